#include "base/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"

namespace odafs::tls {
namespace {

// OpenSSL's error queue of this thread, as one line (and emptied).
std::string queued_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    // "error:0A000086:SSL routines::certificate verify failed": keep the reason.
    const char* reason = ERR_reason_error_string(e);
    out += reason != nullptr ? reason : buf;
  }
  return out;
}

Status failure(const std::string& what) {
  std::string why = queued_errors();
  return Status(EPROTO, why.empty() ? what : what + ": " + why);
}

int remaining_ms(const timespec* deadline) {
  if (deadline == nullptr) return -1;
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const int64_t ms =
      (deadline->tv_sec - now.tv_sec) * 1000 + (deadline->tv_nsec - now.tv_nsec) / 1000000;
  return ms < 0 ? 0 : static_cast<int>(ms > INT32_MAX ? INT32_MAX : ms);
}

std::string asn1_text(const ASN1_STRING* s) {
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
}

// The client's socket BIO. OpenSSL's own writes with write(2), which raises SIGPIPE once
// the peer has gone; odafsd ignores the signal, but a library must not change a program's
// signals, nor pay four system calls per write to hold one off. This one sends with
// MSG_NOSIGNAL. (Kernel TLS needs OpenSSL's socket BIO: the server keeps that one.)
int socket_write(BIO* b, const char* in, int len) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b)));
  const ssize_t n = send(fd, in, static_cast<size_t>(len), MSG_NOSIGNAL);
  BIO_clear_retry_flags(b);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_write(b);
  }
  return static_cast<int>(n);
}

int socket_read(BIO* b, char* out, int len) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b)));
  const ssize_t n = recv(fd, out, static_cast<size_t>(len), 0);
  BIO_clear_retry_flags(b);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_read(b);
  }
  return static_cast<int>(n);
}

long socket_ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

const BIO_METHOD* client_socket_method() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "odafs socket (MSG_NOSIGNAL)");
    BIO_meth_set_write(m, socket_write);
    BIO_meth_set_read(m, socket_read);
    BIO_meth_set_ctrl(m, socket_ctrl);
    return m;
  }();
  return method;
}

}  // namespace

Result<std::shared_ptr<const Context>> Context::make(Side side, const Files& files) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(side == Side::kServer ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return failure("tls: no context");
  // Owns ctx from here: every failure below frees it.
  std::shared_ptr<const Context> out(new Context(side, ctx, !files.cert.empty()));
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // AES-128-GCM first: as safe for this use, and its 10 rounds cost less per record than
  // AES-256's 14 (OpenSSL's default puts AES-256 first).
  SSL_CTX_set_ciphersuites(
      ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
  // One recv takes every record the socket holds (not a header, then its body).
  SSL_CTX_set_read_ahead(ctx, 1);
  if (side == Side::kServer) SSL_CTX_set_num_tickets(ctx, 0);
  if (files.cert.empty() != files.key.empty()) {
    return Status(EINVAL, "tls: a certificate needs its key, and a key its certificate");
  }
  if (side == Side::kServer && files.cert.empty()) {
    return Status(EINVAL, "tls: the server needs a certificate and its key");
  }
  if (!files.cert.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, files.cert.c_str()) != 1) {
      return failure("tls: certificate " + files.cert);
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, files.key.c_str(), SSL_FILETYPE_PEM) != 1) {
      return failure("tls: key " + files.key);
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      return failure("tls: key " + files.key + " does not match " + files.cert);
    }
  }
  if (!files.ca.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, files.ca.c_str(), nullptr) != 1) {
      return failure("tls: CA file " + files.ca);
    }
  } else if (side == Side::kClient && SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return failure("tls: the system's CA store");
  }
  if (side == Side::kClient) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  } else if (!files.ca.empty()) {
    // Asked, not required: the export rules decide per client (mtls) whether one must come.
    // One presented is verified, and a bad one fails the handshake.
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files.ca.c_str())) {
      SSL_CTX_set_client_CA_list(ctx, names);
    }
  }
  ERR_clear_error();
  return out;
}

Context::~Context() { SSL_CTX_free(ctx_); }

