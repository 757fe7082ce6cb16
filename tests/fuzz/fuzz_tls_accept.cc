// Fuzz target: odafsd's side of a TLS handshake (tls::Session, as rpc::Server drives it
// after STARTTLS) fed arbitrary bytes: the handshake steps and the reads after it must end
// in bytes, EAGAIN or a clean failure, never a crash, a hang or a leak.
//
// The same bytes are also a certificate's subjectAltName extension (DER GeneralNames, as a
// CA may sign whatever a request holds): naming the peer from it (tls::describe_certificate,
// what Session::peer runs on a verified certificate) must never read past what it holds.
// Handshake inputs rarely parse as GeneralNames and the reverse: each corpus file serves
// the part it fits, and the seeds san_* the second.
//
// The server's certificate is made once per process (an EC key, self-signed), in files the
// context is built from, as odafsd's are.
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "base/tls.h"

namespace {

std::shared_ptr<const odafs::tls::Context> server_context() {
  char dir[] = "/tmp/odafs-fuzz-tls-XXXXXX";
  if (mkdtemp(dir) == nullptr) std::abort();
  const std::string cert_path = std::string(dir) + "/cert.pem";
  const std::string key_path = std::string(dir) + "/key.pem";
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("fuzz"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  if (X509_sign(cert, key, EVP_sha256()) == 0) std::abort();
  FILE* out = std::fopen(cert_path.c_str(), "w");
  PEM_write_X509(out, cert);
  std::fclose(out);
  out = std::fopen(key_path.c_str(), "w");
  PEM_write_PrivateKey(out, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(out);
  X509_free(cert);
  EVP_PKEY_free(key);
  // The CA file asks clients for certificates, so that path is fuzzed too.
  auto context = odafs::tls::Context::make(odafs::tls::Context::Side::kServer,
                                           odafs::tls::Files{cert_path, key_path, cert_path});
  std::remove(cert_path.c_str());
  std::remove(key_path.c_str());
  rmdir(dir);
  if (!context.ok()) std::abort();
  return *context;
}

// A certificate whose subjectAltName extension holds [data, data + size) as its value.
void name_certificate_with_san(const uint8_t* data, size_t size) {
  X509* cert = X509_new();
  ASN1_OCTET_STRING* value = ASN1_OCTET_STRING_new();
  if (cert == nullptr || value == nullptr ||
      ASN1_OCTET_STRING_set(value, data, static_cast<int>(size)) != 1) {
    std::abort();
  }
  X509_EXTENSION* ext = X509_EXTENSION_create_by_NID(nullptr, NID_subject_alt_name, 0, value);
  if (ext == nullptr || X509_add_ext(cert, ext, -1) != 1) std::abort();
  (void)odafs::tls::describe_certificate(cert);
  X509_EXTENSION_free(ext);
  ASN1_OCTET_STRING_free(value);
  X509_free(cert);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::shared_ptr<const odafs::tls::Context> context = server_context();
  if (size <= 1 << 16) name_certificate_with_san(data, size);
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  // The peer's bytes, then its close: whatever the server waits for never comes.
  size_t sent = 0;
  while (sent < size) {
    ssize_t n = send(fds[1], data + sent, size - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  shutdown(fds[1], SHUT_WR);
  auto session = odafs::tls::Session::make(context, fds[0]);
  if (session.ok()) {
    odafs::tls::Session& s = **session;
    // Bounded: each step consumes input or fails; input is finite and then EOF.
    for (int step = 0; step < 64; ++step) {
      odafs::Status st = s.handshake();
      if (st.ok()) {
        char buf[4096];
        for (int r = 0; r < 64 && s.read(buf, sizeof buf) > 0; ++r) {
        }
        (void)s.peer();
        break;
      }
      if (st.errno_value() != EAGAIN) break;
      char drain[4096];  // the server's flight, so its writes never stall
      while (recv(fds[1], drain, sizeof drain, MSG_DONTWAIT) > 0) {
      }
    }
  }
  close(fds[0]);
  close(fds[1]);
  return 0;
}
