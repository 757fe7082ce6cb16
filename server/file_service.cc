// FileService's construction and its glue: to the RPC server (the procedure table,
// resolving handles, STATS) and to the one-sided engine (the export table hooks on the
// cache, starting the engine, sealing references to cache blocks). The procedures
// themselves are in namespace_ops.cc, attribute_ops.cc and data_ops.cc.
#include "server/file_service.h"

#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "base/log.h"
#include "proto/procedures.h"
#include "proto/ref_xdr.h"
#include "proto/status.h"
#include "server/reply_util.h"
#include "server/store_impl/posix_store.h"

namespace odafs::server {
namespace {

// The store of options: the given one, or the local directory export_root.
std::shared_ptr<Store> store_of(const FileService::Options& options) {
  if (options.store) return options.store;
  Result<std::unique_ptr<PosixStore>> local =
      PosixStore::open_export(options.export_root, options.env);
  if (!local) {
    throw std::system_error(local.errno_value(), std::generic_category(), local.status().message());
  }
  return std::move(local).value();
}

// The procedure P (proto/procedures.h) decoding its arguments and running handler Fn of
// self, whose argument type must be P's: one line of register_procedures' table.
template <uint32_t P, auto Fn>
rpc::ProcedureFn bind_procedure(FileService* self) {
  using Args = typename wire::Procedure<P>::Args;
  return rpc::typed_procedure<Args>(
      xp(wire::Procedure<P>::xargs),
      [self](const rpc::CallContext& c, Args& a, rpc::Reply& r) { (self->*Fn)(c, a, r); });
}

// A line of the table: the procedure's number, name and flags come from its trait.
struct ProcedureEntry {
  uint32_t proc;
  const char* name;
  rpc::ProcedureFn (*bind)(FileService*);
  uint32_t flags;
};
template <uint32_t P, auto Fn>
constexpr ProcedureEntry entry() {
  return {P, wire::Procedure<P>::kName, &bind_procedure<P, Fn>, wire::Procedure<P>::kFlags};
}

}  // namespace

FileService::FileService(Options options, CpuAccounting* cpu)
    : options_(std::move(options)),
      authority_(options_.access),
      cpu_(cpu),
      store_(store_of(options_)),
      check_change_times_(store_->shared() && !store_->leases()),
      nodes_(*store_, options_.max_nodes, options_.max_open_files,
             options_.handle_key ? &*options_.handle_key : nullptr),
      cache_(cache::BlockCache::Options{options_.cache_bytes, options_.block_size}),
      // An away client's state lasts twelve leases (a minute at the default lease): long
      // enough to ride out a cut connection, short enough that what it pins goes.
      owners_(ClientOwners::Options{.away_ms = int64_t{12} * options_.lease_ms,
                                    .max_owners = options_.recovery_max_owners}),
      delegations_(
          Delegations::Options{.lease_ms = options_.lease_ms,
                               .wait_ms = std::min(options_.lease_ms, 1000),
                               .max_waiters = options_.max_delegation_waiters,
                               .cooldown_ms = options_.lease_ms},
          [this](uint64_t holder, const WireHandle& fh, uint64_t id) {
            return send_recall(holder, fh, id);
          },
          store_->reserves_space()
              ? Delegations::WriteEndedFn([this](const NodeRef& n) { release_space(n); })
              : nullptr,
          [this](uint64_t connection) { return owners_.holder_of(connection); }),
      recovery_(Recovery::Options{options_.recovery_record, options_.grace_ms,
                                  options_.recovery_max_owners}),
      space_(SpaceAccount::Options{.margin_bytes = options_.space_margin_bytes},
             [this](struct statvfs* out) {
               Result<OpenNode> root = nodes_.open(nodes_.root());  // always open
               return root && store_->statfs(root->object(), out).ok();
             }),
      leases_(*store_, nodes_, delegations_, cache_,
              // Each lease keeps its file open: most of the open files may be leased ones.
              LeaseKeeper::Options{.max_leases =
                                       std::max<size_t>(nodes_.max_open_files() * 3 / 4, 1)}) {
  if (RAND_bytes(write_verf_.data(), static_cast<int>(write_verf_.size())) != 1) {
    throw std::runtime_error("RAND_bytes failed: no write verifier");
  }
  if (check_change_times_) {
    // A delegation promises that no one changes the file unseen; over a shared store
    // others do, unless the store's leases back ours (docs/ceph.md).
    options_.delegations = false;
    ODAFS_LOG_INFO(
        "%s export without leases: no delegations; cached blocks are checked "
        "against the file's change time",
        store_->kind());
  }
  // Revoke before a block's memory is reused; lock it while its bytes change. Both hooks
  // cost an atomic store or two when no one-sided read is copying the block.
  // engine_ is set before serving starts and never changes after.
  cache_.set_evict_hook([this](const cache::Block& b) {
    if (engine_) engine_->revoke(b.segment);
  });
  cache_.set_modify_hooks(
      [this](const cache::Block& b) {
        if (engine_) engine_->begin_write(b.segment);
      },
      [this](const cache::Block& b) {
        if (engine_) engine_->end_write(b.segment);
      });
  // A shared store's files are deleted by others all the time, and a stat there is a
  // network call: its sweep is the store's leases' business (docs/ceph.md).
  if (!store_->shared()) {
    unlinked_sweeper_ =
        std::make_unique<Periodic>(std::chrono::milliseconds(500), [this] { sweep_unlinked(); });
  }
  if (!options_.peers.empty()) {
    fence_ = std::make_unique<PeerFence>(
        PeerFence::Options{.peers = options_.peers},
        [store = store_](const std::string& peer, int64_t opened_before_ms) {
          return store->evict_peer_sessions(peer, opened_before_ms);
        });
  }
}

void FileService::sweep_unlinked() {
  for (const NodeTable::Unlinked& gone : nodes_.drop_unlinked()) {
    unlinked_dropped_.fetch_add(1, std::memory_order_relaxed);
    delegations_.file_gone(gone.id);
    if (gone.type == S_IFREG && gone.size > 0) drop_cached_blocks(gone.id, 0, gone.size);
  }
}

void FileService::start_engine(const ordma::EngineOptions& options) {
  ordma::ExportedMemory memory{cache_.arena(), cache_.block_size(), cache_.block_count()};
  engine_ = ordma::make_engine(options, memory);
  engine_threads_ = options.threads;
  engine_->start();
}

void FileService::stop_engine() {
  if (engine_) engine_->stop();
}

bool FileService::make_ref(const cache::BlockCache::ReadPin& pin, uint64_t block, uint64_t session,
                           odafs_ref* out) {
  uint32_t seg = pin.segment();
  ordma::Reference r;
  if (!engine_->export_segment(seg, pin.valid(), session, &r)) return false;
  // An invalidation (truncate, remove) may drop a pinned block: it bumps the block's
  // identity, then revokes. Checking the identity after exporting catches a drop that our
  // export could have undone; a later drop's revocation overrules the export anyway.
  if (!pin.still_mapped()) {
    engine_->revoke(seg);
    return false;
  }
  *out = ordma::reference_to_wire(r, block);
  return true;
}

odafs_stat FileService::open_handle(const char* fh, OpenNode* out) {
  Result<OpenNode> node = nodes_.open(reinterpret_cast<const unsigned char*>(fh));
  if (!node) {
    int err = node.errno_value();
    return err == kBadHandle ? ODAFS_ERR_BADHANDLE : status_from_errno(err);
  }
  *out = std::move(node).value();
  return ODAFS_OK;
}

odafs_stat FileService::stat_node(const OpenNode& node, struct stat* st) {
  if (Status s = store_->stat(node.object(), st); !s.ok())
    return status_from_errno(s.errno_value());
  if (st->st_nlink == 0) return ODAFS_ERR_STALE;  // removed since the handle was handed out
  if (check_change_times_ && S_ISREG(st->st_mode)) check_cached_blocks(*node, *st);
  return ODAFS_OK;
}

namespace {
int64_t change_time_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
}
}  // namespace