Result<std::unique_ptr<Session>> Session::make(std::shared_ptr<const Context> context, int fd,
                                               const std::string& host) {
  ERR_clear_error();
  SSL* ssl = SSL_new(context->native());
  if (ssl == nullptr) return failure("tls: no session");
  const bool client = context->side() == Context::Side::kClient;
  std::unique_ptr<Session> s(new Session(std::move(context), ssl, fd));
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return Status::from_errno("tls: socket not made non-blocking");
  }
  if (client) {
    BIO* bio = BIO_new(client_socket_method());
    if (bio == nullptr) return failure("tls: socket");
    BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl, bio, bio);  // one reference, owned by ssl
  } else if (SSL_set_fd(ssl, fd) != 1) {
    return failure("tls: socket");
  }
  if (client) {
    SSL_set_connect_state(ssl);
    in6_addr ip;
    const bool literal =
        inet_pton(AF_INET, host.c_str(), &ip) == 1 || inet_pton(AF_INET6, host.c_str(), &ip) == 1;
    if (literal) {
      if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) != 1) {
        return failure("tls: server address " + host);
      }
    } else if (SSL_set1_host(ssl, host.c_str()) != 1 ||
               SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) {
      return failure("tls: server name " + host);
    }
  } else {
    SSL_set_accept_state(ssl);
  }
  return s;
}

Session::~Session() { SSL_free(ssl_); }

ssize_t Session::settle(int r) {
  const int e = SSL_get_error(ssl_, r);
  switch (e) {
    case SSL_ERROR_WANT_READ:
      wants_write_ = false;
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_WANT_WRITE:
      wants_write_ = true;
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_ZERO_RETURN:
      return 0;
    case SSL_ERROR_SYSCALL: {
      const int saved = errno;
      error_ = queued_errors();
      if (error_.empty()) error_ = saved != 0 ? strerror(saved) : "connection closed";
      errno = ECONNRESET;
      return -1;
    }
    default:
      error_ = queued_errors();
      if (error_.empty()) error_ = "TLS failure " + std::to_string(e);
      errno = EIO;
      return -1;
  }
}

Status Session::handshake() {
  std::lock_guard lock(mu_);
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) return Status();
  const int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    wants_write_ = e == SSL_ERROR_WANT_WRITE;
    return Status(EAGAIN, "tls handshake in progress");
  }
  std::string why;
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) why = X509_verify_cert_error_string(verify);
  std::string queued = queued_errors();
  if (!queued.empty()) why += (why.empty() ? "" : " (") + queued + (why.empty() ? "" : ")");
  if (why.empty()) why = e == SSL_ERROR_SYSCALL ? "the peer closed the connection" : "failed";
  error_ = why;
  return Status(EPROTO, "tls handshake: " + why);
}

bool Session::handshake_done() const {
  std::lock_guard lock(mu_);
  return SSL_is_init_finished(ssl_) == 1;
}

Status Session::wait_socket(bool for_write, const timespec* deadline) {
  pollfd p{fd_, static_cast<short>(for_write ? POLLOUT : POLLIN), 0};
  for (;;) {
    const int n = poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return Status();
    if (n == 0) return Status(ETIMEDOUT, "tls: timed out");
    if (errno != EINTR) return Status::from_errno("tls: poll");
  }
}

Status Session::handshake_until(const timespec& deadline) {
  for (;;) {
    Status s = handshake();
    if (s.errno_value() != EAGAIN) return s;
    Status waited = wait_socket(wants_write(), &deadline);
    if (!waited.ok()) return Status(waited.errno_value(), "tls handshake: " + waited.message());
  }
}

ssize_t Session::read(void* buf, size_t len) {
  std::lock_guard lock(mu_);
  ERR_clear_error();
  const int r = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(len, INT32_MAX)));
  return r > 0 ? r : settle(r);
}

ssize_t Session::write(const void* buf, size_t len) {
  std::lock_guard lock(mu_);
  ERR_clear_error();
  const int r = SSL_write(ssl_, buf, static_cast<int>(std::min<size_t>(len, INT32_MAX)));
  return r > 0 ? r : settle(r);
}

bool Session::has_pending() const {
  std::lock_guard lock(mu_);
  return SSL_has_pending(ssl_) == 1;
}

bool Session::wants_write() const {
  std::lock_guard lock(mu_);
  return wants_write_;
}

