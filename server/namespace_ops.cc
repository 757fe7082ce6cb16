// The namespace procedures of FileService: MOUNT, LOOKUP, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE,
// RMDIR, RENAME, LINK, READDIR, READLINK, FSSTAT. They work on names and handles through
// the node table; file bytes are the data path's (data_ops.cc), which they touch only to
// drop cached blocks a truncation or removal makes stale.
#include <dirent.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/log.h"
#include "proto/attr.h"
#include "proto/enums.h"
#include "proto/status.h"
#include "server/file_service.h"
#include "server/identity.h"
#include "server/reply_util.h"

namespace odafs::server {
namespace {

bool is_dir(const Node& n) { return S_ISDIR(n.type); }

// XDR bytes of an odafs_fattr: what READDIR's plus adds to each entry.
const size_t kAttrBytes = [] {
  odafs_fattr attr{};
  return static_cast<size_t>(xdr_sizeof(xp(xdr_odafs_fattr), &attr));
}();

}  // namespace

void FileService::entry_attributes(const Object& dir, const char* name, odafs_post_attr* out) {
  out->present = FALSE;
  struct stat st;
  // As the caller (the scope of do_readdir): no search permission, no attributes.
  if (!store_->stat_at(dir, name, &st).ok()) return;
  // A write delegation's holder may have newer bytes (and size, times) than the file
  // here; which files those are would take the node table's lock per entry, so while any
  // is out no regular file's attributes are given: the client then looks the name up,
  // which recalls the holder's.
  if (S_ISREG(st.st_mode) && delegations_.writers_out()) return;
  out->present = TRUE;
  fill_attr(st, 0, &out->odafs_post_attr_u.attr);  // no node: file_generation unknown
}

bool FileService::mount(const rpc::CallContext& ctx, const char* mount_path, rpc::Reply& r) {
  mount_res res{};
  Result<OpenNode> root = nodes_.open(nodes_.root());  // the root is always open
  if (!root) {
    res.status = status_from_errno(root.errno_value());
    r.send(xp(xdr_mount_res), &res);
    return false;
  }
  OpenNode node = std::move(root).value();
  struct stat st;
  // Walk the requested path one component at a time, like LOOKUP would. Clients send "/"
  // for the root; an empty path is what a path holding a NUL byte decodes to.
  std::string path = mount_path ? mount_path : "";
  if (path.empty()) {
    res.status = ODAFS_ERR_INVAL;
    r.send(xp(xdr_mount_res), &res);
    return false;
  }
  size_t pos = 0;
  while (pos < path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(pos, end - pos);
    pos = end + 1;
    if (part.empty() || part == ".") continue;
    if (part == ".." || !NodeTable::valid_name(part.c_str()) || !is_dir(*node)) {
      res.status = part == ".." ? ODAFS_ERR_INVAL : ODAFS_ERR_NOTDIR;
      r.send(xp(xdr_mount_res), &res);
      return false;
    }
    // As LOOKUP: search permission on each directory, and the lookup as the caller.
    IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
    if (as.refused_call(r)) return false;
    if (!store_->stat(node.object(), &st).ok() || !as.permits(st, X_OK)) {
      res.status = ODAFS_ERR_ACCES;
      r.send(xp(xdr_mount_res), &res);
      return false;
    }
    Result<NodeRef> next = nodes_.lookup(node, part.c_str(), &st);
    Result<OpenNode> opened = next ? nodes_.open(*next) : Result<OpenNode>(next.status());
    if (!opened) {
      res.status = status_from_errno(opened.errno_value());
      r.send(xp(xdr_mount_res), &res);
      return false;
    }
    node = std::move(opened).value();
  }
  if (!is_dir(*node)) {
    res.status = ODAFS_ERR_NOTDIR;
    r.send(xp(xdr_mount_res), &res);
    return false;
  }
  res.status = ODAFS_OK;
  WireHandle h = nodes_.handle_of(*node);
  std::memcpy(res.mount_res_u.ok.root, h.data(), h.size());
  res.mount_res_u.ok.block_size = cache_.block_size();
  res.mount_res_u.ok.max_read = options_.max_io;
  res.mount_res_u.ok.max_write = options_.max_io;
  res.mount_res_u.ok.max_record = static_cast<u_int>(max_request_record());
  std::memcpy(res.mount_res_u.ok.write_verf, write_verf_.data(), write_verf_.size());
  std::string engine = engine_ ? engine_->endpoint() : std::string();
  res.mount_res_u.ok.engine = engine.data();
  res.mount_res_u.ok.engine_kind = const_cast<char*>(engine_ ? engine_->kind() : "");
  if (engine_) {
    // A mount over TLS gets a TLS-bound session: its secret is good on TLS engine
    // connections only, so it never travels, or counts, in the clear.
    const bool over_tls = ctx.admission != nullptr && ctx.admission->tls;
    ordma::Session session = engine_->open_session(over_tls);
    res.mount_res_u.ok.session = session.id;
    std::memcpy(res.mount_res_u.ok.session_secret, session.secret.data(), session.secret.size());
  }
  r.send(xp(xdr_mount_res), &res);
  return true;
}

OpenNode FileService::resolve_dir_or_reply(const char* fh, const char* name, rpc::Reply& r) {
  struct stat st;
  OpenNode dir = resolve_or_reply(fh, r, &st);
  if (!dir) return {};
  // A bare status: stat_res encodes like the error arm of every result type.
  if (!is_dir(*dir)) {
    reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_NOTDIR);
    return {};
  }
  if (!NodeTable::valid_name(name)) {
    reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_INVAL);
    return {};
  }
  return dir;
}

