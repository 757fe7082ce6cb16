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
// this one includes: client/file.h (File), client/error.h (Error), client/attr.h (Attr,
// DirEntry, FsStat, the conversion to struct stat), client/options.h (MountOptions,
// ServerLimits, ClientStats).
//
// This header is the interface only (LevelDB's DB and DBImpl): Client is abstract, and
// Client::mount returns its one implementation, client/client_impl.h, which users never
// include.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "client/attr.h"
#include "client/error.h"
#include "client/file.h"
#include "client/options.h"

namespace odafs {

namespace rpc {
class Call;
}  // namespace rpc
class ClientCache;
class ClientImpl;
struct MountState;

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
  friend class ClientImpl;
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
  virtual ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Paths are relative to the mount; leading '/' optional. Symlinks are followed in the
  // middle of a path and, for open/stat, at its end.
  virtual File open(const std::string& path, int flags = O_RDONLY, mode_t mode = 0644) = 0;
  virtual Attr stat(const std::string& path) = 0;
  virtual Attr lstat(const std::string& path) = 0;
  // lstat() and chmod() without throwing, std::filesystem-style, for callers that branch on
  // the error (odafs-mount: a negative lookup on ENOENT, a chmod refused EPERM).
  virtual Result<Attr> try_lstat(const std::string& path) = 0;
  virtual Status try_chmod(const std::string& path, mode_t mode) = 0;
  virtual void mkdir(const std::string& path, mode_t mode = 0755) = 0;
  virtual void rmdir(const std::string& path) = 0;
  virtual void unlink(const std::string& path) = 0;
  virtual void rename(const std::string& from, const std::string& to) = 0;
  // The entries but "." and "..", with their attributes if `attributes` (one READDIR with
  // plus: no LOOKUP per entry). An entry's attributes are left out where another client
  // or this one may hold newer ones than the listing (write delegations, writes behind).
  virtual std::vector<DirEntry> readdir(const std::string& path, bool attributes = false) = 0;
  virtual void truncate(const std::string& path, uint64_t size) = 0;
  virtual void chmod(const std::string& path, mode_t mode) = 0;
  // Changes owner and group like lchown(2) (a symlink at the end is changed itself);
  // (uid_t)-1 / (gid_t)-1 leave one as it is. Throws Error (EPERM where the server acting
  // as the caller may not).
  virtual void chown(const std::string& path, uid_t uid, gid_t gid) = 0;
  // Which of `want` (R_OK | W_OK | X_OK) the caller (CallAs, else this client) has on the
  // object at path, as the server decides (ACCESS): the granted part of want. Without
  // follow_last a symlink at the end is asked about itself (it has every bit).
  virtual int access(const std::string& path, int want, bool follow_last = true) = 0;
  // Sets access and modification times like utimensat(2): tv_nsec may be UTIME_NOW (the
  // server's clock) or UTIME_OMIT (leave unchanged). Without follow_last a symlink at the
  // end of path gets the times itself (AT_SYMLINK_NOFOLLOW).
  virtual void utimens(const std::string& path, const struct timespec times[2],
                       bool follow_last = true) = 0;
  virtual void symlink(const std::string& target, const std::string& path) = 0;
  // Makes a FIFO, socket or device node like mknod(2): mode holds the type (S_IFIFO,
  // S_IFSOCK, S_IFCHR, S_IFBLK; another: EINVAL) and the permission bits, used as given
  // (no umask here); rdev the device's numbers. Devices need the export's `devices` rule
  // and a caller the server's kernel lets make them (EPERM otherwise). Returns the new
  // object's attributes.
  virtual Attr mknod(const std::string& path, mode_t mode, dev_t rdev = 0) = 0;
  // A hard link: new_path names the object at existing (not a directory: EPERM), like
  // link(2), which follows no symlink at existing. Returns its attributes after.
  virtual Attr link(const std::string& existing, const std::string& new_path) = 0;
  virtual std::string readlink(const std::string& path) = 0;
  virtual FsStat statfs() = 0;

