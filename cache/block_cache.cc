#include "cache/block_cache.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>

namespace odafs::cache {

BlockCache::BlockCache(Options options) : options_(options) {
  uint32_t bs = options_.block_size;
  if (bs < 4096 || bs > 65536 || (bs & (bs - 1)) != 0) {
    throw std::invalid_argument("block size must be a power of two in 4096..65536");
  }
  size_t count = std::max<size_t>(options_.capacity_bytes / bs, 4);
  arena_bytes_ = count * bs;
  void* mem = mmap(nullptr, arena_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (mem == MAP_FAILED) throw std::bad_alloc();
  arena_ = static_cast<std::byte*>(mem);
  blocks_ = std::vector<Block>(count);
  size_t nbuckets = 1;
  while (nbuckets < count) nbuckets <<= 1;
  buckets_ = std::vector<Map::bucket_type>(nbuckets);
  map_ = std::make_unique<Map>(Map::bucket_traits(buckets_.data(), buckets_.size()));
  file_buckets_ = std::vector<FileIndex::bucket_type>(nbuckets);
  by_file_ = std::make_unique<FileIndex>(
      FileIndex::bucket_traits(file_buckets_.data(), file_buckets_.size()));
  for (size_t i = 0; i < count; ++i) {
    blocks_[i].data = arena_ + i * bs;
    blocks_[i].segment = static_cast<uint32_t>(i);
    lru_.push_back(blocks_[i]);
  }
}

BlockCache::~BlockCache() {
  by_file_->clear();
  map_->clear();
  lru_.clear();
  munmap(arena_, arena_bytes_);
}

void BlockCache::set_evict_hook(EvictHook hook) {
  std::lock_guard lock(mu_);
  evict_hook_ = std::move(hook);
}

void BlockCache::set_modify_hooks(ModifyHook before, ModifyHook after) {
  before_modify_ = std::move(before);
  after_modify_ = std::move(after);
}

BlockCache::ReadPin::ReadPin(ReadPin&& other) noexcept
    : block_(other.block_), identity_(other.identity_) {
  other.block_ = nullptr;
}

BlockCache::ReadPin& BlockCache::ReadPin::operator=(ReadPin&& other) noexcept {
  if (this != &other) {
    release();
    block_ = other.block_;
    identity_ = other.identity_;
    other.block_ = nullptr;
  }
  return *this;
}

BlockCache::ReadPin::~ReadPin() { release(); }

void BlockCache::ReadPin::release() {
  if (block_ == nullptr) return;
  block_->data_mu.unlock_shared();
  block_->pins.fetch_sub(1, std::memory_order_release);
  block_ = nullptr;
}

void BlockCache::drop_locked(Block* b) {
  if (b->state == Block::State::kValid) {
    // Identity first, then the hook: a holder that checks the identity after publishing
    // something about the block (an export) either sees the change or is overruled by
    // the hook (a revocation) that follows it.
    b->identity.fetch_add(1, std::memory_order_seq_cst);
    if (evict_hook_) evict_hook_(*b);
    map_->erase(map_->iterator_to(*b));
    by_file_->erase(by_file_->iterator_to(*b));
    b->state = Block::State::kFree;
  }
}

void BlockCache::drop_for_reuse_locked(Block* b) {
  drop_locked(b);
  lru_.erase(lru_.iterator_to(*b));
  lru_.push_front(*b);
}

Block* BlockCache::take_victim_locked() {
  for (Block& b : lru_) {
    if (b.pins.load(std::memory_order_acquire) != 0) continue;
    if (b.state == Block::State::kValid) stats_.evictions.fetch_add(1, std::memory_order_relaxed);
    drop_locked(&b);
    return &b;
  }
  return nullptr;
}

Status BlockCache::read(const BlockKey& key, uint32_t need, const FillFn& fill, ReadPin* pin) {
  pin->release();
  Block* b = nullptr;
  bool hit = false;
  uint64_t identity = 0;
  {
    std::lock_guard lock(mu_);
    auto it = map_->find(key);
    if (it != map_->end()) {
      b = &*it;
      hit = true;
      stats_.hits.fetch_add(1, std::memory_order_relaxed);
    } else {
      stats_.misses.fetch_add(1, std::memory_order_relaxed);
      b = take_victim_locked();
      if (b == nullptr) {
        stats_.bypasses.fetch_add(1, std::memory_order_relaxed);
        return Status();  // every block pinned: pin->bypass()
      }
      b->key = key;
      b->state = Block::State::kValid;
      map_->insert(*b);
      by_file_->insert(*b);
      // Unpinned blocks have no holders, so this cannot block; taking it before the
      // cache mutex drops makes later finders wait for the fill.
      b->data_mu.lock();
      b->valid = 0;
    }
    b->pins.fetch_add(1, std::memory_order_relaxed);
    identity = b->identity.load(std::memory_order_relaxed);
    lru_.erase(lru_.iterator_to(*b));
    lru_.push_back(*b);
  }

  if (hit) {
    b->data_mu.lock_shared();
    if (b->valid >= need) {
      pin->block_ = b;
      pin->identity_ = identity;
      return Status();
    }
    b->data_mu.unlock_shared();
    b->data_mu.lock();  // short block: the file grew past it since the fill
  }
  if (b->valid < need) {
    // A hit that refills changes a block others may hold references to.
    bool exported_bytes = hit && before_modify_;
    if (exported_bytes) before_modify_(*b);
    Result<size_t> n = fill(b->data, options_.block_size);
    if (exported_bytes) after_modify_(*b);
    if (!n.ok()) {
      stats_.fill_errors.fetch_add(1, std::memory_order_relaxed);
      b->valid = 0;
      b->data_mu.unlock();
      {
        std::lock_guard lock(mu_);
        if (b->key == key) drop_locked(b);
      }
      b->pins.fetch_sub(1, std::memory_order_release);
      return std::move(n).status();
    }
    b->valid = static_cast<uint32_t>(*n);
  }
  b->data_mu.unlock();
  b->data_mu.lock_shared();
  pin->block_ = b;
  pin->identity_ = identity;
  return Status();
}

void BlockCache::update(const BlockKey& key, uint32_t offset, const void* src, size_t len) {
  Block* b;
  {
    std::lock_guard lock(mu_);
    auto it = map_->find(key);
    if (it == map_->end()) return;
    b = &*it;
    b->pins.fetch_add(1, std::memory_order_relaxed);
  }
  b->data_mu.lock();
  if (before_modify_) before_modify_(*b);
  if (offset > b->valid) std::memset(b->data + b->valid, 0, offset - b->valid);
  std::memcpy(b->data + offset, src, len);
  b->valid = std::max<uint32_t>(b->valid, offset + static_cast<uint32_t>(len));
  if (after_modify_) after_modify_(*b);
  b->data_mu.unlock();
  b->pins.fetch_sub(1, std::memory_order_release);
}

void BlockCache::invalidate(uint64_t file, uint64_t first, uint64_t last) {
  if (first > last) return;
  // A short range: a lookup per block. Otherwise the file's blocks, whatever their number
  // in the cache: a whole-file drop costs what the file has cached.
  constexpr uint64_t kLookups = 16;
  std::lock_guard lock(mu_);
  if (last - first < kLookups) {
    for (uint64_t i = first;; ++i) {  // so that last == UINT64_MAX cannot wrap
      auto it = map_->find(BlockKey{file, i});
      if (it != map_->end()) drop_for_reuse_locked(&*it);
      if (i == last) break;
    }
    return;
  }
  auto [it, end] = by_file_->equal_range(file);
  while (it != end) {
    Block& b = *it++;  // dropping b unlinks it; the next stays valid
    if (b.key.index >= first && b.key.index <= last) drop_for_reuse_locked(&b);
  }
}

void BlockCache::report_counters(const CounterSink& add) const {
  add("hits", stats_.hits.load());
  add("misses", stats_.misses.load());
  add("evictions", stats_.evictions.load());
  add("bypasses", stats_.bypasses.load());
  add("fill_errors", stats_.fill_errors.load());
  add("blocks", block_count());
  add("block_size", block_size());
}

}  // namespace odafs::cache