void FileService::reply_node(const Node& node, const struct stat& st, rpc::Reply& r) {
  dirop_res res{};
  res.status = ODAFS_OK;
  WireHandle h = nodes_.handle_of(node);
  std::memcpy(res.dirop_res_u.ok.fh, h.data(), h.size());
  fill_attr(st, node.file_generation, &res.dirop_res_u.ok.attr);
  r.send(xp(xdr_dirop_res), &res);
}

void FileService::reply_dirop(const OpenNode& dir, const char* name, rpc::Reply& r) {
  struct stat st;
  Result<NodeRef> node = nodes_.lookup(dir, name, &st);
  if (!node) {
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), status_from_errno(node.errno_value()));
  }
  reply_node(**node, st, r);
}

void FileService::do_lookup(const rpc::CallContext& ctx, diropargs& a, rpc::Reply& r) {
  struct stat st;
  OpenNode dir = resolve_or_reply(a.dir, r, &st);
  if (!dir) return;
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  odafs_stat status = ODAFS_OK;
  if (!is_dir(*dir)) {
    status = ODAFS_ERR_NOTDIR;
  } else if (!as.permits(st, X_OK)) {
    status = ODAFS_ERR_ACCES;
  } else if (!NodeTable::valid_name(a.name) && std::strcmp(a.name, ".") != 0 &&
             std::strcmp(a.name, "..") != 0) {
    status = ODAFS_ERR_INVAL;
  }
  if (status == ODAFS_OK && !await_writers_of_name(dir, a.name, ctx.connection)) {
    status = ODAFS_ERR_DELAY;  // another's write delegation is still out
  }
  if (status != ODAFS_OK) return reply_status<dirop_res>(r, xp(xdr_dirop_res), status);
  reply_dirop(dir, a.name, r);
}

