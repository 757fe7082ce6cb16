// The verbs engine's direct transfers (DAFS direct read and write): the server RDMA WRITEs
// into, or RDMA READs from, a buffer the client registered (its REGISTER message names the
// address, length and rkey), then tells the client with a PUSH_DONE / PULL_DONE message on
// the same queue pair, which the RC ordering delivers after the data.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "base/log.h"
#include "ordma/engine_impl/verbs/verbs_engine_impl.h"
#include "ordma/engine_impl/verbs/verbs_support.h"

namespace odafs::ordma::verbs {

bool VerbsEngine::find_buffer(Conn& c, uint32_t id, RemoteBuffer* out) {
  // The client sends REGISTER before its RPC, but the two travel different ways: give the
  // message a moment to arrive.
  std::unique_lock lock(c.buffers_mu);
  bool found = c.buffers_cv.wait_for(lock, std::chrono::milliseconds(kRegistrationWaitMs),
                                     [&] { return c.buffers.count(id) != 0; });
  if (found) *out = c.buffers[id];
  return found;
}

bool VerbsEngine::ensure_bounce(Conn& c, size_t bytes) {
  ConnVerbs& v = c.v;
  if (v.bounce.size() >= bytes && v.bounce_mr != nullptr) return true;
  v.bounce_mr.reset();  // before the memory it registered moves
  v.bounce.assign(std::max<size_t>(bytes, 64 * 1024), 0);
  v.bounce_mr = register_memory(v.pd, v.bounce.data(), v.bounce.size(), IBV_ACCESS_LOCAL_WRITE);
  return v.bounce_mr != nullptr;
}

Fault VerbsEngine::send_done(Conn& c, MessageKind kind, uint32_t tag, uint32_t value) {
  Message m = make_message(kind);
  m.tag.set(tag);
  m.value.set(value);
  return send_locked(c, m) ? Fault::kNone : Fault::kTransport;
}

// A transfer the client's buffer cannot take (unknown id, out of its bounds) is refused
// to the client, as the soft engine's client refuses a PUT or GET outside its buffer: the
// client's direct() ends with the fault instead of waiting for bytes that never come.
Fault VerbsEngine::transfer(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag,
                            uint32_t length, bool to_client, int timeout_ms,
                            const std::function<void(char* bounce)>& bytes) {
  std::shared_ptr<Conn> c = by_session(session);
  if (!c) return Fault::kWrongSession;
  RemoteBuffer rb;
  const bool fits =
      find_buffer(*c, buffer, &rb) && offset <= rb.length && length <= rb.length - offset;
  std::lock_guard send(c->send_mu);
  if (!fits) {
    Fault refused =
        send_done(*c, MessageKind::kCancel, tag, static_cast<uint32_t>(Fault::kOutOfBounds));
    return to_client && refused == Fault::kNone ? Fault::kNone : Fault::kOutOfBounds;
  }
  if (c->dead || !ensure_bounce(*c, length)) return Fault::kTransport;
  if (to_client) bytes(c->v.bounce.data());
  if (length > 0) {
    ibv_sge sge{reinterpret_cast<uint64_t>(c->v.bounce.data()), length, c->v.bounce_mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = tag;
    wr.opcode = to_client ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = rb.addr + offset;
    wr.wr.rdma.rkey = rb.rkey;
    if (post_and_wait(c->v.cm->qp, c->v.send_cq.get(), &wr, std::max(timeout_ms, 1)) !=
        IBV_WC_SUCCESS) {
      rdma_disconnect(c->v.cm.get());
      return Fault::kTransport;
    }
  }
  if (!to_client) bytes(c->v.bounce.data());
  // Ordered after the data on the queue pair: the client's wait ends once the bytes are in
  // place (a push) or taken (a pull).
  return send_done(*c, to_client ? MessageKind::kPushDone : MessageKind::kPullDone, tag, length);
}

Fault VerbsEngine::push(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag,
                        const iovec* parts, int nparts) {
  size_t total = 0;
  for (int i = 0; i < nparts; ++i) total += parts[i].iov_len;
  if (total > UINT32_MAX) return Fault::kOutOfBounds;
  Fault f = transfer(session, buffer, offset, tag, static_cast<uint32_t>(total), true,
                     kSendTimeoutMs, [&](char* bounce) {
                       for (int i = 0; i < nparts; ++i) {
                         std::memcpy(bounce, parts[i].iov_base, parts[i].iov_len);
                         bounce += parts[i].iov_len;
                       }
                     });
  if (f == Fault::kNone) {
    stats_.pushes.fetch_add(1, std::memory_order_relaxed);
    stats_.push_bytes.fetch_add(total, std::memory_order_relaxed);
  }
  return f;
}

Fault VerbsEngine::pull(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag,
                        uint32_t length, int timeout_ms, std::vector<char>* data) {
  Fault f = transfer(session, buffer, offset, tag, length, false, timeout_ms,
                     [&](char* bounce) { data->assign(bounce, bounce + length); });
  if (f == Fault::kNone) {
    stats_.pulls.fetch_add(1, std::memory_order_relaxed);
    stats_.pull_bytes.fetch_add(length, std::memory_order_relaxed);
  }
  return f;
}

void VerbsEngine::cancel(uint64_t session, uint32_t tag, Fault fault) {
  std::shared_ptr<Conn> c = by_session(session);
  if (!c) return;
  std::lock_guard send(c->send_mu);
  send_done(*c, MessageKind::kCancel, tag, static_cast<uint32_t>(fault));
}

}  // namespace odafs::ordma::verbs
