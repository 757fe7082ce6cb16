// The odafs procedures: what odafsd does with each call, on top of the node table and the
// block cache. One FileService serves one export.
//
// One class owns the state; its code is split by job: file_service.cc (construction, the
// procedure table, STATS, the engine glue), namespace_ops.cc (names and handles),
// attribute_ops.cc (one object's attributes and the caller's access to it) and data_ops.cc
// (file bytes through the cache; block_span.h cuts ranges into blocks).
//
// Thread-safety: every handler may run on any pool thread concurrently with others.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/periodic.h"
#include "cache/block_cache.h"
#include "ordma/engine.h"
#include "ordma/session.h"
#include "proto/odafs_prot.h"
#include "proto/wire_layout.h"
#include "rpc/server.h"
#include "server/call_authority.h"
#include "server/client_owners.h"
#include "server/cpu_accounting.h"
#include "server/delegations.h"
#include "server/file_env.h"
#include "server/lease_keeper.h"
#include "server/node_table.h"
#include "server/peer_fence.h"
#include "server/recovery.h"
#include "server/space_account.h"
#include "server/store.h"

namespace odafs::server {

class IdentityScope;

class FileService {
 public:
  struct Options {
    std::string export_root;
    size_t cache_bytes = 64u << 20;
    uint32_t block_size = 8192;
    uint32_t max_io = 1u << 20;  // largest READ/WRITE payload
    // Space reserved past a file's end for its write delegation's holder (space_limit: the
    // size at the grant plus this). A holder keeps one run written behind past a close (64
    // KiB, the client's MountOptions::write_behind_bytes); more would show in the file's
    // bytes used while the delegation lasts, and fill more of a hole a writer leaves past
    // it. A run that ends past the limit is sent by its close.
    uint32_t delegated_space = 64u << 10;
    // How that space is held (server/space_account.h): by the server's accounting while
    // the file system has more than this free beyond what is promised (-1: the larger of
    // 64 MiB and 1 % of it), below it by allocating it (fallocate). A margin larger than
    // the file system always allocates (an export with per-user quotas, which only an
    // allocation as the caller counts).
    int64_t space_margin_bytes = -1;
    size_t max_nodes = 65536;
    // Descriptors the node table keeps open, at most half of RLIMIT_NOFILE (see NodeTable).
    size_t max_open_files = kDefaultMaxOpenFiles;
    // Act as each call's credential (server/identity.h; needs root). false: every call
    // runs as the server's own user, whoever sent it (--identity server).
    bool act_as_callers = false;
    // Who may call, and how (server/call_authority.h).
    CallAuthority::Options access;
    bool ordma = true;  // false: RPC only, no references (the DAFS baseline)
    // Direct writes waiting on their client's bytes at once. Each holds an RPC thread until
    // the client answers (or kPullTimeoutMs), so keep this below the RPC thread count: a
    // client that never answers must not stall everyone. Past it, WRITE_DIRECT replies
    // NOTSUPP and the client writes by plain RPC. 0 turns direct writes off.
    size_t max_direct_writes = 3;
    // What is exported (server/store.h); null: the local directory export_root.
    std::shared_ptr<Store> store;
    // Handles that every server of the store with this key accepts (NodeTable); only for
    // a store that finds objects by identity (CephFS). Empty: handles of this server only.
    std::optional<NodeTable::SharedKey> handle_key;
    // File data I/O of a local export; null: the real system calls. Tests pass a
    // CrashSimulatingEnv. REQUIRES: outlives the service.
    FileEnv* env = nullptr;
    // Open delegations (see server/delegations.h): granted at all, how long a recalled
    // holder has to return one, and how many changes may wait for returns at once (keep
    // it below the RPC thread count, so one thread is always free to take the returns).
    bool delegations = true;
    int lease_ms = 5000;
    int max_delegation_waiters = 3;
    // Restart and reclaim (server/recovery.h): the recovery record's file (empty: none,
    // and so no write delegations) and the longest grace period after a start.
    std::string recovery_record;
    int grace_ms = 10000;
    // The most owners a recovery record may name: the server's connection limit.
    size_t recovery_max_owners = 1024;
    // The other gateways of a shared store's export, fenced when they stay dead
    // (server/peer_fence.h). Empty: none.
    std::vector<net::Endpoint> peers;
  };