void FileService::do_create(const rpc::CallContext& ctx, create_args& a, rpc::Reply& r) {
  auto fail = [&](odafs_stat status) { reply_status<open_res>(r, xp(xdr_open_res), status); };
  if (!valid(a.how)) return fail(ODAFS_ERR_INVAL);
  OpenNode dir = resolve_dir_or_reply(a.dir, a.name, r);
  if (!dir) return;
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  // The store tells whether this call created the file: a new file is this connection's
  // alone, an existing one is opened as OPEN opens it. CREATE makes and opens regular
  // files only: anything else at the name (a symlink, a FIFO) is EXIST.
  struct stat st;
  bool created = false;
  bool writable = true;
  // An existing file is opened to write, which over a store with leases recalls the
  // server's own lease on it: given back first, as before any write (make_writable).
  if (leases_.active() && a.how == ODAFS_CREATE_UNCHECKED &&
      store_->stat_at(dir.object(), a.name, &st).ok() && S_ISREG(st.st_mode)) {
    leases_.give_back(store_->id_of(st));
  }
  Result<Object> file = store_->create(dir.object(), a.name, a.mode & 07777,
                                       a.how != ODAFS_CREATE_UNCHECKED, &st, &created, &writable);
  if (!file) return fail(status_from_errno(file.errno_value()));
  NodeRef node =
      nodes_.adopt(dir, a.name, std::move(file).value(), st, Store::Access{true, writable});
  uint32_t access = a.access;
  if (!writable) access &= ~static_cast<uint32_t>(ODAFS_OPEN_WRITE);
  if (!created && !settle_for_open(*node, st, access, ctx.connection)) {
    return fail(ODAFS_ERR_DELAY);
  }
  reply_open(ctx, as, node, access, st, r);
}

void FileService::do_mkdir(const rpc::CallContext& ctx, mkdir_args& a, rpc::Reply& r) {
  OpenNode dir = resolve_dir_or_reply(a.dir, a.name, r);
  if (!dir) return;
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  if (Status s = store_->mkdir(dir.object(), a.name, a.mode & 07777); !s.ok()) {
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), status_from_errno(s.errno_value()));
  }
  reply_dirop(dir, a.name, r);
}

void FileService::do_symlink(const rpc::CallContext& ctx, symlink_args& a, rpc::Reply& r) {
  OpenNode dir = resolve_dir_or_reply(a.dir, a.name, r);
  if (!dir) return;
  if (a.target == nullptr || a.target[0] == '\0') {
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), ODAFS_ERR_INVAL);
  }
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  // The target is stored as given: it is never followed by the server (every open uses
  // O_NOFOLLOW and walks by handle), so an absolute or ".." target cannot escape.
  if (Status s = store_->symlink(dir.object(), a.name, a.target); !s.ok()) {
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), status_from_errno(s.errno_value()));
  }
  reply_dirop(dir, a.name, r);
}

void FileService::do_mknod(const rpc::CallContext& ctx, mknod_args& a, rpc::Reply& r) {
  OpenNode dir = resolve_dir_or_reply(a.dir, a.name, r);
  if (!dir) return;
  mode_t type = 0;
  // The raw bits (proto/enums.h): a decoded enum may hold any number.
  switch (raw_enum(a.type)) {
    case ODAFS_FIFO:
      type = S_IFIFO;
      break;
    case ODAFS_SOCK:
      type = S_IFSOCK;
      break;
    case ODAFS_CHR:
      type = S_IFCHR;
      break;
    case ODAFS_BLK:
      type = S_IFBLK;
      break;
    default:  // regular files are CREATE's, directories MKDIR's, symlinks SYMLINK's
      return reply_status<dirop_res>(r, xp(xdr_dirop_res), ODAFS_ERR_INVAL);
  }
  const bool device = type == S_IFCHR || type == S_IFBLK;
  if (device && !authority_.allows_devices(ctx)) {
    ODAFS_LOG_INFO("MKNOD of device %s refused: the client's export rule has no 'devices'", a.name);
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), ODAFS_ERR_PERM);
  }
  const dev_t rdev = device ? makedev(a.rdev.major, a.rdev.minor) : 0;
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  // As the caller: the kernel checks write and search on dir, and CAP_MKNOD for devices
  // (which setfsuid to anyone but root drops).
  if (Status s = store_->mknod(dir.object(), a.name, type | (a.mode & 07777), rdev); !s.ok()) {
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), status_from_errno(s.errno_value()));
  }
  reply_dirop(dir, a.name, r);
}

