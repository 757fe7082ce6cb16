// The verbs engine's client: one RC queue pair (a Link) to the engine, RDMA READs of
// exported blocks into registered staging slots, each followed by a READ of the block's
// generation word (verbs_engine.h says why). A Link that fails (a remote access error moves
// the queue pair to the error state) is replaced in the background while reads answer
// kTransport, which sends them to the RPC.
#include <openssl/rand.h>
#include <poll.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/futex.h"
#include "base/log.h"
#include "ordma/engine_impl/verbs/verbs_engine.h"
#include "ordma/engine_impl/verbs/verbs_support.h"
#include "ordma/engine_impl/verbs/verbs_wire.h"

namespace odafs::ordma {
namespace verbs {
namespace {

inline constexpr int kSlots = 32;               // reads (and messages) in flight per link
inline constexpr size_t kSlotData = 64 * 1024;  // the largest block a server exports
inline constexpr int kClientRecvSlots = 16;
inline constexpr uint64_t kRecvBit = uint64_t{1} << 63;
inline constexpr int kReconnectPauseMs = 1000;

enum : uint32_t { kPosted = 0, kDone = 1 };

// One slot's registered memory: a block's bytes, its generation word, a message to send.
struct alignas(64) SlotMemory {
  char data[kSlotData];
  Be64 generation;
  Message message;
};

struct Slot {
  std::atomic<uint32_t> state{kDone};
  Fault fault = Fault::kNone;
};

// A direct call waiting for the engine's PUSH_DONE / PULL_DONE / CANCEL.
struct DirectWait {
  std::atomic<uint32_t> state{kPosted};
  Fault fault = Fault::kNone;
  uint32_t got = 0;
};

struct Staging {
  SlotMemory slots[kSlots];
  Message recv[kClientRecvSlots];
};

// One connected, authenticated queue pair. Thread-safe. A failed Link stays failed.
class Link {
 public:
  Link(const net::Endpoint& engine, const Session& session, const EngineClientOptions& options);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  bool failed() const { return failed_.load(std::memory_order_acquire); }

  // A free slot, or -1 when none frees up before deadline or the link failed.
  int acquire(const timespec* deadline);
  void release(int slot);
  // Posts the READ of op's bytes and then of its generation word into `slot`.
  bool post_read(int slot, const ReadOp& op);
  // Sends m from `slot` and waits for its completion.
  bool send(int slot, const Message& m, const timespec* deadline);
  // Waits for the slot's completion; false on timeout.
  bool wait(int slot, const timespec* deadline);
  Fault fault(int slot) const { return slots_[slot].fault; }
  const SlotMemory& memory(int slot) const { return staging_->slots[slot]; }

  void expect_direct(uint32_t tag, DirectWait* w);
  void forget_direct(uint32_t tag);

  ibv_pd* pd() const { return pd_; }

 private:
  void setup(const net::Endpoint& engine, const Session& session, int timeout_ms);
  void release_resources();
  void complete();  // the completion thread
  void on_completion(const ibv_wc& wc);
  void on_message(const Message& m);
  void post_receive(int slot);
  void fail_link(const char* why);

  EngineClientOptions options_;
  rdma_event_channel* cm_channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  bool qp_created_ = false;
  Staging* staging_ = nullptr;  // mmap'd: page-aligned and zeroed
  ibv_mr* staging_mr_ = nullptr;
  uint64_t generations_addr_ = 0;
  uint32_t generations_rkey_ = 0;
  uint32_t segments_ = 0;

  Slot slots_[kSlots];
  std::mutex free_mu_;
  std::vector<int> free_;
  std::atomic<uint32_t> free_count_{0};  // futex word: waiters for a slot sleep on it

  std::mutex direct_mu_;
  std::unordered_map<uint32_t, DirectWait*> direct_;