  // Throws std::system_error when the export cannot be opened.
  FileService(Options options, CpuAccounting* cpu);

  // Hands every procedure of ODAFS_V3 but MOUNT and EXPORTS (the ExportRouter's: they
  // choose among exports) to `add`. server: whose connections the calls come on (recalls
  // go out on them; STATS reads its counters). REQUIRES: server not started; server
  // outlives this service's use of it.
  using AddProcedure = std::function<void(uint32_t proc, const char* name, rpc::ProcedureFn fn)>;
  void register_procedures(rpc::Server* server, const AddProcedure& add);

  // MOUNT of `path`, a path inside this export ("/" for its root): walks it as LOOKUP
  // would, as ctx.cred, and answers mount_res with the directory's handle. Whether it
  // answered ODAFS_OK.
  bool mount(const rpc::CallContext& ctx, const char* path, rpc::Reply& r);

  // Record size a server must accept / reply buffer it must have for these limits.
  size_t max_request_record() const { return options_.max_io + 4096; }
  // A READ reply also carries one reference per block it touches.
  size_t max_reply_record() const {
    return options_.max_io + 4096 + (options_.max_io / options_.block_size + 2) * sizeof(wire::Ref);
  }

  // Starts the one-sided engine over the cache arena. Without it (or with ordma off)
  // READ replies carry no references and MOUNT names no engine.
  // REQUIRES: options.ordma; called once, before serving.
  void start_engine(const ordma::EngineOptions& options);
  // Stops the engine; call before the RPC server stops so no read races the shutdown.
  void stop_engine();
  const ordma::Engine* engine() const { return engine_.get(); }

  // The RPC server's hook for a closed connection: an unnamed one's delegations are gone; a
  // named client's write delegations stay while it is away (docs/protocol.md, "Open
  // delegations"), unless it holds none.
  void connection_closed(uint64_t connection);
  // Delegations the client of `connection` holds on this export.
  size_t delegations_held_by(uint64_t connection) const { return delegations_.held_by(connection); }
  // Lets go of files deleted on the export's disk directly (not through a REMOVE): their
  // handles turn STALE, their delegations and cached blocks go, and their descriptors
  // close, so their space is free (NodeTable::drop_unlinked). Runs twice a second on its
  // own thread over a local store.
  void sweep_unlinked();
  // The server is stopping: connections closing from now on keep their clients' place in
  // the recovery record (they come back to reclaim after the restart).
  void stopping() {
    recovery_.stopping();
    delegations_.stop_serving();
  }

  // A call of proc (named `name`) answered `status`: refusals (EROFS, EACCES, EPERM,
  // ENOSPC, EDQUOT) are counted by kind ("refused.ENOSPC") and logged, naming the client,
  // its uid and the export, at most once a second per kind. Thread-safe.
  void note_reply(const rpc::CallContext& ctx, const char* name, uint32_t status);

  // Every counter STATS answers, by name ("cache.hits"): the RPC server's ("rpc.",
  // "calls." and "cpu_us.": the whole server's), then this export's. Allocates; takes no
  // lock a call holds long. REQUIRES: register_procedures done.
  std::vector<std::pair<std::string, uint64_t>> counters();

  // The export rules: the RPC server's admit and authorize hooks.
  const CallAuthority& authority() const { return authority_; }
  CallAuthority& authority() { return authority_; }  // replace_rules at a reload

  cache::BlockCache& cache() { return cache_; }
  NodeTable& nodes() { return nodes_; }
  const std::array<unsigned char, 8>& write_verifier() const { return write_verf_; }

 private:
  // ---- file_service.cc: construction, the procedure table, STATS, engine glue ----

