// File: an open file of a Client, with close-to-open commit of unstable writes, copies of
// those writes kept until committed, and finding the file again after a server restart.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "base/log.h"
#include "client/call_util.h"
#include "client/client.h"
#include "client/mount_state.h"

namespace odafs {

// What changes while the file is open, shared by the threads using it.
struct File::State {
  std::mutex mu;  // guards everything below except commit_mu
  Handle fh{};
  uint64_t key = 0;                       // cache_key(fh)
  WriteVerifier instance{};               // the server instance fh came from (its write verifier)
  bool unstable = false;                  // writes not yet committed
  std::optional<WriteVerifier> verifier;  // of the last unstable write
  bool verifier_changed = false;          // differed between two unstable writes
  // The unstable writes since the last COMMIT, (offset, length), their bytes end to end in
  // pending_data, kept to be sent again should the server restart before the COMMIT.
  std::vector<std::pair<uint64_t, size_t>> pending;
  std::vector<char> pending_data;
  std::mutex commit_mu;  // one fsync at a time
  // Not under mu: the file's size as this client knows it: at open, from stat(), after its
  // own writes and truncations, and as reads find it. Reads stop here without asking the
  // server, as an NFS client's reads stop at its cached size: close-to-open promises the
  // size at open, and this spares a READ per whole-file read just to learn the end (a
  // cached or one-sided last block would otherwise need one). Shared with the client's
  // other Files of this file (client/open_sizes.h).
  OpenSizes::Size size;   // null once closed
  uint64_t size_key = 0;  // the key it was acquired under (key changes with a stale handle)
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
  state_->size = client->open_sizes_.acquire(state_->key, attr.size);
}

uint64_t File::size_hint() const {
  return state_->size ? state_->size->load(std::memory_order_relaxed) : UINT64_MAX;
}

void File::saw_size_at_least(uint64_t size) {
  if (!state_->size) return;  // closed
  uint64_t known = state_->size->load(std::memory_order_relaxed);
  while (known < size &&
         !state_->size->compare_exchange_weak(known, size, std::memory_order_relaxed)) {
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
    fsync();  // the copies kept for re-sending would outgrow their bound
  }
}

void File::wrote(uint64_t key, uint64_t offset, const char* src, size_t n,
                 const WriteVerifier& verf, int committed) {
  if (committed == ODAFS_UNSTABLE) {
    std::lock_guard lock(state_->mu);
    State& s = *state_;
    if (s.verifier && *s.verifier != verf) s.verifier_changed = true;
    s.verifier = verf;
    s.unstable = true;
    s.pending.push_back({offset, n});
    s.pending_data.insert(s.pending_data.end(), src, src + n);
  }
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
    if (e.errno_value() != ESTALE || !refresh_stale(fh)) throw;
    auto [fresh, fresh_key] = current();
    return fn(fresh, fresh_key);
  }
}

size_t File::pread(void* buf, size_t len, uint64_t offset) {
  check_readable();
  size_t n = retry_stale([&](const Handle& fh, uint64_t key) {
    return client_->read_file(fh, key, buf, len, offset, size_hint());
  });
  if (n > 0) saw_size_at_least(offset + n);
  return n;
}

size_t File::pwrite(const void* buf, size_t len, uint64_t offset) {
  check_writable();
  // O_APPEND: each chunk goes at the server's end of file, atomically there, and the
  // reply's size says where it landed (no GETATTR first).
  const bool append = (flags_ & O_APPEND) != 0;
  const MountOptions& o = client_->options();
  size_t done = 0;  // outside the retry: chunks that landed are not sent again
  return retry_stale([&](const Handle& fh, uint64_t key) {
    const size_t max_write = client_->mount_state()->limits.max_write;
    while (done < len) {
      size_t chunk = std::min<size_t>(len - done, max_write);
      const char* src = static_cast<const char*>(buf) + done;
      make_room_for(chunk);
      WriteVerifier verf;
      int committed = 0;
      uint64_t end = 0;
      size_t n =
          o.direct_writes && !append
              ? client_->write_direct(fh, src, chunk, offset + done, o.stability, &verf, &committed)
              : client_->write(fh, src, chunk, append ? kAppendOffset : offset + done, o.stability,
                               &verf, &committed, &end);
      wrote(key, append ? end - n : offset + done, src, n, verf, committed);
      done += n;
    }
    return done;
  });
}