  // Issues every request at once (pipelined on the connection) and waits for all; each
  // request's result/error is set independently. Requests larger than max_read are split.
  virtual void read_batch(std::span<ReadRequest> requests) = 0;

  // Asynchronous reads: any number may be in flight on the connection at once, from one
  // thread or many. start_read sends the READ and returns; finish_read waits for it and
  // returns the bytes read (fewer only at end of file, *eof then set). Both throw Error.
  // REQUIRES: len <= limits().max_read; buf stays valid until finish_read returns.
  virtual void start_read(AsyncRead& op, const Handle& fh, void* buf, size_t len,
                          uint64_t offset) = 0;
  virtual size_t finish_read(AsyncRead& op, bool* eof = nullptr) = 0;

  virtual void ping() = 0;  // the NULL procedure: a round trip and nothing else

  // Ends the mount, keeping every byte a close kept under a write delegation: writes them
  // back and gives the delegations back; if the server cannot be reached, waits for it
  // (MountOptions::unmount_wait_ms; give_up, when given and set, e.g. by a signal, ends the
  // wait at once) saying so in the log every 5 s, re-mounting to reclaim them. What is not
  // on the server when the wait ends goes to rescue files (MountOptions::rescue_dir), each
  // logged with its path; then the status is EIO and its message names each file, its
  // server and its rescue file. Never throws. Idempotent (a second call returns the first's
  // status); the destructor calls it.
  // REQUIRES: no other call on this client is in progress or follows (but the destructor).
  virtual Status try_unmount(const std::atomic<bool>* give_up = nullptr) = 0;
  virtual std::vector<std::pair<std::string, uint64_t>> server_stats() = 0;

  // Asks the server for references to [offset, offset + len) of f and puts them in the
  // directory (the paper's eager directory building). Returns how many came back; 0 when
  // the server has no engine.
  virtual size_t prefetch_references(const File& f, uint64_t offset, uint64_t len) = 0;

  virtual const ClientStats& stats() const = 0;
  virtual size_t directory_size() const = 0;
  // The current mount's cache (references and data; blocks keyed by File::cache_key()),
  // for tools and tests that inspect or tamper with it. Valid until the next re-mount.
  virtual ClientCache* cache() = 0;
  virtual bool engine_connected() const = 0;
  // How one-sided reads travel now: "ring", "tcp", or "none" (not connected yet, or no
  // engine).
  virtual std::string engine_transport() const = 0;

  // The current mount's limits (a re-mount may change them).
  virtual ServerLimits limits() const = 0;
  // The options as mounted; options().read_mode is the mount-time mode, read_mode() the
  // current one.
  virtual const MountOptions& options() const = 0;
  // Switches how later reads travel (for measurement). Thread-safe; reads under way finish
  // the way they started.
  virtual void set_read_mode(ReadMode mode) = 0;
  virtual ReadMode read_mode() const = 0;

  // Handle-level calls, for tools and tests that need the protocol's view.
  virtual Handle root() const = 0;
  virtual std::pair<Handle, Attr> lookup(const Handle& dir, const std::string& name) = 0;
  virtual Attr getattr(const Handle& fh) = 0;
  virtual size_t read(const Handle& fh, void* buf, size_t len, uint64_t offset, bool* eof) = 0;
  // Returns the bytes written; sets *verf and *committed (0 unstable .. 2 file sync), and
  // *size_after (when given) to the file's size after the write. offset kAppendOffset
  // (proto/enums.h) appends at the server's end of file, atomically there; such a write is
  // not sent again after a lost connection (it might land twice).
  virtual size_t write(const Handle& fh, const void* buf, size_t len, uint64_t offset,
                       Stability how, WriteVerifier* verf, int* committed,
                       uint64_t* size_after = nullptr) = 0;
  virtual WriteVerifier commit(const Handle& fh) = 0;

 protected:
  Client() = default;
};

}  // namespace odafs
