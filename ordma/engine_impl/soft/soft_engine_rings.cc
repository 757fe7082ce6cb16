#include "ordma/engine_impl/soft/soft_engine_impl.h"

namespace odafs::ordma::soft {

bool SoftEngineImpl::open_ring(Conn* c) {
  if (!flush(c) || c->backlog() > 0) return false;  // the greeting left long ago
  // The ring's place under the cap is taken here and, once the ring exists, held by
  // c->ring: every failure after that closes c, and the drop gives the place back.
  if (rings_.fetch_add(1, std::memory_order_relaxed) >= settings_.max_rings) {
    rings_.fetch_sub(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("engine: refused a local ring (%zu open)", settings_.max_rings);
    return false;
  }
  Result<NewRing> made = create_ring(slot_bytes());
  if (!made) {
    rings_.fetch_sub(1, std::memory_order_relaxed);  // no c->ring for the drop to count
    ODAFS_LOG_WARN("engine: %s", made.status().to_string().c_str());
    return false;
  }
  c->ring = std::move(made->ring);
  Ring& r = *c->ring;
  // Registered and counted before WELCOME: once the client has it, the ring is live.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;  // every doorbell write is an edge; the count is never read
  ev.data.u64 = reinterpret_cast<uintptr_t>(c) | kDoorbellBit;
  if (epoll_ctl(c->ep, EPOLL_CTL_ADD, r.doorbell, &ev) != 0) return false;
  rings_set_up_.fetch_add(1, std::memory_order_relaxed);
  // made closes the memfd on the way out: the mapping and the client's copy keep the memory.
  if (!send_ring_welcome(c->fd, made->memfd, r.doorbell)) return false;  // the drop undoes it
  c->in_len = 0;
  return true;
}

void SoftEngineImpl::serve_ring(Conn* c, bool* more) {
  *more = false;
  std::lock_guard out_lock(c->out_mu);
  if (c->dead || !c->ring) return;
  Ring& r = *c->ring;
  ring::Header* h = ring::header(r.base);
  h->engine_awake.store(1, std::memory_order_seq_cst);
  TurnBudget budget;
  for (;;) {
    if (c->ring_pending == 0) {
      c->ring_pending = h->posted.exchange(0, std::memory_order_acq_rel);
      if (c->ring_pending == 0) {
        h->engine_awake.store(0, std::memory_order_seq_cst);
        if (h->posted.load(std::memory_order_seq_cst) == 0) return;
        h->engine_awake.store(1, std::memory_order_seq_cst);
        continue;
      }
    }
    while (c->ring_pending != 0 && !budget.spent()) {
      budget.take(serve_slot(c, r, static_cast<uint32_t>(__builtin_ctzll(c->ring_pending))));
      c->ring_pending &= c->ring_pending - 1;
    }
    if (budget.spent()) {  // the others' turn; engine_awake stays 1, as we come back
      *more = true;
      return;
    }
  }
}

uint32_t SoftEngineImpl::serve_slot(const Conn* c, Ring& r, uint32_t i) {
  ring::Slot& s = *ring::slot(r.base, i);
  uint32_t state = s.state.load(std::memory_order_acquire);
  if (state != ring::kPosted && state != ring::kPostedWaiting) return 0;  // a stray bit
  unsigned char frame[wire::kReadRequestBytes];
  std::memcpy(frame, s.request, sizeof frame);  // checked and used from our copy only
  wire::ReadRequest req;
  Fault f = Fault::kBadRequest;
  const std::byte* bytes = nullptr;
  if (wire::decode(frame, &req)) {
    f = admit_and_pin(c, req, &bytes);
  } else {
    stats_.faults[static_cast<size_t>(f)].fetch_add(1, std::memory_order_relaxed);
  }
  uint32_t length = 0;
  if (f == Fault::kNone) {
    // admit() kept the range inside one segment, and a slot holds a segment.
    std::memcpy(ring::slot_data(r.base, slot_bytes(), i), bytes, req.length);
    table_.unpin(req.ref.segment);
    length = req.length;
  }
  s.fault.store(static_cast<uint32_t>(f), std::memory_order_relaxed);
  s.length.store(length, std::memory_order_relaxed);
  if (s.state.exchange(ring::kDone, std::memory_order_acq_rel) == ring::kPostedWaiting) {
    futex_wake(&s.state, 1, FutexScope::kShared);
  }
  return length;
}

}  // namespace odafs::ordma::soft
