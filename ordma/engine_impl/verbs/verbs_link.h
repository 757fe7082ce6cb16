// The verbs client's queue pair: one connected, authenticated RC queue pair to the
// engine (a Link), its registered staging slots, and the completion thread that finishes
// reads, sends and direct transfers. Private to ordma/engine_impl/verbs/ (verbs_client.cc
// keeps the current Link and replaces a failed one).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/endian.h"
#include "base/net.h"
#include "ordma/engine.h"
#include "ordma/engine_impl/verbs/verbs_support.h"
#include "ordma/engine_impl/verbs/verbs_wire.h"

namespace odafs::ordma::verbs {

inline constexpr int kSlots = 32;               // reads (and messages) in flight per link
inline constexpr size_t kSlotData = 64 * 1024;  // the largest block a server exports
inline constexpr int kClientRecvSlots = 16;
inline constexpr uint64_t kRecvBit = uint64_t{1} << 63;

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

// Staging lives in its own mapping: page-aligned and zeroed, as registration wants.
struct StagingUnmapper {
  void operator()(Staging* staging) const;
};
using StagingMapping = std::unique_ptr<Staging, StagingUnmapper>;

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

  ibv_pd* pd() const { return pd_.get(); }

 private:
  void setup(const net::Endpoint& engine, const Session& session, int timeout_ms);
  // Joins the completion thread and disconnects: what must precede freeing the verbs objects
  // (the members do that). Idempotent.
  void shut_down();
  void complete();  // the completion thread
  void on_completion(const ibv_wc& wc);
  void on_message(const Message& m);
  void post_receive(int slot);
  void fail_link(const char* why);

  EngineClientOptions options_;
  // Declared in the order they are made: freed in reverse, the queue pair first.
  EventChannel cm_channel_;
  CmId id_;
  ProtectionDomain pd_;
  CompletionChannel channel_;
  CompletionQueue cq_;
  StagingMapping staging_;
  MemoryRegion staging_mr_;
  QueuePair qp_;  // id_'s
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

}  // namespace odafs::ordma::verbs
