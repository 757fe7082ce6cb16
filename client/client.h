// libodafs: the odafs client library.
//
//   auto fs = odafs::Client::mount("odafs://127.0.0.1:7000/");
//   odafs::File f = fs->open("/data/log", O_RDWR | O_CREAT, 0644);
//   f.pwrite(buf, n, 0);
//   f.close();  // commits unstable writes (close-to-open)
//
// Errors: the C++ API reports a failure by throwing odafs::Error (client/error.h: a
// std::system_error whose code() is the errno, e.g. ENOENT, EACCES, ESTALE); nothing is
// reported through return values except byte counts and the try_ forms below. Exactly:
//   Throw Error: Client::mount, and every Client call that takes a path or a handle or
//     calls the server (open, stat, lstat, mkdir, rmdir, unlink, rename, readdir,
//     truncate, chmod, chown, access, utimens, symlink, mknod, link, readlink, statfs,
//     start_read, finish_read, ping, server_stats, prefetch_references, lookup, getattr,
//     read, write, commit); File's pread, pwrite, stat, truncate, fsync, flush and close;
//     IoQueue's constructor, submit_read, submit_write and wait (client/io_queue.h), for
//     what they name.
//   Never throw Error: the try_ forms, which return a Status or a Result<T>
//     (base/status.h) for callers that branch on the error (Client::try_lstat,
//     Client::try_chmod, Client::try_unmount, File::try_stat); destructors and File's moves (a
//     File's close failure there is logged); read_batch (each request carries its own error); every
//     accessor (stats, options, limits, read_mode, set_read_mode, root, cache,
//     directory_size, engine_connected, engine_transport; File's is_open, handle, path,
//     cache_key, attributes_at_open, known_size); IoQueue's reap, depth, outstanding,
//     ready, and its requests' own failures (their completions' errors).
// std::bad_alloc may come from anywhere memory is allocated. Internally the library
// passes Status and Result<T> (base/status.h's rule) and throws nowhere else, but for
// the one private throw ordma's direct-transfer interface asks for (client/read_path.cc).
// The C API (odafs.h) never throws: it returns -1 with errno.
//
// Thread-safety: a Client may be shared by any number of threads; calls run concurrently
// over one pipelined connection. A File's pread, pwrite, stat, truncate and fsync may run from
// several threads at once (as with pread(2)/pwrite(2) on one descriptor); moving or closing
// it may not overlap any other call on it.
//
// Asynchronous reads and writes from one thread (submit, then reap or wait): IoQueue,
// client/io_queue.h. The types the calls take and give are in headers of their own, which
// this one includes: client/error.h (Error), client/attr.h (Attr, DirEntry, FsStat, the
// conversion to struct stat), client/options.h (MountOptions, ServerLimits, ClientStats).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "client/attr.h"
#include "client/error.h"
#include "client/lost_writes.h"
#include "client/open_files.h"
#include "client/options.h"

struct setattr_args;  // proto/odafs_prot.x
struct attr_res;      // proto/odafs_prot.x
struct dirop_res;     // proto/odafs_prot.x
struct access_res;    // proto/odafs_prot.x
struct open_res;      // proto/odafs_prot.x
struct create_args;   // proto/odafs_prot.x

namespace odafs::tls {
class Context;
}  // namespace odafs::tls