size_t File::uncommitted_bytes() const {
  std::lock_guard lock(state_->mu);
  return state_->pending.empty() ? 0 : state_->pending_data.size();
}

Attr File::stat() {
  Attr a = retry_stale([&](const Handle& fh, uint64_t) { return client_->getattr(fh); });
  state_->size->store(a.size, std::memory_order_relaxed);
  return a;
}

void File::truncate(uint64_t size) {
  // Earlier unstable writes are committed first: were the server to restart after the
  // truncation, re-sending them then would bring truncated bytes back.
  fsync();
  uint64_t key = retry_stale([&](const Handle& fh, uint64_t k) {
    client_->setattr_size(fh, size);
    return k;
  });
  client_->forget_data(key, 0, UINT64_MAX);
  state_->size->store(size, std::memory_order_relaxed);
}

void File::fsync() {
  if (client_ == nullptr) fail(EBADF, "file is closed");
  std::lock_guard commit(state_->commit_mu);
  // Take the writes acknowledged so far: the COMMIT below covers them. Writes that finish
  // meanwhile stay for the next fsync.
  std::vector<std::pair<uint64_t, size_t>> taken;
  std::vector<char> taken_data;
  std::optional<WriteVerifier> verifier;
  bool changed;
  {
    std::lock_guard lock(state_->mu);
    State& s = *state_;
    if (!s.unstable) return;
    taken.swap(s.pending);
    taken_data.swap(s.pending_data);
    verifier = s.verifier;
    changed = s.verifier_changed;
    s.unstable = false;
    s.verifier_changed = false;
    s.verifier.reset();
  }
  auto give_back_buffers = [&] {  // keeps their capacity: a steady writer allocates nothing
    std::lock_guard lock(state_->mu);
    taken.clear();
    taken_data.clear();
    if (state_->pending.empty()) {
      state_->pending.swap(taken);
      state_->pending_data.swap(taken_data);
    }
  };
  auto put_back = [&] {  // failed: the writes stay uncommitted, ahead of newer ones
    std::lock_guard lock(state_->mu);
    State& s = *state_;
    taken.insert(taken.end(), s.pending.begin(), s.pending.end());
    taken_data.insert(taken_data.end(), s.pending_data.begin(), s.pending_data.end());
    s.pending.swap(taken);
    s.pending_data.swap(taken_data);
    s.unstable = true;
    s.verifier_changed = true;  // not known to be safe: the next fsync sends them again
  };
  try {
    WriteVerifier v = retry_stale([&](const Handle& fh, uint64_t) { return client_->commit(fh); });
    if (changed || (verifier && *verifier != v)) {
      // The server restarted since some of these writes were acknowledged, so they may
      // be lost: send them all again, in their order, stable this time (as NFS clients
      // do).
      try {
        resend(taken, taken_data);
      } catch (const Error& e) {
        fail(EIO, "commit " + path_ + ": the server restarted and unstable writes could not " +
                      "be sent again: " + e.what());
      }
    }
  } catch (...) {
    put_back();
    throw;
  }
  give_back_buffers();
}

void File::resend(const std::vector<std::pair<uint64_t, size_t>>& writes,
                  const std::vector<char>& data) {
  const char* src = data.data();
  for (const auto& write : writes) {
    const uint64_t offset = write.first;  // not a structured binding: lambdas capture it
    const size_t len = write.second;
    for (size_t done = 0; done < len;) {
      WriteVerifier verf;
      int committed = 0;
      done += retry_stale([&](const Handle& fh, uint64_t key) {
        size_t n = client_->write(fh, src + done, len - done, offset + done, Stability::kFileSync,
                                  &verf, &committed);
        client_->forget_data(key, offset + done, n);
        return n;
      });
    }
    src += len;
  }
}

void File::close() {
  if (client_ == nullptr) return;
  Client* client = std::exchange(client_, nullptr);
  auto give_back = [&] { client->open_sizes_.release(state_->size_key, state_->size); };
  try {
    client_ = client;
    fsync();
    client_ = nullptr;
  } catch (...) {
    client_ = nullptr;
    give_back();
    throw;
  }
  give_back();
}

}  // namespace odafs
