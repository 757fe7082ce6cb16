// The write books of a SharedFile (client/shared_file.h), as the write paths keep them:
// sending a write-behind run, keeping a copy of each unstable write with its verifier, and
// committing them (sending them again, stable, when the server restarted meanwhile).
// Shared by File (client/file.cc) and by a write delegation's write-back and the flush of a
// file's run before another call (client/write_back.cc); the callers pass how a WRITE and
// a COMMIT go out (their handle, their mount).
//
// Thread-safety: as each function says (the SharedFile's locks, in its lock order).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "client/client.h"
#include "client/shared_file.h"

namespace odafs {

// Records a failure of sf's writes (a run that could not be sent, bytes lost at a reclaim)
// for the next write, fsync or close of each open File of sf, each caller hearing it once
// (File::ErrorMark). REQUIRES sf.behind_mu.
inline void record_write_failure_locked(SharedFile& sf, const Status& failed) {
  ++sf.behind_failures;
  sf.behind_errno = failed.errno_value();
  sf.behind_error = failed.to_string();
}

// Sends sf's write-behind run with write(bytes, length, offset) -> Status and empties it.
// On failure records the error for the next write, fsync or close of each open File of sf
// (SharedFile::behind_failures), drops the run (the server never got it, as an NFS
// client's failed write-behind), and returns the failure; but when kept(failure) says so
// (a write delegation's kept bytes whose connection broke: the next mount reclaims them,
// client/reclaim.cc; an open File's run the server could not be reached for: the next call
// sends it again) it leaves the run as it was and only returns the failure. REQUIRES
// sf.behind_mu.
template <class WriteFn, class KeepFn>
Status send_run_locked(SharedFile& sf, WriteFn&& write, KeepFn&& kept) {
  if (sf.behind.empty()) return Status();
  Status sent = write(sf.behind.data(), sf.behind.size(), sf.behind_offset);
  if (!sent.ok()) {
    if (kept(sent)) return sent;
    record_write_failure_locked(sf, sent);
    // Refused by the server (EFBIG at 2^62 left stat saying 2^62 + 1): the size the run made
    // is not the file's; back to what it was before the run, unless a truncation set it
    // lower since. (Other failures, a file gone say, keep reads asking the server.)
    const int err = sent.errno_value();
    uint64_t now = sf.size.load(std::memory_order_relaxed);
    if ((err == EFBIG || err == ENOSPC || err == EDQUOT) && now > sf.size_before_run) {
      sf.size.compare_exchange_strong(now, sf.size_before_run, std::memory_order_relaxed);
    }
  }
  sf.behind.clear();  // keeps its capacity: a steady writer allocates nothing
  sf.has_behind.store(false, std::memory_order_release);
  return sent;
}

// After a WRITE of src[0, n) at offset came back with (verf, committed): keeps an unstable
// write's copy and verifier for the COMMIT.
inline void record_write(SharedFile& s, uint64_t offset, const char* src, size_t n,
                         const WriteVerifier& verf, int committed) {
  if (committed != ODAFS_UNSTABLE) return;
  std::lock_guard lock(s.mu);
  if (s.verifier && *s.verifier != verf) s.verifier_changed = true;
  s.verifier = verf;
  s.unstable = true;
  s.pending.push_back({offset, n});
  s.pending_data.insert(s.pending_data.end(), src, src + n);
}

// Writes buf[0, len) at offset in chunks of max_write with
// write_one(src, n, offset, &verf, &committed) -> Result<size_t> (bytes written), keeping
// unstable copies in sf and calling forget(offset, n) for each (the cached copies are out
// of date). Stops at the first failure and returns it.
template <class WriteOne, class Forget>
Status write_run(SharedFile& sf, size_t max_write, const char* buf, size_t len, uint64_t offset,
                 WriteOne&& write_one, Forget&& forget) {
  for (size_t done = 0; done < len;) {
    const size_t chunk = std::min<size_t>(len - done, max_write);
    WriteVerifier verf;
    int committed = 0;
    ODAFS_ASSIGN_OR_RETURN(size_t n,
                           write_one(buf + done, chunk, offset + done, &verf, &committed));
    record_write(sf, offset + done, buf + done, n, verf, committed);
    forget(offset + done, n);
    done += n;
  }
  return Status();
}

// COMMIT of shared's unstable writes acknowledged so far (writes that finish meanwhile stay
// for the next one): commit() -> Result<WriteVerifier>, the server's. If the server
// restarted since one was acknowledged, they may be lost, so all go again, in order,
// stable, through write_stable(src, len, offset) -> Result<size_t> (bytes written), as NFS
// clients do; EIO if that fails, but ESTALE if the file is gone (write_stable's ESTALE after
// the COMMIT succeeded: it was removed in between). On failure (returned) they stay
// uncommitted, ahead of newer ones, and the next try sends them again. `what` names the
// file in errors. Shared by File (which finds a stale handle again) and by a write
// delegation's write-back (which has only the handle).
//
// try_only: if another thread is committing, do nothing (it has the writes in hand and
// commits or keeps them). A write delegation's worker uses it: blocking there could wait on
// a thread that waits for the worker to stop (a re-mount freeing the old mount).
template <class CommitFn, class WriteStableFn>
Status commit_books(SharedFile& shared, const std::string& what, CommitFn&& commit,
                    WriteStableFn&& write_stable, bool try_only = false) {
  std::unique_lock commit_lock(shared.commit_mu, std::defer_lock);
  if (!try_only) {
    commit_lock.lock();
  } else if (!commit_lock.try_lock()) {
    return Status();
  }
  std::vector<std::pair<uint64_t, size_t>> taken;
  std::vector<char> taken_data;
  std::optional<WriteVerifier> verifier;
  bool changed;
  {
    std::lock_guard lock(shared.mu);
    SharedFile& s = shared;
    if (!s.unstable) return Status();
    taken.swap(s.pending);
    taken_data.swap(s.pending_data);
    verifier = s.verifier;
    changed = s.verifier_changed;
    s.unstable = false;
    s.verifier_changed = false;
    s.verifier.reset();
  }
  auto give_back_buffers = [&] {  // keeps their capacity: a steady writer allocates nothing
    std::lock_guard lock(shared.mu);
    taken.clear();
    taken_data.clear();
    if (shared.pending.empty()) {
      shared.pending.swap(taken);
      shared.pending_data.swap(taken_data);
    }
  };
  auto put_back = [&] {  // failed: the writes stay uncommitted, ahead of newer ones
    std::lock_guard lock(shared.mu);
    SharedFile& s = shared;
    taken.insert(taken.end(), s.pending.begin(), s.pending.end());
    taken_data.insert(taken_data.end(), s.pending_data.begin(), s.pending_data.end());
    s.pending.swap(taken);
    s.pending_data.swap(taken_data);
    s.unstable = true;
    s.verifier_changed = true;  // not known to be safe: the next fsync sends them again
  };
  // The writes again, stable: the server may have lost them.
  auto send_again = [&]() -> Status {
    const char* src = taken_data.data();
    for (const auto& [offset, len] : taken) {
      for (size_t done = 0; done < len;) {
        ODAFS_ASSIGN_OR_RETURN(size_t n, write_stable(src + done, len - done, offset + done));
        done += n;
      }
      src += len;
    }
    return Status();
  };
  Result<WriteVerifier> v = commit();
  Status done = v.status();
  if (done.ok() && (changed || (verifier && *verifier != *v))) {
    if (Status again = send_again(); !again.ok()) {
      // ESTALE: the handle the COMMIT just used went stale before the writes did, so the
      // file was removed (or renamed over) since: its bytes went with it, as they would
      // have had the remove come a moment later. That is the file gone, as for any call on
      // it, not bytes lost from a file that is still there.
      done = again.errno_value() == ESTALE
                 ? Status(ESTALE, "commit " + what +
                                      ": the file was removed after the server restarted, "
                                      "before its unstable writes were sent again: " +
                                      again.to_string())
                 : Status(EIO, "commit " + what +
                                   ": the server restarted and unstable writes could not be "
                                   "sent again: " +
                                   again.to_string());
    }
  }
  if (!done.ok()) {
    put_back();
    return done;
  }
  give_back_buffers();
  return Status();
}

}  // namespace odafs