void FileService::forget(const struct stat& st) {
  // st is from just before the unlink: a directory is gone, a file has one link less
  // (what the table believes when the node has no descriptor open to ask).
  nlink_t links_left = S_ISDIR(st.st_mode) || st.st_nlink == 0 ? 0 : st.st_nlink - 1;
  const ObjectId key = nodes_.key_of(st);
  uint64_t id = nodes_.forget_if_unlinked(key, links_left);
  if (id != 0) delegations_.file_gone(id);  // its holders removed it themselves, or returned it
  // A lease would keep the removed file open in the store, and its space taken.
  if (links_left == 0 && S_ISREG(st.st_mode)) leases_.give_back(key);
  if (id != 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    drop_cached_blocks(id, 0, static_cast<uint64_t>(st.st_size));
  }
}

int FileService::truncate_file(const OpenNode& node, uint64_t size) {
  {
    // The size the cache is cut back from must be the one the truncation changed.
    std::unique_lock locked(node->data.lock);
    struct stat before;
    if (Status s = store_->stat(node.object(), &before); !s.ok()) return s.errno_value();
    if (check_change_times_)
      check_cached_blocks(*node, before);  // before ours hide others' changes
    if (Status s = store_->truncate(node.object(), size); !s.ok()) return s.errno_value();
    drop_cached_blocks(node->id, size, static_cast<uint64_t>(before.st_size));
    struct stat after;
    if (check_change_times_ && store_->stat(node.object(), &after).ok())
      blocks_checked(*node, after);
  }
  // A size change is stable when SETATTR answers, as NFS asks of every SETATTR.
  return store_->sync(node.object(), false).errno_value();
}

void FileService::drop_cached_blocks(uint64_t id, uint64_t from, uint64_t old_size) {
  uint64_t bs = cache_.block_size();
  uint64_t old_last = old_size > 0 ? (old_size - 1) / bs : 0;
  uint64_t first = from / bs;
  if (first <= old_last) cache_.invalidate(id, first, old_last);
}

void FileService::do_remove(const rpc::CallContext& ctx, diropargs& a, rpc::Reply& r) {
  remove_entry(ctx, a, r, false);
}

void FileService::do_rmdir(const rpc::CallContext& ctx, diropargs& a, rpc::Reply& r) {
  remove_entry(ctx, a, r, true);
}

void FileService::remove_entry(const rpc::CallContext& ctx, diropargs& a, rpc::Reply& r,
                               bool dir_wanted) {
  OpenNode dir = resolve_dir_or_reply(a.dir, a.name, r);
  if (!dir) return;
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  struct stat victim;
  if (Status s = store_->stat_at(dir.object(), a.name, &victim); !s.ok()) {
    return reply_status<stat_res>(r, xp(xdr_stat_res), status_from_errno(s.errno_value()));
  }
  if (dir_wanted != S_ISDIR(victim.st_mode)) {
    return reply_status<stat_res>(r, xp(xdr_stat_res),
                                  dir_wanted ? ODAFS_ERR_NOTDIR : ODAFS_ERR_ISDIR);
  }
  Delegations::Change change = begin_change_of_name(dir, a.name, ctx.connection);
  if (change.delayed()) return reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_DELAY);
  // The file's last name: its lease goes first. The store would recall it for this very
  // unlink and wait for the give-back, and the keeper would wait for the remover's own
  // delegation, which a client removing the file does not return (the file takes it).
  if (S_ISREG(victim.st_mode) && victim.st_nlink <= 1) leases_.give_back(nodes_.key_of(victim));
  if (Status s = store_->remove(dir.object(), a.name, dir_wanted); !s.ok()) {
    return reply_status<stat_res>(r, xp(xdr_stat_res), status_from_errno(s.errno_value()));
  }
  forget(victim);
  reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_OK);
}