  std::atomic<uint32_t> welcomed_{0};
  std::atomic<bool> failed_{false};
  std::atomic<bool> stopping_{false};
  std::thread completer_;
};

Link::Link(const net::Endpoint& engine, const Session& session, const EngineClientOptions& options)
    : options_(options) {
  for (int i = kSlots - 1; i >= 0; --i) free_.push_back(i);
  free_count_ = kSlots;
  try {
    setup(engine, session, options.timeout_ms);
  } catch (...) {
    release_resources();
    throw;
  }
}

Link::~Link() { release_resources(); }

void Link::setup(const net::Endpoint& engine, const Session& session, int timeout_ms) {
  Deadline deadline(timeout_ms);
  cm_channel_ = rdma_create_event_channel();
  if (cm_channel_ == nullptr) fail(errno, "rdma_create_event_channel");
  if (rdma_create_id(cm_channel_, &id_, nullptr, RDMA_PS_TCP) != 0) fail(errno, "rdma_create_id");
  rdma_addrinfo* where = resolve(engine, false);
  int r = rdma_resolve_addr(id_, nullptr, where->ai_dst_addr, std::max(timeout_ms, 1000));
  int resolve_errno = errno;
  rdma_freeaddrinfo(where);
  if (r != 0) fail(resolve_errno, "rdma_resolve_addr " + engine.to_string());
  rdma_ack_cm_event(expect_event(cm_channel_, RDMA_CM_EVENT_ADDR_RESOLVED, timeout_ms));
  if (rdma_resolve_route(id_, std::max(timeout_ms, 1000)) != 0) fail(errno, "rdma_resolve_route");
  rdma_ack_cm_event(expect_event(cm_channel_, RDMA_CM_EVENT_ROUTE_RESOLVED, timeout_ms));

  pd_ = ibv_alloc_pd(id_->verbs);
  if (pd_ == nullptr) fail(errno, "ibv_alloc_pd");
  channel_ = ibv_create_comp_channel(id_->verbs);
  if (channel_ == nullptr) fail(errno, "ibv_create_comp_channel");
  cq_ = ibv_create_cq(id_->verbs, 2 * kSlots + kClientRecvSlots + 8, nullptr, channel_, 0);
  if (cq_ == nullptr) fail(errno, "ibv_create_cq");
  if (ibv_req_notify_cq(cq_, 0) != 0) fail(errno, "ibv_req_notify_cq");
  ibv_qp_init_attr qa{};
  qa.send_cq = cq_;
  qa.recv_cq = cq_;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 2 * kSlots;
  qa.cap.max_recv_wr = kClientRecvSlots;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if (rdma_create_qp(id_, pd_, &qa) != 0) fail(errno, "rdma_create_qp");
  qp_created_ = true;
  void* mem =
      ::mmap(nullptr, sizeof(Staging), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) fail(errno, "staging memory");
  staging_ = static_cast<Staging*>(mem);
  staging_mr_ = ibv_reg_mr(pd_, staging_, sizeof(Staging), IBV_ACCESS_LOCAL_WRITE);
  if (staging_mr_ == nullptr) fail(errno, "registering staging memory");
  for (int i = 0; i < kClientRecvSlots; ++i) post_receive(i);

  ibv_device_attr attr{};
  if (ibv_query_device(id_->verbs, &attr) != 0) fail(errno, "ibv_query_device");
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
  if (rdma_connect(id_, &param) != 0) fail(errno, "rdma_connect " + engine.to_string());
  rdma_cm_event* established = expect_event(cm_channel_, RDMA_CM_EVENT_ESTABLISHED, timeout_ms);
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

void Link::release_resources() {
  stopping_ = true;
  if (completer_.joinable()) completer_.join();
  if (id_ && qp_created_) {
    rdma_disconnect(id_);
    rdma_destroy_qp(id_);
  }
  if (staging_mr_) ibv_dereg_mr(staging_mr_);
  if (staging_) ::munmap(staging_, sizeof(Staging));
  if (cq_) ibv_destroy_cq(cq_);
  if (channel_) ibv_destroy_comp_channel(channel_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (id_) rdma_destroy_id(id_);
  if (cm_channel_) rdma_destroy_event_channel(cm_channel_);
  staging_mr_ = nullptr;
  staging_ = nullptr;
  cq_ = nullptr;
  channel_ = nullptr;
  pd_ = nullptr;
  id_ = nullptr;
  cm_channel_ = nullptr;
  qp_created_ = false;
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
  if (options_.busy_poll) {
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
    int n = ibv_poll_cq(cq_, 16, wcs);
    if (n < 0) {
      fail_link("ibv_poll_cq failed");
      return;
    }
    for (int i = 0; i < n; ++i) on_completion(wcs[i]);
    if (n > 0 || options_.busy_poll) continue;
    // Nothing there: arm the channel, look once more (a completion may have come between),
    // then sleep until one comes (or 100 ms pass, to notice stopping_).
    ibv_req_notify_cq(cq_, 0);
    n = ibv_poll_cq(cq_, 16, wcs);
    for (int i = 0; i < n; ++i) on_completion(wcs[i]);
    if (n > 0) continue;
    if (::poll(&p, 1, 100) > 0) {
      ibv_cq* cq = nullptr;
      void* context = nullptr;
      if (ibv_get_cq_event(channel_, &cq, &context) == 0) ibv_ack_cq_events(cq, 1);
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
  if (!options_.busy_poll) futex_wake(&s.state);
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

// The EngineClient: the current Link, replaced in the background when it fails.
class VerbsEngineClient final : public EngineClient {
 public:
  VerbsEngineClient(const net::Endpoint& engine, const Session& session,
                    const EngineClientOptions& options)
      : engine_(engine),
        session_(session),
        options_(options),
        link_(std::make_shared<Link>(engine, session, options)) {}

  ~VerbsEngineClient() override {
    stopping_ = true;
    if (reconnector_.joinable()) reconnector_.join();
  }

  Fault read(const Reference& ref, uint32_t offset, uint32_t length, void* dst,
             uint32_t* got) override {
    ReadOp op{ref, offset, length, dst};
    read_many(std::span<ReadOp>(&op, 1));
    if (op.fault == Fault::kNone) *got = op.got;
    return op.fault;
  }

  void read_many(std::span<ReadOp> ops) override;
  bool broken() const override { return broken_.load(); }
  const char* transport() const override { return "verbs"; }
  uint64_t reconnects() const override { return reconnects_.load(); }

  uint32_t register_buffer(void* base, size_t length) override;
  void unregister_buffer(uint32_t id) override;
  Fault direct(const std::function<void(uint32_t tag)>& call, uint32_t* got,
               int timeout_ms) override;

 private:
  std::shared_ptr<Link> link() {
    std::lock_guard lock(link_mu_);
    return link_;
  }
  // Starts replacing a failed link, unless that is under way. Reads meanwhile go by RPC.
  void replace_link();
  Fault check(const ReadOp& op) const;

  struct Registered {
    std::shared_ptr<Link> link;  // the region lives in its protection domain
    ibv_mr* mr = nullptr;
  };

  net::Endpoint engine_;
  Session session_;
  EngineClientOptions options_;
  std::mutex link_mu_;
  std::shared_ptr<Link> link_;
  std::atomic<bool> broken_{false};
  std::atomic<bool> replacing_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> reconnects_{0};
  std::thread reconnector_;
  std::mutex buffers_mu_;
  std::unordered_map<uint32_t, Registered> buffers_;
  uint32_t next_buffer_ = 1;  // under buffers_mu_
  std::atomic<uint32_t> next_tag_{1};
};

Fault VerbsEngineClient::check(const ReadOp& op) const {
  // What the client can tell on its own, before a bad read costs it its queue pair.
  if (op.ref.session != session_.id) return Fault::kWrongSession;
  if (op.offset < op.ref.offset || op.length > op.ref.length ||
      op.offset - op.ref.offset > op.ref.length - op.length || op.length > kSlotData) {
    return Fault::kOutOfBounds;
  }
  return Fault::kNone;
}

void VerbsEngineClient::read_many(std::span<ReadOp> ops) {
  std::shared_ptr<Link> l = link();
  Deadline deadline(options_.timeout_ms);
  std::vector<int> slots(ops.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    ReadOp& op = ops[i];
    op.fault = check(op);
    if (op.fault != Fault::kNone) continue;
    op.fault = Fault::kTransport;
    if (broken_ || l->failed()) continue;
    int slot = l->acquire(deadline.get());
    if (slot < 0) continue;
    if (!l->post_read(slot, op)) {
      l->release(slot);
      continue;
    }
    slots[i] = slot;
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (slots[i] < 0) continue;
    ReadOp& op = ops[i];
    if (!l->wait(slots[i], deadline.get())) {
      // The interface's promise: a read not answered in time breaks the client, so a late
      // completion lands in staging nobody reads. The slot stays taken.
      broken_ = true;
      continue;
    }
    op.fault = l->fault(slots[i]);
    if (op.fault == Fault::kNone) {
      const SlotMemory& mem = l->memory(slots[i]);
      if (static_cast<uint32_t>(mem.generation.get()) != op.ref.generation) {
        op.fault = Fault::kStaleGeneration;  // the key came round: not this block any more
      } else {
        std::memcpy(op.dst, mem.data, op.length);
        op.got = op.length;
      }
    }
    l->release(slots[i]);
  }
  if (l->failed()) replace_link();
}

void VerbsEngineClient::replace_link() {
  if (stopping_ || replacing_.exchange(true)) return;
  if (reconnector_.joinable()) reconnector_.join();  // the previous, finished replacement
  reconnector_ = std::thread([this] {
    while (!stopping_) {
      try {
        auto fresh = std::make_shared<Link>(engine_, session_, options_);
        {
          std::lock_guard lock(link_mu_);
          link_ = std::move(fresh);
        }
        reconnects_.fetch_add(1);
        ODAFS_LOG_INFO("verbs: queue pair to %s re-established", engine_.to_string().c_str());
        break;
      } catch (const std::exception& e) {
        ODAFS_LOG_WARN_THROTTLED("verbs: re-establishing the queue pair: %s", e.what());
        for (int i = 0; i < kReconnectPauseMs / 50 && !stopping_; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
    }
    replacing_ = false;
  });
}

uint32_t VerbsEngineClient::register_buffer(void* base, size_t length) {
  std::shared_ptr<Link> l = link();
  Registered r{
      l, ibv_reg_mr(l->pd(), base, length,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)};
  uint32_t id;
  {
    std::lock_guard lock(buffers_mu_);
    id = next_buffer_++;
    buffers_[id] = r;
  }
  if (r.mr == nullptr) return id;  // the engine never learns it: its transfer fails
  Message m = make_message(MessageKind::kRegister);
  m.id.set(id);
  m.addr.set(reinterpret_cast<uint64_t>(base));
  m.length.set(length);
  m.rkey.set(r.mr->rkey);
  Deadline deadline(options_.timeout_ms);
  int slot = l->acquire(deadline.get());
  if (slot >= 0) {
    l->send(slot, m, deadline.get());
    l->release(slot);
  }
  return id;
}

void VerbsEngineClient::unregister_buffer(uint32_t id) {
  Registered r;
  {
    std::lock_guard lock(buffers_mu_);
    auto it = buffers_.find(id);
    if (it == buffers_.end()) return;
    r = it->second;
    buffers_.erase(it);
  }
  if (r.mr == nullptr) return;
  Message m = make_message(MessageKind::kUnregister);
  m.id.set(id);
  Deadline deadline(options_.timeout_ms);
  int slot = r.link->acquire(deadline.get());
  if (slot >= 0) {
    r.link->send(slot, m, deadline.get());
    r.link->release(slot);
  }
  ibv_dereg_mr(r.mr);  // after the engine was told: it can no longer write here
}

Fault VerbsEngineClient::direct(const std::function<void(uint32_t tag)>& call, uint32_t* got,
                                int timeout_ms) {
  std::shared_ptr<Link> l = link();
  const uint32_t tag = next_tag_.fetch_add(1);
  DirectWait w;
  l->expect_direct(tag, &w);
  try {
    call(tag);
  } catch (...) {
    l->forget_direct(tag);
    throw;
  }
  Deadline deadline(timeout_ms < 0 ? options_.timeout_ms : timeout_ms);
  while (w.state.load(std::memory_order_acquire) != kDone) {
    if (deadline.get() != nullptr && deadline_passed(*deadline.get())) {
      l->forget_direct(tag);
      // The completion thread may have finished w between the check and forget_direct.
      if (w.state.load(std::memory_order_acquire) == kDone) break;
      broken_ = true;
      return Fault::kTransport;
    }
    futex_wait(&w.state, kPosted, deadline.get());
  }
  if (w.fault == Fault::kNone) *got = w.got;
  return w.fault;
}

}  // namespace
}  // namespace verbs

std::unique_ptr<EngineClient> connect_verbs_engine(const net::Endpoint& engine,
                                                   const Session& session,
                                                   const EngineClientOptions& options) {
  return std::make_unique<verbs::VerbsEngineClient>(engine, session, options);
}

}  // namespace odafs::ordma
