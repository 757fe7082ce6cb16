#include "ordma/engine_impl/soft/soft_engine_impl.h"

namespace odafs::ordma::soft {

bool SoftEngineImpl::on_event(Conn* c, uint32_t events) {
  if (events & (EPOLLERR | EPOLLHUP)) return false;
  if (events & EPOLLIN) c->readable = true;
  return true;  // EPOLLOUT: the turn flushes
}

bool SoftEngineImpl::take_turn(int ep, Conn* c, bool* more) {
  *more = false;
  std::lock_guard out_lock(c->out_mu);
  if (c->dead) return true;
  TurnBudget budget;
  bool filled = false;  // the read took all the room: the socket may hold more
  if (c->tls && !c->tls_up) {
    Status step = c->tls->handshake();
    if (!step.ok() && step.errno_value() != EAGAIN) {
      stats_.bad_handshakes.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED("engine: TLS handshake failed: %s", step.message().c_str());
      return false;
    }
    c->tls_up = step.ok();
    c->readable = c->readable || c->tls_up;  // its HELLO may have come with the last flight
  }
  if ((c->readable || (c->tls_up && c->tls->has_pending())) && c->in_len < c->in.size() &&
      c->backlog() < options_.max_backlog && (!c->tls || c->tls_up)) {
    c->readable = false;  // level-triggered: epoll says so again while bytes wait
    for (;;) {
      size_t room = c->in.size() - c->in_len;
      ssize_t n = c->tls ? c->tls->read(c->in.data() + c->in_len, room)
                         : recv(c->fd, c->in.data() + c->in_len, room, 0);
      if (n == 0) return false;
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return false;
      }
      c->in_len += static_cast<size_t>(n);
      filled = static_cast<size_t>(n) == room;
      break;
    }
  }
  // Input parked behind a full backlog is parsed once the backlog drains.
  if (c->backlog() < options_.max_backlog && !parse(c, &budget)) return false;
  if (!flush(c)) return false;
  // Ask for EPOLLOUT while output waits (or TLS waits to write); stop reading while too
  // much of it waits.
  const bool tls_wants_write = c->tls && c->tls->wants_write();
  uint32_t want = (c->backlog() < options_.max_backlog ? uint32_t{EPOLLIN} : 0u) |
                  (c->backlog() > 0 || tls_wants_write ? uint32_t{EPOLLOUT} : 0u);
  if (want != c->events) {
    c->events = want;
    epoll_event ev{};
    ev.events = want;
    ev.data.ptr = c;
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
  }
  // Requests still waiting, here or (it seems) in the socket: another turn, at the back.
  // (A TLS session may hold records the socket no longer shows.)
  *more = c->backlog() < options_.max_backlog &&
          ((budget.spent() && c->in_len >= wire::kReadRequestBytes) || filled ||
           (c->tls_up && c->tls->has_pending()));
  return true;
}

bool SoftEngineImpl::start_tls(Conn* c) {
  std::shared_ptr<const tls::Context> context =
      options_.tls_context ? options_.tls_context() : nullptr;
  if (c->tls || c->local || !context || c->in_len != wire::kHelloBytes) {
    stats_.bad_handshakes.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("engine: refused a connection (%s)",
                             !context ? "TLS asked, none offered" : "TLS asked out of turn");
    return false;
  }
  Result<std::unique_ptr<tls::Session>> session = tls::Session::make(std::move(context), c->fd);
  if (!session.ok()) {
    ODAFS_LOG_ERROR("engine: TLS: %s", session.status().message().c_str());
    return false;
  }
  c->tls = std::move(*session);
  c->in_len = 0;  // the real HELLO comes inside TLS
  return true;
}