void FileService::do_rename(const rpc::CallContext& ctx, rename_args& a, rpc::Reply& r) {
  struct stat st;
  OpenNode from = resolve_or_reply(a.from_dir, r, &st);
  if (!from) return;
  OpenNode to = resolve_or_reply(a.to_dir, r, &st);
  if (!to) return;
  if (!is_dir(*from) || !is_dir(*to)) {
    return reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_NOTDIR);
  }
  if (!NodeTable::valid_name(a.from_name) || !NodeTable::valid_name(a.to_name)) {
    return reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_INVAL);
  }
  // Both the object moved and the one it replaces change their name.
  Delegations::Change moving = begin_change_of_name(from, a.from_name, ctx.connection);
  if (moving.delayed()) return reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_DELAY);
  Delegations::Change replacing = begin_change_of_name(to, a.to_name, ctx.connection);
  if (replacing.delayed()) return reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_DELAY);
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  struct stat replaced;
  const bool had_target = store_->stat_at(to.object(), a.to_name, &replaced).ok();
  if (Status s = store_->rename(from.object(), a.from_name, to.object(), a.to_name); !s.ok()) {
    return reply_status<stat_res>(r, xp(xdr_stat_res), status_from_errno(s.errno_value()));
  }
  if (had_target) forget(replaced);
  // Whatever now sits at the new name is reached by it from now on (a node reopens by it).
  struct stat moved;
  if (store_->stat_at(to.object(), a.to_name, &moved).ok()) {
    nodes_.renamed(to, a.to_name, nodes_.key_of(moved));
  }
  reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_OK);
}

void FileService::do_link(const rpc::CallContext& ctx, link_args& a, rpc::Reply& r) {
  struct stat st;
  OpenNode file = resolve_or_reply(a.fh, r, &st);
  if (!file) return;
  OpenNode dir = resolve_dir_or_reply(a.dir, a.name, r);
  if (!dir) return;
  if (S_ISDIR(st.st_mode)) {  // as link(2): no hard links to directories
    return reply_status<attr_res>(r, xp(xdr_attr_res), status_from_errno(EPERM));
  }
  // Holders trust the file's attributes, its link count among them.
  Delegations::Change change = delegations_.begin_change(file->id, ctx.connection);
  if (change.delayed()) return reply_status<attr_res>(r, xp(xdr_attr_res), ODAFS_ERR_DELAY);
  if (odafs_stat s = change.waited() ? stat_node(file, &st) : ODAFS_OK; s != ODAFS_OK) {
    return reply_status<attr_res>(r, xp(xdr_attr_res), s);
  }
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  // By the node's object, not by a name it may no longer have.
  Status linked = store_->link(file.object(), dir.object(), a.name);
  if (linked.ok()) linked = store_->stat(file.object(), &st);
  if (!linked.ok()) {
    return reply_status<attr_res>(r, xp(xdr_attr_res), status_from_errno(linked.errno_value()));
  }
  reply_attr(*file, st, r);
}

