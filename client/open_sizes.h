// OpenSizes: the size of each file a Client has open, one shared by all of its Files of
// that file. A File's reads stop at the size it knows (client/file.cc says why); sharing
// it makes what one open of the client writes or truncates reach the reads of another
// open, as POSIX has a process see its own writes through every descriptor (Berkeley DB
// writes its log through one descriptor and reads it back through another).
//
// Thread-safety: thread-safe. acquire/release take a mutex (at open and close, which make
// calls anyway); the shared size itself is an atomic read and updated lock-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace odafs {

class OpenSizes {
 public:
  using Size = std::shared_ptr<std::atomic<uint64_t>>;

  // The shared size of the file `key`, set to `at_open` (the server's, fresh from the
  // open: close-to-open makes it the truth, also for the other opens).
  Size acquire(uint64_t key, uint64_t at_open) {
    std::lock_guard lock(mu_);
    Size& s = sizes_[key];
    if (!s) s = std::make_shared<std::atomic<uint64_t>>(0);
    s->store(at_open, std::memory_order_relaxed);
    return s;
  }
  // Gives back what acquire(key) returned (reset); the entry goes with the last File.
  void release(uint64_t key, Size& size) {
    std::lock_guard lock(mu_);
    auto it = sizes_.find(key);
    // Two references left (the map's and this one): no other File has it.
    if (it != sizes_.end() && it->second == size && size.use_count() == 2) sizes_.erase(it);
    size.reset();
  }
  size_t files() const {
    std::lock_guard lock(mu_);
    return sizes_.size();
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Size> sizes_;
};

}  // namespace odafs
