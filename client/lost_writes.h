// LostWrites: the files whose writes this client acknowledged and then could not get to the
// server (kept under a write delegation when the server restarted, and not reclaimable:
// client/reclaim.cc), by file id: the object, whatever name reaches it now (a file created
// since under the old name is another file, and hears nothing). The next write, fsync or
// close of such a file through this client fails with EIO, once, as a failed write-behind
// does; the log has named it already.
//
// Thread-safety: thread-safe; `any` is one relaxed load, for the write path.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace odafs {

class LostWrites {
 public:
  // Remembers that file `fileid` lost its writes, and why. At most kMax files (any go).
  void add(uint64_t fileid, std::string why) {
    std::lock_guard lock(mu_);
    if (lost_.size() >= kMax) lost_.erase(lost_.begin());
    lost_[fileid] = std::move(why);
    count_.store(lost_.size(), std::memory_order_relaxed);
  }
  bool any() const { return count_.load(std::memory_order_relaxed) != 0; }
  // Why file `fileid` lost its writes, forgetting it; nothing if it did not.
  std::optional<std::string> take(uint64_t fileid) {
    std::lock_guard lock(mu_);
    auto it = lost_.find(fileid);
    if (it == lost_.end()) return std::nullopt;
    std::string why = std::move(it->second);
    lost_.erase(it);
    count_.store(lost_.size(), std::memory_order_relaxed);
    return why;
  }

 private:
  static constexpr size_t kMax = 1024;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::string> lost_;
  std::atomic<size_t> count_{0};
};

}  // namespace odafs
