// The client's directory of references: which server cache block holds which block of
// which file, and the capability to read it one-sided.
//
// Entries are headers without data (the paper's "empty headers"): a reference stays here
// after its data would have left a client cache, so the directory maps far more of the
// server's cache than the client holds. Headers come from a pool allocated up front, kept
// in an intrusive LRU list and hash set (Boost.Intrusive): no allocation per insert.
//
// Thread-safety: all members are thread-safe (one mutex; every operation is O(1)).
#pragma once

#include <atomic>
#include <boost/intrusive/list.hpp>
#include <boost/intrusive/unordered_set.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ordma/capability.h"

namespace odafs {

class ReferenceDirectory {
 public:
  // capacity: headers in the pool (>= 1).
  explicit ReferenceDirectory(size_t capacity);
  ~ReferenceDirectory();
  ReferenceDirectory(const ReferenceDirectory&) = delete;
  ReferenceDirectory& operator=(const ReferenceDirectory&) = delete;

  // Copies the reference for (file, block) to *out and marks it recently used.
  bool find(uint64_t file, uint64_t block, ordma::Reference* out);
  bool contains(uint64_t file, uint64_t block);
  // Inserts or replaces; when full, the least recently used header is reused.
  void insert(uint64_t file, uint64_t block, const ordma::Reference& ref);
  // Forgets one reference (after a fault) or all (after a server restart).
  void drop(uint64_t file, uint64_t block);
  void clear();

  size_t size() const;
  size_t capacity() const { return headers_.size(); }
  uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }

 private:
  struct Key {
    uint64_t file;
    uint64_t block;
    bool operator==(const Key&) const = default;
  };
  struct Header : boost::intrusive::list_base_hook<>, boost::intrusive::unordered_set_base_hook<> {
    Key key{};
    ordma::Reference ref;
    bool mapped = false;
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
  using Lru = boost::intrusive::list<Header>;
  using Map = boost::intrusive::unordered_set<Header, boost::intrusive::key_of_value<KeyOf>,
                                              boost::intrusive::hash<KeyHash>,
                                              boost::intrusive::power_2_buckets<true>>;

  void unmap_locked(Header& h);

  std::vector<Header> headers_;
  std::vector<Map::bucket_type> buckets_;
  mutable std::mutex mu_;
  Lru lru_;  // front: least recently used (free headers first)
  std::unique_ptr<Map> map_;
  size_t mapped_ = 0;
  std::atomic<uint64_t> evictions_{0};
};

}  // namespace odafs
