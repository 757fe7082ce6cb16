#include "server/file_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "base/futex.h"
#include "rpc/server.h"

namespace odafs::server {
namespace {

// Flushes with fn (fsync or fdatasync). A flush the device takes its time over lets the
// RPC thread's event loop go on without it (rpc::before_blocking); one it acknowledges at
// once (tmpfs, a battery-backed cache) would pay two context switches for nothing. Which
// one the export's device is, recent flushes say: a moving average of their durations.
template <class Flush>
int timed_flush(Flush fn, int fd) {
  // Hand over above this: a hand-over costs ~10-20 us of CPU, two context switches.
  constexpr int64_t kHandOverNs = 200'000;
  static std::atomic<int64_t> average_ns{0};
  if (average_ns.load(std::memory_order_relaxed) > kHandOverNs) {
    rpc::before_blocking(rpc::Wait::kShort);
  }
  const int64_t start = monotonic_ns();
  const int rc = fn(fd);
  const int64_t took = monotonic_ns() - start;
  const int64_t avg = average_ns.load(std::memory_order_relaxed);
  average_ns.store(avg + (took - avg) / 8, std::memory_order_relaxed);  // racy, and fine
  return rc;
}

class PosixFileEnv final : public FileEnv {
 public:
  ssize_t pread(int fd, void* buf, size_t len, off_t offset) override {
    return ::pread(fd, buf, len, offset);
  }
  ssize_t pwrite(int fd, const void* buf, size_t len, off_t offset) override {
    return ::pwrite(fd, buf, len, offset);
  }
  int ftruncate(int fd, off_t size) override { return ::ftruncate(fd, size); }
  int fsync(int fd) override { return timed_flush(::fsync, fd); }
  int fdatasync(int fd) override { return timed_flush(::fdatasync, fd); }
};

// Reads [offset, offset + len) of fd, short at end of file.
std::string read_range(int fd, off_t offset, size_t len) {
  std::string out(len, '\0');
  size_t got = 0;
  while (got < len) {
    ssize_t n = ::pread(fd, out.data() + got, len - got, offset + static_cast<off_t>(got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace

FileEnv& posix_file_env() {
  static PosixFileEnv env;
  return env;
}

CrashSimulatingEnv::~CrashSimulatingEnv() {
  for (auto& [key, p] : pending_) close(p.fd);
}

CrashSimulatingEnv::Pending* CrashSimulatingEnv::pending_for(int fd, off_t* size) {
  struct stat st;
  if (crashed_ || fstat(fd, &st) != 0) {
    errno = EIO;
    return nullptr;
  }
  *size = st.st_size;
  auto [it, fresh] = pending_.try_emplace(Key{st.st_dev, st.st_ino});
  if (fresh) {
    it->second.fd = dup(fd);
    it->second.synced_size = st.st_size;
    if (it->second.fd < 0) {
      pending_.erase(it);
      errno = EIO;
      return nullptr;
    }
  }
  return &it->second;
}

ssize_t CrashSimulatingEnv::pread(int fd, void* buf, size_t len, off_t offset) {
  std::lock_guard lock(mu_);
  if (crashed_) {
    errno = EIO;
    return -1;
  }
  return ::pread(fd, buf, len, offset);
}

ssize_t CrashSimulatingEnv::pwrite(int fd, const void* buf, size_t len, off_t offset) {
  std::lock_guard lock(mu_);
  off_t size = 0;
  Pending* p = pending_for(fd, &size);
  if (p == nullptr) return -1;
  size_t overlap = offset < size ? std::min<size_t>(len, static_cast<size_t>(size - offset)) : 0;
  p->undo.push_back(Undo{offset, read_range(fd, offset, overlap)});
  return ::pwrite(fd, buf, len, offset);
}

int CrashSimulatingEnv::ftruncate(int fd, off_t new_size) {
  std::lock_guard lock(mu_);
  off_t size = 0;
  Pending* p = pending_for(fd, &size);
  if (p == nullptr) return -1;
  // Growing needs no bytes to undo: the final truncation to synced_size cuts it off.
  std::string tail =
      new_size < size ? read_range(fd, new_size, static_cast<size_t>(size - new_size)) : "";
  p->undo.push_back(Undo{new_size, std::move(tail)});
  return ::ftruncate(fd, new_size);
}

int CrashSimulatingEnv::sync(int fd, bool data_only) {
  std::lock_guard lock(mu_);
  if (crashed_) {
    errno = EIO;
    return -1;
  }
  int rc = data_only ? timed_flush(::fdatasync, fd) : timed_flush(::fsync, fd);
  if (rc != 0) return rc;
  struct stat st;
  if (fstat(fd, &st) == 0) {
    auto it = pending_.find(Key{st.st_dev, st.st_ino});
    if (it != pending_.end()) {
      close(it->second.fd);
      pending_.erase(it);
    }
  }
  return 0;
}

int CrashSimulatingEnv::fsync(int fd) { return sync(fd, false); }
int CrashSimulatingEnv::fdatasync(int fd) { return sync(fd, true); }

void CrashSimulatingEnv::crash() {
  std::lock_guard lock(mu_);
  crashed_ = true;
  for (auto& [key, p] : pending_) {
    for (auto u = p.undo.rbegin(); u != p.undo.rend(); ++u) {
      size_t done = 0;
      while (done < u->before.size()) {
        ssize_t n = ::pwrite(p.fd, u->before.data() + done, u->before.size() - done,
                             u->offset + static_cast<off_t>(done));
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
    }
    // A failure here leaves extra bytes, which the test then reports.
    [[maybe_unused]] int rc = ::ftruncate(p.fd, p.synced_size);
    ::fsync(p.fd);
    close(p.fd);
  }
  pending_.clear();
}

size_t CrashSimulatingEnv::unsynced_files() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

ssize_t SlowWriteEnv::pread(int fd, void* buf, size_t len, off_t offset) {
  return posix_file_env().pread(fd, buf, len, offset);
}

ssize_t SlowWriteEnv::pwrite(int fd, const void* buf, size_t len, off_t offset) {
  size_t first = len / 2;
  if (first == 0) return posix_file_env().pwrite(fd, buf, len, offset);
  ssize_t n = posix_file_env().pwrite(fd, buf, first, offset);
  if (n < static_cast<ssize_t>(first)) return n;  // failed or short: the caller goes on
  ::usleep(pause_us_);
  ssize_t m = posix_file_env().pwrite(fd, static_cast<const char*>(buf) + first, len - first,
                                      offset + static_cast<off_t>(first));
  return m < 0 ? n : n + m;
}

int SlowWriteEnv::ftruncate(int fd, off_t size) { return posix_file_env().ftruncate(fd, size); }
int SlowWriteEnv::fsync(int fd) { return posix_file_env().fsync(fd); }
int SlowWriteEnv::fdatasync(int fd) { return posix_file_env().fdatasync(fd); }

}  // namespace odafs::server