  // Resolves a wire handle; on failure encodes the error status into reply and returns
  // an empty OpenNode. Stale covers removed files too; a handle that is not ours is
  // BADHANDLE (NodeTable's kBadHandle).
  // The node comes back pinned open (see NodeTable::open).
  OpenNode resolve_or_reply(const char* fh, rpc::Reply& reply, struct stat* st);
  // The two halves of resolve_or_reply, for callers that answer for themselves: the
  // pinned node of a handle, and its attributes (STALE once removed).
  odafs_stat open_handle(const char* fh, OpenNode* out);
  odafs_stat stat_node(const OpenNode& node, struct stat* st);
  // For a shared store: drops the cached blocks of regular file node when st (its
  // attributes, just taken) says it changed since they were checked (another gateway or
  // client of the store wrote it), so they are read again and references to them fault.
  // A file this server changes is checked just before and recorded just after (under its
  // data lock), so its own writes keep their blocks.
  void check_cached_blocks(const Node& node, const struct stat& st);
  // Records st (taken after this server changed node's bytes, under its data lock) as
  // what node's cached blocks are now checked against. Nothing for an unshared store.
  void blocks_checked(const Node& node, const struct stat& st);
  void do_stats(rpc::Reply& r);
  // Fills *out with a sealed reference to the block `pin` holds, for session, exporting
  // the block's segment if needed. False if the block was dropped from the cache meanwhile.
  // REQUIRES: engine running, pin holds file data.
  bool make_ref(const cache::BlockCache::ReadPin& pin, uint64_t block, uint64_t session,
                odafs_ref* out);

  // ---- attribute_ops.cc: one object's attributes ----

  void do_getattr(const rpc::CallContext& ctx, struct getattr_args& a, rpc::Reply& r);
  void do_setattr(const rpc::CallContext& ctx, struct setattr_args& a, rpc::Reply& r);
  void do_access(const rpc::CallContext& ctx, struct access_args& a, rpc::Reply& r);

  // ---- namespace_ops.cc: names and handles ----

  void do_lookup(const rpc::CallContext& ctx, struct diropargs& a, rpc::Reply& r);
  void do_create(const rpc::CallContext& ctx, struct create_args& a, rpc::Reply& r);
  void do_mkdir(const rpc::CallContext& ctx, struct mkdir_args& a, rpc::Reply& r);
  void do_symlink(const rpc::CallContext& ctx, struct symlink_args& a, rpc::Reply& r);
  void do_mknod(const rpc::CallContext& ctx, struct mknod_args& a, rpc::Reply& r);
  void do_remove(const rpc::CallContext& ctx, struct diropargs& a, rpc::Reply& r);
  void do_rmdir(const rpc::CallContext& ctx, struct diropargs& a, rpc::Reply& r);
  // REMOVE (dir_wanted false) and RMDIR.
  void remove_entry(const rpc::CallContext& ctx, struct diropargs& a, rpc::Reply& r,
                    bool dir_wanted);
  void do_rename(const rpc::CallContext& ctx, struct rename_args& a, rpc::Reply& r);
  void do_link(const rpc::CallContext& ctx, struct link_args& a, rpc::Reply& r);
  void do_readdir(const rpc::CallContext& ctx, struct readdir_args& a, rpc::Reply& r);
  // READDIR's plus: the attributes of entry `name` of directory dir, where the server
  // vouches for them (docs/protocol.md), else out->present false.
  void entry_attributes(const Object& dir, const char* name, struct odafs_post_attr* out);
  void do_readlink(const rpc::CallContext& ctx, struct getattr_args& a, rpc::Reply& r);
  void do_fsstat(const rpc::CallContext& ctx, struct getattr_args& a, rpc::Reply& r);
  // Resolves the directory handle of a call on entry `name` in it, like resolve_or_reply;
  // also replies NOTDIR or INVAL and returns nullptr when it is not a directory or name
  // is not a valid entry name.
  OpenNode resolve_dir_or_reply(const char* fh, const char* name, rpc::Reply& r);
  // Replies with a dirop_res for `name` in dir after a create-like call succeeded.
  void reply_dirop(const OpenNode& dir, const char* name, rpc::Reply& r);
  // Replies ODAFS_OK with node's handle and attributes st (a dirop_res).
  void reply_node(const Node& node, const struct stat& st, rpc::Reply& r);
  // Forgets a removed object and drops its cached blocks.
  void forget(const struct stat& st);
  // Sets the size of regular file node (opened writable) and drops the cached blocks it
  // cut or grew over, under the node's data lock; then makes the size stable. Returns 0 or
  // the errno.
  int truncate_file(const OpenNode& node, uint64_t size);
  // Drops the cached blocks of file `id` from the one holding byte `from` through the last
  // block of a file old_size bytes long (block 0 if it was empty): after a size change to
  // `from` (growing within the last block makes that block stale too), or a removal
  // (from = 0).
  void drop_cached_blocks(uint64_t id, uint64_t from, uint64_t old_size);

