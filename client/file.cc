// File: an open file of a Client, with close-to-open commit of unstable writes, copies of
// those writes kept until committed, and finding the file again after a server restart.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "base/log.h"
#include "client/call_util.h"
#include "client/client.h"
#include "client/client_impl.h"
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
  // Guarded by shared->behind_mu: this File's own error mark. It starts at the failures
  // someone had heard of when the File opened: one no one heard is this File's to hear.
  ErrorMark errors_heard = 0;
};

File::File(ClientImpl* client, Handle fh, const Attr& attr, WriteVerifier instance,
           std::string path, int flags)
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
  std::lock_guard behind(state_->shared->behind_mu);
  state_->errors_heard = state_->shared->behind_failures_reported;
}

uint64_t File::size_hint() const {
  return state_->shared ? state_->shared->size.load(std::memory_order_relaxed) : UINT64_MAX;
}

void File::learned_size(uint64_t size) {
  if (state_->shared) state_->shared->size.store(size, std::memory_order_relaxed);
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
    close_quietly();
    client_ = std::exchange(other.client_, nullptr);
    state_ = std::move(other.state_);
    fileid_ = other.fileid_;
    opened_ = other.opened_;
    opened_by_delegation_ = other.opened_by_delegation_;
    path_ = std::move(other.path_);
    flags_ = other.flags_;
  }
  return *this;
}

File::~File() { close_quietly(); }

