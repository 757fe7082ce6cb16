// The verbs client's queue pair (verbs_link.h).
#include "ordma/engine_impl/verbs/verbs_link.h"

#include <poll.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/futex.h"
#include "base/log.h"
#include "ordma/engine_impl/verbs/verbs_support.h"

namespace odafs::ordma::verbs {

Link::Link(const net::Endpoint& engine, const Session& session, const EngineClientOptions& options)
    : options_(options) {
  for (int i = kSlots - 1; i >= 0; --i) free_.push_back(i);
  free_count_ = kSlots;
  try {
    setup(engine, session, options.timeout_ms);
  } catch (...) {
    shut_down();  // then the members free what setup made
    throw;
  }
}

Link::~Link() { shut_down(); }

void StagingUnmapper::operator()(Staging* staging) const { ::munmap(staging, sizeof(Staging)); }

void Link::setup(const net::Endpoint& engine, const Session& session, int timeout_ms) {
  Deadline deadline(timeout_ms);
  cm_channel_.reset(rdma_create_event_channel());
  if (cm_channel_ == nullptr) fail(errno, "rdma_create_event_channel");
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(cm_channel_.get(), &id, nullptr, RDMA_PS_TCP) != 0) {
    fail(errno, "rdma_create_id");
  }
  id_.reset(id);
  rdma_addrinfo* where = resolve(engine, false);
  int r = rdma_resolve_addr(id, nullptr, where->ai_dst_addr, std::max(timeout_ms, 1000));
  int resolve_errno = errno;
  rdma_freeaddrinfo(where);
  if (r != 0) fail(resolve_errno, "rdma_resolve_addr " + engine.to_string());
  rdma_ack_cm_event(expect_event(cm_channel_.get(), RDMA_CM_EVENT_ADDR_RESOLVED, timeout_ms));
  if (rdma_resolve_route(id, std::max(timeout_ms, 1000)) != 0) fail(errno, "rdma_resolve_route");
  rdma_ack_cm_event(expect_event(cm_channel_.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, timeout_ms));

  pd_.reset(ibv_alloc_pd(id->verbs));
  if (pd_ == nullptr) fail(errno, "ibv_alloc_pd");
  channel_.reset(ibv_create_comp_channel(id->verbs));
  if (channel_ == nullptr) fail(errno, "ibv_create_comp_channel");
  cq_.reset(
      ibv_create_cq(id->verbs, 2 * kSlots + kClientRecvSlots + 8, nullptr, channel_.get(), 0));
  if (cq_ == nullptr) fail(errno, "ibv_create_cq");
  if (ibv_req_notify_cq(cq_.get(), 0) != 0) fail(errno, "ibv_req_notify_cq");
  ibv_qp_init_attr qa{};
  qa.send_cq = cq_.get();
  qa.recv_cq = cq_.get();
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 2 * kSlots;
  qa.cap.max_recv_wr = kClientRecvSlots;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  void* mem =
      ::mmap(nullptr, sizeof(Staging), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) fail(errno, "staging memory");
  staging_.reset(static_cast<Staging*>(mem));
  staging_mr_ = register_memory(pd_.get(), staging_.get(), sizeof(Staging), IBV_ACCESS_LOCAL_WRITE);
  if (staging_mr_ == nullptr) fail(errno, "registering staging memory");
  if (rdma_create_qp(id, pd_.get(), &qa) != 0) fail(errno, "rdma_create_qp");
  qp_.reset(id);
  for (int i = 0; i < kClientRecvSlots; ++i) post_receive(i);

  ibv_device_attr attr{};
  if (ibv_query_device(id->verbs, &attr) != 0) fail(errno, "ibv_query_device");
  ConnectRequest req{};
  req.magic.set(kMagic);
  req.version.set(kVersion);
  rdma_conn_param param{};
  param.private_data = &req;
  param.private_data_len = sizeof req;
  param.initiator_depth = static_cast<uint8_t>(std::clamp(attr.max_qp_init_rd_atom, 1, 16));
  param.responder_resources = static_cast<uint8_t>(std::clamp(attr.max_qp_rd_atom, 1, 16));
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  if (rdma_connect(id, &param) != 0) fail(errno, "rdma_connect " + engine.to_string());
  rdma_cm_event* established =
      expect_event(cm_channel_.get(), RDMA_CM_EVENT_ESTABLISHED, timeout_ms);
  ConnectAccept acc{};
  bool ours = established->param.conn.private_data_len >= sizeof acc;
  if (ours) std::memcpy(&acc, established->param.conn.private_data, sizeof acc);
  rdma_ack_cm_event(established);
  if (!ours || acc.magic.get() != kMagic || acc.version.get() != kVersion) {
    fail(EPROTO, "not an odafs verbs engine at " + engine.to_string());
  }
  generations_addr_ = acc.generations_addr.get();
  generations_rkey_ = acc.generations_rkey.get();
  segments_ = acc.segments.get();
  completer_ = std::thread([this] { complete(); });