void FileService::do_readdir(const rpc::CallContext& ctx, readdir_args& a, rpc::Reply& r) {
  struct stat st;
  OpenNode dir = resolve_or_reply(a.dir, r, &st);
  if (!dir) return;
  if (!is_dir(*dir)) return reply_status<readdir_res>(r, xp(xdr_readdir_res), ODAFS_ERR_NOTDIR);
  IdentityScope as(*store_, ctx.cred, options_.act_as_callers);
  if (as.refused_call(r)) return;
  if (!as.permits(st, R_OK)) {
    return reply_status<readdir_res>(r, xp(xdr_readdir_res), ODAFS_ERR_ACCES);
  }
  // The store keeps the names it visits valid until the listing ends, so the reply points
  // at them (no copies); entries are taken while the reply's budget lasts.
  struct Taker final : DirVisitor {
    FileService* self;
    const Object* dir;
    bool plus;
    size_t budget;
    size_t used = 64;  // reply header, status, eof, array length
    bool full = false;
    std::vector<odafs_dirent>* entries;
    bool visit(const StoreDirEntry& d) override {
      const size_t len = std::strlen(d.name);
      // fileid, type, name, cookie, the attributes' flag (and the attributes, with plus).
      const size_t cost =
          8 + 4 + 4 + ((len + 3) & ~size_t{3}) + 8 + 4 + 4 + (plus ? kAttrBytes : 0);
      if (used + cost > budget) {
        full = true;
        return false;
      }
      used += cost;
      odafs_dirent e{};
      e.fileid = d.fileid;
      e.type = d.type == 0 ? ODAFS_REG : wire_type(d.type);  // 0: the type is unknown
      e.name = const_cast<char*>(d.name);
      e.cookie = d.next_cookie;
      if (plus) self->entry_attributes(*dir, d.name, &e.attr);
      entries->push_back(e);
      return true;
    }
  };
  thread_local std::vector<odafs_dirent> entries;
  entries.clear();
  Taker taker;
  taker.self = this;
  taker.dir = &dir.object();
  taker.plus = a.plus;
  taker.budget = std::clamp<size_t>(a.max_bytes, 512, options_.max_io);
  taker.entries = &entries;
  bool eof = false;
  if (Status s = store_->list(dir.object(), a.cookie, taker, &eof); !s.ok()) {
    const odafs_stat status = s.errno_value() == EINVAL && a.cookie != 0
                                  ? ODAFS_ERR_BADCOOKIE
                                  : status_from_errno(s.errno_value());
    return reply_status<readdir_res>(r, xp(xdr_readdir_res), status);
  }
  const bool full = taker.full;
  if (entries.empty() && !eof) {
    return reply_status<readdir_res>(r, xp(xdr_readdir_res), ODAFS_ERR_INVAL);  // budget too small
  }
  readdir_res res{};
  res.status = ODAFS_OK;
  res.readdir_res_u.ok.entries.entries_len = static_cast<u_int>(entries.size());
  res.readdir_res_u.ok.entries.entries_val = entries.data();
  res.readdir_res_u.ok.eof = eof && !full;
  r.send(xp(xdr_readdir_res), &res);
}

void FileService::do_readlink(const rpc::CallContext&, getattr_args& a, rpc::Reply& r) {
  struct stat st;
  OpenNode node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  if (!S_ISLNK(st.st_mode)) {
    return reply_status<readlink_res>(r, xp(xdr_readlink_res), ODAFS_ERR_INVAL);
  }
  char target[ODAFS_MAXPATHLEN + 1];
  Result<size_t> n = store_->readlink(node.object(), target, ODAFS_MAXPATHLEN);
  if (!n) {
    return reply_status<readlink_res>(r, xp(xdr_readlink_res), status_from_errno(n.errno_value()));
  }
  target[*n] = '\0';
  readlink_res res{};
  res.status = ODAFS_OK;
  res.readlink_res_u.target = target;
  r.send(xp(xdr_readlink_res), &res);
}

void FileService::do_fsstat(const rpc::CallContext&, getattr_args& a, rpc::Reply& r) {
  struct stat st;
  OpenNode node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  struct statvfs vfs;
  if (Status s = store_->statfs(node.object(), &vfs); !s.ok()) {
    return reply_status<fsstat_res>(r, xp(xdr_fsstat_res), status_from_errno(s.errno_value()));
  }
  fsstat_res res{};
  res.status = ODAFS_OK;
  fsstat_ok& ok = res.fsstat_res_u.ok;
  ok.total_bytes = static_cast<u_quad_t>(vfs.f_blocks) * vfs.f_frsize;
  // Less what the accounting promised to write delegations' holders: no one else may
  // write there (write_through).
  ok.free_bytes = space_.available(static_cast<uint64_t>(vfs.f_bfree) * vfs.f_frsize);
  ok.avail_bytes = space_.available(static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize);
  ok.total_files = vfs.f_files;
  ok.free_files = vfs.f_ffree;
  ok.block_size = static_cast<u_int>(vfs.f_bsize);
  ok.max_name = static_cast<u_int>(vfs.f_namemax);
  r.send(xp(xdr_fsstat_res), &res);
}

}  // namespace odafs::server
