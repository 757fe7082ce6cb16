// The client's cache of directory handles by path: what a walk to a file's parent found,
// kept for a short while so that opening many files in a directory does not look every
// directory above them up again each time (NFS clients keep such entries as their dentry
// cache, with a directory attribute lifetime).
//
// Only directories are kept, never the object a call names last: open and stat still
// look that up, so close-to-open holds for files. What may be stale for up to the
// lifetime is the path to a directory that another client renamed or removed meanwhile
// (its handle still names the directory, wherever it is now); this client's own RENAME,
// REMOVE and RMDIR clear the cache, and a walk that meets ESTALE through a cached handle
// starts over without it. Cleared with the mount (handles belong to one server instance).
//
// Thread-safety: all members are thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "client/client.h"

namespace odafs {

class DirCache {
 public:
  // lifetime_ms 0: nothing is kept. max_entries bounds memory (when full, it is cleared).
  DirCache(int64_t lifetime_ms, size_t max_entries);
  // The handle of the directory at `path` (components joined by '/', from the mount root,
  // no symlinks on the way), if known and not expired.
  std::optional<Handle> find(std::string_view path);
  void insert(const std::string& path, const Handle& dir);
  void clear();

 private:
  struct Entry {
    Handle dir;
    int64_t expires_ms;
  };
  const int64_t lifetime_ms_;
  const size_t max_entries_;
  std::mutex mu_;
  // Found by string_view: a walk asks for prefixes of one path without copying them.
  struct PathHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, Entry, PathHash, std::equal_to<>> entries_;
};

}  // namespace odafs
