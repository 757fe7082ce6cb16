#include "client/client_cache.h"

#include <algorithm>
#include <boost/intrusive/parent_from_member.hpp>
#include <cstring>

namespace odafs {

namespace {

template <class Header>
Header& owner(ReplacementNode& n, ReplacementNode Header::*member) {
  return *boost::intrusive::get_parent_from_member(&n, member);
}

}  // namespace

ReplacementParams ClientCache::params_for(CachePolicy policy, const MqTuning& tuning, size_t pool,
                                          size_t history) {
  if (policy == CachePolicy::kLru) return ReplacementParams{};  // one queue, no history
  ReplacementParams p;
  p.queues = tuning.queues;
  p.life_time = uint64_t{tuning.life_factor} * pool;
  p.history = history;
  return p;
}

ClientCache::ClientCache(size_t headers, size_t data_blocks, uint32_t block_size,
                         CachePolicy policy, MqTuning tuning)
    : policy_(policy),
      block_size_(block_size),
      data_blocks_(std::min(data_blocks, std::max<size_t>(headers, 1))),
      headers_(std::max<size_t>(headers, 1)),
      data_(new char[data_blocks_ * block_size_]),
      slot_owner_(data_blocks_, nullptr),
      header_order_(params_for(policy, tuning, headers_.size(), headers_.size())),
      data_order_(params_for(policy, tuning, data_blocks_, data_blocks_ ? headers_.size() : 0)) {
  size_t nbuckets = 1;
  while (nbuckets < headers_.size()) nbuckets <<= 1;
  buckets_ = std::vector<Map::bucket_type>(nbuckets);
  map_ = std::make_unique<Map>(Map::bucket_traits(buckets_.data(), buckets_.size()));
  free_headers_.reserve(headers_.size());
  for (size_t i = headers_.size(); i > 0; --i) free_headers_.push_back(&headers_[i - 1]);
  free_slots_.reserve(data_blocks_);
  for (size_t i = data_blocks_; i > 0; --i) free_slots_.push_back(static_cast<int32_t>(i - 1));
}

ClientCache::~ClientCache() { map_->clear(); }

ClientCache::Header* ClientCache::lookup_locked(uint64_t file, uint64_t block) {
  auto it = map_->find(BlockKey{file, block});
  return it == map_->end() ? nullptr : &*it;
}

void ClientCache::use_locked(Header& h) {
  header_order_.access(h.dir);
  if (h.slot >= 0) data_order_.access(h.data);
}

void ClientCache::release_data_locked(Header& h) {
  if (h.slot < 0) return;
  data_order_.remove(h.data, h.key);
  slot_owner_[h.slot] = nullptr;
  free_slots_.push_back(h.slot);
  h.slot = -1;
  h.valid = 0;
}

void ClientCache::release_locked(Header& h) {
  release_data_locked(h);
  h.has_ref = false;
  if (!h.mapped) return;
  map_->erase(map_->iterator_to(h));
  header_order_.remove(h.dir, h.key);
  h.mapped = false;
  --mapped_;
  free_headers_.push_back(&h);  // reused first
}

ClientCache::Header& ClientCache::claim_locked(uint64_t file, uint64_t block, bool* fresh) {
  if (Header* h = lookup_locked(file, block)) {
    *fresh = false;
    return *h;
  }
  *fresh = true;
  if (free_headers_.empty()) {
    evictions_.fetch_add(1, std::memory_order_relaxed);
    release_locked(owner(*header_order_.victim(), &Header::dir));
  }
  Header& h = *free_headers_.back();
  free_headers_.pop_back();
  h.key = BlockKey{file, block};
  map_->insert(h);
  h.mapped = true;
  ++mapped_;
  header_order_.admit(h.dir, h.key);
  return h;
}

bool ClientCache::find(uint64_t file, uint64_t block, ordma::Reference* out) {
  std::lock_guard lock(mu_);
  Header* h = lookup_locked(file, block);
  if (h == nullptr || !h->has_ref) return false;
  *out = h->ref;
  use_locked(*h);
  return true;
}

bool ClientCache::contains(uint64_t file, uint64_t block) {
  std::lock_guard lock(mu_);
  Header* h = lookup_locked(file, block);
  return h != nullptr && h->has_ref;
}

void ClientCache::insert(uint64_t file, uint64_t block, const ordma::Reference& ref) {
  std::lock_guard lock(mu_);
  bool fresh;
  Header& h = claim_locked(file, block, &fresh);
  h.ref = ref;
  h.has_ref = true;
  if (!fresh) use_locked(h);
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
  header_order_.forget_history();
  data_order_.forget_history();
  stamps_.clear();
}

bool ClientCache::read(uint64_t file, uint64_t block, uint32_t offset, uint32_t len, void* dst) {
  std::lock_guard lock(mu_);
  Header* h = lookup_locked(file, block);
  if (h == nullptr || h->slot < 0 || uint64_t{offset} + len > h->valid) return false;
  std::memcpy(dst, data_.get() + size_t(h->slot) * block_size_ + offset, len);
  use_locked(*h);
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
  bool fresh;
  Header& h = claim_locked(file, block, &fresh);  // a fresh header counts its use here
  if (h.slot < 0) {
    if (free_slots_.empty()) {
      // Reclaim the policy's victim; its header stays if it has a reference (an empty
      // header), else it goes.
      Header& victim = owner(*data_order_.victim(), &Header::data);
      data_evictions_.fetch_add(1, std::memory_order_relaxed);
      release_data_locked(victim);
      if (!victim.has_ref && &victim != &h) release_locked(victim);
    }
    h.slot = free_slots_.back();
    free_slots_.pop_back();
    slot_owner_[h.slot] = &h;
    data_order_.admit(h.data, h.key);
  } else {
    data_order_.access(h.data);  // refilled: read() missed it (a short block)
  }
  std::memcpy(data_.get() + size_t(h.slot) * block_size_, data, valid);
  h.valid = valid;
}

void ClientCache::forget_data(uint64_t file, uint64_t first_block, uint64_t last_block) {
  std::lock_guard lock(mu_);
  data_epoch_.fetch_add(1, std::memory_order_release);
  auto forget = [&](Header& h) {
    release_data_locked(h);
    if (!h.has_ref) release_locked(h);
  };
  if (last_block - first_block >= data_blocks_) {
    for (Header* h : slot_owner_) {
      if (h != nullptr && h->key.file == file && h->key.block >= first_block &&
          h->key.block <= last_block) {
        forget(*h);  // clears its own slot_owner_ entry only
      }
    }
    return;
  }
  for (uint64_t b = first_block;; ++b) {
    if (Header* h = lookup_locked(file, b)) forget(*h);
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
