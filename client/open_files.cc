#include "client/open_files.h"

#include "client/shared_file.h"

namespace odafs {

OpenFiles::Ref OpenFiles::acquire(uint64_t key, const Attr& at_open, const std::string& path) {
  std::lock_guard lock(mu_);
  Ref& f = files_[key];
  if (!f) {
    f = std::make_shared<SharedFile>();
    f->fileid = at_open.fileid;
    f->file_generation = at_open.file_generation;
  }
  f->opened_as(path);
  f->size.store(at_open.size, std::memory_order_relaxed);
  f->server_mtime_ns.store(nanoseconds(at_open.mtime), std::memory_order_relaxed);
  return f;
}

void OpenFiles::release(uint64_t key, Ref& ref) {
  std::lock_guard lock(mu_);
  auto it = files_.find(key);
  // Two references left (the map's and this one): no other File has it.
  if (it != files_.end() && it->second == ref && ref.use_count() == 2) files_.erase(it);
  ref.reset();
}

void SharedFile::opened_as(const std::string& path) {
  std::lock_guard lock(paths_mu_);
  if (!paths_.empty() && paths_.front() == path) return;  // the common case: no allocation
  std::erase(paths_, path);
  if (paths_.size() == kMaxPaths) paths_.pop_back();
  paths_.insert(paths_.begin(), path);
}

std::string SharedFile::path() const {
  std::lock_guard lock(paths_mu_);
  return paths_.empty() ? std::string() : paths_.front();
}

std::vector<std::string> SharedFile::paths() const {
  std::lock_guard lock(paths_mu_);
  return paths_;
}

OpenFiles::Ref OpenFiles::find(uint64_t key) const {
  std::lock_guard lock(mu_);
  auto it = files_.find(key);
  return it == files_.end() ? nullptr : it->second;
}

size_t OpenFiles::files() const {
  std::lock_guard lock(mu_);
  return files_.size();
}

}  // namespace odafs
