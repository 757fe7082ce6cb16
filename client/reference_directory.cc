#include "client/reference_directory.h"

namespace odafs {

ReferenceDirectory::ReferenceDirectory(size_t capacity) : headers_(std::max<size_t>(capacity, 1)) {
  size_t nbuckets = 1;
  while (nbuckets < headers_.size()) nbuckets <<= 1;
  buckets_ = std::vector<Map::bucket_type>(nbuckets);
  map_ = std::make_unique<Map>(Map::bucket_traits(buckets_.data(), buckets_.size()));
  for (Header& h : headers_) lru_.push_back(h);
}

ReferenceDirectory::~ReferenceDirectory() {
  map_->clear();
  lru_.clear();
}

void ReferenceDirectory::unmap_locked(Header& h) {
  if (!h.mapped) return;
  map_->erase(map_->iterator_to(h));
  h.mapped = false;
  --mapped_;
}

bool ReferenceDirectory::find(uint64_t file, uint64_t block, ordma::Reference* out) {
  std::lock_guard lock(mu_);
  auto it = map_->find(Key{file, block});
  if (it == map_->end()) return false;
  *out = it->ref;
  lru_.erase(lru_.iterator_to(*it));
  lru_.push_back(*it);
  return true;
}

bool ReferenceDirectory::contains(uint64_t file, uint64_t block) {
  std::lock_guard lock(mu_);
  return map_->find(Key{file, block}) != map_->end();
}

void ReferenceDirectory::insert(uint64_t file, uint64_t block, const ordma::Reference& ref) {
  std::lock_guard lock(mu_);
  Header* h;
  auto it = map_->find(Key{file, block});
  if (it != map_->end()) {
    h = &*it;
  } else {
    h = &lru_.front();
    if (h->mapped) evictions_.fetch_add(1, std::memory_order_relaxed);
    unmap_locked(*h);
    h->key = Key{file, block};
    map_->insert(*h);
    h->mapped = true;
    ++mapped_;
  }
  h->ref = ref;
  lru_.erase(lru_.iterator_to(*h));
  lru_.push_back(*h);
}

void ReferenceDirectory::drop(uint64_t file, uint64_t block) {
  std::lock_guard lock(mu_);
  auto it = map_->find(Key{file, block});
  if (it == map_->end()) return;
  Header& h = *it;
  unmap_locked(h);
  lru_.erase(lru_.iterator_to(h));
  lru_.push_front(h);  // reused first
}

void ReferenceDirectory::clear() {
  std::lock_guard lock(mu_);
  for (Header& h : headers_) unmap_locked(h);
}

size_t ReferenceDirectory::size() const {
  std::lock_guard lock(mu_);
  return mapped_;
}

}  // namespace odafs
