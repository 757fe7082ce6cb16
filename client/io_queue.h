// IoQueue: DAFS-style asynchronous I/O on Files. One thread submits many reads, writes and
// stats without waiting, then reaps (polls) or waits for their completions.
//
//   odafs::IoQueue q(*fs, 64);
//   q.submit_read(f, buf, 4096, 0, /*user_tag=*/1);
//   q.submit_write(g, data, n, 8192, /*user_tag=*/2);
//   odafs::Completion done[64];
//   size_t n = q.wait(done, /*min=*/2, /*timeout_ms=*/-1);  // done[i].user_tag, .bytes, .error
//
// A read goes down the same per-block pipeline as File::pread (client/block_reader.h):
// blocks in the client's data cache are copied, blocks the directory holds a reference to
// are read one-sided (a fault falls back to the RPC), and the rest go by one pipelined
// READ per run of blocks, whose reply brings references and is kept in the cache. Cache
// copies run at submit. One-sided reads are gathered: those of every request submitted
// (or brought references by a reply) since the last reap or wait go to the engine
// together at the next reap or wait, one doorbell on the ring or one send over TCP for
// the lot, so a window of reads costs one round trip, not one each. Read mode kDirect
// reads synchronously at submit (File::pread).
// A write goes as pipelined WRITE RPCs (also when MountOptions::direct_writes is set) and
// completes with File::pwrite's bookkeeping: unstable writes' copies kept for re-sending
// after a server restart, verifier tracking, the cached blocks dropped, the known size.
//
// A request longer than the server's max_read / max_write goes as successive calls, one
// in flight per request, and completes once. Requests progress only inside submit_*,
// reap and wait, on the calling thread. A read or write on a connection that was lost
// re-mounts (waiting up to MountOptions::reconnect_window_ms) and resumes once, and one
// whose handle turned stale because the server restarted finds its file again by path
// (the same inode only) and resumes once, as File::pread and File::pwrite do.
//
// Completions come in the order requests complete, not as submitted. Each carries its
// own result: errors (EBADF, ESTALE, ETIMEDOUT, ECONNRESET, EIO, ...) never disturb the
// other requests and are never thrown. A write that failed part-way reports the bytes
// written before the failure with the error.
//
// Blocking: submit_* and reap never wait for the server's replies. They may still block
// in the rare cases File does: re-mounting after a lost connection, a COMMIT when the
// copies of unstable writes reach MountOptions::max_uncommitted_bytes (each write
// in flight may add up to max_write past it), a GETATTR for an O_APPEND file's end, the
// lookups that find a file again after a server restart.
//
// Memory: everything per request is allocated at construction (depth slots, each with its
// rpc::Call); a read whose span does not fit the caller's buffer (unaligned, with the data
// cache on), or whose one-sided reads bring whole blocks for the data cache, reads them
// into its slot's scratch buffer, which grows once to the largest such span (at most
// max_read) and stays; the queue's list of planned one-sided reads grows once to the
// most planned at a time. A steady stream allocates nothing.
//
// Thread-safety: an IoQueue is used by one thread at a time. The Files it reads and
// writes may be used by other threads meanwhile, as with File::pread/pwrite.
#pragma once

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/retry_policy.h"

namespace odafs::ordma {
struct ReadOp;
}  // namespace odafs::ordma

namespace odafs {

// One finished request.
struct Completion {
  uint64_t user_tag = 0;  // as given at submit
  size_t bytes = 0;       // bytes read (fewer only at end of file) or written
  int error = 0;          // errno; 0: success
};

class IoQueue {
 public:
  // At most `depth` requests (1..65536) submitted and not yet reaped: completions waiting
  // to be reaped hold their place. Throws Error(EINVAL) for a depth outside that range.
  // REQUIRES: client outlives the queue.
  IoQueue(Client& client, size_t depth);
  // Waits for the calls in flight (the server may still be writing into their buffers)
  // and drops completions nobody reaped.
  ~IoQueue();
  IoQueue(const IoQueue&) = delete;
  IoQueue& operator=(const IoQueue&) = delete;

  // Reads up to len bytes of f at offset into buf; the completion's bytes are fewer only
  // at the end of the file (as the client knows it, see File). Throws Error: EBUSY when
  // depth requests are outstanding, EINVAL when buf is null (len > 0) or f belongs to
  // another Client. Every other failure, a closed or write-only f included, comes as the
  // completion's error. REQUIRES: buf and f stay valid, and f is not moved or closed,
  // until the completion is reaped (or the queue destroyed).
  void submit_read(File& f, void* buf, size_t len, uint64_t offset, uint64_t user_tag);
  // Writes len bytes of buf to f at offset (at its end when f was opened O_APPEND).
  // Throws and REQUIRES as submit_read.
  void submit_write(File& f, const void* buf, size_t len, uint64_t offset, uint64_t user_tag);
  // The attributes of f into *out, as File::stat would return them (one GETATTR). Many in
  // flight go out together: the server reads them in one receive and answers in one send
  // (16 at once cost it a quarter of the CPU per call of one at a time: docs/PERFORMANCE.md,
  // "Metadata calls in flight"). The completion's bytes are 0. Throws and REQUIRES as
  // submit_read, with out for buf.
  void submit_stat(File& f, Attr* out, uint64_t user_tag);