namespace odafs {

namespace net {
struct Endpoint;
}  // namespace net
namespace rpc {
class Channel;
class Call;
struct CallerCred;
}  // namespace rpc
namespace ordma {
class EngineClient;
}  // namespace ordma
class ClientCache;
class Delegations;
class DirCache;
struct MountState;
struct SharedFile;

class Client;

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
  friend class Client;
  // instance: the server instance the handle came from (its write verifier at mount).
  File(Client* client, Handle fh, const Attr& attr, WriteVerifier instance, std::string path,
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
  Client* client_ = nullptr;
  std::unique_ptr<State> state_;  // handle, and what the client's Files of the file share
  uint64_t fileid_ = 0;
  Attr opened_;
  bool opened_by_delegation_ = false;
  std::string path_;
  int flags_ = 0;
};

// One READ in flight: started by Client::start_read, collected by Client::finish_read.
// A handle-level RPC read (no client cache, no one-sided read), for tools and RPC
// measurement; IoQueue (client/io_queue.h) is the asynchronous form of File::pread.
// Reusable for any number of reads, one at a time; it keeps its RPC buffers, so a steady
// stream of reads allocates nothing. Destroying one in flight waits for its reply.
class AsyncRead {
 public:
  AsyncRead();
  ~AsyncRead();
  AsyncRead(AsyncRead&& other) noexcept;  // the in-flight read moves along
  AsyncRead(const AsyncRead&) = delete;
  AsyncRead& operator=(const AsyncRead&) = delete;
  bool in_flight() const { return in_flight_; }

