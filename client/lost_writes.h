// LostWrites: the files whose writes this client acknowledged and then could not get to the
// server (kept under a write delegation when the server restarted, and not reclaimable:
// client/reclaim.cc), by file id: the object, whatever name reaches it now (a file created
// since under the old name is another file, and hears nothing). The next write, fsync or
// close of such a file through this client takes the loss over into the file's failed
// writes (File::note_lost_writes), and fails as a failed write-behind does (ENOSPC or
// EDQUOT when the server's disk was why, else EIO): once for each open of the file and each
// process using it; the log has named it already.
//
// A file id alone does not name one file for ever: file systems reuse inode numbers, so a
// file created after the loss may carry the lost one's (ext4 does so at once). The second
// key is the modification time the server last showed this client for the lost file: its
// bytes never reached the server, so nothing through this client moved it, and a rename
// does not; a file created since was modified after the loss. A file is taken for the lost
// one when its id matches and its modification time, as its opener saw it, is not later.
// What that misses: the lost file modified since by someone else is not told (the log
// was); a new file given an old mtime (utimes) under a reused id is.
//
// Thread-safety: thread-safe; `any` is one relaxed load, for the write path.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "base/status.h"

namespace odafs {

class LostWrites {
 public:
  // Remembers that file `fileid`, last seen modified at `mtime_ns`, lost its writes, and
  // why (the errno to report, and the message). At most kMax files (any go).
  void add(uint64_t fileid, int64_t mtime_ns, int err, std::string why) {
    std::lock_guard lock(mu_);
    if (lost_.size() >= kMax) lost_.erase(lost_.begin());
    lost_[fileid] = Loss{mtime_ns, err, std::move(why)};
    count_.store(lost_.size(), std::memory_order_relaxed);
  }
  bool any() const { return count_.load(std::memory_order_relaxed) != 0; }
  // Why file `fileid`, opened when it was modified at `mtime_ns`, lost its writes,
  // forgetting it; nothing if it did not (or is a later file under the same id).
  std::optional<Status> take(uint64_t fileid, int64_t mtime_ns) {
    std::lock_guard lock(mu_);
    auto it = lost_.find(fileid);
    if (it == lost_.end() || mtime_ns > it->second.mtime_ns) return std::nullopt;
    Status why(it->second.err, std::move(it->second.why));
    lost_.erase(it);
    count_.store(lost_.size(), std::memory_order_relaxed);
    return why;
  }

 private:
  struct Loss {
    int64_t mtime_ns;
    int err;
    std::string why;
  };
  static constexpr size_t kMax = 1024;
  std::mutex mu_;
  std::unordered_map<uint64_t, Loss> lost_;
  std::atomic<size_t> count_{0};
};

}  // namespace odafs
