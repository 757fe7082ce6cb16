// The verbs engine's client: one RC queue pair (a Link) to the engine, RDMA READs of
// exported blocks into registered staging slots, each followed by a READ of the block's
// generation word (verbs_engine.h says why). A Link that fails (a remote access error moves
// the queue pair to the error state) is replaced in the background while reads answer
// kTransport, which sends them to the RPC.
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/futex.h"
#include "base/log.h"
#include "ordma/engine_impl/verbs/verbs_engine.h"
#include "ordma/engine_impl/verbs/verbs_link.h"
#include "ordma/engine_impl/verbs/verbs_support.h"

namespace odafs::ordma {
namespace verbs {
namespace {

inline constexpr int kReconnectPauseMs = 1000;

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
  Result<Fault> direct(const std::function<Status(uint32_t tag)>& call, uint32_t* got,
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
    std::shared_ptr<Link> link;  // the region lives in its protection domain: freed after it
    MemoryRegion mr;
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
  MemoryRegion mr =
      register_memory(l->pd(), base, length,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  const bool registered = mr != nullptr;
  const uint32_t rkey = registered ? mr->rkey : 0;
  uint32_t id;
  {
    std::lock_guard lock(buffers_mu_);
    id = next_buffer_++;
    buffers_[id] = Registered{l, std::move(mr)};
  }
  if (!registered) return id;  // the engine never learns it: its transfer fails
  Message m = make_message(MessageKind::kRegister);
  m.id.set(id);
  m.addr.set(reinterpret_cast<uint64_t>(base));
  m.length.set(length);
  m.rkey.set(rkey);
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
    r = std::move(it->second);
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
  r.mr.reset();  // after the engine was told: it can no longer write here
}

Result<Fault> VerbsEngineClient::direct(const std::function<Status(uint32_t tag)>& call,
                                        uint32_t* got, int timeout_ms) {
  std::shared_ptr<Link> l = link();
  const uint32_t tag = next_tag_.fetch_add(1);
  DirectWait w;
  l->expect_direct(tag, &w);
  if (Status called = call(tag); !called.ok()) {
    l->forget_direct(tag);
    return called;
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