 private:
  friend class Client;
  std::unique_ptr<rpc::Call> call_;
  std::shared_ptr<const MountState> mount_;  // the mount (and connection) it went out on
  uint64_t key_ = 0;                         // where its references go in that mount's cache
  void* buf_ = nullptr;
  size_t len_ = 0;
  bool in_flight_ = false;
};

// One READ of a batch: filled in by Client::read_batch.
struct ReadRequest {
  File* file = nullptr;
  void* buf = nullptr;
  size_t len = 0;
  uint64_t offset = 0;
  size_t result = 0;  // bytes read
  int error = 0;      // errno, 0 on success
};

class Client {
 public:
  // Connects and mounts the URL's path (a directory of the export). Throws Error.
  // odafs://HOST:PORT,HOST2:PORT2/PATH names several servers of one file system (odafsd
  // gateways of one CephFS, docs/ceph.md): when the one in use cannot be reached (at
  // mount, or on a lost connection), the next is mounted, in order, round the list, each
  // failover logged; gateways sharing a --handle-key-file keep open files and handles
  // good across it.
  static std::unique_ptr<Client> mount(const std::string& url, MountOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Paths are relative to the mount; leading '/' optional. Symlinks are followed in the
  // middle of a path and, for open/stat, at its end.
  File open(const std::string& path, int flags = O_RDONLY, mode_t mode = 0644);
  Attr stat(const std::string& path);
  Attr lstat(const std::string& path);
  // lstat() and chmod() without throwing, std::filesystem-style, for callers that branch on
  // the error (odafs-mount: a negative lookup on ENOENT, a chmod refused EPERM).
  Result<Attr> try_lstat(const std::string& path);
  Status try_chmod(const std::string& path, mode_t mode);
  void mkdir(const std::string& path, mode_t mode = 0755);
  void rmdir(const std::string& path);
  void unlink(const std::string& path);
  void rename(const std::string& from, const std::string& to);
  // The entries but "." and "..", with their attributes if `attributes` (one READDIR with
  // plus: no LOOKUP per entry). An entry's attributes are left out where another client
  // or this one may hold newer ones than the listing (write delegations, writes behind).
  std::vector<DirEntry> readdir(const std::string& path, bool attributes = false);
  void truncate(const std::string& path, uint64_t size);
  void chmod(const std::string& path, mode_t mode);
  // Changes owner and group like lchown(2) (a symlink at the end is changed itself);
  // (uid_t)-1 / (gid_t)-1 leave one as it is. Throws Error (EPERM where the server acting
  // as the caller may not).
  void chown(const std::string& path, uid_t uid, gid_t gid);
  // Which of `want` (R_OK | W_OK | X_OK) the caller (CallAs, else this client) has on the
  // object at path, as the server decides (ACCESS): the granted part of want. Without
  // follow_last a symlink at the end is asked about itself (it has every bit).
  int access(const std::string& path, int want, bool follow_last = true);
  // Sets access and modification times like utimensat(2): tv_nsec may be UTIME_NOW (the
  // server's clock) or UTIME_OMIT (leave unchanged). Without follow_last a symlink at the
  // end of path gets the times itself (AT_SYMLINK_NOFOLLOW).
  void utimens(const std::string& path, const struct timespec times[2], bool follow_last = true);
  void symlink(const std::string& target, const std::string& path);
  // Makes a FIFO, socket or device node like mknod(2): mode holds the type (S_IFIFO,
  // S_IFSOCK, S_IFCHR, S_IFBLK; another: EINVAL) and the permission bits, used as given
  // (no umask here); rdev the device's numbers. Devices need the export's `devices` rule
  // and a caller the server's kernel lets make them (EPERM otherwise). Returns the new
  // object's attributes.
  Attr mknod(const std::string& path, mode_t mode, dev_t rdev = 0);
  // A hard link: new_path names the object at existing (not a directory: EPERM), like
  // link(2), which follows no symlink at existing. Returns its attributes after.
  Attr link(const std::string& existing, const std::string& new_path);
  std::string readlink(const std::string& path);
  FsStat statfs();

  // Issues every request at once (pipelined on the connection) and waits for all; each
  // request's result/error is set independently. Requests larger than max_read are split.
  void read_batch(std::span<ReadRequest> requests);

  // Asynchronous reads: any number may be in flight on the connection at once, from one
  // thread or many. start_read sends the READ and returns; finish_read waits for it and
  // returns the bytes read (fewer only at end of file, *eof then set). Both throw Error.
  // REQUIRES: len <= limits().max_read; buf stays valid until finish_read returns.
  void start_read(AsyncRead& op, const Handle& fh, void* buf, size_t len, uint64_t offset);
  size_t finish_read(AsyncRead& op, bool* eof = nullptr);

  void ping();  // the NULL procedure: a round trip and nothing else

  // Ends the mount, keeping every byte a close kept under a write delegation: writes them
  // back and gives the delegations back; if the server cannot be reached, waits for it
  // (MountOptions::unmount_wait_ms; give_up, when given and set, e.g. by a signal, ends the
  // wait at once) saying so in the log every 5 s, re-mounting to reclaim them. What is not
  // on the server when the wait ends goes to rescue files (MountOptions::rescue_dir), each
  // logged with its path; then the status is EIO and its message names each file, its
  // server and its rescue file. Never throws. Idempotent (a second call returns the first's
  // status); the destructor calls it.
  // REQUIRES: no other call on this client is in progress or follows (but the destructor).
  Status try_unmount(const std::atomic<bool>* give_up = nullptr);
  std::vector<std::pair<std::string, uint64_t>> server_stats();

  // Asks the server for references to [offset, offset + len) of f and puts them in the
  // directory (the paper's eager directory building). Returns how many came back; 0 when
  // the server has no engine.
  size_t prefetch_references(const File& f, uint64_t offset, uint64_t len);

  const ClientStats& stats() const { return stats_; }
  size_t directory_size() const;
  // The current mount's cache (references and data; blocks keyed by File::cache_key()),
  // for tools and tests that inspect or tamper with it. Valid until the next re-mount.
  ClientCache* cache();
  bool engine_connected() const;
  // How one-sided reads travel now: "ring", "tcp", or "none" (not connected yet, or no
  // engine).
  std::string engine_transport() const;

  // The current mount's limits (a re-mount may change them).
  ServerLimits limits() const;
  // The options as mounted; options().read_mode is the mount-time mode, read_mode() the
  // current one.
  const MountOptions& options() const { return options_; }
  // Switches how later reads travel (for measurement). Thread-safe; reads under way finish
  // the way they started.
  void set_read_mode(ReadMode mode) { read_mode_.store(mode, std::memory_order_relaxed); }
  ReadMode read_mode() const { return read_mode_.load(std::memory_order_relaxed); }

  // Handle-level calls, for tools and tests that need the protocol's view.
  Handle root() const;
  std::pair<Handle, Attr> lookup(const Handle& dir, const std::string& name);
  Attr getattr(const Handle& fh);
  size_t read(const Handle& fh, void* buf, size_t len, uint64_t offset, bool* eof);
  // Returns the bytes written; sets *verf and *committed (0 unstable .. 2 file sync), and
  // *size_after (when given) to the file's size after the write. offset kAppendOffset
  // (proto/enums.h) appends at the server's end of file, atomically there; such a write is
  // not sent again after a lost connection (it might land twice).
  size_t write(const Handle& fh, const void* buf, size_t len, uint64_t offset, Stability how,
               WriteVerifier* verf, int* committed, uint64_t* size_after = nullptr);
  WriteVerifier commit(const Handle& fh);

 private:
  friend class File;
  friend class BlockReader;
  friend class IoQueue;
  Client(const std::string& url, MountOptions options, ClientOwner owner);

  // Every private member that can fail returns a Status or a Result<T>; a try_ name is the
  // non-throwing form of the public call of the same name.
  Result<std::pair<Handle, Attr>> try_lookup(const Handle& dir, const std::string& name);
  Result<Attr> try_getattr(const Handle& fh);
  Result<size_t> try_read(const Handle& fh, void* buf, size_t len, uint64_t offset, bool* eof);
  Result<size_t> try_write(const Handle& fh, const void* buf, size_t len, uint64_t offset,
                           Stability how, WriteVerifier* verf, int* committed,
                           uint64_t* size_after = nullptr);
  Result<WriteVerifier> try_commit(const Handle& fh);

  // The current mount; re-mounts first when there is none or its connection broke.
  Result<std::shared_ptr<const MountState>> mount_state();
  // Connects and mounts afresh; after a lost connection, reclaims what the old mount's
  // write delegations kept (reclaim) before the new mount is published. REQUIRES:
  // remount_mu_ held.
  Result<std::shared_ptr<const MountState>> remount();

  // ---- reclaim.cc: restart and reclaim ----

  // A random owner id: names this client to the server across its connections.
  static Result<ClientOwner> make_owner();
  // CLIENT_ID on m's channel: true if the server lets this client reclaim (it restarted and
  // its record names this client, or it kept this client's delegations while the client
  // had no connection: then m->reclaim_after says so). A server without CLIENT_ID: false.
  Result<bool> name_client(MountState& m);
  // A handle this client holds for a file with kept bytes, and the server instance it
  // came from (the write verifier of the mount it was issued on).
  struct HeldHandle {
    Handle fh;
    WriteVerifier instance;
  };
  // Writes back on *home what old's write delegations kept and did not send (old's
  // connection broke), each to its file (home_of); reports the rest lost (report_lost), and
  // all of it when home is null (the server refused the reclaim, or there is no server to
  // be had), `no_home` saying why. REQUIRES: home not published yet.
  void reclaim(const MountState* home, const MountState& old, const std::string& no_home);
  // The file at `path` (from m's root, symbolic links followed as an open follows them),
  // by LOOKUPs and READLINKs on m's channel only (the mount may not be published yet);
  // DELAY and GRACE waited out. Nothing if it is not there.
  Result<std::optional<std::pair<Handle, Attr>>> find_again(const MountState& m,
                                                            const std::string& path);
  // Where sf's kept bytes go on m: `held` (may be null) while the server takes it as sf's
  // file, which follows the file wherever it was renamed; only if the server refuses it as
  // stale, the file found again at one of sf's paths (find_again; the latest first) with
  // sf's file id. Nothing when neither is sf's file. Another file that reuses the inode
  // number is never taken by the handle (the server checks its slot generation and the
  // kernel's file handle); by the path only the file id tells them apart.
  // Fails ESTALE (kRemovedOnServer) when the file is gone: m's server is the instance that
  // issued `held` (it stayed up: a stale handle then means the file was removed, or
  // replaced by a rename over it) and no path leads to the file. After a restart a stale
  // handle says nothing of the file (handles of a local export name one instance): then
  // nothing is returned, as for a file that is no longer at its path.
  Result<std::optional<Handle>> home_of(const MountState& m, const SharedFile& sf,
                                        const HeldHandle* held);
  // Writes (stable) pieces (offset, length; their bytes end to end in data) of sf's file,
  // found by home_of. Returns ok or why they could not be: ESTALE only when the file is
  // gone from the server (the bytes went with it).
  Status write_home(const MountState& m, SharedFile& sf, const HeldHandle* held,
                    const std::vector<std::pair<uint64_t, size_t>>& pieces,
                    const std::vector<char>& data);
  // Bytes a write delegation kept whose write-back failed with the connection after the
  // re-mount had taken the rest (Delegations' adopt hook): written home on the current mount
  // as reclaim would, or reported lost; `kept` released.
  // caller: whose close kept them (null: the channel's own credential); removing: see
  // Delegations::Return.
  void adopt_unsent(const HeldHandle& held, OpenFiles::Ref& kept, const rpc::CallerCred* caller,
                    bool removing);
  // A run kept (of the file held names) whose send failed because the connection broke, on
  // a thread that held its lock through the re-mount (so reclaim left it): written home on
  // the current mount as reclaim would, or reported lost; if the file was removed on the
  // server meanwhile, its open Files hear ESTALE as they would have connected.
  // REQUIRES: sf.behind_mu held.
  void rehome_run_locked(const HeldHandle& held, SharedFile& sf);
  // Logs that sf's bytes (pieces: offset, length; their bytes end to end in data) are lost
  // and why, and makes the file's next write, fsync or close through this client fail with
  // ENOSPC or EDQUOT when that is why, else EIO. While unmounting they go to a rescue file
  // first (rescue), which the log names.
  void report_lost(SharedFile& sf, const std::vector<std::pair<uint64_t, size_t>>& pieces,
                   const std::vector<char>& data, const Status& why);
  // Saves sf's pieces in a new rescue file (MountOptions::rescue_dir), each at its offset,
  // and records it for try_unmount's status. Returns its path, or why there is none.
  Result<std::string> rescue(const SharedFile& sf,
                             const std::vector<std::pair<uint64_t, size_t>>& pieces,
                             const std::vector<char>& data);
  // try_unmount's wait: while the current mount's connection is broken and its write
  // delegations keep bytes, re-mounts (which reclaims them) until the server answers,
  // unmount_wait_ms passes or give_up is set. Logs every 5 s what waits.
  void wait_for_server(const std::atomic<bool>* give_up);
  // The server the mount uses now, "HOST:PORT", for messages.
  std::string server_name() const;
  // The failure (report_lost's errno) if writes to file `fileid`, opened when its mtime was
  // `mtime_at_open`, were lost and not yet reported (LostWrites says how a reused id is
  // told).
  Status check_lost(uint64_t fileid, const struct timespec& mtime_at_open);
  // The connection broke while write delegations kept bytes: re-mount (and so reclaim)
  // soon, on a thread of the client's, even if no call comes. Never blocks.
  void reconnect_soon();
  void reconnect_loop();
  void stop_reconnecting();
  // Runs fn(mount) (returning a Status or a Result<T>) on the current mount, again while
  // it fails DELAY; on a lost connection re-mounts and, if idempotent, runs it once more
  // on the new mount (client/retry_policy.h).
  template <class Fn>
  auto with_mount(bool idempotent, Fn&& fn) -> decltype(fn(std::declval<const MountState&>()));
  template <class Fn>
  auto with_channel(bool idempotent, Fn&& fn) -> decltype(fn(std::declval<rpc::Channel&>()));
  // Runs fn() (a path operation: resolve, then calls on the handles it found; returning a
  // Status or a Result<T>), and once more
  // if it failed ESTALE after a re-mount meanwhile (a server restart: its handles named the
  // old instance). Safe for any operation: a stale handle means the server did nothing.
  template <class Fn>
  auto again_after_restart(Fn&& fn) -> decltype(fn());
  // The mount's engine (see EngineSlot::get); engine_for_reads: only in read mode kOrdma.
  std::shared_ptr<ordma::EngineClient> engine(const MountState& m);
  std::shared_ptr<ordma::EngineClient> engine_for_reads(const MountState& m);
  uint64_t session_for_reads(const MountState& m) const;

  // Resolves path to (handle, attributes). follow_last: follow a symlink at the end.
  // for_parent: the caller wants a directory's handle only (it may come from the
  // DirCache, and then the attributes hold only its type).
  Result<std::pair<Handle, Attr>> resolve(const std::string& path, bool follow_last,
                                          bool for_parent = false);
  // resolve()'s walk from `start`, without the retry; dirs (may be null) serves and keeps
  // directory handles, *used_cache set when it served one.
  Result<std::pair<Handle, Attr>> walk(const std::string& path, bool follow_last,
                                       const Handle& start, bool for_parent, DirCache* dirs,
                                       bool* used_cache);
  // Resolves the parent directory of path; returns its handle and the last name.
  Result<std::pair<Handle, std::string>> resolve_parent(const std::string& path);
  // What open() finds at an existing path, for `access` (O_RDONLY, O_WRONLY, O_RDWR):
  // from a read delegation this mount holds, without a call, or by OPEN, which may grant
  // one (and, to write, recalls other clients'). Follows symlinks.
  // *by_delegation: whether a delegation served it.
  Result<std::pair<Handle, Attr>> open_existing(const std::string& path, int access,
                                                bool* by_delegation);
  // Whether m holds a delegation on `name` in dir that it may trust now: then *fh, *attr
  // (its size grown by this client's writes behind) and *write (a write delegation) say
  // what it holds. Allocates nothing.
  bool delegated(const MountState& m, const Handle& dir, std::string_view name, Handle* fh,
                 Attr* attr, bool* write);
  // Under a per-call credential (rpc::CallAs: one client serving several callers, as
  // odafs-mount does), the open of an existing regular file is where the caller's
  // permission for `access` (O_RDONLY, O_WRONLY, O_RDWR) is checked: after it, this
  // client's cached blocks, references and delegations serve that caller like any other.
  // EACCES when the server refuses the caller.
  Status check_access(const Handle& fh, const Attr& attr, const std::string& path, int access);
  // This client changes fh's bytes or attributes: the writes it gathered behind for fh go
  // to the server first (flush_writes_behind), and its own delegation on fh is void.
  Status forget_delegation(const Handle& fh);
  // Sends the writes this client gathered behind for fh (client/shared_file.h), if any;
  // returns the error of sending them.
  Status flush_writes_behind(const Handle& fh);
  // A write delegation's write-back (client/delegations.h): sends sf's run and COMMITs its
  // unstable writes (again, stable, after a server restart) on m's channel, without
  // re-mounting. True if there was anything to send; what failed stays in sf.
  Result<bool> write_back(const MountState& m, const Handle& fh, SharedFile& sf);
  // One WRITE of src[0, n) (n <= max_write) at `at` on m's channel, sent again while
  // answered DELAY; never re-mounts. Returns the bytes written.
  Result<size_t> write_on(const MountState& m, const Handle& fh, const char* src, size_t n,
                          uint64_t at, Stability how, WriteVerifier* verf, int* committed);
  // COMMIT on m's channel.
  Result<WriteVerifier> commit_on(const MountState& m, const Handle& fh);
  // Attributes the server gave for fh, with the size grown to what this client has written
  // behind (not yet sent) to the file.
  Attr with_writes_behind(const Handle& fh, Attr a) const;

  // One READ by RPC of [offset, offset + len) into buf (len <= max_read) on m's channel;
  // the reply's references go into m's directory under `key`. The caller decides about
  // retrying.
  Result<size_t> rpc_read(const MountState& m, rpc::Call& call, const Handle& fh, uint64_t key,
                          void* buf, size_t len, uint64_t offset, bool* eof);
  // rpc_read in two halves, for callers that keep several in flight: start_rpc_read sends
  // the READ (pre-posting buf unless kInline) and returns; finish_rpc_read waits for it
  // until call.deadline(), decodes it and puts its references into m's directory under
  // `key`. buf must stay valid in between.
  Status start_rpc_read(const MountState& m, rpc::Call& call, const Handle& fh, void* buf,
                        size_t len, uint64_t offset);
  Result<size_t> finish_rpc_read(const MountState& m, rpc::Call& call, uint64_t key, void* buf,
                                 size_t len, bool* eof);
  // One WRITE of buf[0, len) (len <= max_write) in two halves, like the read's: the bytes
  // are copied into the call at start. finish_write returns the bytes written and sets
  // *verf and *committed.
  Status start_write(const MountState& m, rpc::Call& call, const Handle& fh, const void* buf,
                     size_t len, uint64_t offset, Stability how);
  // One GETATTR of fh in two halves, for IoQueue::submit_stat; the attributes as
  // try_getattr returns them.
  Status start_getattr(const MountState& m, rpc::Call& call, const Handle& fh);
  Result<Attr> finish_getattr(const MountState& m, rpc::Call& call, const Handle& fh);
  // A GETATTR reply's attributes (its error otherwise), with this client's writes behind.
  Result<Attr> attr_of(const attr_res& res, const Handle& fh) const;
  // IoQueue's metadata requests: one call each in two halves, like the reads'
  // (client/namespace_calls.cc). start_* encode the call (the arguments are not kept);
  // finish_* wait for its reply (it is there or overdue: IoQueue polled) and decode it with
  // the synchronous call's own decoder below. finish_create records a delegation granted.
  Status start_lookup(const MountState& m, rpc::Call& call, const Handle& dir,
                      const std::string& name);
  Result<std::pair<Handle, Attr>> finish_lookup(const MountState& m, rpc::Call& call,
                                                const std::string& name);
  Status start_access(const MountState& m, rpc::Call& call, const Handle& fh, int want);
  Result<int> finish_access(const MountState& m, rpc::Call& call, int want);
  // REQUIRES: forget_delegation(fh) done (setattr() does it).
  Status start_setattr(const MountState& m, rpc::Call& call, const Handle& fh, setattr_args& args);
  Result<Attr> finish_setattr(const MountState& m, rpc::Call& call, const std::string& what);
  // access: O_RDONLY, O_WRONLY or O_RDWR; flags: O_EXCL is the only one read.
  Status start_create(const MountState& m, rpc::Call& call, const Handle& dir,
                      const std::string& name, mode_t mode, int flags, int access);
  Result<std::pair<Handle, Attr>> finish_create(const MountState& m, rpc::Call& call,
                                                const Handle& dir, const std::string& name,
                                                int access, const std::string& what);
  // REMOVE (proc ODAFSPROC_REMOVE) or RMDIR of name in dir.
  Status start_remove(const MountState& m, rpc::Call& call, const Handle& dir,
                      const std::string& name, uint32_t proc);
  Status finish_remove(const MountState& m, rpc::Call& call, const std::string& what);
  // The decoders the synchronous calls and the halves share: a reply's result, or its
  // error naming `what` (a LOOKUP's: the name).
  static Result<std::pair<Handle, Attr>> lookup_of(const dirop_res& res, const std::string& name);
  static Result<int> granted_of(const access_res& res, int want);
  static Result<Attr> setattr_of(const attr_res& res, const std::string& what);
  // CREATE's arguments; they point into name, which must outlive them.
  static create_args create_call_args(const Handle& dir, const std::string& name, mode_t mode,
                                      int flags, int access);
  // The file an OPEN or CREATE of `name` in dir answered, its delegation, if granted,
  // recorded (a write open without one forgets the name's: this client is about to write).
  static Result<std::pair<Handle, Attr>> opened(const MountState& m, const Handle& dir,
                                                std::string_view name, int access,
                                                const open_res& res, const std::string& what);
  // The File open() hands out for (fh, attr) found at path: the cached blocks
  // revalidated (close-to-open), O_DIRECTORY and a directory opened to write refused, and
  // O_TRUNC done (a SETATTR when the file has bytes).
  Result<File> file_at_open(const std::shared_ptr<const MountState>& m, const Handle& fh, Attr attr,
                            const std::string& path, int flags, int access, bool by_delegation);
  Result<size_t> finish_write(const MountState& m, rpc::Call& call, size_t len, WriteVerifier* verf,
                              int* committed, uint64_t* size_after = nullptr);
  // The read path of File::pread (read_path.cc): per block, cache → one-sided read with a
  // reference → RPC, whatever the read mode; kDirect goes to read_direct.
  // Reads stop at size_hint when the bytes before it came without an RPC (the file's
  // size as the caller knows it; UINT64_MAX: unknown).
  Result<size_t> read_file(const Handle& fh, uint64_t key, void* buf, size_t len, uint64_t offset,
                           uint64_t size_hint);
  Result<size_t> read_direct(const Handle& fh, void* buf, size_t len, uint64_t offset);
  Result<size_t> write_direct(const Handle& fh, const void* buf, size_t len, uint64_t offset,
                              Stability how, WriteVerifier* verf, int* committed);
  // Sets the file's size; returns its attributes after the change.
  Result<Attr> setattr_size(const Handle& fh, uint64_t size);
  // SETATTR of fh with the fields `args` sets (its handle is filled in here), after giving
  // back a delegation on it; `what` names the call in an error. Returns the attributes
  // after.
  Result<Attr> setattr(const Handle& fh, setattr_args& args, const std::string& what);
  // ACCESS: the part of want (R_OK | W_OK | X_OK) the caller has on fh.
  Result<int> access_handle(const Handle& fh, int want);
  // access() and open() without throwing (IoQueue's requests finish with them).
  Result<int> try_access(const std::string& path, int want, bool follow_last);
  Result<File> try_open(const std::string& path, int flags, mode_t mode);
  // What LOOKUP of name in dir would answer, from a delegation this client holds on the
  // file (a file of one link), without a call: true and *found.
  bool lookup_without_call(const MountState& m, const Handle& dir, const std::string& name,
                           std::pair<Handle, Attr>* found);
  Result<std::string> readlink_handle(const Handle& fh);
  Status remove_name(const std::string& path, uint32_t proc, const char* what);
  // Drops what the current mount caches of the file's data (after this client changed it).
  void forget_data(uint64_t key, uint64_t offset, uint64_t len);

  const std::string url_;
  std::string mount_path_;
  const MountOptions options_;
  // MountOptions::tls: the context every connection of the mount starts TLS with (the
  // server's certificate must name the host of the server it reaches). Set at mount, then
  // constant.
  std::shared_ptr<const tls::Context> tls_context_;
  // The URL's servers, and which one mounts next (guarded by remount_mu_).
  std::vector<net::Endpoint> servers_;
  std::atomic<size_t> server_index_{0};  // written under remount_mu_; messages read it
  std::atomic<ReadMode> read_mode_;
  std::mutex remount_mu_;  // serialises re-mounts; nothing else takes it
  std::atomic<std::shared_ptr<const MountState>> mount_;
  // Mounts published so far: a path operation that met ESTALE runs again if this moved
  // (again_after_restart), for the cost of one load instead of loading the mount.
  std::atomic<uint64_t> mounts_{0};
  ClientStats stats_;
  OpenFiles open_files_;  // what the Files of one file share
  const ClientOwner owner_;
  LostWrites lost_writes_;
  // The re-mounting thread of reconnect_soon, started the first time it is wanted.
  std::mutex reconnect_mu_;
  std::condition_variable reconnect_cv_;
  bool reconnect_wanted_ = false;  // guarded by reconnect_mu_
  bool closing_ = false;           // guarded by reconnect_mu_
  std::thread reconnector_;
  // try_unmount: its status once it ran (guarded by unmount_mu_), and whether it is under
  // way (report_lost reads it on whichever thread reclaims).
  std::mutex unmount_mu_;
  std::optional<Status> unmounted_;
  std::atomic<bool> unmounting_{false};
  // The rescue files made, one line each for try_unmount's status. Guarded by rescued_mu_
  // (rescue runs on the thread that reclaims: try_unmount's, or a delegation worker's).
  std::mutex rescued_mu_;
  std::vector<std::string> rescued_;
};

}  // namespace odafs
