// An open file of a Client (client/client.h, which includes this header): reads, writes,
// attributes, fsync and close, with the errors client/client.h's "Errors" lists.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "base/status.h"
#include "client/attr.h"
#include "client/error.h"
#include "client/options.h"

namespace odafs {

class ClientImpl;

// An open file. Moves, does not copy; the destructor closes (errors there are logged,
// not thrown: call close() to see them).
class File {
 public:
  File();
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  ~File();

  // Reads up to len bytes at offset; returns fewer only at end of file.
  size_t pread(void* buf, size_t len, uint64_t offset);
  // Writes all len bytes at offset (or at the end of file when opened O_APPEND). Small
  // positioned writes may be gathered and sent later (MountOptions::write_behind_bytes);
  // an error sending them is thrown by a later pwrite, fsync or close.
  size_t pwrite(const void* buf, size_t len, uint64_t offset);
  Attr stat();
  // stat() without throwing: for callers that branch on the error (odafs-mount).
  Result<Attr> try_stat();
  // The attributes open() found (from OPEN, CREATE or a read delegation), without a call:
  // what stat() would have said at open, not since.
  const Attr& attributes_at_open() const { return opened_; }
  // The file's size as this client knows it, without a call: at open, after stat(), and
  // grown by this client's writes (those gathered behind too) and reads.
  uint64_t known_size() const { return size_hint(); }
  void truncate(uint64_t size);
  // Sends the writes gathered behind, then makes every write so far durable (COMMIT), of
  // every open of this file by this client. If the server restarted since an unstable
  // write (its write verifier changed), sends every uncommitted write again, stable; throws
  // EIO only if that fails.
  void fsync();
  // What close(2) of one descriptor owes: the writes durable (fsync()), and an earlier
  // failed write reported; nothing for a File opened O_RDONLY. Under a write delegation
  // this mount may trust, nothing is sent: the writes stay with the delegation until it is
  // recalled, given back or fsync'ed (client/delegations.h). May be called more than once
  // (dup'ed descriptors).
  void flush();
  // flush(), then forget the handle.
  void close();
  // Whether open() was served by a delegation this client already held, without a call:
  // then nobody else changed the file since this client last heard from the server about it.
  bool opened_by_delegation() const { return opened_by_delegation_; }

  // A reader's place among this file's failed writes sent behind: fsync and flush given a
  // mark report a failure the mark has not heard of yet, once per mark, as Linux reports
  // a writeback error once per open file (errseq). A File's own mark serves pwrite,
  // fsync(), flush() and close(). One File used by several processes keeps a mark per
  // process (odafs-mount: a descriptor inherited across fork), so that a child's close,
  // even close-on-exec's, does not take the report its parent's close owes. A new mark
  // (kNewErrorMark) starts where this File's own mark is: it hears what pwrite has not
  // reported yet.
  using ErrorMark = uint64_t;
  static constexpr ErrorMark kNewErrorMark = ~ErrorMark{0};
  void fsync(ErrorMark* mark);
  void flush(ErrorMark* mark);

  bool is_open() const { return client_ != nullptr; }
  Handle handle() const;
  const std::string& path() const { return path_; }
  // The key this file's blocks have in the client cache (see Client::cache()).
  uint64_t cache_key() const;

 private:
  friend class ClientImpl;
  // instance: the server instance the handle came from (its write verifier at mount).
  File(ClientImpl* client, Handle fh, const Attr& attr, WriteVerifier instance, std::string path,
       int flags);
  // The size this client knows (see State::size); reads stop there without an RPC.
  uint64_t size_hint() const;
  void saw_size_at_least(uint64_t size);
  // The size a GETATTR of the file reported (stat, IoQueue::submit_stat).
  void learned_size(uint64_t size);
  // After ESTALE from `stale`: if the server restarted since the handle was issued, finds
  // the file again by its path (the same inode only), switches to its new handle and
  // returns true (also when another call already switched); false when the file is gone.
  // Fails as the lookups do.
  Result<bool> refresh_stale(const Handle& stale);
  // Runs fn(handle, cache key) (returning a Status or a Result<T>); if it failed ESTALE
  // because the server restarted, finds the file again (refresh_stale) and runs fn once
  // more. EBADF for a closed file.
  template <class Fn>
  auto retry_stale(Fn&& fn) -> decltype(fn(Handle{}, uint64_t{}));

