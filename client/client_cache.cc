#include "client/client_cache.h"

#include <cstring>

namespace odafs {

ClientCache::ClientCache(size_t headers, size_t data_blocks, uint32_t block_size)
    : block_size_(block_size),
      data_blocks_(std::min(data_blocks, std::max<size_t>(headers, 1))),
      headers_(std::max<size_t>(headers, 1)),
      data_(new char[data_blocks_ * block_size_]) {
  size_t nbuckets = 1;
  while (nbuckets < headers_.size()) nbuckets <<= 1;
  buckets_ = std::vector<Map::bucket_type>(nbuckets);
  map_ = std::make_unique<Map>(Map::bucket_traits(buckets_.data(), buckets_.size()));
  for (Header& h : headers_) lru_.push_back(h);
  for (size_t i = data_blocks_; i > 0; --i) free_slots_.push_back(static_cast<int32_t>(i - 1));
}

ClientCache::~ClientCache() {
  data_lru_.clear();
  map_->clear();
  lru_.clear();
}

ClientCache::Header* ClientCache::lookup_locked(uint64_t file, uint64_t block) {
  auto it = map_->find(Key{file, block});
  return it == map_->end() ? nullptr : &*it;
}

void ClientCache::touch_locked(Header& h) {
  lru_.erase(lru_.iterator_to(h));
  lru_.push_back(h);
  if (h.slot >= 0) {
    data_lru_.erase(data_lru_.iterator_to(h));
    data_lru_.push_back(h);
  }
}

void ClientCache::release_data_locked(Header& h) {
  if (h.slot < 0) return;
  data_lru_.erase(data_lru_.iterator_to(h));
  free_slots_.push_back(h.slot);
  h.slot = -1;
  h.valid = 0;
}

void ClientCache::release_locked(Header& h) {
  release_data_locked(h);
  if (h.mapped) {
    map_->erase(map_->iterator_to(h));
    h.mapped = false;
    --mapped_;
  }
  h.has_ref = false;
  lru_.erase(lru_.iterator_to(h));
  lru_.push_front(h);  // reused first
}

ClientCache::Header& ClientCache::claim_locked(uint64_t file, uint64_t block) {
  if (Header* h = lookup_locked(file, block)) return *h;
  Header& h = lru_.front();
  if (h.mapped) evictions_.fetch_add(1, std::memory_order_relaxed);
  release_locked(h);
  h.key = Key{file, block};
  map_->insert(h);
  h.mapped = true;
  ++mapped_;
  return h;
}

bool ClientCache::find(uint64_t file, uint64_t block, ordma::Reference* out) {
  std::lock_guard lock(mu_);
  Header* h = lookup_locked(file, block);
  if (h == nullptr || !h->has_ref) return false;
  *out = h->ref;
  touch_locked(*h);
  return true;
}

bool ClientCache::contains(uint64_t file, uint64_t block) {
  std::lock_guard lock(mu_);
  Header* h = lookup_locked(file, block);
  return h != nullptr && h->has_ref;
}

void ClientCache::insert(uint64_t file, uint64_t block, const ordma::Reference& ref) {
  std::lock_guard lock(mu_);
  Header& h = claim_locked(file, block);
  h.ref = ref;
  h.has_ref = true;
  touch_locked(h);
}

void ClientCache::drop(uint64_t file, uint64_t block) {
  std::lock_guard lock(mu_);
  Header* h = lookup_locked(file, block);
  if (h == nullptr) return;
  h->has_ref = false;
  if (h->slot < 0) release_locked(*h);
}

void ClientCache::clear() {
  std::lock_guard lock(mu_);
  for (Header& h : headers_) {
    if (h.mapped) release_locked(h);
  }
  stamps_.clear();
}

bool ClientCache::read(uint64_t file, uint64_t block, uint32_t offset, uint32_t len, void* dst) {
  std::lock_guard lock(mu_);
  Header* h = lookup_locked(file, block);
  if (h == nullptr || h->slot < 0 || uint64_t{offset} + len > h->valid) return false;
  std::memcpy(dst, data_.get() + size_t(h->slot) * block_size_ + offset, len);
  touch_locked(*h);
  return true;
}

bool ClientCache::has_data(uint64_t file, uint64_t block) {
  std::lock_guard lock(mu_);
  Header* h = lookup_locked(file, block);
  return h != nullptr && h->slot >= 0;
}

void ClientCache::store(uint64_t file, uint64_t block, const void* data, uint32_t valid,
                        uint64_t ticket) {
  if (data_blocks_ == 0) return;
  std::lock_guard lock(mu_);
  if (data_epoch_.load(std::memory_order_relaxed) != ticket) return;  // changed meanwhile
  Header& h = claim_locked(file, block);
  if (h.slot < 0) {
    if (free_slots_.empty()) {
      // Reclaim the least recently used data block; its header stays if it has a
      // reference (an empty header), else it goes.
      Header& victim = data_lru_.front();
      release_data_locked(victim);
      if (!victim.has_ref && &victim != &h) release_locked(victim);
    }
    h.slot = free_slots_.back();
    free_slots_.pop_back();
    data_lru_.push_back(h);
  }
  std::memcpy(data_.get() + size_t(h.slot) * block_size_, data, valid);
  h.valid = valid;
  touch_locked(h);
}

void ClientCache::forget_data(uint64_t file, uint64_t first_block, uint64_t last_block) {
  std::lock_guard lock(mu_);
  data_epoch_.fetch_add(1, std::memory_order_release);
  if (last_block - first_block >= data_blocks_) {
    for (auto it = data_lru_.begin(); it != data_lru_.end();) {
      Header& h = *it++;
      if (h.key.file == file && h.key.block >= first_block && h.key.block <= last_block) {
        release_data_locked(h);
        if (!h.has_ref) release_locked(h);
      }
    }
    return;
  }
  for (uint64_t b = first_block;; ++b) {
    if (Header* h = lookup_locked(file, b)) {
      release_data_locked(*h);
      if (!h->has_ref) release_locked(*h);
    }
    if (b == last_block) break;
  }
}

void ClientCache::forget_file_data(uint64_t file) { forget_data(file, 0, UINT64_MAX); }

void ClientCache::revalidate(uint64_t file, const struct timespec& mtime,
                             const struct timespec& ctime, uint64_t size) {
  Stamp now{mtime.tv_sec, mtime.tv_nsec, ctime.tv_sec, ctime.tv_nsec, size};
  bool changed;
  {
    std::lock_guard lock(mu_);
    auto [it, fresh] = stamps_.try_emplace(file, now);
    changed = !fresh && !(it->second == now);
    it->second = now;
  }
  if (changed) forget_file_data(file);
}

size_t ClientCache::size() const {
  std::lock_guard lock(mu_);
  return mapped_;
}

size_t ClientCache::data_blocks_used() const {
  std::lock_guard lock(mu_);
  return data_blocks_ - free_slots_.size();
}

}  // namespace odafs
