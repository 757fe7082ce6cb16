// The open-delegation procedures of FileService: OPEN (LOOKUP that may grant a read or
// write delegation; CREATE answers the same way), DELEGRETURN, and the CB_RECALL callbacks the
// server sends. The table of who holds what is server/delegations.h; the changes that recall
// (WRITE, SETATTR, REMOVE, RENAME, OPEN for writing) call begin_change from their own procedures,
// and the reads (READ, READ_DIRECT, GETATTR, LOOKUP, OPEN) await_writers.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstring>

#include "base/log.h"
#include "base/setid.h"
#include "proto/status.h"
#include "rpc/message_header.h"
#include "server/file_service.h"
#include "server/identity.h"
#include "server/reply_util.h"

namespace odafs::server {

void FileService::do_open(const rpc::CallContext& ctx, open_args& a, rpc::Reply& r) {
  auto fail = [&](odafs_stat status) { reply_status<open_res>(r, xp(xdr_open_res), status); };
  OpenNode dir = resolve_dir_or_reply(a.dir, a.name, r);
  if (!dir) return;
  if ((a.access & ODAFS_OPEN_WRITE) != 0 && authority_.refuses_change(ctx)) {
    return fail(ODAFS_ERR_ROFS);
  }
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  struct stat st;
  if (Status s = store_->stat(dir.object(), &st); !s.ok()) {
    return fail(status_from_errno(s.errno_value()));
  }
  if (!as.permits(st, X_OK)) return fail(ODAFS_ERR_ACCES);
  Result<NodeRef> node = nodes_.lookup(dir, a.name, &st);
  if (!node) return fail(status_from_errno(node.errno_value()));
  if (!settle_for_open(**node, st, a.access, ctx.connection)) return fail(ODAFS_ERR_DELAY);
  reply_open(ctx, as, *node, a.access, st, r);
}

bool FileService::settle_for_open(const Node& node, const struct stat& st, uint32_t access,
                                  uint64_t connection) {
  if (!S_ISREG(st.st_mode)) return true;
  // Opening to write conflicts with others' delegations: take them back now, so that
  // their holders stop trusting their copies before this client starts writing.
  if ((access & ODAFS_OPEN_WRITE) != 0) {
    return !delegations_.begin_change(node.id, connection).delayed();
  }
  return delegations_.await_writers(node.id, connection);  // another's write delegation
}

void FileService::reply_open(const rpc::CallContext& ctx, const IdentityScope& as,
                             const NodeRef& node, uint32_t access, struct stat& st, rpc::Reply& r) {
  const WireHandle fh = nodes_.handle_of(*node);
  open_res res{};
  const bool write = (access & ODAFS_OPEN_WRITE) != 0;
  // A write delegation only for a caller who may read too: its holder serves later opens
  // for reading from what it holds. None on a file whose setuid/setgid bits a write drops:
  // the server drops them when the bytes arrive, which must not wait for a recall.
  // None in a grace period (a reclaimer's write-back must find no one holding the file).
  // A write one only for a client named in the recovery record, which lets it reclaim
  // what it keeps after a restart; otherwise a read one.
  // Over a shared store, only under the store's lease (LeaseKeeper), a write one under a
  // write lease, checked again after the grant: a recall that began before it has
  // cleared the lease.
  Delegations::Grant g;
  if (S_ISREG(st.st_mode) && options_.delegations && (access & ODAFS_OPEN_READ) != 0 &&
      as.permits(st, write ? R_OK | W_OK : R_OK) && !recovery_.in_grace()) {
    const bool may_write =
        write && setid_bits_to_drop(st.st_mode) == 0 && recovery_.may_hold_writes(ctx.connection);
    if ((may_write || !write) && lease_for_delegation(node, may_write)) {
      g = delegations_.grant(node, ctx.connection, fh, may_write);
    }
    if (g.id != 0 && !leases_.holds(*node)) {
      delegations_.returned(node->id, ctx.connection, g.id);
      g = {};
    }
  }
  if (S_ISREG(st.st_mode)) {
    // The attributes answered are from after the grant (a change that slipped in between
    // the lookup and the grant recalled nothing) and after the write-backs of the recalls
    // settle_for_open waited for: the opener starts from the size they made.
    Result<OpenNode> open = nodes_.open(node);
    if (!open || !store_->stat(open->object(), &st).ok()) {
      if (g.id != 0) delegations_.returned(node->id, ctx.connection, g.id);
    } else if (g.id != 0) {
      res.open_res_u.ok.delegation = g.id;
      res.open_res_u.ok.delegation_kind = g.write ? ODAFS_DELEG_WRITE : ODAFS_DELEG_READ;
      if (g.write) res.open_res_u.ok.space_limit = space_limit(*open, &st);
      // Others' references to the file's blocks go: their one-sided reads would bypass
      // the recall a READ makes, and miss what the holder keeps unsent.
      if (g.new_write && st.st_size > 0) {
        drop_cached_blocks(node->id, 0, static_cast<uint64_t>(st.st_size));
      }
    }
  }
  res.status = ODAFS_OK;
  std::memcpy(res.open_res_u.ok.fh, fh.data(), fh.size());
  fill_attr(st, node->file_generation, &res.open_res_u.ok.attr);
  res.open_res_u.ok.lease_ms = static_cast<u_int>(delegations_.lease_ms());
  r.send(xp(xdr_open_res), &res);
}

bool FileService::lease_for_delegation(const NodeRef& node, bool write) {
  if (!leases_.active()) return true;
  Result<OpenNode> open = nodes_.open(node);
  if (!open || !open->readable()) return false;
  return write ? leases_.may_delegate_writes(*open) : leases_.may_cache(*open);
}

// The space rule. A write delegation's holder keeps unsent past a close at most one run,
// and only below space_limit (client/delegations.h): the server holds
// [size, size + delegated_space) for it at each grant, so its write-back cannot meet a disk
// that later files filled. Held one of two ways:
//   - by the server's accounting (SpaceAccount, server/space_account.h), while the file
//     system has the margin free beyond every promise: no system call, and every write the
//     server makes outside the promises is refused with ENOSPC before it eats into them
//     (write_through);
//   - otherwise by the store (Store::reserve_space: fallocate KEEP_SIZE), which holds
//     against anyone, writers outside odafsd included; only while the disk has room for two
//     such runs per write delegation held, so that what is reserved stays under about half
//     of the free space and writers without a delegation still find room.
// A sparse file is promised nothing (a kept run over a hole would need blocks the promise
// does not cover; the store looks for holes, Store::has_hole, since blocks reserved past
// the end by earlier grants hide them from st_blocks: test_fsx found one so), nor is anyone
// when the store cannot reserve: every close then sends its bytes, and a full disk fails
// the write(), fsync() or close() of the file that met it. A run over the file's written
// bytes needs no blocks (on a file system that overwrites in place).
//
// Promises and their release are ordered by Node::data.lock held exclusively, as every
// change of the file's size through the server is (write_through, truncate_file): the
// release reads the size and frees what lies past it with no write able to extend the
// file between the two. And a release frees nothing while a write delegation on the file
// is held (checked under the lock): its grant came before its promise, so a release
// either sees the holder, or runs wholly before the promise takes the lock. A renewal
// keeps the kind of promise the file has and moves it to the size now.
uint64_t FileService::space_limit(const OpenNode& open, struct stat* st) {
  if (!store_->reserves_space()) return 0;
  const uint64_t size = static_cast<uint64_t>(st->st_size);
  if (static_cast<uint64_t>(st->st_blocks) * 512 < size) return 0;  // sparse
  if (size != 0) {  // blocks reserved past the end hide a hole from st_blocks: look
    if (!nodes_.make_readable(open).ok()) return 0;
    Result<bool> hole = store_->has_hole(open.object(), size);
    if (!hole.ok() || *hole) return 0;
  }
  const uint64_t reserve = options_.delegated_space;
  if (reserve == 0) return 0;
  {
    std::unique_lock locked(open->data.lock);
    FileNodeState::SpacePromise& p = open->data.space;
    if (p.to != 0 && p.by_account) {
      p.from = size;
      p.to = size + reserve;
      return p.to;
    }
    if (p.to == 0 && space_.promise(reserve)) {
      p = {size, size + reserve, true};
      return p.to;
    }
  }
  struct statvfs vfs;
  if (!store_->statfs(open.object(), &vfs).ok()) return 0;
  const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (avail < 2 * (delegations_.writers() + 1) * reserve) return 0;
  if (!make_writable(open).ok()) return 0;
  std::unique_lock locked(open->data.lock);
  if (open->data.space.by_account) return 0;  // promised meanwhile by a renewal: that one holds
  // ENOSPC, EDQUOT: no room to promise; EOPNOTSUPP: a file system without fallocate. What a
  // failed reservation did allocate goes back when the delegation ends: it is recorded, as
  // an empty range (it covers no write). The reservation cannot take what the accounting
  // promised: that is at most one run per write delegation held, and the check above left
  // room for two each.
  open->data.space = {size + reserve, size + reserve, false};
  const bool reserved = store_->reserve_space(open.object(), size, reserve).ok();
  space_.allocated(reserve);  // all of it, a failed one too: on the safe side
  if (!reserved) return 0;
  open->data.space.from = size;
  space_reserved_.fetch_add(1, std::memory_order_relaxed);
  // The opener starts from the attributes after it (its change time moved).
  (void)store_->stat(open.object(), st);
  return size + reserve;
}

void FileService::release_space(const NodeRef& node) {
  {
    std::unique_lock locked(node->data.lock);
    if (delegations_.write_held_on(node->id)) return;  // a new holder's space (the rule above)
    if (node->data.space.to == 0) return;              // none was promised or reserved
    if (node->data.space.by_account) {
      const uint64_t promised = node->data.space.to - node->data.space.from;
      node->data.space = {};
      space_.unpromise(promised);
      return;
    }
  }
  Result<OpenNode> open = nodes_.open(node);
  if (!open) return;  // no descriptor to be had: freed at the file's truncation or removal
  std::unique_lock locked(node->data.lock);
  if (delegations_.write_held_on(node->id)) return;
  node->data.space = {};
  if (Status s = store_->release_space(open->object()); !s.ok()) {
    ODAFS_LOG_WARN_THROTTLED("delegations: giving back space held for a write delegation: %s",
                             s.to_string().c_str());
  }
}

void FileService::do_delegreturn(const rpc::CallContext& ctx, delegreturn_args& a, rpc::Reply& r) {
  Result<NodeRef> node = nodes_.resolve(reinterpret_cast<const unsigned char*>(a.fh));
  // INVAL: not held (expired, or never granted); a write delegation's holder learns that
  // its writes came back late. A handle gone stale has nothing left to return: OK.
  const bool held = !node || delegations_.returned((*node)->id, ctx.connection, a.delegation);
  reply_status<stat_res>(r, xp(xdr_stat_res), held ? ODAFS_OK : ODAFS_ERR_INVAL);
}

// Who holds what by owner. A client naming itself again, on a new connection, finds what
// the server kept for it (its write delegations while it was away): it may write back what
// it kept, as after a restart, and its RECLAIM_COMPLETE then ends those delegations (the
// client dropped its own entries for them; its new mount starts afresh).
void FileService::do_client_id(const rpc::CallContext& ctx, client_id_args& a, rpc::Reply& r) {
  ClientOwners::Owner owner;
  std::memcpy(owner.data(), a.owner, owner.size());
  client_id_res res{};
  {
    std::lock_guard naming(naming_mu_);
    std::vector<ClientOwners::Forgotten> forgotten;
    Result<ClientOwners::Joined> named =
        owners_.join(ctx.connection, owner, authority_.principal(ctx),
                     ctx.peer != nullptr ? *ctx.peer : "", &forgotten);
    forget_owners(forgotten);
    Result<Recovery::Joined> j =
        named ? recovery_.join(ctx.connection, owner) : Result<Recovery::Joined>(named.status());
    res.status = j ? ODAFS_OK : status_from_errno(j.errno_value());
    if (j) {
      // Over a shared store, any client may write back what it kept: its write
      // delegations may have been another gateway's, which is gone (docs/ceph.md).
      res.client_id_res_u.ok.reclaim = j->reclaim || named->known || leases_.active();
      res.client_id_res_u.ok.kept = named->known && !j->reclaim;
      res.client_id_res_u.ok.grace_ms = j->grace_ms;
    }
  }
  r.send(xp(xdr_client_id_res), &res);
}

void FileService::do_reclaim_complete(const rpc::CallContext& ctx, rpc::Reply& r) {
  {
    std::lock_guard naming(naming_mu_);
    recovery_.reclaim_complete(ctx.connection);
    const uint64_t holder = owners_.holder_of(ctx.connection);
    if ((holder & Delegations::kNamedHolder) != 0) delegations_.drop_holder(holder);
  }
  reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_OK);
}