bool SoftEngineImpl::parse(Conn* c, TurnBudget* budget) {
  size_t pos = 0;
  if (c->authed && c->local) return false;  // a ring's socket carries nothing after setup
  if (!c->authed) {
    if (c->in_len < wire::kHelloBytes) return true;
    Proof proof;
    uint64_t session = 0;
    uint16_t flags = 0;
    const bool decoded = wire::decode_hello(c->in.data(), &session, &proof, &flags);
    if (decoded && (flags & wire::kHelloStartTls) != 0) return start_tls(c);
    // A TLS mount's session counts only inside TLS, proved under its exporter (the ring's
    // Unix socket is this host's kernel's: no TLS there).
    Nonce nonce = c->nonce;
    unsigned char exporter[kNonceBytes];
    if (c->tls && !c->tls->export_key(kEngineExporterLabel, exporter, sizeof exporter).ok()) {
      return false;
    }
    if (c->tls) nonce = bind_to_tls(c->nonce, exporter);
    const char* why = !decoded ? "bad magic or version"
                      : tls_bound(session) && !c->tls && !c->local
                          ? "a TLS mount's session in the clear"
                      : !sessions_.verify(session, nonce, proof) ? "bad session proof"
                                                                 : nullptr;
    if (why != nullptr) {
      stats_.bad_handshakes.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED("engine: refused a connection (%s)", why);
      return false;
    }
    c->authed = true;
    c->session = session;
    c->in.resize(kInBytes);
    if (c->local) return c->in_len == wire::kHelloBytes && open_ring(c);
    {
      // Registered before WELCOME leaves, so a client may start direct I/O at once.
      // Lock order: out_mu (held) then sessions_mu_; push() never holds both.
      std::lock_guard lock(sessions_mu_);
      std::lock_guard conns_lock(conns_mu_);
      auto it = conns_.find(c);
      if (it != conns_.end()) by_session_[session] = it->second;
    }
    unsigned char welcome[wire::kWelcomeBytes];
    wire::encode_welcome(local_fd_ >= 0 ? wire::kWelcomeOffersRings : 0,
                         local_fd_ >= 0 ? ring_token_.data() : nullptr, welcome);
    c->out.insert(c->out.end(), welcome, welcome + sizeof welcome);
    pos = wire::kHelloBytes;
  }
  while (pos < c->in_len) {
    if (c->sink_left > 0) {  // streaming a DATA frame's bytes to its waiter
      uint32_t n = static_cast<uint32_t>(std::min<size_t>(c->sink_left, c->in_len - pos));
      if (c->sink) std::memcpy(c->sink->data.data() + c->sink_at, c->in.data() + pos, n);
      c->sink_at += n;
      c->sink_left -= n;
      pos += n;
      if (c->sink_left == 0) finish_sink(c);
      continue;
    }
    if (c->in[pos] == wire::kTypeData) {
      if (c->in_len - pos < wire::kDataHeaderBytes) break;
      wire::Data d = wire::decode_data(c->in.data() + pos);
      Fault fault = d.fault;
      uint32_t tag = d.tag, length = d.length;
      pos += wire::kDataHeaderBytes;
      std::shared_ptr<PullWaiter> w = pulls_.take(c->session, tag);
      c->sink.reset();
      if (w && fault == Fault::kNone && length == w->data.size()) {
        c->sink = w;
      } else if (w) {
        w->complete(fault != Fault::kNone ? fault : Fault::kBadRequest);
      }
      c->sink_left = length;  // an unexpected frame's bytes are read and dropped
      c->sink_at = 0;
      if (length == 0) finish_sink(c);
      continue;
    }
    if (c->in_len - pos < wire::kReadRequestBytes || c->backlog() >= options_.max_backlog ||
        budget->spent()) {
      break;
    }
    wire::ReadRequest req;
    if (!wire::decode(c->in.data() + pos, &req)) {
      stats_.bad_frames.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED("engine: closing a connection after a %s", "malformed frame");
      return false;
    }
    pos += wire::kReadRequestBytes;
    // The last request of a turn, with nothing queued before it, may go straight from the
    // segment to the socket.
    budget->take(req.length);
    bool last = budget->spent() || c->in_len - pos < wire::kReadRequestBytes;
    serve(c, req, last && c->backlog() == 0);
  }
  if (pos > 0) {
    std::memmove(c->in.data(), c->in.data() + pos, c->in_len - pos);
    c->in_len -= pos;
  }
  return true;
}

