// The client's cache: block headers that carry references (the directory) and, for
// fewer of them, the block's data.
//
// Headers outnumber data blocks. When a data block is reclaimed its header stays, with its
// reference, as an "empty header": the client keeps mapping far more of the server's cache
// than it holds in memory, and a later miss on that block is one one-sided read away.
// Both pools are allocated up front; headers sit on an intrusive hash set, and each pool
// has its own replacement order (client/replacement.h), LRU or Multi-Queue
// (CachePolicy): no allocation per operation. With MQ a scan of blocks read once does not
// push out the references and data of blocks read often, which is why the paper
// recommends it for the directory; it costs a history of use counts per pool (Qout, as
// many entries as headers: about 40 bytes per header per pool) and a few more list
// steps per use.
//
// What counts as a use, for each pool, is one per block a read touches: read() when it
// hits, find() when it returns a reference, insert() (the RPC that brought the
// reference), and store() for what it brings new (a header, a data block) or refills.
// store() after find() or insert() of the same block is not a second use of its header.
//
// Consistency (close-to-open, like NFS without delegations): revalidate() at open drops a
// file's cached data when its attributes changed; the client's own writes and truncations
// drop the blocks they touch. References are never dropped for content changes: they name
// server blocks, not contents, and the server revokes them itself.
//
// Thread-safety: all members are thread-safe (one mutex; operations are O(1), O(m) for
// the m queues of MQ, except the per-file data drops, O(data blocks)).
#pragma once

#include <atomic>
#include <boost/intrusive/unordered_set.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "client/client.h"
#include "client/replacement.h"
#include "ordma/reference.h"

namespace odafs {

// The client cache's Multi-Queue knobs (CachePolicy::kMultiQueue), for each pool.
struct MqTuning {
  uint32_t queues = 8;  // m, as in the paper
  // An entry not used for life_factor times as many uses of its pool as the pool has
  // entries moves down a queue; 0: never.
  uint32_t life_factor = 1;
};

class ClientCache {
 public:
  // headers >= 1; data_blocks may be 0 (no data caching, references only). Under MQ each
  // pool remembers the use counts of as many blocks given up as there are headers.
  ClientCache(size_t headers, size_t data_blocks, uint32_t block_size,
              CachePolicy policy = CachePolicy::kLru, MqTuning tuning = {});
  ~ClientCache();
  ClientCache(const ClientCache&) = delete;
  ClientCache& operator=(const ClientCache&) = delete;

  // ---- references (the directory)
  // Copies the reference for (file, block) to *out; a use of the header (and its data).
  bool find(uint64_t file, uint64_t block, ordma::Reference* out);
  bool contains(uint64_t file, uint64_t block);
  // Inserts or replaces; when every header is in use the policy's victim goes (with its
  // data, if any).
  void insert(uint64_t file, uint64_t block, const ordma::Reference& ref);
  // Forgets one reference (after a fault); the block's data, if any, stays.
  void drop(uint64_t file, uint64_t block);
  // Forgets everything (a new server instance).
  void clear();

  // ---- data
  // Copies [offset, offset + len) of the block to dst when the cache holds those bytes.
  bool read(uint64_t file, uint64_t block, uint32_t offset, uint32_t len, void* dst);
  bool has_data(uint64_t file, uint64_t block);
  // A reader takes a ticket before it fetches a block from the server and hands it to
  // store(). Any forget_* in between (a write or truncation by this client, or a change
  // seen at open) voids the ticket, so bytes fetched before that change are never cached
  // after it. One counter for the whole cache: a write to one file makes reads of others
  // under way skip caching once, which costs a later miss, never correctness.
  uint64_t data_ticket() const { return data_epoch_.load(std::memory_order_acquire); }
  // Keeps the block's first `valid` bytes (REQUIRES valid <= block size), unless the ticket
  // is void. No-op without data blocks.
  void store(uint64_t file, uint64_t block, const void* data, uint32_t valid, uint64_t ticket);
  void forget_data(uint64_t file, uint64_t first_block, uint64_t last_block);
  void forget_file_data(uint64_t file);
  // Close-to-open: records the file's change stamp; drops its data if it differs from the
  // one seen before.
  void revalidate(uint64_t file, const struct timespec& mtime, const struct timespec& ctime,
                  uint64_t size);

  size_t size() const;  // headers holding a reference or data
  size_t data_blocks_used() const;
  size_t capacity() const { return headers_.size(); }
  size_t data_capacity() const { return data_blocks_; }
  uint32_t block_size() const { return block_size_; }
  CachePolicy policy() const { return policy_; }
  uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }
  uint64_t data_evictions() const { return data_evictions_.load(std::memory_order_relaxed); }

 private:
  struct Header : boost::intrusive::unordered_set_base_hook<> {
    BlockKey key{};
    bool mapped = false;
    bool has_ref = false;
    ordma::Reference ref;
    int32_t slot = -1;  // data slot, -1: empty header
    uint32_t valid = 0;
    ReplacementNode dir;   // in header_order_ while mapped
    ReplacementNode data;  // in data_order_ while it holds a data slot
  };
  struct KeyOf {
    using type = BlockKey;
    const BlockKey& operator()(const Header& h) const { return h.key; }
  };
  struct Stamp {
    int64_t mtime_s, mtime_ns, ctime_s, ctime_ns;
    uint64_t size;
    bool operator==(const Stamp&) const = default;
  };
  using Map = boost::intrusive::unordered_set<Header, boost::intrusive::key_of_value<KeyOf>,
                                              boost::intrusive::hash<BlockKeyHash>,
                                              boost::intrusive::power_2_buckets<true>>;

  static ReplacementParams params_for(CachePolicy policy, const MqTuning& tuning, size_t pool,
                                      size_t history);
  Header* lookup_locked(uint64_t file, uint64_t block);
  // Finds or takes a header; *fresh tells which (a fresh one is already admitted).
  Header& claim_locked(uint64_t file, uint64_t block, bool* fresh);
  void use_locked(Header& h);  // one use of the header and of its data, if any
  void release_data_locked(Header& h);
  void release_locked(Header& h);  // unmap entirely

  const CachePolicy policy_;
  uint32_t block_size_;
  size_t data_blocks_;
  std::vector<Header> headers_;
  std::vector<Map::bucket_type> buckets_;
  std::unique_ptr<char[]> data_;  // data_blocks_ * block_size_
  std::vector<int32_t> free_slots_;
  std::vector<Header*> slot_owner_;    // by data slot; null: free
  std::vector<Header*> free_headers_;  // unmapped; reused last released first

  mutable std::mutex mu_;
  Replacement header_order_;  // mapped headers
  Replacement data_order_;    // headers holding data
  std::unique_ptr<Map> map_;
  std::unordered_map<uint64_t, Stamp> stamps_;  // per file, at its last open
  size_t mapped_ = 0;
  std::atomic<uint64_t> evictions_{0};       // mapped headers taken for another block
  std::atomic<uint64_t> data_evictions_{0};  // data blocks reclaimed for another block
  std::atomic<uint64_t> data_epoch_{0};      // bumped under mu_ by every forget_*
};

}  // namespace odafs
