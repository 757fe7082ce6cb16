// File: an open file of a Client, with close-to-open commit of unstable writes, copies of
// those writes kept until committed, and finding the file again after a server restart.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "base/log.h"
#include "client/call_util.h"
#include "client/client.h"
#include "client/mount_state.h"
#include "client/shared_file.h"
#include "client/write_books.h"
#include "rpc/client_channel.h"

namespace odafs {

// What changes while the file is open, shared by the threads using it.
struct File::State {
  std::mutex mu;  // guards fh, key and instance
  Handle fh{};
  uint64_t key = 0;          // cache_key(fh)
  WriteVerifier instance{};  // the server instance fh came from (its write verifier)
  // Shared with the client's other Files of this file (client/open_files.h); null once
  // closed. Acquired under size_key (the key changes with a stale handle's refresh).
  OpenFiles::Ref shared;
  uint64_t size_key = 0;
};

File::File(Client* client, Handle fh, const Attr& attr, WriteVerifier instance, std::string path,
           int flags)
    : client_(client),
      state_(std::make_unique<State>()),
      fileid_(attr.fileid),
      opened_(attr),
      path_(std::move(path)),
      flags_(flags) {
  state_->fh = fh;
  state_->key = odafs::cache_key(fh);
  state_->instance = instance;
  state_->size_key = state_->key;
  state_->shared = client->open_files_.acquire(state_->key, attr, path_);
}

uint64_t File::size_hint() const {
  return state_->shared ? state_->shared->size.load(std::memory_order_relaxed) : UINT64_MAX;
}

void File::saw_size_at_least(uint64_t size) {
  if (!state_->shared) return;  // closed
  std::atomic<uint64_t>& known_size = state_->shared->size;
  uint64_t known = known_size.load(std::memory_order_relaxed);
  while (known < size &&
         !known_size.compare_exchange_weak(known, size, std::memory_order_relaxed)) {
  }
}

File::File() = default;

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
    state_ = std::move(other.state_);
    fileid_ = other.fileid_;
    opened_ = other.opened_;
    path_ = std::move(other.path_);
    flags_ = other.flags_;
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

Handle File::handle() const {
  if (!state_) return {};
  std::lock_guard lock(state_->mu);
  return state_->fh;
}

uint64_t File::cache_key() const {
  if (!state_) return 0;
  std::lock_guard lock(state_->mu);
  return state_->key;
}

std::pair<Handle, uint64_t> File::current() const {
  std::lock_guard lock(state_->mu);
  return {state_->fh, state_->key};
}

void File::check_readable() const {
  if (client_ == nullptr) fail(EBADF, "file is closed");
  if ((flags_ & O_ACCMODE) == O_WRONLY) fail(EBADF, "read on a write-only file");
}

void File::check_writable() const {
  if (client_ == nullptr) fail(EBADF, "file is closed");
  if ((flags_ & O_ACCMODE) == O_RDONLY) fail(EBADF, "write on a read-only file");
}

uint64_t File::write_offset(uint64_t offset) {
  return (flags_ & O_APPEND) ? stat().size : offset;  // not atomic against other writers
}

void File::make_room_for(size_t len) {
  const MountOptions& o = client_->options();
  if (o.stability == Stability::kUnstable && uncommitted_bytes() + len > o.max_uncommitted_bytes) {
    commit_unstable();  // the copies kept for re-sending would outgrow their bound
  }
}

void File::wrote(uint64_t key, uint64_t offset, const char* src, size_t n,
                 const WriteVerifier& verf, int committed) {
  record_write(*state_->shared, offset, src, n, verf, committed);
  client_->forget_data(key, offset, n);  // the cached copies are out of date now
  saw_size_at_least(offset + n);
}

bool File::refresh_stale(const Handle& stale) {
  WriteVerifier instance;
  {
    std::lock_guard lock(state_->mu);
    if (state_->fh != stale) return true;  // another call found the file again meanwhile
    instance = state_->instance;
  }
  // A handle goes stale when its file is removed or replaced, and when the server
  // restarts (a handle names one server instance). Only after a restart is the file
  // worth finding again by its path, and only if the path still leads to the same inode:
  // otherwise the name may now belong to another file, and an open file never switches
  // to another (a soak caught writes landing in a file created under a removed one's
  // name). A restart that also replaced the file by one reusing its inode number is not
  // told apart (docs/RELIABILITY.md).
  const WriteVerifier now = client_->mount_state()->limits.write_verifier;
  if (now == instance) return false;
  auto [fresh, attr] = client_->resolve(path_, true);
  if (fresh == stale || attr.fileid != fileid_ || attr.type != FileType::kRegular) return false;
  std::lock_guard lock(state_->mu);
  state_->fh = fresh;
  state_->key = odafs::cache_key(fresh);
  state_->instance = now;
  return true;
}

template <class Fn>
auto File::retry_stale(Fn&& fn) -> decltype(fn(Handle{}, uint64_t{})) {
  if (client_ == nullptr) fail(EBADF, "file is closed");
  auto [fh, key] = current();
  try {
    return fn(fh, key);
  } catch (const Error& e) {
    // Once, as RetryPolicy::again_after_stale has it (a second ESTALE is the answer).
    if (e.errno_value() != ESTALE || !refresh_stale(fh)) throw;
    auto [fresh, fresh_key] = current();
    return fn(fresh, fresh_key);
  }
}

bool File::read_behind(void* buf, size_t len, uint64_t offset, size_t* n) {
  SharedFile& sf = *state_->shared;
  if (!sf.has_behind.load(std::memory_order_acquire)) return false;
  std::lock_guard behind(sf.behind_mu);
  const uint64_t start = sf.behind_offset;
  const uint64_t end = start + sf.behind.size();
  if (sf.behind.empty() || offset < start || offset >= end) return false;
  // Past the run's end only if the run ends the file (as this client knows it).
  if (offset + len > end && end < sf.size.load(std::memory_order_relaxed)) return false;
  *n = static_cast<size_t>(std::min<uint64_t>(len, end - offset));
  std::memcpy(buf, sf.behind.data() + (offset - start), *n);
  return true;
}

size_t File::pread(void* buf, size_t len, uint64_t offset) {
  check_readable();
  // This client reads its own writes: from the run gathered behind when it holds them all
  // (a file written and read back, as PostMark's are), else after sending it.
  if (size_t n = 0; len != 0 && read_behind(buf, len, offset, &n)) return n;
  flush_behind(false);
  // DELAY: another client's write delegation is still out; the server read nothing.
  size_t n = retry_delayed(client_->options().timeout_ms, [&] {
    return retry_stale([&](const Handle& fh, uint64_t key) {
      return client_->read_file(fh, key, buf, len, offset, size_hint());
    });
  });
  if (n > 0) saw_size_at_least(offset + n);
  return n;
}

size_t File::pwrite(const void* buf, size_t len, uint64_t offset) {
  check_writable();
  client_->check_lost(fileid_, opened_.mtime);
  const MountOptions& o = client_->options();
  const size_t behind_cap =
      std::min<size_t>(o.write_behind_bytes, client_->mount_state()->limits.max_write);
  // O_APPEND goes to the server at once (it places the bytes), unless a write delegation
  // says no one else writes the file; direct writes are the engine's to pull; large
  // writes gain nothing from waiting.
  const bool append = (flags_ & O_APPEND) != 0;
  if (o.direct_writes || len >= behind_cap ||
      (append && !client_->mount_state()->delegations->holds_write(handle()))) {
    flush_behind(true);
    return write_through(static_cast<const char*>(buf), len, offset, o.stability, append);
  }
  SharedFile& sf = *state_->shared;
  std::lock_guard behind(sf.behind_mu);
  throw_behind_error_locked();
  if (append) {
    // The end this client knows is the file's while the delegation holds, and asked under
    // behind_mu it holds until the run is sent: a recall's write-back waits for the lock.
    if (!client_->mount_state()->delegations->holds_write(handle())) {  // recalled meanwhile
      send_behind_locked(o.stability);
      return write_through(static_cast<const char*>(buf), len, offset, o.stability, true);
    }
    offset = sf.size.load(std::memory_order_relaxed);
  }
  const bool follows = offset == sf.behind_offset + sf.behind.size();
  if (!sf.behind.empty() && (!follows || sf.behind.size() + len > behind_cap)) {
    send_behind_locked(o.stability);
  }
  if (sf.behind.empty()) {
    sf.behind_offset = offset;
    sf.size_before_run = sf.size.load(std::memory_order_relaxed);
  }
  const char* src = static_cast<const char*>(buf);
  sf.behind.insert(sf.behind.end(), src, src + len);
  sf.has_behind.store(true, std::memory_order_release);
  saw_size_at_least(offset + len);
  return len;
}

size_t File::write_through(const char* buf, size_t len, uint64_t offset, Stability how,
                           bool append) {
  const MountOptions& o = client_->options();
  size_t done = 0;  // outside the retry: chunks that landed are not sent again
  return retry_stale([&](const Handle& fh, uint64_t key) {
    const size_t max_write = client_->mount_state()->limits.max_write;
    while (done < len) {
      size_t chunk = std::min<size_t>(len - done, max_write);
      const char* src = buf + done;
      make_room_for(chunk);
      WriteVerifier verf;
      int committed = 0;
      uint64_t end = 0;
      size_t n = o.direct_writes && !append
                     ? client_->write_direct(fh, src, chunk, offset + done, how, &verf, &committed)
                     : client_->write(fh, src, chunk, append ? kAppendOffset : offset + done, how,
                                      &verf, &committed, &end);
      wrote(key, append ? end - n : offset + done, src, n, verf, committed);
      done += n;
    }
    return done;
  });
}

void File::send_behind_locked(Stability how) {
  send_run_locked(
      *state_->shared,
      [this, how](const char* buf, size_t len, uint64_t offset) {
        // At its own offset even from an O_APPEND File: the run may be another File's (kept
        // by a write delegation past its close), gathered by positioned writes.
        write_through(buf, len, offset, how, /*append=*/false);
      },
      [] { return false; });  // an open File's own run: its next call reports the failure
}

void File::throw_behind_error_locked() {
  SharedFile& sf = *state_->shared;
  if (sf.behind_errno == 0) return;
  Error e(sf.behind_errno, "an earlier write of " + path_ + " failed: " + sf.behind_error);
  sf.behind_errno = 0;
  sf.behind_error.clear();
  throw e;
}

void File::flush_behind(bool report) {
  if (client_ == nullptr) fail(EBADF, "file is closed");
  SharedFile& sf = *state_->shared;
  if (!report && !sf.has_behind.load(std::memory_order_acquire)) return;
  std::lock_guard behind(sf.behind_mu);
  try {
    send_behind_locked(client_->options().stability);
  } catch (const Error&) {
    if (!report) return;  // kept for the next write, fsync or close
  }
  if (report) throw_behind_error_locked();
}

size_t File::uncommitted_bytes() const {
  SharedFile& s = *state_->shared;
  std::lock_guard lock(s.mu);
  return s.pending.empty() ? 0 : s.pending_data.size();
}

Attr File::stat() {
  flush_behind(false);
  Attr a = retry_stale([&](const Handle& fh, uint64_t) { return client_->getattr(fh); });
  state_->shared->size.store(a.size, std::memory_order_relaxed);
  return a;
}

void File::truncate(uint64_t size) {
  // Earlier writes are sent and committed first: were the server to restart after the
  // truncation, re-sending them then would bring truncated bytes back.
  fsync();
  uint64_t key = retry_stale([&](const Handle& fh, uint64_t k) {
    client_->setattr_size(fh, size);
    return k;
  });
  client_->forget_data(key, 0, UINT64_MAX);
  state_->shared->size.store(size, std::memory_order_relaxed);
}

void File::fsync() {
  if (client_ == nullptr) fail(EBADF, "file is closed");
  client_->check_lost(fileid_, opened_.mtime);
  SharedFile& sf = *state_->shared;
  if (client_->options().stability == Stability::kUnstable &&
      sf.has_behind.load(std::memory_order_acquire)) {
    std::lock_guard behind(sf.behind_mu);
    bool nothing_else;
    {
      std::lock_guard lock(sf.mu);
      nothing_else = !sf.unstable;
    }
    // The run is all there is to make durable (a file written and closed at once, as
    // PostMark's and most programs' are): one FILE_SYNC WRITE does it, no COMMIT after.
    if (nothing_else && !sf.behind.empty()) {
      try {
        send_behind_locked(Stability::kFileSync);
      } catch (const Error&) {
        // recorded: thrown once, below
      }
      throw_behind_error_locked();
      return;
    }
  }
  flush_behind(true);
  commit_unstable();
}

void File::commit_unstable() {
  if (client_ == nullptr) fail(EBADF, "file is closed");
  commit_books(
      *state_->shared, path_,
      [&] { return retry_stale([&](const Handle& fh, uint64_t) { return client_->commit(fh); }); },
      [&](const char* src, size_t len, uint64_t offset) {
        return retry_stale([&](const Handle& fh, uint64_t key) {
          WriteVerifier verf;
          int committed = 0;
          size_t n = client_->write(fh, src, len, offset, Stability::kFileSync, &verf, &committed);
          client_->forget_data(key, offset, n);
          return n;
        });
      });
}

void File::flush() {
  if (client_ == nullptr) fail(EBADF, "file is closed");
  client_->check_lost(fileid_, opened_.mtime);
  SharedFile& sf = *state_->shared;
  bool failed;
  {
    std::lock_guard behind(sf.behind_mu);
    failed = sf.behind_errno != 0;
  }
  // Under a write delegation the SharedFile stays with it, unsent and uncommitted, until
  // it is recalled or given back (client/delegations.h); an error waiting is reported
  // now. Only UNSTABLE mounts: the others asked for their bytes durable by the close.
  if (failed || client_->options().stability != Stability::kUnstable ||
      !client_->mount_state()->delegations->keep_open(handle(), state_->shared)) {
    fsync();
  }
}

void File::close() {
  if (client_ == nullptr) return;
  Client* client = client_;
  auto give_back = [&] { client->open_files_.release(state_->size_key, state_->shared); };
  try {
    flush();
    client_ = nullptr;
  } catch (...) {
    client_ = nullptr;
    give_back();
    throw;
  }
  give_back();
}

}  // namespace odafs