void FileService::connection_closed(uint64_t connection) {
  std::lock_guard naming(naming_mu_);
  std::vector<ClientOwners::Forgotten> forgotten;
  const ClientOwners::Closed c = owners_.closed(connection, &forgotten);
  recovery_.connection_closed(connection);
  if (!c.named) {
    delegations_.drop_holder(c.holder);
  } else if (c.away && !delegations_.holder_away(c.holder)) {
    // Away holding nothing: nothing to come back for.
    ClientOwners::Owner owner;
    if (owners_.forget_if_away(c.holder, &owner)) recovery_.forget(owner);
  }
  forget_owners(forgotten);
}

void FileService::forget_owners(const std::vector<ClientOwners::Forgotten>& forgotten) {
  for (const ClientOwners::Forgotten& f : forgotten) {
    ODAFS_LOG_WARN(
        "a client away for over %lld ms (or the longest away of too many) loses its "
        "delegations: coming back, it may not reclaim, and reports what it kept as lost",
        static_cast<long long>(owners_.away_ms()));
    delegations_.drop_holder(f.holder);
    recovery_.forget(f.owner);
  }
}

bool FileService::send_recall(uint64_t holder, const WireHandle& fh, uint64_t id) {
  const uint64_t connection = owners_.connection_of(holder);
  if (server_ == nullptr || connection == 0) return false;
  cb_recall_args args{};
  std::memcpy(args.fh, fh.data(), fh.size());
  args.delegation = id;
  thread_local std::vector<char> record;
  rpc::CallSpec spec{next_callback_xid_.fetch_add(1, std::memory_order_relaxed),
                     ODAFS_CB_PROGRAM,
                     ODAFS_CB_V1,
                     ODAFSCBPROC_RECALL,
                     {}};
  Result<size_t> n = rpc::encode_call_record(spec, xp(xdr_cb_recall_args), &args, 4096, &record);
  return n.ok() && server_->send_to_connection(connection, record.data(), *n);
}

Delegations::Change FileService::begin_change_of_name(const OpenNode& dir, const char* name,
                                                      uint64_t connection) {
  struct stat st;
  uint64_t id = 0;
  if (store_->stat_at(dir.object(), name, &st).ok() && S_ISREG(st.st_mode)) {
    id = nodes_.node_id_of(nodes_.key_of(st));
  }
  // Node ids start at 1: id 0 is nobody's, so its Change never waits.
  return delegations_.begin_change(id, connection);
}

bool FileService::await_writers_of_name(const OpenNode& dir, const char* name,
                                        uint64_t connection) {
  if (!delegations_.writers_out()) return true;  // none anywhere: no stat
  struct stat st;
  if (!store_->stat_at(dir.object(), name, &st).ok() || !S_ISREG(st.st_mode)) return true;
  return delegations_.await_writers(nodes_.node_id_of(nodes_.key_of(st)), connection);
}

}  // namespace odafs::server