  Nonce nonce;
  std::memcpy(nonce.data(), acc.nonce, nonce.size());
  Message proof = make_message(MessageKind::kProof);
  proof.session.set(session.id);
  Proof p = prove_session(session.secret, nonce);
  std::memcpy(proof.proof, p.data(), p.size());
  int slot = acquire(deadline.get());
  if (slot < 0 || !send(slot, proof, deadline.get())) fail(ECONNRESET, "sending the session proof");
  release(slot);
  while (welcomed_.load() == 0 && !failed()) {
    if (deadline.get() != nullptr && deadline_passed(*deadline.get())) {
      fail(ETIMEDOUT, "no WELCOME from the engine in time");
    }
    futex_wait(&welcomed_, 0, deadline.get());
  }
  if (welcomed_.load() == 0) fail(EACCES, "the engine refused the session");
}

void Link::shut_down() {
  stopping_ = true;
  if (completer_.joinable()) completer_.join();
  if (qp_ != nullptr) rdma_disconnect(id_.get());
}

void Link::post_receive(int slot) {
  ibv_sge sge{reinterpret_cast<uint64_t>(&staging_->recv[slot]), sizeof(Message),
              staging_mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = kRecvBit | static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_recv(id_->qp, &wr, &bad) != 0) fail_link("ibv_post_recv failed");
}

int Link::acquire(const timespec* deadline) {
  for (;;) {
    if (failed()) return -1;
    {
      std::lock_guard lock(free_mu_);
      if (!free_.empty()) {
        int slot = free_.back();
        free_.pop_back();
        free_count_.fetch_sub(1);
        return slot;
      }
    }
    if (deadline != nullptr && deadline_passed(*deadline)) return -1;
    futex_wait(&free_count_, 0, deadline);
  }
}

void Link::release(int slot) {
  {
    std::lock_guard lock(free_mu_);
    free_.push_back(slot);
  }
  free_count_.fetch_add(1);
  futex_wake(&free_count_, 1);
}

bool Link::post_read(int slot, const ReadOp& op) {
  if (op.ref.segment >= segments_) return false;
  Token token = get_token(op.ref);
  SlotMemory& mem = staging_->slots[slot];
  slots_[slot].state.store(kPosted, std::memory_order_relaxed);
  ibv_sge data{reinterpret_cast<uint64_t>(mem.data), op.length, staging_mr_->lkey};
  ibv_sge gen{reinterpret_cast<uint64_t>(&mem.generation), sizeof(Be64), staging_mr_->lkey};
  ibv_send_wr wrs[2]{};
  wrs[0].wr_id = static_cast<uint64_t>(slot);
  wrs[0].opcode = IBV_WR_RDMA_READ;
  wrs[0].sg_list = &data;
  wrs[0].num_sge = 1;
  wrs[0].wr.rdma.remote_addr = token.addr.get() + op.offset;
  wrs[0].wr.rdma.rkey = token.rkey.get();
  wrs[0].next = &wrs[1];
  // The generation word after the data: a completion for both says the data was read
  // while the block still had this generation, or the word tells otherwise.
  wrs[1].wr_id = static_cast<uint64_t>(slot);
  wrs[1].opcode = IBV_WR_RDMA_READ;
  wrs[1].sg_list = &gen;
  wrs[1].num_sge = 1;
  wrs[1].send_flags = IBV_SEND_SIGNALED;
  wrs[1].wr.rdma.remote_addr = generations_addr_ + sizeof(Be64) * op.ref.segment;
  wrs[1].wr.rdma.rkey = generations_rkey_;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(id_->qp, wrs, &bad) != 0) {
    fail_link("ibv_post_send failed");
    return false;
  }
  return true;
}

bool Link::send(int slot, const Message& m, const timespec* deadline) {
  SlotMemory& mem = staging_->slots[slot];
  std::memcpy(&mem.message, &m, sizeof m);
  slots_[slot].state.store(kPosted, std::memory_order_relaxed);
  ibv_sge sge{reinterpret_cast<uint64_t>(&mem.message), sizeof(Message), staging_mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = static_cast<uint64_t>(slot);
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(id_->qp, &wr, &bad) != 0) {
    fail_link("ibv_post_send failed");
    return false;
  }
  return wait(slot, deadline) && slots_[slot].fault == Fault::kNone;
}

