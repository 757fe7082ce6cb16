// The client's cache: block headers that carry references (the directory) and, for
// fewer of them, the block's data.
//
// Headers outnumber data blocks. When a data block is reclaimed its header stays, with its
// reference, as an "empty header": the client keeps mapping far more of the server's cache
// than it holds in memory, and a later miss on that block is one one-sided read away.
// Both pools are allocated up front; headers sit on an intrusive LRU list and hash set,
// headers holding data also on a second LRU list (Boost.Intrusive): no allocation per
// operation. LRU for both, as the paper starts with.
//
// Consistency (close-to-open, like NFS without delegations): revalidate() at open drops a
// file's cached data when its attributes changed; the client's own writes and truncations
// drop the blocks they touch. References are never dropped for content changes: they name
// server blocks, not contents, and the server revokes them itself.
//
// Thread-safety: all members are thread-safe (one mutex; operations are O(1) except the
// per-file data drops, O(data blocks)).
#pragma once

#include <atomic>
#include <boost/intrusive/list.hpp>
#include <boost/intrusive/unordered_set.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ordma/reference.h"

namespace odafs {

class ClientCache {
 public:
  // headers >= 1; data_blocks may be 0 (no data caching, references only).
  ClientCache(size_t headers, size_t data_blocks, uint32_t block_size);
  ~ClientCache();
  ClientCache(const ClientCache&) = delete;
  ClientCache& operator=(const ClientCache&) = delete;

  // ---- references (the directory)
  // Copies the reference for (file, block) to *out and marks the header recently used.
  bool find(uint64_t file, uint64_t block, ordma::Reference* out);
  bool contains(uint64_t file, uint64_t block);
  // Inserts or replaces; when every header is in use the least recently used one goes.
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
  uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }

 private:
  struct Key {
    uint64_t file;
    uint64_t block;
    bool operator==(const Key&) const = default;
  };
  struct DataTag;
  using DataHook = boost::intrusive::list_base_hook<boost::intrusive::tag<DataTag>>;
  struct Header : boost::intrusive::list_base_hook<>,
                  boost::intrusive::unordered_set_base_hook<>,
                  DataHook {
    Key key{};
    bool mapped = false;
    bool has_ref = false;
    ordma::Reference ref;
    int32_t slot = -1;  // data slot, -1: empty header
    uint32_t valid = 0;
  };
  struct KeyOf {
    using type = Key;
    const Key& operator()(const Header& h) const { return h.key; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.file * 0x9E3779B97F4A7C15ull ^ k.block);
    }
  };
  struct Stamp {
    int64_t mtime_s, mtime_ns, ctime_s, ctime_ns;
    uint64_t size;
    bool operator==(const Stamp&) const = default;
  };
  using Lru = boost::intrusive::list<Header>;
  using DataLru = boost::intrusive::list<Header, boost::intrusive::base_hook<DataHook>>;
  using Map = boost::intrusive::unordered_set<Header, boost::intrusive::key_of_value<KeyOf>,
                                              boost::intrusive::hash<KeyHash>,
                                              boost::intrusive::power_2_buckets<true>>;

  Header* lookup_locked(uint64_t file, uint64_t block);
  Header& claim_locked(uint64_t file, uint64_t block);  // find or take a header
  void release_data_locked(Header& h);
  void release_locked(Header& h);  // unmap entirely
  void touch_locked(Header& h);

  uint32_t block_size_;
  size_t data_blocks_;
  std::vector<Header> headers_;
  std::vector<Map::bucket_type> buckets_;
  std::unique_ptr<char[]> data_;  // data_blocks_ * block_size_
  std::vector<int32_t> free_slots_;

  mutable std::mutex mu_;
  Lru lru_;           // every header; front: least recently used (free ones first)
  DataLru data_lru_;  // headers holding data; front: least recently used
  std::unique_ptr<Map> map_;
  std::unordered_map<uint64_t, Stamp> stamps_;  // per file, at its last open
  size_t mapped_ = 0;
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> data_epoch_{0};  // bumped under mu_ by every forget_*
};

}  // namespace odafs
