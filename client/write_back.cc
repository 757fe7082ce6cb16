// A Client's writes that are not a File's own call: the flush of a file's write-behind run
// before another call reads or changes the file, WRITE on one mount's channel, and a write
// delegation's write-back (the books in client/write_books.h).
#include <algorithm>
#include <chrono>
#include <mutex>

#include "client/call_util.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/mount_state.h"
#include "client/shared_file.h"
#include "client/write_books.h"
#include "rpc/client_channel.h"

namespace odafs {

Status ClientImpl::flush_writes_behind(const Handle& fh) {
  const uint64_t key = odafs::cache_key(fh);
  OpenFiles::Ref f = open_files_.find(key);
  if (!f || !f->has_behind.load(std::memory_order_acquire)) return Status();
  std::lock_guard behind(f->behind_mu);
  ODAFS_ASSIGN_OR_RETURN(const std::shared_ptr<const MountState> m, mount_state());
  Status sent = send_run_locked(
      *f,
      [&](const char* buf, size_t len, uint64_t offset) {
        const Stability how = options().stability;
        return write_run(
            *f, m->limits.max_write, buf, len, offset,
            [&](const char* src, size_t n, uint64_t at, WriteVerifier* verf, int* committed) {
              return try_write(fh, src, n, at, how, verf, committed);
            },
            [&](uint64_t at, size_t n) { forget_data(key, at, n); });
      },
      [&](const Status&) { return m->channel->broken(); });
  // The connection broke under the send, and the re-mount's reclaim could not take the
  // run (this thread held it): it goes home now, then the caller's call starts over. fh is
  // taken as m's instance's: one of an older instance that no call found again since a
  // restart would, with a cut in this very send, be taken for a removed file's, and the
  // writer told ESTALE rather than the run written by the file's path.
  if (!sent.ok() && m->channel->broken()) {
    rehome_run_locked(HeldHandle{fh, m->limits.write_verifier}, *f);
  }
  return sent;
}

Result<size_t> ClientImpl::write_on(const MountState& m, const Handle& fh, const char* src,
                                    size_t n, uint64_t at, Stability how, WriteVerifier* verf,
                                    int* committed) {
  return retry_delayed(options_.timeout_ms, [&]() -> Result<size_t> {
    thread_local rpc::Call call;
    ODAFS_RETURN_IF_ERROR(start_write(m, call, fh, src, n, at, how));
    return finish_write(m, call, n, verf, committed);
  });
}

Result<bool> ClientImpl::write_back(const MountState& m, const Handle& fh, SharedFile& sf) {
  bool any;
  {
    std::lock_guard lock(sf.mu);
    any = sf.unstable || sf.has_behind.load(std::memory_order_acquire);
  }
  if (!any) return false;
  const uint64_t key = odafs::cache_key(fh);
  const uint64_t bs = m.limits.block_size;
  auto forget = [&](uint64_t at, size_t n) {
    if (n != 0) m.cache->forget_data(key, at / bs, (at + n - 1) / bs);
  };
  // On m's channel only: a re-mount here could free m's Delegations from its own worker.
  // The size later opens under the delegation start from grows with what goes out here, as
  // with this client's other writes (Delegations::wrote): a File's run may be written back
  // here with no close of it recording its size (the SharedFile is kept by another entry).
  auto write_one = [&](const char* src, size_t n, uint64_t at, Stability how, WriteVerifier* verf,
                       int* committed) -> Result<size_t> {
    ODAFS_ASSIGN_OR_RETURN(size_t wrote, write_on(m, fh, src, n, at, how, verf, committed));
    if (wrote != 0) m.delegations->wrote(fh, at + wrote);
    return wrote;
  };
  {
    // The run must go out before the delegation does: a thread holding the lock may be
    // adding to it at the end this client knows (an O_APPEND under the delegation), and
    // once the delegation is back another client's append lands at that same end. So this
    // waits for the lock, but only while the connection holds: a broken one means a
    // re-mount, whose thread may hold the lock and wait for this worker to stop; the run
    // then stays for the next mount to reclaim.
    std::unique_lock behind(sf.behind_mu, std::defer_lock);
    while (!behind.try_lock_for(std::chrono::milliseconds(20))) {
      if (m.channel->broken()) break;
    }
    if (behind.owns_lock()) {
      ODAFS_RETURN_IF_ERROR(send_run_locked(
          sf,
          [&](const char* buf, size_t len, uint64_t offset) {
            return write_run(
                sf, m.limits.max_write, buf, len, offset,
                [&](const char* src, size_t n, uint64_t at, WriteVerifier* verf, int* committed) {
                  return write_one(src, n, at, options_.stability, verf, committed);
                },
                forget);
          },
          // The connection broke: the run stays for the next mount to reclaim.
          [&](const Status&) { return m.channel->broken(); }));
    }
  }
  ODAFS_RETURN_IF_ERROR(commit_books(
      sf, "a write-delegated file", [&] { return commit_on(m, fh); },
      [&](const char* src, size_t len, uint64_t offset) -> Result<size_t> {
        WriteVerifier verf;
        int committed = 0;
        ODAFS_ASSIGN_OR_RETURN(size_t n,
                               write_one(src, std::min<size_t>(len, m.limits.max_write), offset,
                                         Stability::kFileSync, &verf, &committed));
        forget(offset, n);
        return n;
      },
      /*try_only=*/true));
  return true;
}

}  // namespace odafs