Fault SoftEngineImpl::admit_and_pin(const Conn* c, const wire::ReadRequest& r,
                                    const std::byte** bytes) {
  Fault f = admit(c, r);
  if (f == Fault::kNone) f = table_.pin(r.ref.segment, r.ref.generation);
  if (f != Fault::kNone) {
    stats_.faults[static_cast<size_t>(f)].fetch_add(1, std::memory_order_relaxed);
    return f;
  }
  stats_.reads.fetch_add(1, std::memory_order_relaxed);
  stats_.bytes.fetch_add(r.length, std::memory_order_relaxed);
  *bytes = memory_.base + size_t{r.ref.segment} * memory_.segment_bytes + r.offset;
  return Fault::kNone;
}

Fault SoftEngineImpl::admit(const Conn* c, const wire::ReadRequest& r) const {
  if (r.ref.session != c->session) return Fault::kWrongSession;
  if (Fault f = authority_.check(r.ref, c->session); f != Fault::kNone) return f;
  if ((r.ref.rights & kRightRead) == 0) return Fault::kBadCapability;
  if (r.ref.segment >= memory_.segments) return Fault::kUnknownSegment;
  uint64_t ref_end = uint64_t{r.ref.offset} + r.ref.length;
  uint64_t end = uint64_t{r.offset} + r.length;
  if (ref_end > memory_.segment_bytes || r.offset < r.ref.offset || end > ref_end) {
    return Fault::kOutOfBounds;
  }
  return Fault::kNone;
}

void SoftEngineImpl::serve(Conn* c, const wire::ReadRequest& r, bool send_now) {
  wire::Response resp;
  resp.tag = r.tag;
  const std::byte* bytes = nullptr;
  resp.fault = admit_and_pin(c, r, &bytes);
  size_t at = c->out.size();
  if (resp.fault != Fault::kNone) {
    c->out.resize(at + wire::kResponseBytes);
    wire::encode(resp, c->out.data() + at);
    return;
  }
  resp.length = r.length;
  size_t sent = 0;
  unsigned char head[wire::kResponseBytes];
  wire::encode(resp, head);
  if (send_now && !c->tls) {  // (TLS: through flush, record by record)
    iovec iov[2] = {{head, sizeof head}, {const_cast<std::byte*>(bytes), r.length}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    ssize_t n = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) sent = static_cast<size_t>(n);
  }
  size_t total = sizeof head + r.length;
  if (sent < total) {
    size_t from_head = sent < sizeof head ? sizeof head - sent : 0;
    c->out.resize(at + (total - sent));
    std::memcpy(c->out.data() + at, head + (sizeof head - from_head), from_head);
    size_t body_sent = sent > sizeof head ? sent - sizeof head : 0;
    std::memcpy(c->out.data() + at + from_head, bytes + body_sent, r.length - body_sent);
  }
  table_.unpin(r.ref.segment);
}

bool SoftEngineImpl::flush(Conn* c) {
  bool moved = false;
  while (c->backlog() > 0) {
    ssize_t n = c->tls ? c->tls->write(c->out.data() + c->out_head, c->backlog())
                       : send(c->fd, c->out.data() + c->out_head, c->backlog(),
                              MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      c->out_head += static_cast<size_t>(n);
      moved = true;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      return false;
    }
  }
  if (c->out_head == c->out.size()) {
    // Keeps its capacity, so steady state allocates nothing; but not the room a backed-up
    // client made it take (a turn's output is at most about kBytesPerTurn).
    if (c->out.capacity() > 4 * kBytesPerTurn) {
      c->out = {};
    } else {
      c->out.clear();
    }
    c->out_head = 0;
  } else if (c->out_head >= c->backlog()) {
    // Mostly sent: drop the sent part, so the buffer holds what waits, not what went.
    c->out.erase(c->out.begin(), c->out.begin() + static_cast<ptrdiff_t>(c->out_head));
    c->out_head = 0;
  }
  if (moved) c->moved_ms.store(now_ms(), std::memory_order_relaxed);
  account(c);
  return true;
}

void SoftEngineImpl::account(Conn* c) {
  size_t now = c->backlog();
  size_t before = c->accounted.exchange(now, std::memory_order_relaxed);
  if (before == 0 && now > 0) c->moved_ms.store(now_ms(), std::memory_order_relaxed);
  if (now >= before) {
    out_totals_[c->thread].fetch_add(now - before, std::memory_order_relaxed);
  } else {
    out_totals_[c->thread].fetch_sub(before - now, std::memory_order_relaxed);
  }
}

}  // namespace odafs::ordma::soft