void FileService::check_cached_blocks(const Node& node, const struct stat& st) {
  const int64_t now = change_time_ns(st);
  const int64_t seen = node.data.blocks_checked_at.load(std::memory_order_acquire);
  if (seen == now) return;  // the common case: one compare
  // Dropped before `now` is published: a thread that sees it finds no older block left
  // (threads that race here each drop them; that is harmless). A node's id is new to
  // this server, so a node never checked has no blocks yet.
  if (seen != FileNodeState::kNeverChecked) cache_.invalidate(node.id, 0, UINT64_MAX);
  node.data.blocks_checked_at.store(now, std::memory_order_release);
}

void FileService::blocks_checked(const Node& node, const struct stat& st) {
  if (check_change_times_)
    node.data.blocks_checked_at.store(change_time_ns(st), std::memory_order_release);
}

OpenNode FileService::resolve_or_reply(const char* fh, rpc::Reply& r, struct stat* st) {
  OpenNode node;
  odafs_stat status = open_handle(fh, &node);
  if (status == ODAFS_OK) status = stat_node(node, st);
  if (status == ODAFS_OK) return node;
  // Every result type starts with the status; a bare stat_res encodes identically.
  stat_res res{status};
  r.send(xp(xdr_stat_res), &res);
  return {};
}