  // ---- Metadata by path, as Client's synchronous calls take paths. The path is copied at
  // submit, and its parent directory found there: from the client's directory cache, or
  // by the LOOKUPs of a walk, made there and waited for (a walk blocks as File's rare cases
  // do). The request's own calls then go pipelined like reads, and complete in any order;
  // the completion's bytes are 0. A request that meets a symlink where it follows one (the
  // last name of submit_access and submit_chmod), or a name CREATE finds taken by one
  // without O_EXCL, finishes with the synchronous call, at reap or wait. DELAY is waited
  // out as for reads; a lost connection or a server restart starts the request over once
  // when it is idempotent (lstat, access, chmod), and fails it otherwise (create, unlink:
  // it may have been done). Throws Error: EBUSY as submit_read, EINVAL for a null out.
  //
  // The attributes of path, not following a symlink at its end (Client::lstat): one LOOKUP,
  // or none while this client holds a delegation on the file.
  void submit_lstat(const std::string& path, Attr* out, uint64_t user_tag);
  // The part of want (R_OK | W_OK | X_OK) the caller has on path, following a symlink at
  // its end (Client::access): a LOOKUP, then an ACCESS.
  void submit_access(const std::string& path, int want, int* granted, uint64_t user_tag);
  // Creates path (with O_EXCL in flags, fails EEXIST if it exists) and opens it into *out,
  // as Client::open(path, flags | O_CREAT, mode) does: one CREATE, which may bring a
  // delegation. Truncating a file that existed (O_TRUNC without O_EXCL) is a SETATTR at
  // reap or wait. REQUIRES: *out is not used until the completion is reaped.
  void submit_create(const std::string& path, int flags, mode_t mode, File* out, uint64_t user_tag);
  // Removes the name path of a file (Client::unlink): one REMOVE, after what this client
  // kept under a write delegation of it is written back (at submit, blocking).
  void submit_unlink(const std::string& path, uint64_t user_tag);
  // Sets the permission bits of path, following a symlink at its end (Client::chmod): a
  // LOOKUP, then a SETATTR.
  void submit_chmod(const std::string& path, mode_t mode, uint64_t user_tag);

  // Moves up to out.size() completions into out, without waiting; returns how many.
  size_t reap(std::span<Completion> out);
  // Waits until at least min completions are there, or nothing is left in flight, or
  // timeout_ms passed (< 0: no limit; 0: do not wait), then reaps like reap(). Throws
  // Error(EINVAL) when min > out.size().
  size_t wait(std::span<Completion> out, size_t min, int timeout_ms);

  size_t depth() const { return depth_; }
  // Requests submitted and not yet reaped (in flight or complete).
  size_t outstanding() const { return depth_ - free_.size(); }
  // Completions ready to be reaped.
  size_t ready() const { return ready_count_; }

 private:
  struct Slot;
  friend class ClientImpl;  // read_batch: try_submit
  // f: null for a request by path.
  Result<Slot*> take_slot(File* f, const void* buf, size_t len);
  // The request's RetryPolicy (client/retry_policy.h), made at its first failure.
  RetryPolicy& policy(Slot& s);
  // submit_read / submit_write / submit_stat, failing as they throw.
  enum class Op : uint8_t { kRead, kWrite, kStat, kLstat, kAccess, kCreate, kUnlink, kChmod };
  static bool by_path(Op op) { return op >= Op::kLstat; }
  Status try_submit(Op op, File& f, void* buf, size_t len, uint64_t offset, uint64_t user_tag);
  // The submit_* by path: a slot with the path and op, its result pointer set by `fill`.
  template <class Fill>
  void submit_by_path(Op op, const std::string& path, uint64_t user_tag, Fill&& fill);
  // Runs s until it waits on a call or completes; rpc_ready: its call has its reply (or
  // its deadline passed).
  void drive(Slot& s, bool rpc_ready);
  Result<bool> drive_read(Slot& s, bool rpc_ready);  // true: complete
  Result<bool> drive_write(Slot& s, bool rpc_ready);
  Result<bool> drive_stat(Slot& s, bool rpc_ready);
  // The requests by path: find the parent, then LOOKUP the last name when the op needs
  // its handle, then the op's own call (start_step).
  Result<bool> drive_by_path(Slot& s, bool rpc_ready);
  Result<bool> finish_step(Slot& s);
  Result<bool> start_step(Slot& s);
  // Its synchronous call, for the cases submit_lstat & co. leave to it.
  Result<bool> finish_synchronously(Slot& s);
  // Back to the start (after a lost connection or a restart), giving back what it took.
  void start_over(Slot& s);
  void complete(Slot& s, int error);
  // Drives every slot whose call is ready or overdue. Returns whether calls are still in
  // flight, and the earliest of their deadlines in *next.
  bool poll(timespec* next);
  // Reads the one-sided ops the waiting requests planned, all at once, then drives each
  // of them on (until none waits for the engine).
  void flush_engine();
  size_t take(std::span<Completion> out);

  ClientImpl& client_;
  const size_t depth_;
  std::unique_ptr<Slot[]> slots_;
  std::vector<uint32_t> free_;    // free slots (a stack)
  std::vector<uint32_t> flight_;  // slots with a call in flight
  // One-sided reads planned by requests (submit, or a reply that brought references), read
  // together at the next reap or wait: one doorbell, or one TCP send, for the lot.
  std::vector<ordma::ReadOp> batch_;
  std::vector<uint32_t> waiting_;           // the slots whose ops are in batch_, in order
  std::vector<ordma::ReadOp> engine_done_;  // flush_engine's: batch_ as it was read
  std::vector<uint32_t> waiting_done_;
  std::vector<uint32_t> ready_;  // completed slots, a ring of depth_ from ready_head_
  size_t ready_head_ = 0;
  size_t ready_count_ = 0;
  std::atomic<uint32_t> notify_{0};  // bumped by the channel at each reply to our calls
};

}  // namespace odafs