  // ---- delegation_ops.cc: OPEN, DELEGRETURN and recalls ----

  void do_open(const rpc::CallContext& ctx, struct open_args& a, rpc::Reply& r);
  // Before `connection` opens node (attributes st) with `access` (ODAFS_OPEN_* bits): to
  // write, others' delegations on a regular file are taken back; to read, others' write
  // delegations. False: answer DELAY.
  bool settle_for_open(const Node& node, const struct stat& st, uint32_t access,
                       uint64_t connection);
  // The offset below which the write delegation granted now on node (open as `open`, of
  // attributes *st, refreshed) may keep bytes unsent past a close: the end of the space
  // promised them now, 0 when none could be (docs/protocol.md, "Open delegations").
  uint64_t space_limit(const OpenNode& open, struct stat* st);
  // A write delegation on node ended (or its file is gone): the space promised for it
  // goes back, to the account or, reserved in the store and not written, to the file
  // system (Delegations::WriteEndedFn). REQUIRES: no Node::data.lock held by this thread.
  void release_space(const NodeRef& node);
  // Answers OPEN or CREATE (an open_res) for node, opened with `access` by the caller `as`
  // acts for: its handle, attributes and, on a regular file, a delegation when one can be
  // granted. st: node's attributes, refreshed after a grant.
  void reply_open(const rpc::CallContext& ctx, const IdentityScope& as, const NodeRef& node,
                  uint32_t access, struct stat& st, rpc::Reply& r);
  void do_delegreturn(const rpc::CallContext& ctx, struct delegreturn_args& a, rpc::Reply& r);
  void do_client_id(const rpc::CallContext& ctx, struct client_id_args& a, rpc::Reply& r);
  void do_reclaim_complete(const rpc::CallContext& ctx, rpc::Reply& r);
  // Sends CB_RECALL of delegation id on fh to a connection of holder (Delegations' recall
  // sender).
  bool send_recall(uint64_t holder, const WireHandle& fh, uint64_t id);
  // Drops what the server held for owners ClientOwners gave up on. REQUIRES: naming_mu_.
  void forget_owners(const std::vector<ClientOwners::Forgotten>& forgotten);
  // Delegations::begin_change for the file (or none) that `name` in dir names now.
  // await_writers for the regular file `name` in dir names, if any. Costs nothing more
  // than Delegations::writers_out while no write delegation exists.
  bool await_writers_of_name(const OpenNode& dir, const char* name, uint64_t connection);
  Delegations::Change begin_change_of_name(const OpenNode& dir, const char* name,
                                           uint64_t connection);

  // ---- data_ops.cc: file bytes, through the block cache ----