  // The pieces of pread and pwrite, shared with IoQueue (which runs them around its
  // pipelined calls), so that both keep one set of books. Thread-safe like pread/pwrite.
  friend class IoQueue;
  // EBADF unless the file is open, and open for reading / for writing.
  Status check_readable() const;
  Status check_writable() const;
  // The handle and cache key in use now (a restart changes both together).
  std::pair<Handle, uint64_t> current() const;
  // Where an IoQueue write asked at `offset` goes: the end of file (a GETATTR) when opened
  // O_APPEND. (pwrite appends at the server instead.)
  Result<uint64_t> write_offset(uint64_t offset);
  // Before an UNSTABLE write of `len` bytes: commits first when keeping its copy would take
  // the kept bytes past MountOptions::max_uncommitted_bytes.
  Status make_room_for(size_t len);
  // Sends the write-behind run of this file, if any (every read, stat and IoQueue request
  // does first). report: return the error of this or an earlier run that `mark` (null:
  // this File's) has not heard of (writes, fsync); otherwise keep it for them (reads) and
  // return ok. A run kept unsent because the server could not be reached fails the call
  // either way (the run stays for the next). EBADF for a closed file.
  Status flush_behind(bool report, ErrorMark* mark = nullptr);
  // Reads [offset, offset + len) from the run written behind, if it holds all of it (or
  // all up to the end of the file): true, and *n bytes copied to buf.
  bool read_behind(void* buf, size_t len, uint64_t offset, size_t* n);
  // After a WRITE of src[0, n) at offset came back with (verf, committed), sent with the
  // handle whose cache key is `key`: keeps an unstable write's copy and verifier for fsync,
  // drops the client's cached copies of the blocks, and grows the known size.
  void wrote(uint64_t key, uint64_t offset, const char* src, size_t n, const WriteVerifier& verf,
             int committed);

  // The bytes not yet committed that are kept for re-sending.
  size_t uncommitted_bytes() const;
  // pwrite without write-behind: WRITEs (or direct writes) of max_write at most, `how`
  // stable.
  // With `append`, each chunk goes at the server's end of file, atomically there, and the
  // reply's size says where it landed (no GETATTR first).
  Result<size_t> write_through(const char* buf, size_t len, uint64_t offset, Stability how,
                               bool append);
  // REQUIRES the shared behind_mu: sends the run; on failure returns it, and either keeps
  // the run (the server unreachable) or drops it and records the error (write_books.h).
  Status send_behind_locked(Stability how);
  // Bytes of this file lost at a reclaim (Client::check_lost) become a failure of its
  // writes, which each open and caller hears (take_behind_error_locked).
  void note_lost_writes();
  // REQUIRES the shared behind_mu: the latest recorded run error if `mark` (null: this
  // File's) has not heard of it; then it has.
  Status take_behind_error_locked(ErrorMark* mark = nullptr);
  // REQUIRES the shared behind_mu: whether `mark` (null: this File's) has a run error to
  // hear of.
  bool behind_error_unheard_locked(ErrorMark* mark = nullptr);
  // COMMIT of the unstable writes (fsync without sending the write-behind run).
  Status commit_unstable();
  // pread, fsync, flush and close without throwing, for IoQueue, for one another and for
  // the destructor.
  Result<size_t> try_pread(void* buf, size_t len, uint64_t offset);
  Status try_fsync(ErrorMark* mark = nullptr);
  Status try_flush(ErrorMark* mark = nullptr);
  Status try_close();
  // try_close for the destructor and the move assignment: logs a failure, never throws.
  void close_quietly() noexcept;

  struct State;
  ClientImpl* client_ = nullptr;
  std::unique_ptr<State> state_;  // handle, and what the client's Files of the file share
  uint64_t fileid_ = 0;
  Attr opened_;
  bool opened_by_delegation_ = false;
  std::string path_;
  int flags_ = 0;
};

}  // namespace odafs