void FileService::register_procedures(rpc::Server* server, const AddProcedure& add) {
  server_ = server;
  // What each flag asks of a call before it runs: proto/procedures.h. The handlers' own
  // checks are theirs (WRITE_DIRECT's and OPEN's of a read-only client).
  using F = FileService;
  static constexpr ProcedureEntry kProcedures[] = {
      entry<ODAFSPROC_CLIENT_ID, &F::do_client_id>(),
      entry<ODAFSPROC_GETATTR, &F::do_getattr>(),
      entry<ODAFSPROC_SETATTR, &F::do_setattr>(),
      entry<ODAFSPROC_LOOKUP, &F::do_lookup>(),
      entry<ODAFSPROC_CREATE, &F::do_create>(),
      entry<ODAFSPROC_MKDIR, &F::do_mkdir>(),
      entry<ODAFSPROC_REMOVE, &F::do_remove>(),
      entry<ODAFSPROC_RMDIR, &F::do_rmdir>(),
      entry<ODAFSPROC_RENAME, &F::do_rename>(),
      entry<ODAFSPROC_LINK, &F::do_link>(),
      entry<ODAFSPROC_ACCESS, &F::do_access>(),
      entry<ODAFSPROC_READDIR, &F::do_readdir>(),
      entry<ODAFSPROC_READLINK, &F::do_readlink>(),
      entry<ODAFSPROC_SYMLINK, &F::do_symlink>(),
      entry<ODAFSPROC_MKNOD, &F::do_mknod>(),
      entry<ODAFSPROC_READ, &F::do_read>(),
      entry<ODAFSPROC_WRITE, &F::do_write>(),
      entry<ODAFSPROC_COMMIT, &F::do_commit>(),
      entry<ODAFSPROC_FSSTAT, &F::do_fsstat>(),
      entry<ODAFSPROC_GETREFS, &F::do_getrefs>(),
      entry<ODAFSPROC_READ_DIRECT, &F::do_read_direct>(),
      entry<ODAFSPROC_WRITE_DIRECT, &F::do_write_direct>(),
      entry<ODAFSPROC_OPEN, &F::do_open>(),
      entry<ODAFSPROC_DELEGRETURN, &F::do_delegreturn>(),
  };
  // NULL and STATS take no arguments.
  add(ODAFSPROC_NULL, "NULL", [](const rpc::CallContext&, XDR*, rpc::Reply& r) {
    r.results();
    return true;
  });
  for (const ProcedureEntry& e : kProcedures) {
    rpc::ProcedureFn fn = e.bind(this);
    if ((e.flags & wire::kChanges) != 0) {
      fn = [this, fn = std::move(fn)](const rpc::CallContext& c, XDR* in, rpc::Reply& r) {
        if (!authority_.refuses_change(c)) return fn(c, in, r);
        reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_ROFS);
        return true;
      };
    }
    if ((e.flags & wire::kMovesNames) != 0) {
      // In a grace period no one, reclaimers included, takes a file from its path: the
      // record names owners, not their files, so a reclaimer's REMOVE or RENAME could move
      // the file another reclaimer's write-back will look up by that path, and its kept
      // bytes would be lost (the restart soak's "no longer at its path"). Clients wait
      // GRACE out as DELAY; it ends with the last reclaimer's RECLAIM_COMPLETE.
      fn = [this, fn = std::move(fn)](const rpc::CallContext& c, XDR* in, rpc::Reply& r) {
        if (!recovery_.in_grace()) return fn(c, in, r);
        reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_GRACE);
        return true;
      };
    }
    if ((e.flags & wire::kServedInGrace) == 0) {
      fn = [this, fn = std::move(fn)](const rpc::CallContext& c, XDR* in, rpc::Reply& r) {
        if (!recovery_.holds_back(c.connection)) return fn(c, in, r);
        reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_GRACE);
        return true;
      };
    }
    add(e.proc, e.name, std::move(fn));
  }
  add(ODAFSPROC_RECLAIM_COMPLETE, "RECLAIM_COMPLETE",
      [this](const rpc::CallContext& c, XDR*, rpc::Reply& r) {
        do_reclaim_complete(c, r);
        return true;
      });
  add(ODAFSPROC_STATS, "STATS", [this](const rpc::CallContext&, XDR*, rpc::Reply& r) {
    do_stats(r);
    return true;
  });
}