  void do_read(const rpc::CallContext& ctx, struct read_args& a, rpc::Reply& r);
  void do_write(const rpc::CallContext& ctx, struct write_args& a, rpc::Reply& r);
  void do_commit(const rpc::CallContext& ctx, struct commit_args& a, rpc::Reply& r);
  void do_getrefs(const rpc::CallContext& ctx, struct getrefs_args& a, rpc::Reply& r);
  void do_read_direct(const rpc::CallContext& ctx, struct read_direct_args& a, rpc::Reply& r);
  void do_write_direct(const rpc::CallContext& ctx, struct write_direct_args& a, rpc::Reply& r);
  // A regular file opened for a read procedure: its attributes taken under its data lock,
  // which stays held shared (see Node::data.lock) so that no write is half done in what the
  // caller reads, size included.
  struct ReadableFile {
    OpenNode node;
    struct stat st;
    std::shared_lock<std::shared_mutex> data_lock;
    bool cacheable = true;  // LeaseKeeper::may_cache: false reads the store, uncached
  };
  // Resolves fh for a read by the caller: a regular file it may read now (permission, no
  // other client's write delegation out, a descriptor that reads). ODAFS_OK and *out set,
  // or the status to answer. One fstat while no write delegation is out (the common case):
  // a recall waits with the lock released, then looks again.
  odafs_stat open_for_read(const rpc::CallContext& ctx, const char* fh, ReadableFile* out);
  // ODAFS_OK if the caller may write len bytes at offset of node (a regular file).
  odafs_stat check_write(const rpc::CallContext& ctx, const OpenNode& node, const struct stat& st,
                         uint64_t offset, size_t len);
  // Before the caller changes node's bytes or size: drops the file's setuid bit, and its
  // setgid bit with group-execute (setid_bits_to_drop), unless the caller is privileged
  // (IdentityScope::privileged). The server changes files as root, whose kernel keeps the
  // bits for it (CAP_FSETID), so it drops them itself, as a kernel would for an
  // unprivileged writer. st: the file's attributes, from before. Returns 0 or the errno.
  // REQUIRES: no IdentityScope acting as another caller is active on this thread.
  int drop_setid_bits(const rpc::CallContext& ctx, const OpenNode& node, const struct stat& st);
  // Writes through to the file and the cache, honours `stable`, replies with write_res.
  void write_through(const OpenNode& node, uint64_t offset, odafs_stable_how stable,
                     const char* src, size_t len, rpc::Reply& r);
  // How long a direct write waits for the client's bytes.
  static constexpr int kPullTimeoutMs = 10000;
  // Reads block `index` of file's node into the cache, filling from the file on a miss,
  // and pins it in *pin (or leaves pin->bypass() set: no block to spare, or a file that
  // may not be cached). Fails with the errno of the failed fill.
  Status pin_block(const ReadableFile& file, uint64_t index, uint32_t need,
                   cache::BlockCache::ReadPin* pin);
  // Reopens node to write (NodeTable::make_writable), giving the store's lease on it back
  // first (a writer may hold none). REQUIRES: no data lock held on node.
  Status make_writable(const OpenNode& node);
  // Whether a delegation on node may be granted as far as the store goes: always without
  // leases; otherwise when the server holds (or now takes) the file's lease.
  bool lease_for_delegation(const NodeRef& node, bool write);

  Options options_;
  CallAuthority authority_;
  CpuAccounting* cpu_;
  std::shared_ptr<Store> store_;  // never null
  // Over a shared store without leases only: cached blocks are checked against the file's
  // change time (check_cached_blocks). With leases, blocks live only under a lease, which
  // anyone else's change recalls first (LeaseKeeper), so the checks would be work twice.
  const bool check_change_times_;
  NodeTable nodes_;
  cache::BlockCache cache_;
  // The one-sided engine over the cache arena (segment i is block i); null without ORDMA.
  // Set by start_engine() before serving, then never changed.
  std::unique_ptr<ordma::Engine> engine_;
  int engine_threads_ = 0;  // as started, for STATS
  std::array<unsigned char, 8> write_verf_;
  rpc::Server* server_ = nullptr;
  ClientOwners owners_;  // before delegations_, which asks it for holders
  // Orders the changes of who holds what by owner (CLIENT_ID, RECLAIM_COMPLETE, a
  // connection's close): a client naming itself again never races the close of its last
  // connection. Rare calls; taken before any lock of delegations_ or owners_.
  std::mutex naming_mu_;
  Delegations delegations_;
  Recovery recovery_;
  // The space promised to write delegations' holders; counts only while the store
  // reserves_space() (else no space is promised).
  SpaceAccount space_;
  LeaseKeeper leases_;  // after what it uses; its pins go before nodes_
  std::atomic<uint32_t> next_callback_xid_{1};
  // Refused calls by kind (note_reply): EROFS, EACCES, EPERM, ENOSPC, EDQUOT.
  std::array<std::atomic<uint64_t>, 5> refused_{};
  std::array<LogThrottle, 5> refusal_logs_;  // one line a second per kind
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<size_t> direct_writes_waiting_{0};
  std::atomic<uint64_t> direct_writes_refused_{0};  // over max_direct_writes
  std::atomic<uint64_t> space_reserved_{0};         // promises made by Store::reserve_space
  std::atomic<uint64_t> unlinked_dropped_{0};       // nodes sweep_unlinked let go
  // Twice a second, sweep_unlinked (a local store only). Last: stops first.
  std::unique_ptr<Periodic> unlinked_sweeper_;
  std::unique_ptr<PeerFence> fence_;  // null without Options::peers
};

}  // namespace odafs::server
