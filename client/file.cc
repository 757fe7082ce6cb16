// File: an open file of a Client, with close-to-open commit of unstable writes.
#include <algorithm>

#include "base/log.h"
#include "client/call_util.h"
#include "client/client.h"
#include "client/mount_state.h"

namespace odafs {

File::File(Client* client, Handle fh, uint64_t fileid, WriteVerifier instance, std::string path,
           int flags)
    : client_(client),
      fh_(fh),
      key_(odafs::cache_key(fh)),
      fileid_(fileid),
      instance_(instance),
      path_(std::move(path)),
      flags_(flags) {}

File::File(File&& other) noexcept { *this = std::move(other); }

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (client_ != nullptr) {
      try {
        close();
      } catch (const std::exception& e) {
        ODAFS_LOG_WARN("odafs: closing %s: %s", path_.c_str(), e.what());
      }
    }
    client_ = std::exchange(other.client_, nullptr);
    fh_ = other.fh_;
    key_ = other.key_;
    fileid_ = other.fileid_;
    instance_ = other.instance_;
    path_ = std::move(other.path_);
    flags_ = other.flags_;
    unstable_ = other.unstable_;
    verifier_ = other.verifier_;
    verifier_changed_ = other.verifier_changed_;
  }
  return *this;
}

File::~File() {
  if (client_ == nullptr) return;
  try {
    close();
  } catch (const std::exception& e) {
    ODAFS_LOG_WARN("odafs: closing %s: %s", path_.c_str(), e.what());
  }
}

template <class Fn>
auto File::retry_stale(Fn&& fn) -> decltype(fn()) {
  if (client_ == nullptr) fail(EBADF, "file is closed");
  try {
    return fn();
  } catch (const Error& e) {
    if (e.errno_value() != ESTALE) throw;
    // A handle goes stale when its file is removed or replaced, and when the server
    // restarts (a handle names one server instance). Only after a restart is the file
    // worth finding again by its path, and only if the path still leads to the same inode:
    // otherwise the name may now belong to another file, and an open file never switches
    // to another (a soak caught writes landing in a file created under a removed one's
    // name). A restart that also replaced the file by one reusing its inode number is not
    // told apart (docs/RELIABILITY.md).
    const WriteVerifier now = client_->mount_state()->limits.write_verifier;
    if (now == instance_) throw;
    auto [fresh, attr] = client_->resolve(path_, true);
    if (fresh == fh_ || attr.fileid != fileid_ || attr.type != FileType::kRegular) throw;
    fh_ = fresh;
    key_ = odafs::cache_key(fresh);
    instance_ = now;
    return fn();
  }
}

size_t File::pread(void* buf, size_t len, uint64_t offset) {
  if ((flags_ & O_ACCMODE) == O_WRONLY) fail(EBADF, "pread on a write-only file");
  return retry_stale([&] { return client_->read_file(fh_, key_, buf, len, offset); });
}

size_t File::pwrite(const void* buf, size_t len, uint64_t offset) {
  if ((flags_ & O_ACCMODE) == O_RDONLY) fail(EBADF, "pwrite on a read-only file");
  if (flags_ & O_APPEND) offset = stat().size;  // not atomic against other writers
  return retry_stale([&] {
    const size_t max_write = client_->mount_state()->limits.max_write;
    size_t done = 0;
    while (done < len) {
      size_t chunk = std::min<size_t>(len - done, max_write);
      WriteVerifier verf;
      int committed = 0;
      const char* src = static_cast<const char*>(buf) + done;
      size_t n = client_->options().direct_writes
                     ? client_->write_direct(fh_, src, chunk, offset + done,
                                             client_->options().stability, &verf, &committed)
                     : client_->write(fh_, src, chunk, offset + done, client_->options().stability,
                                      &verf, &committed);
      if (committed == ODAFS_UNSTABLE) {
        if (verifier_ && *verifier_ != verf) verifier_changed_ = true;
        verifier_ = verf;
        unstable_ = true;
      }
      done += n;
    }
    client_->forget_data(key_, offset, len);  // the cached copies are out of date now
    return done;
  });
}

Attr File::stat() {
  return retry_stale([&] { return client_->getattr(fh_); });
}

void File::truncate(uint64_t size) {
  retry_stale([&] { client_->setattr_size(fh_, size); });
  client_->forget_data(key_, 0, UINT64_MAX);
}

void File::fsync() {
  if (!unstable_) return;
  WriteVerifier v = retry_stale([&] { return client_->commit(fh_); });
  bool lost = verifier_changed_ || (verifier_ && *verifier_ != v);
  unstable_ = false;
  verifier_changed_ = false;
  verifier_.reset();
  if (lost) {
    fail(EIO,
         "commit " + path_ + ": the server restarted since an unstable write, which may be lost");
  }
}

void File::close() {
  if (client_ == nullptr) return;
  try {
    fsync();
  } catch (...) {
    client_ = nullptr;
    throw;
  }
  client_ = nullptr;
}

}  // namespace odafs
