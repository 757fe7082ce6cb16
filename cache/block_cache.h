// The server's block cache: file blocks in one pre-allocated arena.
//
// Blocks live at fixed addresses for the life of the cache: a block's memory is only ever
// reused for another (file, index) after the evict hook has run for its old identity and
// nobody holds it pinned. That is the property the one-sided engine needs to export the
// arena (docs/architecture.md, consistency): revoke in the hook, and in-flight readers pin.
//
// Thread-safety: all members are thread-safe. Lock order: cache mutex, then a block's
// data lock; the data lock is never held while waiting for the cache mutex.
#pragma once

#include <atomic>
#include <boost/intrusive/list.hpp>
#include <boost/intrusive/unordered_set.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "base/counter_sink.h"
#include "base/status.h"

namespace odafs::cache {

struct BlockKey {
  uint64_t file = 0;   // the server's node id: never reused while the server runs
  uint64_t index = 0;  // block number within the file
  bool operator==(const BlockKey&) const = default;
};

class BlockCache;

// A cache block header. Fields other than the hooks are guarded as noted.
struct Block : boost::intrusive::list_base_hook<>, boost::intrusive::unordered_set_base_hook<> {
  enum class State : uint8_t { kFree, kValid };
  // In the cache's index by file while valid (guarded by the cache mutex).
  boost::intrusive::unordered_set_member_hook<> file_hook;
  BlockKey key;                   // guarded by the cache mutex
  State state = State::kFree;     // guarded by the cache mutex
  std::atomic<uint32_t> pins{0};  // raised under the cache mutex, lowered anywhere
  // Bumped (under the cache mutex) each time the block loses its identity, just before
  // the evict hook runs. A holder compares it across a step to learn whether the block was dropped
  // meanwhile (an invalidation does not wait for pins).
  std::atomic<uint64_t> identity{0};
  uint32_t valid = 0;         // bytes of file data held; guarded by data_mu
  std::byte* data = nullptr;  // fixed for the cache's life
  uint32_t segment = 0;       // position in the arena: the export table's segment number
  std::shared_mutex data_mu;  // readers share, fill and update are exclusive
};

class BlockCache {
 public:
  struct Options {
    size_t capacity_bytes = 64u << 20;
    uint32_t block_size = 8192;  // power of two, 4 KiB .. 64 KiB
  };

  // Fills dst (len = block_size bytes) with the file's bytes of the block; returns the
  // count read (short at EOF, at most len) or the failure.
  using FillFn = std::function<Result<size_t>(std::byte* dst, size_t len)>;
  // Runs before a block's identity is dropped (eviction, invalidation), with the cache
  // mutex held: keep it short and do not call back into the cache.
  using EvictHook = std::function<void(const Block&)>;
  // Run around every change to the bytes of a block that already holds file data (write
  // updates, refills), with the block's data lock held exclusively. The one-sided engine
  // reads blocks without that lock, so the server locks the block's export entry here.
  using ModifyHook = std::function<void(const Block&)>;

  // Throws std::invalid_argument for a bad block size, std::bad_alloc if the arena
  // cannot be mapped.
  explicit BlockCache(Options options);
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  void set_evict_hook(EvictHook hook);
  // REQUIRES: before the cache is shared between threads.
  void set_modify_hooks(ModifyHook before, ModifyHook after);

  // A shared hold on one block's bytes; the block stays put while the pin lives.
  class ReadPin {
   public:
    ReadPin() = default;
    ReadPin(ReadPin&& other) noexcept;
    ReadPin& operator=(ReadPin&& other) noexcept;
    ~ReadPin();
    // True when the cache had no block to spare: read the file directly instead.
    bool bypass() const { return block_ == nullptr; }
    const std::byte* data() const { return block_->data; }
    uint32_t valid() const { return block_->valid; }
    uint32_t segment() const { return block_->segment; }
    // False once the block was dropped from the cache (truncation, removal) while pinned:
    // its bytes are still readable by this holder but no longer the file's.
    bool still_mapped() const {
      return block_->identity.load(std::memory_order_seq_cst) == identity_;
    }

