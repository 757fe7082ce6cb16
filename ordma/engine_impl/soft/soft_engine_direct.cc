#include "ordma/engine_impl/soft/soft_engine_impl.h"

namespace odafs::ordma::soft {

Fault SoftEngineImpl::push(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag,
                           const iovec* parts, int nparts) {
  size_t length = 0;
  for (int i = 0; i < nparts; ++i) length += parts[i].iov_len;
  Fault f = send_to(session, wire::kKindPut, Fault::kNone, tag, buffer, offset,
                    static_cast<uint32_t>(length), parts, nparts);
  if (f == Fault::kNone) {
    stats_.pushes.fetch_add(1, std::memory_order_relaxed);
    stats_.push_bytes.fetch_add(length, std::memory_order_relaxed);
  }
  return f;
}

void SoftEngineImpl::cancel(uint64_t session, uint32_t tag, Fault fault) {
  send_to(session, wire::kKindPut, fault, tag, 0, 0, 0, nullptr, 0);
}

Fault SoftEngineImpl::pull(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag,
                           uint32_t length, int timeout_ms, std::vector<char>* data) {
  std::shared_ptr<PullWaiter> w = pulls_.add(session, tag, length);
  if (!w) return Fault::kTransport;  // a pull with this tag waits already: a client's error
  Fault f = send_to(session, wire::kKindGet, Fault::kNone, tag, buffer, offset, length, nullptr, 0);
  if (f == Fault::kNone) {
    timespec deadline = deadline_after_ms(timeout_ms);
    while (!w->done() && !deadline_passed(deadline)) futex_wait(&w->state, 0, &deadline);
  }
  pulls_.take(session, tag);  // gone if answered; removed here on failure or timeout
  if (!w->done()) return f == Fault::kNone ? Fault::kTransport : f;
  if (w->fault == Fault::kNone) {
    data->swap(w->data);
    stats_.pulls.fetch_add(1, std::memory_order_relaxed);
    stats_.pull_bytes.fetch_add(length, std::memory_order_relaxed);
  }
  return w->fault;
}

Fault SoftEngineImpl::send_to(uint64_t session, uint8_t kind, Fault fault, uint32_t tag,
                              uint32_t buffer, uint32_t offset, uint32_t length, const iovec* parts,
                              int nparts) {
  std::shared_ptr<Conn> held;
  {
    std::lock_guard lock(sessions_mu_);
    auto it = by_session_.find(session);
    if (it == by_session_.end()) return Fault::kWrongSession;  // no engine connection
    held = it->second;
  }
  Conn* c = held.get();
  size_t body = kind == wire::kKindPut ? length : 0;
  std::lock_guard out_lock(c->out_mu);
  if (c->dead) return Fault::kTransport;
  if (c->backlog() + body > options_.max_backlog * 4) return Fault::kTransport;
  size_t at = c->out.size();
  c->out.resize(at + wire::kResponseBytes + wire::kPutExtraBytes + body);
  unsigned char* p = c->out.data() + at;
  wire::encode(wire::Transfer{tag, fault, kind, length, buffer, offset}, p);
  p += wire::kResponseBytes + wire::kPutExtraBytes;
  for (int i = 0; i < nparts; ++i) {
    std::memcpy(p, parts[i].iov_base, parts[i].iov_len);
    p += parts[i].iov_len;
  }
  if (!flush(c)) return Fault::kTransport;  // the owner thread sees the error and drops
  if (c->backlog() > 0 && !(c->events & EPOLLOUT)) {
    c->events |= EPOLLOUT;
    epoll_event ev{};
    ev.events = c->events;
    ev.data.ptr = c;
    epoll_ctl(c->ep, EPOLL_CTL_MOD, c->fd, &ev);
  }
  return Fault::kNone;
}

void SoftEngineImpl::finish_sink(Conn* c) {
  if (c->sink) c->sink->complete(Fault::kNone);
  c->sink.reset();
}

}  // namespace odafs::ordma::soft
