#include "client/dir_cache.h"

#include "base/futex.h"

namespace odafs {

DirCache::DirCache(int64_t lifetime_ms, size_t max_entries)
    : lifetime_ms_(lifetime_ms), max_entries_(max_entries) {}

std::optional<Handle> DirCache::find(std::string_view path) {
  if (lifetime_ms_ <= 0) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = entries_.find(path);
  if (it == entries_.end()) return std::nullopt;
  if (it->second.expires_ms <= now_ms()) {
    entries_.erase(it);
    return std::nullopt;
  }
  return it->second.dir;
}

void DirCache::insert(const std::string& path, const Handle& dir) {
  if (lifetime_ms_ <= 0) return;
  std::lock_guard lock(mu_);
  if (entries_.size() >= max_entries_) entries_.clear();
  entries_.insert_or_assign(path, Entry{dir, now_ms() + lifetime_ms_});
}

void DirCache::clear() {
  std::lock_guard lock(mu_);
  entries_.clear();
}

}  // namespace odafs