   private:
    friend class BlockCache;
    void release();
    Block* block_ = nullptr;
    uint64_t identity_ = 0;
  };

  // Pins block `key` in *pin, holding at least `need` valid bytes (or all the file has),
  // filling it with fill() on a miss. *pin is released first. When every block is pinned
  // the result is ok with pin->bypass() set (read the file directly). Fails with the fill's
  // Status (nothing then stays cached for `key`, and *pin holds nothing). Allocates
  // nothing unless the fill fails. REQUIRES: the caller holds no other pin on `key` (a
  // short block's refill would wait for that pin's shared lock forever).
  Status read(const BlockKey& key, uint32_t need, const FillFn& fill, ReadPin* pin);

  // Write-through helper: if block `key` is cached, copies src into it at `offset`
  // (REQUIRES offset + len <= block_size), zero-filling any gap past its valid bytes.
  void update(const BlockKey& key, uint32_t offset, const void* src, size_t len);

  // Drops blocks [first, last] of `file` (truncation, a CephFS lease given back). Pinned
  // blocks keep their bytes for their holders and are reused only after the last pin goes.
  // Costs the smaller of the range and the file's cached blocks (an index by file), never
  // a walk of the whole cache.
  void invalidate(uint64_t file, uint64_t first, uint64_t last);

  uint32_t block_size() const { return options_.block_size; }
  size_t block_count() const { return blocks_.size(); }
  std::byte* arena() const { return arena_; }
  size_t arena_bytes() const { return arena_bytes_; }

  struct Stats {
    std::atomic<uint64_t> hits{0};
    std::atomic<uint64_t> misses{0};
    std::atomic<uint64_t> evictions{0};
    std::atomic<uint64_t> bypasses{0};
    std::atomic<uint64_t> fill_errors{0};
  };
  const Stats& stats() const { return stats_; }
  // Its counters under their own names (base/counter_sink.h). Thread-safe.
  void report_counters(const CounterSink& add) const;

 private:
  struct KeyHash {
    size_t operator()(const BlockKey& k) const {
      return std::hash<uint64_t>()(k.file * 0x9E3779B97F4A7C15ull ^ k.index);
    }
  };
  struct BlockKeyOf {
    using type = BlockKey;
    const BlockKey& operator()(const Block& b) const { return b.key; }
  };
  struct FileHash {
    size_t operator()(uint64_t file) const {
      return std::hash<uint64_t>()(file * 0x9E3779B97F4A7C15ull);
    }
  };
  struct FileOf {
    using type = uint64_t;
    const uint64_t& operator()(const Block& b) const { return b.key.file; }
  };
  using LruList = boost::intrusive::list<Block>;
  // Every valid block, grouped by file (a multiset keeps equal keys next to each other).
  using FileIndex = boost::intrusive::unordered_multiset<
      Block,
      boost::intrusive::member_hook<Block, boost::intrusive::unordered_set_member_hook<>,
                                    &Block::file_hook>,
      boost::intrusive::key_of_value<FileOf>, boost::intrusive::hash<FileHash>,
      boost::intrusive::power_2_buckets<true>>;
  using Map = boost::intrusive::unordered_set<Block, boost::intrusive::key_of_value<BlockKeyOf>,
                                              boost::intrusive::hash<KeyHash>,
                                              boost::intrusive::power_2_buckets<true>>;

  Block* take_victim_locked();
  void drop_locked(Block* b);
  // drop_locked, and b is the first block to be reused.
  void drop_for_reuse_locked(Block* b);

  Options options_;
  std::byte* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  std::vector<Block> blocks_;
  std::vector<Map::bucket_type> buckets_;
  std::vector<FileIndex::bucket_type> file_buckets_;

  std::mutex mu_;
  LruList lru_;  // front = least recently used; holds every block, free ones first
  std::unique_ptr<Map> map_;
  std::unique_ptr<FileIndex> by_file_;
  EvictHook evict_hook_;
  ModifyHook before_modify_, after_modify_;
  Stats stats_;
};

}  // namespace odafs::cache
