#include "server/record_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/log.h"

namespace odafs::server {
namespace {
std::atomic<bool> g_left_a_write{false};
}  // namespace

struct RecordWriter::State {
  State(int fd, std::string n, std::string p)
      : dir_fd(fd), name(std::move(n)), tmp(name + ".tmp"), path(std::move(p)) {}
  ~State() {
    if (dir_fd >= 0) close(dir_fd);
  }
  // One durable rewrite; false (logged) if any step failed.
  bool write_version(const std::string& text);

  const int dir_fd;
  const std::string name, tmp, path;
  std::mutex mu;
  std::condition_variable cv;    // a version queued, one written or failed, or the stop
  std::string queued;            // guarded by mu
  uint64_t queued_version = 0;   // the newest submitted; guarded by mu
  uint64_t written_version = 0;  // the newest attempted; guarded by mu
  uint64_t durable_version = 0;  // the newest written and synced; guarded by mu
  bool stopped = false;          // waiters give up; guarded by mu
  bool quit = false;             // the thread ends once idle; guarded by mu
  bool running = true;           // the thread has not returned; guarded by mu
  std::atomic<uint64_t> writes{0};
};

RecordWriter::RecordWriter(int dir_fd, std::string name, std::string path)
    : state_(std::make_shared<State>(dir_fd, std::move(name), std::move(path))) {
  std::thread(run, state_).detach();
}

RecordWriter::~RecordWriter() {
  stop();
  std::unique_lock lock(state_->mu);
  state_->quit = true;
  state_->cv.notify_all();
  if (!state_->cv.wait_for(lock, std::chrono::milliseconds(kLeaveAfterMs),
                           [this] { return !state_->running; })) {
    ODAFS_LOG_WARN(
        "recovery record %s: a write still under way after %d ms is left to end "
        "with the process (the record holds the old version or the new one)",
        state_->path.c_str(), kLeaveAfterMs);
    g_left_a_write.store(true);
  }
}

uint64_t RecordWriter::submit(std::string text) {
  std::lock_guard lock(state_->mu);
  state_->queued = std::move(text);
  const uint64_t version = ++state_->queued_version;
  state_->cv.notify_all();
  return version;
}

bool RecordWriter::wait_durable(uint64_t version) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  s.cv.wait(lock, [&] { return s.stopped || s.written_version >= version; });
  return s.durable_version >= version;
}

void RecordWriter::stop() {
  std::lock_guard lock(state_->mu);
  state_->stopped = true;
  state_->cv.notify_all();
}

bool RecordWriter::left_a_write() { return g_left_a_write.load(); }

uint64_t RecordWriter::writes() const { return state_->writes.load(std::memory_order_relaxed); }

void RecordWriter::run(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::unique_lock lock(s.mu);
  for (;;) {
    s.cv.wait(lock, [&] { return s.quit || s.queued_version > s.written_version; });
    if (s.queued_version == s.written_version) break;  // quit, and idle
    const uint64_t version = s.queued_version;
    const std::string text = std::move(s.queued);
    lock.unlock();
    const bool ok = s.write_version(text);
    lock.lock();
    s.written_version = version;
    if (ok) s.durable_version = version;
    s.cv.notify_all();
  }
  s.running = false;
  s.cv.notify_all();
}

bool RecordWriter::State::write_version(const std::string& text) {
  // The temporary is made O_EXCL (a name left there, whatever it is, is removed first, never
  // followed) in the directory's descriptor.
  const char* failed = nullptr;
  int err = 0;
  if (unlinkat(dir_fd, tmp.c_str(), 0) != 0 && errno != ENOENT) {
    failed = "removing a stale temporary", err = errno;
  }
  const int fd =
      failed != nullptr
          ? -1
          : openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (failed == nullptr && fd < 0) {
    failed = "open", err = errno;
  } else if (fd >= 0) {
    if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      failed = "write", err = errno != 0 ? errno : ENOSPC;
    } else if (fsync(fd) != 0) {
      failed = "fsync", err = errno;
    }
    close(fd);
  }
  if (failed == nullptr && renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
    failed = "rename", err = errno;
  }
  if (failed == nullptr && fsync(dir_fd) != 0) failed = "fsync of its directory", err = errno;
  if (failed != nullptr) {
    ODAFS_LOG_ERROR("recovery record %s: %s failed (%s)", path.c_str(), failed, std::strerror(err));
    return false;
  }
  writes.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace odafs::server