bool Link::wait(int slot, const timespec* deadline) {
  std::atomic<uint32_t>& state = slots_[slot].state;
  if (options_.spin_wait) {
    while (state.load(std::memory_order_acquire) != kDone) {
      if (deadline != nullptr && deadline_passed(*deadline)) return false;
    }
    return true;
  }
  while (state.load(std::memory_order_acquire) != kDone) {
    if (deadline != nullptr && deadline_passed(*deadline)) return false;
    futex_wait(&state, kPosted, deadline);
  }
  return true;
}

void Link::expect_direct(uint32_t tag, DirectWait* w) {
  std::lock_guard lock(direct_mu_);
  direct_[tag] = w;
}

void Link::forget_direct(uint32_t tag) {
  std::lock_guard lock(direct_mu_);
  direct_.erase(tag);
}

void Link::fail_link(const char* why) {
  if (!failed_.exchange(true, std::memory_order_acq_rel)) {
    ODAFS_LOG_WARN("verbs: queue pair failed (%s); reading by RPC until it is replaced", why);
  }
  // Whoever waits for a slot or a direct transfer wakes and sees the failure.
  futex_wake(&free_count_);
  std::lock_guard lock(direct_mu_);
  for (auto& [tag, w] : direct_) {
    w->fault = Fault::kTransport;
    w->state.store(kDone, std::memory_order_release);
    futex_wake(&w->state);
  }
  direct_.clear();
}

void Link::complete() {
  ibv_wc wcs[16];
  pollfd p{channel_->fd, POLLIN, 0};
  while (!stopping_.load(std::memory_order_relaxed)) {
    int n = ibv_poll_cq(cq_.get(), 16, wcs);
    if (n < 0) {
      fail_link("ibv_poll_cq failed");
      return;
    }
    for (int i = 0; i < n; ++i) on_completion(wcs[i]);
    if (n > 0 || options_.spin_wait) continue;
    // Nothing there: arm the channel, look once more (a completion may have come between),
    // then sleep until one comes (or 100 ms pass, to notice stopping_).
    ibv_req_notify_cq(cq_.get(), 0);
    n = ibv_poll_cq(cq_.get(), 16, wcs);
    for (int i = 0; i < n; ++i) on_completion(wcs[i]);
    if (n > 0) continue;
    if (::poll(&p, 1, 100) > 0) {
      ibv_cq* cq = nullptr;
      void* context = nullptr;
      if (ibv_get_cq_event(channel_.get(), &cq, &context) == 0) ibv_ack_cq_events(cq, 1);
    }
  }
}

void Link::on_completion(const ibv_wc& wc) {
  if (wc.wr_id & kRecvBit) {
    if (wc.status != IBV_WC_SUCCESS) return fail_link("a receive failed");
    const int slot = static_cast<int>(wc.wr_id & ~kRecvBit);
    Message m;
    std::memcpy(&m, &staging_->recv[slot], sizeof m);
    post_receive(slot);
    if (wc.byte_len == sizeof m) on_message(m);
    return;
  }
  Slot& s = slots_[wc.wr_id % kSlots];
  if (s.state.load(std::memory_order_relaxed) == kDone) return;  // the second of a failed pair
  switch (wc.status) {
    case IBV_WC_SUCCESS:
      s.fault = Fault::kNone;
      break;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
      // The key is no longer (or never was) valid for this queue pair: revoked, locked for a
      // write, or forged. The queue pair is now in the error state.
      s.fault = Fault::kRevoked;
      fail_link("remote access error");
      break;
    default:
      s.fault = Fault::kTransport;
      fail_link(ibv_wc_status_str(wc.status));
      break;
  }
  s.state.store(kDone, std::memory_order_release);
  if (!options_.spin_wait) futex_wake(&s.state);
}

void Link::on_message(const Message& m) {
  const auto kind = static_cast<MessageKind>(m.kind.get());
  if (kind == MessageKind::kWelcome) {
    welcomed_.store(1);
    futex_wake(&welcomed_);
    return;
  }
  if (kind != MessageKind::kPushDone && kind != MessageKind::kPullDone &&
      kind != MessageKind::kCancel) {
    return;
  }
  std::lock_guard lock(direct_mu_);
  auto it = direct_.find(m.tag.get());
  if (it == direct_.end()) return;  // the call gave up; a late transfer is dropped
  DirectWait* w = it->second;
  direct_.erase(it);
  if (kind == MessageKind::kCancel) {
    const uint32_t f = m.value.get();
    w->fault = f > 0 && f < static_cast<uint32_t>(kFaultKinds) ? static_cast<Fault>(f)
                                                               : Fault::kBadRequest;
  } else {
    w->fault = Fault::kNone;
    w->got = m.value.get();
  }
  w->state.store(kDone, std::memory_order_release);
  futex_wake(&w->state);
}

}  // namespace odafs::ordma::verbs
