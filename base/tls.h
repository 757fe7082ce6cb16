// TLS 1.3 over a TCP socket, by OpenSSL: the contexts both ends build from PEM files, and a
// Session that runs one connection's TLS on a socket whose owner keeps its own event loop.
//
// Why a Session and not a blocking SSL per connection: odafsd's RPC loops and its engine
// read and write their sockets without blocking (one-shot epoll events, replies queued when
// the socket is full) and from several threads (a connection is read by whoever holds its
// read event and written by any thread under its write lock). A Session serialises its SSL
// object behind one mutex and answers like the system calls it replaces: bytes, 0 at the
// peer's close, or -1 with errno EAGAIN when the socket would block. Callers that wait
// (the client's receiver thread) use the *_until forms, which poll.
//
// Versions and choices: TLS 1.3 only; no session tickets (a connection lives long, and a
// ticket written from inside a read would need the write lock); peers verified against the
// configured CA, the server's certificate against the host the client named (DNS name or
// IP address). Kernel TLS (SSL_OP_ENABLE_KTLS) is asked for: where the kernel has the
// `tls` module, OpenSSL moves the record layer into the kernel after the handshake and
// Session::kernel_tls() says so.
//
// Signals: a client session writes with MSG_NOSIGNAL (its own BIO); a server session uses
// OpenSSL's socket BIO (kernel TLS needs it), whose writes raise SIGPIPE at a closed peer:
// REQUIRES the server process to ignore SIGPIPE (odafsd does).
//
// Thread-safety: a Context is immutable once built and may be shared by any number of
// sessions and threads. Every Session member function is thread-safe; read and write may
// run concurrently (one waits for the other's SSL call, never for the socket).
#pragma once

#include <time.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct x509_st X509;

namespace odafs::tls {

// PEM files a context is built from. A server needs cert and key; ca (if set) makes it ask
// clients for certificates and verify those presented. A client needs ca (empty: the
// system's store); cert and key (both or neither) are its own certificate for mutual TLS.
struct Files {
  std::string cert;
  std::string key;
  std::string ca;
};

class Context {
 public:
  enum class Side { kServer, kClient };
  // Builds a context from files; the Status names the file and OpenSSL's reason.
  static Result<std::shared_ptr<const Context>> make(Side side, const Files& files);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Side side() const { return side_; }
  // A certificate of its own was given (a client's, for mutual TLS).
  bool has_certificate() const { return has_certificate_; }
  SSL_CTX* native() const { return ctx_; }

 private:
  Context(Side side, SSL_CTX* ctx, bool has_certificate)
      : side_(side), ctx_(ctx), has_certificate_(has_certificate) {}
  Side side_;
  SSL_CTX* ctx_;
  bool has_certificate_;
};

// The peer's certificate, as the handshake verified it.
struct PeerCertificate {
  bool present = false;  // a certificate was presented and verified
  std::string subject;   // RFC 2253 ("CN=client1,O=odafs")
  // Its subjectAltName entries, each as "DNS:name", "IP:addr", "email:addr" or "URI:uri".
  std::vector<std::string> alt_names;
  time_t not_after = 0;
};

// The names of a certificate, whoever presented it (Session::peer's, for a verified
// peer). Malformed entries (an iPAddress of neither 4 nor 16 bytes) are left out, logged.
// present is set: the caller vouches for the certificate. REQUIRES: cert != nullptr.
PeerCertificate describe_certificate(X509* cert);

class Session {
 public:
  // A session on connected socket fd (not owned; left open at destruction). The socket may
  // be blocking or not: the session makes it non-blocking. `host` (client side): the name
  // or address the server's certificate must carry.
  static Result<std::unique_ptr<Session>> make(std::shared_ptr<const Context> context, int fd,
                                               const std::string& host = "");
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // One step of the handshake: ok once done; EAGAIN while it waits for the socket
  // (wants_write() says for which direction); another errno when it failed (the Status
  // message says why: a certificate expired, from an unknown CA, for another name...).
  Status handshake();
  bool handshake_done() const;
  // Waits (poll) until the handshake is done, failed, or the deadline (CLOCK_MONOTONIC)
  // passed (ETIMEDOUT).
  Status handshake_until(const timespec& deadline);

  // Like recv/send on a non-blocking socket: bytes moved (> 0); 0 from read at the peer's
  // close_notify or EOF; -1 with errno EAGAIN when the socket would block (and wants_write()
  // says whether it waits to write), errno EIO or ECONNRESET on a TLS or socket failure
  // (last_error() says which). write moves all of len or a prefix of whole records; after
  // an EAGAIN the caller repeats it with the same bytes first (they may live elsewhere).
  ssize_t read(void* buf, size_t len);
  ssize_t write(const void* buf, size_t len);
  // Whether decrypted bytes or undecoded records wait inside the session: the socket may
  // not be readable although read() would return bytes.
  bool has_pending() const;
  // The last EAGAIN waits for the socket to take bytes rather than to have some.
  bool wants_write() const;
  std::string last_error() const;

  // Blocking forms for callers with a thread to spare: all of [buf, len) or false at EOF
  // (read), a Status on failure or when the deadline passes (ETIMEDOUT). Null deadline: none.
  Result<bool> read_full(void* buf, size_t len, const timespec* deadline);
  Status write_all(const void* buf, size_t len, const timespec* deadline);

  // The peer's certificate. REQUIRES: handshake_done().
  PeerCertificate peer() const;
  // RFC 8446 section 7.5 exporter: len bytes bound to this TLS session and `label`, the
  // same at both ends and different on every other connection. REQUIRES: handshake_done().
  Status export_key(const std::string& label, void* out, size_t len) const;
  // OpenSSL sends (and receives) records through the kernel's TLS.
  bool kernel_tls() const;

 private:
  Session(std::shared_ptr<const Context> context, SSL* ssl, int fd)
      : context_(std::move(context)), ssl_(ssl), fd_(fd) {}
  // REQUIRES: mu_ held. Maps an SSL call's result r to the errno contract above.
  ssize_t settle(int r);
  Status wait_socket(bool for_write, const timespec* deadline);

  std::shared_ptr<const Context> context_;
  mutable std::mutex mu_;
  SSL* ssl_;
  int fd_;
  bool wants_write_ = false;  // mu_
  std::string error_;         // mu_
};

}  // namespace odafs::tls
