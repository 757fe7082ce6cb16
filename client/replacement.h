// Replacement: the order in which one pool of cached entries is given up.
//
// The client cache has two pools, its headers (the directory of references) and its data
// blocks, and orders each with one Replacement. It is the Multi-Queue algorithm of Zhou,
// Philbin and Li (USENIX ATC 2001), which the ODAFS paper recommends for the reference
// directory, and with one queue and no history it is plain LRU:
//
// - m LRU queues Q0..Qm-1. An entry used f times lives in Q[min(log2 f, m-1)], so a
//   block read once never pushes out one read many times: the victim is the least
//   recently used entry of the lowest non-empty queue.
// - Logical time is the count of uses. Each use gives the entry an expiry, now + life
//   time; at every use the least recently used entry of each queue above Q0 whose expiry
//   has passed moves down one queue (keeping its count), so blocks that were hot once and
//   are no longer do not stay forever. At most m-1 moves per use.
// - A history (the paper's Qout) remembers the use counts of entries given up, so a block
//   that comes back resumes its count instead of starting again from Q0. It is a fixed
//   ring: the oldest memory is overwritten first, and one recalled leaves a hole.
//
// Entries are the callers' objects: each carries a ReplacementNode (an intrusive hook and
// its counters), and the caller finds its object from the node (get_parent_from_member).
// Everything is sized at construction; no operation allocates. Every operation is O(1)
// but victim() (O(m)) and a use (O(m) expiry checks); the history is an intrusive hash
// set over the ring.
//
// Thread-safety: none; the owner serialises calls (ClientCache: under its mutex).
#pragma once

#include <boost/intrusive/list.hpp>
#include <boost/intrusive/unordered_set.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace odafs {

// A block of a file, as the client cache and its history name it.
struct BlockKey {
  uint64_t file;
  uint64_t block;
  bool operator==(const BlockKey&) const = default;
};

struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const {
    return std::hash<uint64_t>()(k.file * 0x9E3779B97F4A7C15ull ^ k.block);
  }
};

// Embedded in each entry of a pool (a member: one object may be in two pools). Linked
// while its pool's Replacement tracks it.
struct ReplacementNode {
  boost::intrusive::list_member_hook<> hook;
  uint64_t expire = 0;     // logical time after which it moves down a queue
  uint32_t frequency = 0;  // uses while cached, plus those remembered from before
  uint8_t queue = 0;
  bool tracked() const { return hook.is_linked(); }
};

struct ReplacementParams {
  uint32_t queues = 1;                        // m, 1..kMaxQueues; 1 with history 0: LRU
  uint64_t life_time = 0;                     // in uses; 0: never expire
  size_t history = 0;                         // remembered counts (Qout); 0: none
  static constexpr uint32_t kMaxQueues = 32;  // log2 of a 32-bit count
};

class Replacement {
 public:
  explicit Replacement(const ReplacementParams& params);
  ~Replacement();
  Replacement(const Replacement&) = delete;
  Replacement& operator=(const Replacement&) = delete;

  // Starts tracking a new entry (REQUIRES !n.tracked()) as used once more than the
  // history remembers of key (once if nothing), and takes that memory out of the history.
  void admit(ReplacementNode& n, const BlockKey& key);
  // One more use of a tracked entry.
  void access(ReplacementNode& n);
  // The entry to give up next; null when none is tracked. Does not untrack it.
  ReplacementNode* victim();
  // Stops tracking n (REQUIRES n.tracked()), remembering its count under key.
  void remove(ReplacementNode& n, const BlockKey& key);
  // Forgets every remembered count (the tracked entries stay).
  void forget_history();

  size_t size() const { return size_; }
  uint32_t queues() const { return static_cast<uint32_t>(queues_.size()); }
  uint64_t now() const { return now_; }
  // The count the history holds for key, 0 if none (for tests).
  uint32_t remembered(const BlockKey& key) const;

 private:
  using Queue = boost::intrusive::list<
      ReplacementNode,
      boost::intrusive::member_hook<ReplacementNode, boost::intrusive::list_member_hook<>,
                                    &ReplacementNode::hook>>;
  struct Memory : boost::intrusive::unordered_set_base_hook<> {
    BlockKey key{};
    uint32_t frequency = 0;
  };
  struct KeyOf {
    using type = BlockKey;
    const BlockKey& operator()(const Memory& m) const { return m.key; }
  };
  using History = boost::intrusive::unordered_set<Memory, boost::intrusive::key_of_value<KeyOf>,
                                                  boost::intrusive::hash<BlockKeyHash>,
                                                  boost::intrusive::power_2_buckets<true>>;

  void place(ReplacementNode& n);  // to the MRU end of its count's queue; one tick
  void expire_heads();
  uint32_t recall(const BlockKey& key);
  void remember(const BlockKey& key, uint32_t frequency);

  const uint64_t life_time_;
  uint64_t now_ = 0;
  size_t size_ = 0;
  std::vector<Queue> queues_;
  // Declared before history_, which unlinks them when it goes.
  std::vector<Memory> ring_;
  std::vector<History::bucket_type> buckets_;
  size_t next_ = 0;  // the ring slot the next memory overwrites
  std::unique_ptr<History> history_;
};

}  // namespace odafs