std::string Session::last_error() const {
  std::lock_guard lock(mu_);
  return error_;
}

Result<bool> Session::read_full(void* buf, size_t len, const timespec* deadline) {
  if (len == 0) return true;  // (a zero-length pad): never wait for bytes no one asked for
  char* p = static_cast<char*>(buf);
  // A reader that waits for bytes usually finds none yet: wait for the socket first rather
  // than ask OpenSSL, whose recv would answer EAGAIN.
  if (!has_pending()) {
    if (Status s = wait_socket(false, deadline); !s.ok()) return s;
  }
  while (len > 0) {
    const ssize_t n = read(p, len);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n == 0) {
      return false;
    } else if (errno == EAGAIN) {
      if (Status s = wait_socket(wants_write(), deadline); !s.ok()) return s;
    } else {
      return Status(errno, "tls read: " + last_error());
    }
  }
  return true;
}

Status Session::write_all(const void* buf, size_t len, const timespec* deadline) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    const ssize_t n = write(p, len);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n < 0 && errno == EAGAIN) {
      if (Status s = wait_socket(wants_write(), deadline); !s.ok()) return s;
    } else {
      return Status(n == 0 ? ECONNRESET : errno, "tls write: " + last_error());
    }
  }
  return Status();
}

PeerCertificate Session::peer() const {
  std::lock_guard lock(mu_);
  X509* cert = SSL_get0_peer_certificate(ssl_);
  if (cert == nullptr || SSL_get_verify_result(ssl_) != X509_V_OK) return PeerCertificate{};
  return describe_certificate(cert);
}

PeerCertificate describe_certificate(X509* cert) {
  PeerCertificate out;
  out.present = true;
  if (BIO* b = BIO_new(BIO_s_mem())) {
    X509_NAME_print_ex(b, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
    char* data = nullptr;
    const long n = BIO_get_mem_data(b, &data);
    if (n > 0) out.subject.assign(data, static_cast<size_t>(n));
    BIO_free(b);
  }
  if (auto* names = static_cast<GENERAL_NAMES*>(
          X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr))) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(names, i);
      switch (g->type) {
        case GEN_DNS:
          out.alt_names.push_back("DNS:" + asn1_text(g->d.dNSName));
          break;
        case GEN_EMAIL:
          out.alt_names.push_back("email:" + asn1_text(g->d.rfc822Name));
          break;
        case GEN_URI:
          out.alt_names.push_back("URI:" + asn1_text(g->d.uniformResourceIdentifier));
          break;
        case GEN_IPADD: {
          // The CA signed whatever bytes it was given: an address is 4 or 16 of them, and
          // inet_ntop reads that many whatever the string holds.
          const ASN1_OCTET_STRING* ip = g->d.iPAddress;
          const int len = ASN1_STRING_length(ip);
          if (len != 4 && len != 16) {
            ODAFS_LOG_WARN_THROTTLED(
                "certificate %s: an iPAddress subjectAltName of %d bytes (not 4 or 16) ignored",
                out.subject.c_str(), len);
            break;
          }
          char text[INET6_ADDRSTRLEN] = {};
          if (inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(ip), text,
                        sizeof text) != nullptr) {
            out.alt_names.push_back(std::string("IP:") + text);
          }
          break;
        }
        default:
          break;
      }
    }
    GENERAL_NAMES_free(names);
  }
  const ASN1_TIME* end = X509_get0_notAfter(cert);
  tm t{};
  if (end != nullptr && ASN1_TIME_to_tm(end, &t) == 1) out.not_after = timegm(&t);
  return out;
}

Status Session::export_key(const std::string& label, void* out, size_t len) const {
  std::lock_guard lock(mu_);
  ERR_clear_error();
  if (SSL_export_keying_material(ssl_, static_cast<unsigned char*>(out), len, label.data(),
                                 label.size(), nullptr, 0, 0) != 1) {
    return failure("tls: exporter");
  }
  return Status();
}

bool Session::kernel_tls() const {
  std::lock_guard lock(mu_);
#ifdef BIO_get_ktls_send
  return BIO_get_ktls_send(SSL_get_wbio(ssl_)) != 0;
#else
  return false;
#endif
}

}  // namespace odafs::tls
