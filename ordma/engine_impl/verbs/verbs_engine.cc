// The verbs engine: setup and the ORDMA policy. See verbs_engine.h for the design and
// verbs_engine_impl.h for the locks.
#include "ordma/engine_impl/verbs/verbs_engine.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "base/log.h"
#include "ordma/engine_impl/verbs/verbs_engine_impl.h"
#include "ordma/engine_impl/verbs/verbs_support.h"

namespace odafs::ordma {

std::unique_ptr<Engine> make_verbs_engine(const EngineOptions& options, ExportedMemory memory) {
  return std::make_unique<verbs::VerbsEngine>(options, memory);
}

namespace verbs {

namespace {

// options.backend's rdma_device (the only setting this backend takes); "" when not given.
std::string rdma_device_of(const EngineOptions& options) {
  std::string device;
  for (const auto& [name, value] : options.backend) {
    if (name != "rdma_device") {
      throw std::invalid_argument("the verbs engine takes rdma_device=NAME, not " + name + "=" +
                                  value);
    }
    device = value;
  }
  return device;
}

}  // namespace

VerbsEngine::VerbsEngine(const EngineOptions& options, ExportedMemory memory)
    : options_(options),
      rdma_device_(rdma_device_of(options)),
      memory_(memory),
      generations_(new Be64[memory.segments]),
      segments_(new SegmentState[memory.segments]) {
  for (size_t i = 0; i < memory.segments; ++i) generations_[i].set(1);
  open_device();  // what it made before a throw, its members free
}

void VerbsEngine::open_device() {
  cm_channel_.reset(rdma_create_event_channel());
  if (cm_channel_ == nullptr) fail(errno, "rdma_create_event_channel");
  rdma_cm_id* listener = nullptr;
  if (rdma_create_id(cm_channel_.get(), &listener, nullptr, RDMA_PS_TCP) != 0) {
    fail(errno, "rdma_create_id");
  }
  listener_.reset(listener);
  rdma_addrinfo* where = resolve(options_.listen, true);
  int bound = rdma_bind_addr(listener, where->ai_src_addr);
  int bind_errno = errno;
  rdma_freeaddrinfo(where);
  if (bound != 0) fail(bind_errno, "cannot bind " + options_.listen.to_string());
  if (rdma_listen(listener, 128) != 0) fail(errno, "rdma_listen");
  endpoint_ = options_.listen.host + ":" + std::to_string(ntohs(rdma_get_src_port(listener)));

  // The device: the one bound to the listening address, else the one named, else the first.
  ctx_ = listener_->verbs;
  int n = 0;
  ibv_context** all = rdma_get_devices(&n);
  for (int i = 0; ctx_ == nullptr && all != nullptr && i < n; ++i) {
    if (rdma_device_.empty() || rdma_device_ == ibv_get_device_name(all[i]->device)) {
      ctx_ = all[i];
    }
  }
  if (all != nullptr) rdma_free_devices(all);
  if (ctx_ == nullptr) fail(ENODEV, "no RDMA device for " + options_.listen.to_string());
  if (!rdma_device_.empty() && rdma_device_ != ibv_get_device_name(ctx_->device)) {
    fail(ENODEV, options_.listen.to_string() + " is on device " +
                     ibv_get_device_name(ctx_->device) + ", not " + rdma_device_);
  }
  ibv_device_attr attr{};
  if (ibv_query_device(ctx_, &attr) != 0) fail(errno, "ibv_query_device");
  responder_resources_ = static_cast<uint8_t>(std::clamp(attr.max_qp_rd_atom, 1, 16));
  initiator_depth_ = static_cast<uint8_t>(std::clamp(attr.max_qp_init_rd_atom, 1, 16));

  pd_.reset(ibv_alloc_pd(ctx_));
  if (pd_ == nullptr) fail(errno, "ibv_alloc_pd");
  windows_ = has_type2_windows(ctx_);
  const size_t arena = memory_.segment_bytes * memory_.segments;
  const size_t words = sizeof(Be64) * memory_.segments;
  if (windows_) {
    // Nothing remote through the region itself: only windows bound over it are readable.
    arena_mr_ = register_memory(pd_.get(), const_cast<std::byte*>(memory_.base), arena,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    if (arena_mr_ == nullptr) fail(errno, "registering the exported memory");
    generations_mr_ = register_memory(pd_.get(), generations_.get(), words, IBV_ACCESS_REMOTE_READ);
    if (generations_mr_ == nullptr) fail(errno, "registering the generation words");
  }
  recv_channel_.reset(ibv_create_comp_channel(ctx_));
  if (recv_channel_ == nullptr) fail(errno, "ibv_create_comp_channel");
  recv_cq_.reset(ibv_create_cq(ctx_, kRecvSlots * 256, nullptr, recv_channel_.get(), 0));
  if (recv_cq_ == nullptr) fail(errno, "ibv_create_cq");
  if (ibv_req_notify_cq(recv_cq_.get(), 0) != 0) fail(errno, "ibv_req_notify_cq");
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) fail(errno, "eventfd");
  ODAFS_LOG_INFO(
      "verbs engine on %s (%s): %s", endpoint_.c_str(), ibv_get_device_name(ctx_->device),
      windows_ ? "type-2 memory windows" : "a memory region per block (no type-2 windows)");
}

VerbsEngine::~VerbsEngine() {
  stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void VerbsEngine::start() {
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] { serve(); });
}

void VerbsEngine::stop() {
  if (stopped_) return;
  stopped_ = true;
  stopping_ = true;
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
  std::vector<std::shared_ptr<Conn>> all;
  {
    std::unique_lock lock(conns_mu_);
    for (auto& [id, c] : conns_) all.push_back(c);
  }
  for (auto& c : all) teardown(c);
}

std::shared_ptr<Conn> VerbsEngine::by_session(uint64_t session) {
  std::shared_lock lock(conns_mu_);
  auto it = by_session_.find(session);
  return it == by_session_.end() ? nullptr : it->second;
}

bool VerbsEngine::export_segment(uint32_t segment, uint32_t length, uint64_t session,
                                 Reference* ref) {
  if (segment >= memory_.segments || length == 0 || length > memory_.segment_bytes) return false;
  // A window needs the session's queue pair: until the client has connected one, its
  // references would be useless, and the client reads by RPC.
  std::shared_ptr<Conn> c = by_session(session);
  if (!c) return false;
  SegmentState& s = segments_[segment];
  std::lock_guard seg(s.mu);
  if (s.locked) return false;
  std::lock_guard wl(c->windows_mu);
  if (c->dead) return false;
  Window& w = c->v.windows[segment];
  if (!w.bound || w.length != length) {
    if (w.bound) invalidate(*c, w);
    if (!bind(*c, segment, length, w)) return false;
    if (std::find(s.bound.begin(), s.bound.end(), c.get()) == s.bound.end()) {
      s.bound.push_back(c.get());
    }
  }
  const std::byte* addr = memory_.base + size_t{segment} * memory_.segment_bytes;
  *ref = Reference{};
  ref->segment = segment;
  ref->generation = static_cast<uint32_t>(generations_[segment].get());
  ref->offset = 0;
  ref->length = length;
  ref->rights = kRightRead;
  ref->session = session;
  put_token(w.rkey, reinterpret_cast<uint64_t>(addr), ref);
  return true;
}

bool VerbsEngine::bind(Conn& c, uint32_t segment, uint32_t length, Window& w) {
  std::byte* addr = const_cast<std::byte*>(memory_.base) + size_t{segment} * memory_.segment_bytes;
  if (windows_) {
    if (w.mw == nullptr) {
      w.mw.reset(ibv_alloc_mw(c.v.pd, IBV_MW_TYPE_2));
      if (w.mw == nullptr) return false;
      w.rkey = w.mw->rkey;
    }
    // A new key on every bind: references to the previous binding fault.
    const uint32_t key = ibv_inc_rkey(w.rkey);
    ibv_send_wr wr{};
    wr.wr_id = segment;
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = w.mw.get();
    wr.bind_mw.rkey = key;
    wr.bind_mw.bind_info.mr = arena_mr_.get();
    wr.bind_mw.bind_info.addr = reinterpret_cast<uint64_t>(addr);
    wr.bind_mw.bind_info.length = length;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
    std::lock_guard send(c.send_mu);
    if (post_and_wait(c.v.cm->qp, c.v.send_cq.get(), &wr, kSendTimeoutMs) != IBV_WC_SUCCESS) {
      rdma_disconnect(c.v.cm.get());  // stuck or failed: nothing may use it any more
      return false;
    }
    w.rkey = key;
  } else {
    w.mr = register_memory(c.v.pd, addr, length, IBV_ACCESS_REMOTE_READ);
    if (w.mr == nullptr) return false;
    w.rkey = w.mr->rkey;
  }
  w.length = length;
  w.bound = true;
  ++w.binds;
  binds_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void VerbsEngine::invalidate(Conn& c, Window& w) {
  if (!w.bound) return;
  w.bound = false;
  invalidations_.fetch_add(1, std::memory_order_relaxed);
  if (!windows_) {
    w.mr.reset();  // synchronous: no access through its key after this returns
    return;
  }
  ibv_send_wr wr{};
  wr.wr_id = w.rkey;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.invalidate_rkey = w.rkey;
  std::lock_guard send(c.send_mu);
  if (post_and_wait(c.v.cm->qp, c.v.send_cq.get(), &wr, kSendTimeoutMs) != IBV_WC_SUCCESS) {
    // The queue pair failed (then nothing reads through it) or is stuck: disconnecting
    // moves it to the error state, which ends every access through its windows.
    rdma_disconnect(c.v.cm.get());
  }
}

void VerbsEngine::invalidate_all(SegmentState& s, uint32_t segment) {
  for (Conn* c : s.bound) {
    std::lock_guard wl(c->windows_mu);
    if (c->dead) continue;
    auto it = c->v.windows.find(segment);
    if (it != c->v.windows.end()) invalidate(*c, it->second);
  }
  s.bound.clear();
}

void VerbsEngine::revoke(uint32_t segment) {
  if (segment >= memory_.segments) return;
  SegmentState& s = segments_[segment];
  std::lock_guard seg(s.mu);
  // The generation moves before any new key can be bound over the segment: a reader whose
  // old key came round again sees the new generation after its data (verbs_engine.h).
  generations_[segment].set(generations_[segment].get() + 1);
  invalidate_all(s, segment);
}

void VerbsEngine::begin_write(uint32_t segment) {
  if (segment >= memory_.segments) return;
  SegmentState& s = segments_[segment];
  std::lock_guard seg(s.mu);
  s.locked = true;
  invalidate_all(s, segment);
}

void VerbsEngine::end_write(uint32_t segment) {
  if (segment >= memory_.segments) return;
  SegmentState& s = segments_[segment];
  std::lock_guard seg(s.mu);
  s.locked = false;  // the next export binds new keys; old ones stay invalid
}

bool VerbsEngine::send_locked(Conn& c, const Message& m) {
  if (c.dead) return false;
  std::memcpy(&c.v.messages->send, &m, sizeof m);
  ibv_sge sge{reinterpret_cast<uint64_t>(&c.v.messages->send), sizeof(Message),
              c.v.messages_mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 0;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (post_and_wait(c.v.cm->qp, c.v.send_cq.get(), &wr, kSendTimeoutMs) == IBV_WC_SUCCESS)
    return true;
  rdma_disconnect(c.v.cm.get());
  return false;
}

void VerbsEngine::release_conn(Conn& c) {
  std::lock_guard wl(c.windows_mu);
  std::lock_guard send(c.send_mu);
  ConnVerbs gone = std::exchange(c.v, ConnVerbs{});  // freed here, in ConnVerbs' order
}

}  // namespace verbs
}  // namespace odafs::ordma
