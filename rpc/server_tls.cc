// rpc::Server's RPC-with-TLS (RFC 9289): answering the AUTH_TLS probe, the server's side of
// the handshake, and the connection's reads through its TLS session (server_internal.h
// says which file holds what).
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>

#include "base/log.h"
#include "rpc/message_header.h"
#include "rpc/server_internal.h"
#include "rpc/xdr_util.h"

namespace odafs::rpc {

bool Server::start_tls(Connection& conn, uint32_t xid, Worker& w) {
  std::shared_ptr<const tls::Context> context =
      options_.tls_context ? options_.tls_context() : nullptr;
  if (!context) return false;
  // No other call of the connection may be running (one handed to a spare thread, say):
  // the handshake rewrites the connection's Admission, which running calls read.
  if (conn.calls_running.load(std::memory_order_acquire) != 1) return false;
  // The replies this thread holds for the connection go first, in the clear.
  if (w.out_conn == &conn) flush_replies(w, /*call_running=*/true);
  // The probe's reply: accepted, verifier AUTH_NONE with the body "STARTTLS", no results.
  char record[64];
  XDR out;
  xdrmem_create(&out, record + 4, sizeof record - 4, XDR_ENCODE);
  if (!encode_accepted_reply_header(&out, xid, SUCCESS, kStartTlsVerifier)) return false;
  const size_t len = xdr_getpos(&out) + 4;
  put_record_mark(record, static_cast<uint32_t>(len - 4), true);

  Result<std::unique_ptr<tls::Session>> session = tls::Session::make(std::move(context), conn.fd);
  if (!session.ok()) {
    ODAFS_LOG_ERROR("TLS for %s: %s", conn.peer.c_str(), session.status().message().c_str());
    return false;
  }
  std::lock_guard lock(conn.write_mu);
  if (conn.write_failed || conn.unsent() > 0) return false;  // earlier replies still queued
  // Published before the reply leaves: the client's first TLS bytes may be read by another
  // thread as soon as the reply is out, and must find the session.
  conn.tls_session = std::move(*session);
  conn.tls.store(conn.tls_session.get(), std::memory_order_seq_cst);
  ssize_t n;
  do {
    n = send(conn.fd, record, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(len)) fail_writes(conn);  // 36 bytes on a quiet socket
  counters_.bytes_out.fetch_add(len, std::memory_order_relaxed);
  return true;
}

bool Server::continue_handshake(Connection& conn, bool* done) {
  tls::Session* t = conn.tls.load(std::memory_order_acquire);
  *done = t == nullptr || conn.tls_ready.load(std::memory_order_acquire);
  if (*done) return true;
  if (!conn.assembler.idle()) {
    // Bytes that came in the clear after the AUTH_TLS probe: a record begun there would be
    // ended by the client's first TLS record and run inside its session, as the client.
    // RFC 9289 carries nothing from the clear into TLS, and a client sends nothing between
    // its probe and its handshake: someone on the path added them.
    counters_.tls_failures.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED(
        "closing connection from %s: bytes in the clear after its AUTH_TLS "
        "probe (an injection on the path?)",
        conn.peer.c_str());
    return false;
  }
  Status step = t->handshake();
  if (step.errno_value() == EAGAIN) return true;
  if (!step.ok()) {
    counters_.tls_failures.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("TLS handshake with %s failed: %s", conn.peer.c_str(),
                             step.message().c_str());
    // The alert that says why is on its way out. Bytes the client sent meanwhile, left
    // unread, would make the close a reset, which can overtake the alert: read them away.
    char sink[4096];
    while (recv(conn.fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    return false;
  }
  *done = true;
  counters_.tls_sessions.fetch_add(1, std::memory_order_relaxed);
  const tls::PeerCertificate cert = t->peer();
  conn.admission.tls = true;
  conn.admission.tls_client_verified = cert.present;
  if (options_.on_tls) options_.on_tls(*t, conn.peer, &conn.admission);
  conn.tls_ready.store(true, std::memory_order_release);
  ODAFS_LOG_DEBUG("TLS from %s: client certificate %s, kernel TLS %s", conn.peer.c_str(),
                  cert.present ? cert.subject.c_str() : "none", t->kernel_tls() ? "yes" : "no");
  return true;
}

ssize_t Server::read_some(Connection& conn, char* buf, size_t len) {
  if (tls::Session* t = conn.tls.load(std::memory_order_acquire)) return t->read(buf, len);
  return recv(conn.fd, buf, len, 0);
}

uint32_t Server::read_events(const Connection& conn) {
  uint32_t events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  const tls::Session* t = conn.tls.load(std::memory_order_acquire);
  if (t != nullptr && (t->has_pending() || t->wants_write())) events |= EPOLLOUT;
  return events;
}

}  // namespace odafs::rpc