void File::close_quietly() noexcept {
  if (client_ == nullptr) return;
  std::string why;
  try {
    if (Status closed = try_close(); !closed.ok()) why = closed.to_string();
  } catch (const std::exception& e) {  // memory running out: still not out of a destructor
    why = e.what();
  }
  if (!why.empty()) ODAFS_LOG_WARN("odafs: closing %s: %s", path_.c_str(), why.c_str());
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

namespace {
const Status kClosed(EBADF, "file is closed");
}  // namespace

Status File::check_readable() const {
  if (client_ == nullptr) return kClosed;
  if ((flags_ & O_ACCMODE) == O_WRONLY) return Status(EBADF, "read on a write-only file");
  return Status();
}

Status File::check_writable() const {
  if (client_ == nullptr) return kClosed;
  if ((flags_ & O_ACCMODE) == O_RDONLY) return Status(EBADF, "write on a read-only file");
  return Status();
}

Result<uint64_t> File::write_offset(uint64_t offset) {
  if (!(flags_ & O_APPEND)) return offset;
  ODAFS_ASSIGN_OR_RETURN(Attr a, try_stat());  // not atomic against other writers
  return a.size;
}

Status File::make_room_for(size_t len) {
  const MountOptions& o = client_->options();
  if (o.stability == Stability::kUnstable && uncommitted_bytes() + len > o.max_uncommitted_bytes) {
    return commit_unstable();  // the copies kept for re-sending would outgrow their bound
  }
  return Status();
}

void File::wrote(uint64_t key, uint64_t offset, const char* src, size_t n,
                 const WriteVerifier& verf, int committed) {
  record_write(*state_->shared, offset, src, n, verf, committed);
  client_->forget_data(key, offset, n);  // the cached copies are out of date now
  saw_size_at_least(offset + n);
}

Result<bool> File::refresh_stale(const Handle& stale) {
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
  // name). Nor to one that reuses its inode number, once removed: the file generation
  // tells them apart, where the server knows it.
  ODAFS_ASSIGN_OR_RETURN(auto m, client_->mount_state());
  const WriteVerifier now = m->limits.write_verifier;
  if (now == instance) return false;
  ODAFS_ASSIGN_OR_RETURN(auto found, client_->resolve(path_, true));
  const auto& [fresh, attr] = found;
  if (fresh == stale || attr.fileid != fileid_ || attr.type != FileType::kRegular) return false;
  if (attr.file_generation != 0 && opened_.file_generation != 0 &&
      attr.file_generation != opened_.file_generation) {
    return false;
  }
  std::lock_guard lock(state_->mu);
  state_->fh = fresh;
  state_->key = odafs::cache_key(fresh);
  state_->instance = now;
  return true;
}

template <class Fn>
auto File::retry_stale(Fn&& fn) -> decltype(fn(Handle{}, uint64_t{})) {
  if (client_ == nullptr) return kClosed;
  auto [fh, key] = current();
  auto r = fn(fh, key);
  // Once, as RetryPolicy::again_after_stale has it (a second ESTALE is the answer).
  if (r.errno_value() != ESTALE) return r;
  Result<bool> refreshed = refresh_stale(fh);
  if (!refreshed.ok()) return std::move(refreshed).status();
  if (!*refreshed) return r;
  auto [fresh, fresh_key] = current();
  return fn(fresh, fresh_key);
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
  return or_throw(try_pread(buf, len, offset));
}

Result<size_t> File::try_pread(void* buf, size_t len, uint64_t offset) {
  ODAFS_RETURN_IF_ERROR(check_readable());
  // This client reads its own writes: from the run gathered behind when it holds them all
  // (a file written and read back, as PostMark's are), else after sending it.
  if (size_t n = 0; len != 0 && read_behind(buf, len, offset, &n)) return n;
  ODAFS_RETURN_IF_ERROR(flush_behind(false));
  // DELAY: another client's write delegation is still out; the server read nothing.
  ODAFS_ASSIGN_OR_RETURN(size_t n, retry_delayed(client_->options().timeout_ms, [&] {
                           return retry_stale([&](const Handle& fh, uint64_t key) {
                             return client_->read_file(fh, key, buf, len, offset, size_hint());
                           });
                         }));
  if (n > 0) saw_size_at_least(offset + n);
  return n;
}

size_t File::pwrite(const void* buf, size_t len, uint64_t offset) {
  return or_throw([&]() -> Result<size_t> {
    ODAFS_RETURN_IF_ERROR(check_writable());
    note_lost_writes();
    const MountOptions& o = client_->options();
    ODAFS_ASSIGN_OR_RETURN(auto m, client_->mount_state());
    const size_t behind_cap = std::min<size_t>(o.write_behind_bytes, m->limits.max_write);
    // O_APPEND goes to the server at once (it places the bytes), unless a write delegation
    // says no one else writes the file; direct writes are the engine's to pull; large
    // writes gain nothing from waiting.
    const bool append = (flags_ & O_APPEND) != 0;
    const char* src = static_cast<const char*>(buf);
    if (o.direct_writes || len >= behind_cap ||
        (append && !m->delegations->holds_write(handle()))) {
      ODAFS_RETURN_IF_ERROR(flush_behind(true));
      return write_through(src, len, offset, o.stability, append);
    }
    SharedFile& sf = *state_->shared;
    std::lock_guard behind(sf.behind_mu);
    ODAFS_RETURN_IF_ERROR(take_behind_error_locked());
    if (append) {
      // The end this client knows is the file's while the delegation holds, and asked under
      // behind_mu it holds until the run is sent: a recall's write-back waits for the lock.
      ODAFS_ASSIGN_OR_RETURN(auto now, client_->mount_state());
      if (!now->delegations->holds_write(handle())) {  // recalled meanwhile
        ODAFS_RETURN_IF_ERROR(send_behind_locked(o.stability));
        return write_through(src, len, offset, o.stability, true);
      }
      offset = sf.size.load(std::memory_order_relaxed);
    }
    const bool follows = offset == sf.behind_offset + sf.behind.size();
    if (!sf.behind.empty() && (!follows || sf.behind.size() + len > behind_cap)) {
      ODAFS_RETURN_IF_ERROR(send_behind_locked(o.stability));
    }
    if (sf.behind.empty()) {
      sf.behind_offset = offset;
      sf.size_before_run = sf.size.load(std::memory_order_relaxed);
    }
    sf.behind.insert(sf.behind.end(), src, src + len);
    sf.has_behind.store(true, std::memory_order_release);
    saw_size_at_least(offset + len);
    return len;
  }());
}

Result<size_t> File::write_through(const char* buf, size_t len, uint64_t offset, Stability how,
                                   bool append) {
  const MountOptions& o = client_->options();
  size_t done = 0;  // outside the retry: chunks that landed are not sent again
  return retry_stale([&](const Handle& fh, uint64_t key) -> Result<size_t> {
    ODAFS_ASSIGN_OR_RETURN(auto m, client_->mount_state());
    const size_t max_write = m->limits.max_write;
    while (done < len) {
      size_t chunk = std::min<size_t>(len - done, max_write);
      const char* src = buf + done;
      ODAFS_RETURN_IF_ERROR(make_room_for(chunk));
      WriteVerifier verf;
      int committed = 0;
      uint64_t end = 0;
      ODAFS_ASSIGN_OR_RETURN(
          size_t n,
          o.direct_writes && !append
              ? client_->write_direct(fh, src, chunk, offset + done, how, &verf, &committed)
              : client_->try_write(fh, src, chunk, append ? kAppendOffset : offset + done, how,
                                   &verf, &committed, &end));
      wrote(key, append ? end - n : offset + done, src, n, verf, committed);
      done += n;
    }
    return done;
  });
}

Status File::send_behind_locked(Stability how) {
  return send_run_locked(
      *state_->shared,
      [this, how](const char* buf, size_t len, uint64_t offset) {
        // At its own offset even from an O_APPEND File: the run may be another File's (kept
        // by a write delegation past its close), gathered by positioned writes.
        return write_through(buf, len, offset, how, /*append=*/false).status();
      },
      // An open File's own run: kept when the server could not be reached (it may be
      // restarting: the next call sends the run again, and this one's caller hears of
      // it), else dropped, and its next call reports the failure.
      [](const Status& failed) { return server_unreachable(failed.errno_value()); });
}

void File::note_lost_writes() {
  Status lost = client_->check_lost(fileid_, opened_.mtime);
  if (lost.ok()) return;
  std::lock_guard behind(state_->shared->behind_mu);
  record_write_failure_locked(*state_->shared, lost);
}

bool File::behind_error_unheard_locked(ErrorMark* mark) {
  if (mark != nullptr && *mark == kNewErrorMark) *mark = state_->errors_heard;
  return (mark != nullptr ? *mark : state_->errors_heard) != state_->shared->behind_failures;
}

Status File::take_behind_error_locked(ErrorMark* mark) {
  if (!behind_error_unheard_locked(mark)) return Status();
  SharedFile& sf = *state_->shared;
  (mark != nullptr ? *mark : state_->errors_heard) = sf.behind_failures;
  sf.behind_failures_reported = sf.behind_failures;
  return Status(sf.behind_errno, "an earlier write of " + path_ + " failed: " + sf.behind_error);
}

Status File::flush_behind(bool report, ErrorMark* mark) {
  if (client_ == nullptr) return kClosed;
  SharedFile& sf = *state_->shared;
  if (!report && !sf.has_behind.load(std::memory_order_acquire)) return Status();
  std::lock_guard behind(sf.behind_mu);
  // A failure that dropped the run is recorded in sf, for the next write, fsync or close
  // unless reported now; a run kept unsent (the server unreachable) fails this call.
  Status sent = send_behind_locked(client_->options().stability);
  if (!sent.ok() && !sf.behind.empty()) return sent;
  if (report) return take_behind_error_locked(mark);
  return Status();
}

size_t File::uncommitted_bytes() const {
  SharedFile& s = *state_->shared;
  std::lock_guard lock(s.mu);
  return s.pending.empty() ? 0 : s.pending_data.size();
}

Attr File::stat() { return or_throw(try_stat()); }

Result<Attr> File::try_stat() {
  ODAFS_RETURN_IF_ERROR(flush_behind(false));
  ODAFS_ASSIGN_OR_RETURN(
      Attr a, retry_stale([&](const Handle& fh, uint64_t) { return client_->try_getattr(fh); }));
  learned_size(a.size);
  return a;
}

void File::truncate(uint64_t size) {
  or_throw([&]() -> Status {
    // Earlier writes are sent and committed first: were the server to restart after the
    // truncation, re-sending them then would bring truncated bytes back.
    ODAFS_RETURN_IF_ERROR(try_fsync());
    ODAFS_ASSIGN_OR_RETURN(uint64_t key,
                           retry_stale([&](const Handle& fh, uint64_t k) -> Result<uint64_t> {
                             ODAFS_RETURN_IF_ERROR(client_->setattr_size(fh, size));
                             return k;
                           }));
    client_->forget_data(key, 0, UINT64_MAX);
    state_->shared->size.store(size, std::memory_order_relaxed);
    return Status();
  }());
}

void File::fsync() { or_throw(try_fsync()); }

void File::fsync(ErrorMark* mark) { or_throw(try_fsync(mark)); }

Status File::try_fsync(ErrorMark* mark) {
  if (client_ == nullptr) return kClosed;
  note_lost_writes();
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
      Status sent = send_behind_locked(Stability::kFileSync);
      if (!sent.ok() && !sf.behind.empty()) return sent;  // kept unsent (flush_behind)
      return take_behind_error_locked(mark);
    }
  }
  ODAFS_RETURN_IF_ERROR(flush_behind(true, mark));
  return commit_unstable();
}

