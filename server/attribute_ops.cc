// The attribute procedures of FileService: GETATTR, SETATTR and ACCESS. They read and
// change one object's attributes by its node's descriptor, as the caller under --auth-sys
// (IdentityScope); a truncation drops the cached blocks it makes stale (namespace_ops.cc's
// truncate_file).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "proto/enums.h"
#include "proto/status.h"
#include "server/file_service.h"
#include "server/identity.h"
#include "server/reply_util.h"

namespace odafs::server {

void FileService::do_getattr(const rpc::CallContext& ctx, getattr_args& a, rpc::Reply& r) {
  struct stat st;
  OpenNode node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  if (delegations_.writers_out() && S_ISREG(st.st_mode)) {
    // Another's write delegation: its holder writes back first, and the size is then new.
    if (!delegations_.await_writers(node->id, ctx.connection)) {
      return reply_status<attr_res>(r, xp(xdr_attr_res), ODAFS_ERR_DELAY);
    }
    if (Status s = store_->stat(node.object(), &st); !s.ok()) {
      return reply_status<attr_res>(r, xp(xdr_attr_res), status_from_errno(s.errno_value()));
    }
  }
  reply_attr(*node, st, r);
}

void FileService::do_setattr(const rpc::CallContext& ctx, setattr_args& a, rpc::Reply& r) {
  if (!valid(a.atime.how) || !valid(a.mtime.how)) {
    return reply_status<attr_res>(r, xp(xdr_attr_res), ODAFS_ERR_INVAL);
  }
  struct stat st;
  OpenNode node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  // Delegation holders trust cached attributes too: any change takes them back.
  Delegations::Change change = delegations_.begin_change(node->id, ctx.connection);
  if (change.delayed()) return reply_status<attr_res>(r, xp(xdr_attr_res), ODAFS_ERR_DELAY);
  if (odafs_stat s = change.waited() ? stat_node(node, &st) : ODAFS_OK; s != ODAFS_OK) {
    return reply_status<attr_res>(r, xp(xdr_attr_res), s);
  }
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  int err = 0;
  if (a.mode.set && err == 0) {
    if (as.active() && as.permits(st, 0) && st.st_uid != ctx.cred->uid && ctx.cred->uid != 0) {
      err = EPERM;
    } else {
      AttrChange chmod;
      chmod.set_mode = true;
      chmod.mode = a.mode.odafs_set_u32_u.value & 07777;
      err = store_->set_attributes(node.object(), chmod).errno_value();  // EOPNOTSUPP: a symlink
    }
  }
  if (a.size.set && err == 0) {
    u_quad_t size = a.size.odafs_set_u64_u.value;
    if (!S_ISREG(st.st_mode)) {
      err = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    } else if (!IdentityScope::permits_data(ctx.cred, options_.act_as_callers, st, W_OK)) {
      err = EACCES;
    } else if (size > static_cast<u_quad_t>(INT64_MAX)) {
      err = EFBIG;
    } else if (Status w = make_writable(node); !w.ok()) {
      err = w.errno_value() == EBADF ? EACCES : w.errno_value();
    } else {
      // Acting as an unprivileged caller, the kernel drops setuid/setgid bits at the
      // ftruncate itself; acting as the server (root), it keeps them, so drop them here
      // (unless the same call set the mode: that mode is what the caller asked for).
      if (!as.active() && !a.mode.set) err = drop_setid_bits(ctx, node, st);
      if (err == 0) err = truncate_file(node, size);
    }
  }
  if ((a.uid.set || a.gid.set) && err == 0) {
    // The kernel judges the change as the caller (CAP_CHOWN only for root; the owner may
    // give the file a group of its own) and drops setuid/setgid bits as chown(2) does.
    // Of the object: a symlink's own owner changes (lchown), as the protocol says.
    AttrChange chown;
    chown.set_owner = true;
    chown.uid = a.uid.set ? a.uid.odafs_set_u32_u.value : static_cast<uid_t>(-1);
    chown.gid = a.gid.set ? a.gid.odafs_set_u32_u.value : static_cast<gid_t>(-1);
    err = store_->set_attributes(node.object(), chown).errno_value();
  }
  if ((a.atime.how != ODAFS_TIME_DONT_CHANGE || a.mtime.how != ODAFS_TIME_DONT_CHANGE) &&
      err == 0) {
    AttrChange touch;
    touch.set_times = true;
    timespec* times = touch.times;
    const odafs_set_time* in[2] = {&a.atime, &a.mtime};
    for (int i = 0; i < 2; ++i) {
      if (in[i]->how == ODAFS_TIME_DONT_CHANGE) {
        times[i] = {0, UTIME_OMIT};
      } else if (in[i]->how == ODAFS_TIME_SERVER) {
        times[i] = {0, UTIME_NOW};
      } else {
        times[i] = {static_cast<time_t>(in[i]->odafs_set_time_u.time.seconds),
                    static_cast<long>(in[i]->odafs_set_time_u.time.nseconds % 1000000000u)};
      }
    }
    err = store_->set_attributes(node.object(), touch).errno_value();
  }
  if (err == 0) err = store_->stat(node.object(), &st).errno_value();
  if (err != 0) return reply_status<attr_res>(r, xp(xdr_attr_res), status_from_errno(err));
  reply_attr(*node, st, r);
}

void FileService::do_access(const rpc::CallContext& ctx, access_args& a, rpc::Reply& r) {
  struct stat st;
  OpenNode node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  access_res res{};
  res.status = ODAFS_OK;
  unsigned want = a.want & (ODAFS_ACCESS_READ | ODAFS_ACCESS_WRITE | ODAFS_ACCESS_EXEC);
  if (authority_.read_only(ctx)) want &= ~static_cast<unsigned>(ODAFS_ACCESS_WRITE);
  // The store decides, as the caller (on a local export the kernel, with the scope's fs
  // ids, so ACLs and a read-only mount count too); a symlink's own bits are all set.
  static_assert(ODAFS_ACCESS_READ == R_OK && ODAFS_ACCESS_WRITE == W_OK &&
                ODAFS_ACCESS_EXEC == X_OK);
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  res.access_res_u.granted =
      static_cast<u_int>(store_->access(node.object(), static_cast<int>(want)));
  r.send(xp(xdr_access_res), &res);
}

}  // namespace odafs::server