void FileService::do_stats(rpc::Reply& r) {
  const std::vector<std::pair<std::string, uint64_t>> values = counters();
  std::vector<odafs_counter> counters(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    counters[i].name = const_cast<char*>(values[i].first.c_str());
    counters[i].value = values[i].second;
  }
  stats_res res{};
  res.counters.counters_len = static_cast<u_int>(counters.size());
  res.counters.counters_val = counters.data();
  r.send(xp(xdr_stats_res), &res);
}

namespace {

// The refusals note_reply counts and logs, in refused_'s order.
struct Refusal {
  odafs_stat status;
  const char* name;   // the counter's: "refused.EROFS"
  const char* words;  // the log line's
};
constexpr Refusal kRefusals[] = {
    {ODAFS_ERR_ROFS, "EROFS", "read-only"},
    {ODAFS_ERR_ACCES, "EACCES", "permission denied (EACCES)"},
    {ODAFS_ERR_PERM, "EPERM", "not permitted (EPERM)"},
    {ODAFS_ERR_NOSPC, "ENOSPC", "no space left (ENOSPC)"},
    {ODAFS_ERR_DQUOT, "EDQUOT", "over quota (EDQUOT)"},
};

}  // namespace

void FileService::note_reply(const rpc::CallContext& ctx, const char* name, uint32_t status) {
  for (size_t i = 0; i < std::size(kRefusals); ++i) {
    if (status != static_cast<uint32_t>(kRefusals[i].status)) continue;
    refused_[i].fetch_add(1, std::memory_order_relaxed);
    // One throttle per kind: a flood of one does not hide the others.
    if (uint64_t held = 0; refusal_logs_[i].allow(&held)) {
      ODAFS_LOG_WARN("%s of %s (uid %u) on %s refused: %s [%llu more like this not logged]", name,
                     ctx.peer != nullptr ? ctx.peer->c_str() : "?",
                     ctx.cred != nullptr ? ctx.cred->uid : 0, options_.export_root.c_str(),
                     kRefusals[i].words, static_cast<unsigned long long>(held));
    }
    return;
  }
}

std::vector<std::pair<std::string, uint64_t>> FileService::counters() {
  std::vector<std::pair<std::string, uint64_t>> values;
  // Each component reports under its own names; the prefix says whose they are.
  auto under = [&values](const char* prefix) {
    return CounterSink([&values, prefix](const char* name, uint64_t value) {
      values.emplace_back(std::string(prefix) + name, value);
    });
  };
  const CounterSink own = under("");
  server_->report_calls(under("calls."));
  server_->report_counters(under("rpc."));
  authority_.report_counters(under("auth."));
  for (size_t i = 0; i < refused_.size(); ++i) {
    values.emplace_back(std::string("refused.") + kRefusals[i].name, refused_[i].load());
  }
  own("io.bytes_read", bytes_read_.load());
  own("io.bytes_written", bytes_written_.load());
  cache_.report_counters(under("cache."));
  if (leases_.active()) leases_.report_counters(under("leases."));
  if (fence_) fence_->report_counters(under("fence."));
  nodes_.report_counters(under("nodes."));
  own("nodes.unlinked_dropped", unlinked_dropped_.load());
  own("direct_writes.refused_busy", direct_writes_refused_.load());
  own("direct_writes.waiting", direct_writes_waiting_.load());
  delegations_.report_counters(under("delegations."));
  space_.report_counters(under("space."));
  own("space.reserved", space_reserved_.load());
  recovery_.report_counters(under("recovery."));
  owners_.report_counters(under("owners."));
  if (engine_) {
    engine_->report_counters(under("engine."));
    own("engine.threads", static_cast<uint64_t>(engine_threads_));
  }
  uint64_t total = 0;
  for (const auto& [group, us] : cpu_->usage_us()) {
    values.emplace_back("cpu_us." + group, us);
    total += us;
  }
  own("cpu_us.total", total);
  return values;
}

}  // namespace odafs::server