Status File::commit_unstable() {
  if (client_ == nullptr) return kClosed;
  return commit_books(
      *state_->shared, path_,
      [&] {
        return retry_stale([&](const Handle& fh, uint64_t) { return client_->try_commit(fh); });
      },
      [&](const char* src, size_t len, uint64_t offset) {
        return retry_stale([&](const Handle& fh, uint64_t key) -> Result<size_t> {
          WriteVerifier verf;
          int committed = 0;
          ODAFS_ASSIGN_OR_RETURN(
              size_t n,
              client_->try_write(fh, src, len, offset, Stability::kFileSync, &verf, &committed));
          client_->forget_data(key, offset, n);
          return n;
        });
      });
}

void File::flush() { or_throw(try_flush()); }

void File::flush(ErrorMark* mark) { or_throw(try_flush(mark)); }

Status File::try_flush(ErrorMark* mark) {
  if (client_ == nullptr) return kClosed;
  // Open for reading only, a close owes nothing: it wrote nothing to send, and the writers'
  // own closes report their failures (Linux's NFS client flushes only descriptors open for
  // writing). odafs-mount's read-only closes make no FLUSH at all (FOPEN_NOFLUSH).
  if ((flags_ & O_ACCMODE) == O_RDONLY) return Status();
  note_lost_writes();
  SharedFile& sf = *state_->shared;
  bool failed;
  {
    std::lock_guard behind(sf.behind_mu);
    failed = behind_error_unheard_locked(mark);
  }
  // Under a write delegation the SharedFile stays with it, unsent and uncommitted, until
  // it is recalled or given back (client/delegations.h); an error waiting is reported
  // now. Only UNSTABLE mounts: the others asked for their bytes durable by the close.
  if (failed || client_->options().stability != Stability::kUnstable) return try_fsync(mark);
  ODAFS_ASSIGN_OR_RETURN(auto m, client_->mount_state());
  Delegations& delegations = *m->delegations;
  if (delegations.keep_open(handle(), state_->shared)) return Status();
  // Refused for its run (past the server's space_limit, 0 over a shared store, whose
  // recalls cannot wait for bytes sent after them: docs/ceph.md): the run goes now, and
  // the delegation keeps what is left, its commit.
  if (delegations.holds_write(handle()) && sf.has_behind.load(std::memory_order_acquire)) {
    ODAFS_RETURN_IF_ERROR(flush_behind(true, mark));
    if (delegations.keep_open(handle(), state_->shared)) return Status();
  }
  return try_fsync(mark);
}

void File::close() { or_throw(try_close()); }

Status File::try_close() {
  if (client_ == nullptr) return Status();
  Status flushed = try_flush();
  ClientImpl* client = std::exchange(client_, nullptr);
  client->open_files_.release(state_->size_key, state_->shared);  // even after a failure
  return flushed;
}

}  // namespace odafs
