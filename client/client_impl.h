// The implementation behind client/client.h's Client (LevelDB's DB/DBImpl split): the
// mount's state, the RPC calls, the restart and reclaim machinery. Internal to client/:
// File, BlockReader and IoQueue work on it directly; everyone else holds a Client.
//
// Thread-safety: as Client's (any number of threads); what each member guards is said
// where it is declared.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/client.h"
#include "client/lost_writes.h"
#include "client/open_files.h"

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
struct ReadCounts;
struct SharedFile;

class ClientImpl final : public Client {
 public:
  // Connects and mounts (Client::mount's work). Fails by throwing Error, as mount does.
  ClientImpl(const std::string& url, MountOptions options, ClientOwner owner);
  ~ClientImpl() override;

  // Client's interface (client/client.h says what each does).
  File open(const std::string& path, int flags, mode_t mode) override;
  Attr stat(const std::string& path) override;
  Attr lstat(const std::string& path) override;
  Result<Attr> try_lstat(const std::string& path) override;
  Status try_chmod(const std::string& path, mode_t mode) override;
  void mkdir(const std::string& path, mode_t mode) override;
  void rmdir(const std::string& path) override;
  void unlink(const std::string& path) override;
  void rename(const std::string& from, const std::string& to) override;
  std::vector<DirEntry> readdir(const std::string& path, bool attributes) override;
  void truncate(const std::string& path, uint64_t size) override;
  void chmod(const std::string& path, mode_t mode) override;
  void chown(const std::string& path, uid_t uid, gid_t gid) override;
  int access(const std::string& path, int want, bool follow_last) override;
  void utimens(const std::string& path, const struct timespec times[2], bool follow_last) override;
  void symlink(const std::string& target, const std::string& path) override;
  Attr mknod(const std::string& path, mode_t mode, dev_t rdev) override;
  Attr link(const std::string& existing, const std::string& new_path) override;
  std::string readlink(const std::string& path) override;
  FsStat statfs() override;
  void read_batch(std::span<ReadRequest> requests) override;
  void start_read(AsyncRead& op, const Handle& fh, void* buf, size_t len, uint64_t offset) override;
  size_t finish_read(AsyncRead& op, bool* eof) override;
  void ping() override;
  Status try_unmount(const std::atomic<bool>* give_up) override;
  std::vector<std::pair<std::string, uint64_t>> server_stats() override;
  size_t prefetch_references(const File& f, uint64_t offset, uint64_t len) override;
  const ClientStats& stats() const override;
  size_t directory_size() const override;
  ClientCache* cache() override;
  bool engine_connected() const override;
  std::string engine_transport() const override;
  ServerLimits limits() const override;
  const MountOptions& options() const override;
  void set_read_mode(ReadMode mode) override;
  ReadMode read_mode() const override;
  Handle root() const override;
  std::pair<Handle, Attr> lookup(const Handle& dir, const std::string& name) override;
  Attr getattr(const Handle& fh) override;
  size_t read(const Handle& fh, void* buf, size_t len, uint64_t offset, bool* eof) override;
  size_t write(const Handle& fh, const void* buf, size_t len, uint64_t offset, Stability how,
               WriteVerifier* verf, int* committed, uint64_t* size_after) override;
  WriteVerifier commit(const Handle& fh) override;

  // The one implementation of Client: what Client::mount made.
  static ClientImpl& of(Client& c) { return static_cast<ClientImpl&>(c); }

  // Adds what a read counted (BlockReader's, when it ends) to stats(). Thread-safe.
  void count_reads(const ReadCounts& counts);

 private:
  friend class Client;  // mount: makes and mounts the one implementation
  friend class File;
  friend class BlockReader;
  friend class IoQueue;

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
  // REMOVE of name in dir.
  Status start_remove(const MountState& m, rpc::Call& call, const Handle& dir,
                      const std::string& name);
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
  // P: ODAFSPROC_REMOVE or ODAFSPROC_RMDIR (both take diropargs and answer stat_res).
  template <uint32_t P>
  Status remove_name(const std::string& path, const char* what);
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
