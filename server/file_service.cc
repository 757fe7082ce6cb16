#include "server/file_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "ordma/ref_xdr.h"
#include "rpc/log.h"
#include "rpc/status.h"
#include "rpc/xdr_util.h"
#include "server/identity.h"

namespace odafs::server {
namespace {

template <class T>
xdrproc_t xp(bool_t (*fn)(XDR*, T*)) {
  return rpc::to_xdrproc(fn);
}

void fill_attr(const struct stat& st, odafs_fattr* a) {
  switch (st.st_mode & S_IFMT) {
    case S_IFREG:
      a->type = ODAFS_REG;
      break;
    case S_IFDIR:
      a->type = ODAFS_DIR;
      break;
    case S_IFLNK:
      a->type = ODAFS_LNK;
      break;
    case S_IFBLK:
      a->type = ODAFS_BLK;
      break;
    case S_IFCHR:
      a->type = ODAFS_CHR;
      break;
    case S_IFSOCK:
      a->type = ODAFS_SOCK;
      break;
    default:
      a->type = ODAFS_FIFO;
      break;
  }
  a->mode = st.st_mode & 07777;
  a->nlink = static_cast<u_int>(st.st_nlink);
  a->uid = st.st_uid;
  a->gid = st.st_gid;
  a->size = static_cast<u_quad_t>(st.st_size);
  a->used = static_cast<u_quad_t>(st.st_blocks) * 512u;
  a->fileid = st.st_ino;
  a->atime = {st.st_atim.tv_sec, static_cast<u_int>(st.st_atim.tv_nsec)};
  a->mtime = {st.st_mtim.tv_sec, static_cast<u_int>(st.st_mtim.tv_nsec)};
  a->ctime = {st.st_ctim.tv_sec, static_cast<u_int>(st.st_ctim.tv_nsec)};
}

// Path of an open descriptor, for the calls that have no fd form for O_PATH descriptors.
struct ProcPath {
  explicit ProcPath(int fd) { std::snprintf(text, sizeof text, "/proc/self/fd/%d", fd); }
  char text[40];
};

template <class Res>
void reply_status(rpc::Reply& r, xdrproc_t xres, odafs_stat status) {
  Res res{};
  res.status = status;
  r.send(xres, &res);
}

bool is_dir(const Node& n) { return S_ISDIR(n.type); }

}  // namespace

FileService::FileService(Options options, CpuAccounting* cpu)
    : options_(std::move(options)),
      cpu_(cpu),
      nodes_(options_.export_root, options_.max_nodes),
      cache_(cache::BlockCache::Options{options_.cache_bytes, options_.block_size}),
      table_(cache_.block_count()) {
  if (RAND_bytes(write_verf_.data(), static_cast<int>(write_verf_.size())) != 1) {
    throw std::runtime_error("RAND_bytes failed: no write verifier");
  }
  // Revoke before a block's memory is reused; lock it while its bytes change. Both hooks
  // cost an atomic store or two when no one-sided read is copying the block.
  cache_.set_evict_hook([this](const cache::Block& b) { table_.revoke(b.segment); });
  cache_.set_modify_hooks([this](const cache::Block& b) { table_.lock(b.segment); },
                          [this](const cache::Block& b) { table_.unlock(b.segment); });
}

void FileService::start_engine(const ordma::SoftEngineOptions& options) {
  ordma::ExportedMemory memory{cache_.arena(), cache_.block_size(), cache_.block_count()};
  engine_ = ordma::make_soft_engine(options, &table_, &capabilities_, &sessions_, memory);
  engine_->start();
}

void FileService::stop_engine() {
  if (engine_) engine_->stop();
}

bool FileService::make_ref(const cache::BlockCache::ReadPin& pin, uint64_t block, uint64_t session,
                           odafs_ref* out) {
  uint32_t seg = pin.segment();
  uint32_t gen = table_.state(seg) == ordma::ExportTable::State::kExported
                     ? table_.generation(seg)
                     : table_.export_segment(seg);
  // An invalidation (truncate, remove) may drop a pinned block: it bumps the block's
  // identity, then revokes. Checking the identity after exporting catches a drop that our
  // export could have undone; a later drop's revocation overrules the export anyway.
  if (!pin.still_mapped()) {
    table_.revoke(seg);
    return false;
  }
  ordma::Reference r;
  r.segment = seg;
  r.generation = gen;
  r.offset = 0;
  r.length = pin.valid();
  r.rights = ordma::kRightRead;
  r.session = session;
  capabilities_.seal(r);
  *out = ordma::reference_to_wire(r, block);
  return true;
}

bool FileService::pin_block(const Node& node, uint64_t index, uint32_t need,
                            cache::BlockCache::ReadPin* pin, int* err) {
  const int fd = node.fd;
  const off_t block_off = static_cast<off_t>(index * cache_.block_size());
  return cache_.read(
      cache::BlockKey{node.id, index}, need,
      [fd, block_off](std::byte* buf, size_t n) -> ssize_t {
        size_t got = 0;
        while (got < n) {
          ssize_t k = pread(fd, buf + got, n - got, block_off + static_cast<off_t>(got));
          if (k < 0 && errno == EINTR) continue;
          if (k < 0) return -errno;
          if (k == 0) break;
          got += static_cast<size_t>(k);
        }
        return static_cast<ssize_t>(got);
      },
      pin, err);
}

NodeRef FileService::resolve_or_reply(const char* fh, rpc::Reply& r, struct stat* st) {
  HandleError err;
  NodeRef node = nodes_.resolve(reinterpret_cast<const unsigned char*>(fh), &err);
  odafs_stat status = ODAFS_OK;
  if (!node) {
    status = err == HandleError::kStale ? ODAFS_ERR_STALE : ODAFS_ERR_BADHANDLE;
  } else if (fstat(node->fd, st) != 0) {
    status = status_from_errno(errno);
  } else if (st->st_nlink == 0) {
    status = ODAFS_ERR_STALE;  // removed since the handle was handed out
  }
  if (status == ODAFS_OK) return node;
  // Every result type starts with the status; a bare stat_res encodes identically.
  stat_res res{status};
  r.send(xp(xdr_stat_res), &res);
  return nullptr;
}

void FileService::register_procedures(rpc::Server* server) {
  server_ = server;
  using rpc::CallContext;
  using rpc::Reply;
  server->add_procedure(ODAFSPROC_NULL, "NULL", [](const CallContext&, XDR*, Reply& r) {
    r.results();
    return true;
  });
  server->add_procedure(
      ODAFSPROC_MOUNT, "MOUNT",
      rpc::typed_procedure<mount_args>(xp(xdr_mount_args),
                                       [this](auto& c, auto& a, auto& r) { do_mount(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_GETATTR, "GETATTR",
      rpc::typed_procedure<getattr_args>(
          xp(xdr_getattr_args), [this](auto& c, auto& a, auto& r) { do_getattr(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_SETATTR, "SETATTR",
      rpc::typed_procedure<setattr_args>(
          xp(xdr_setattr_args), [this](auto& c, auto& a, auto& r) { do_setattr(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_LOOKUP, "LOOKUP",
      rpc::typed_procedure<diropargs>(xp(xdr_diropargs),
                                      [this](auto& c, auto& a, auto& r) { do_lookup(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_CREATE, "CREATE",
      rpc::typed_procedure<create_args>(xp(xdr_create_args),
                                        [this](auto& c, auto& a, auto& r) { do_create(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_MKDIR, "MKDIR",
      rpc::typed_procedure<mkdir_args>(xp(xdr_mkdir_args),
                                       [this](auto& c, auto& a, auto& r) { do_mkdir(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_REMOVE, "REMOVE",
      rpc::typed_procedure<diropargs>(
          xp(xdr_diropargs), [this](auto& c, auto& a, auto& r) { do_remove(c, a, r, false); }));
  server->add_procedure(
      ODAFSPROC_RMDIR, "RMDIR",
      rpc::typed_procedure<diropargs>(
          xp(xdr_diropargs), [this](auto& c, auto& a, auto& r) { do_remove(c, a, r, true); }));
  server->add_procedure(
      ODAFSPROC_RENAME, "RENAME",
      rpc::typed_procedure<rename_args>(xp(xdr_rename_args),
                                        [this](auto& c, auto& a, auto& r) { do_rename(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_READDIR, "READDIR",
      rpc::typed_procedure<readdir_args>(
          xp(xdr_readdir_args), [this](auto& c, auto& a, auto& r) { do_readdir(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_READLINK, "READLINK",
      rpc::typed_procedure<getattr_args>(
          xp(xdr_getattr_args), [this](auto& c, auto& a, auto& r) { do_readlink(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_SYMLINK, "SYMLINK",
      rpc::typed_procedure<symlink_args>(
          xp(xdr_symlink_args), [this](auto& c, auto& a, auto& r) { do_symlink(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_READ, "READ",
      rpc::typed_procedure<read_args>(xp(xdr_read_args),
                                      [this](auto& c, auto& a, auto& r) { do_read(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_WRITE, "WRITE",
      rpc::typed_procedure<write_args>(xp(xdr_write_args),
                                       [this](auto& c, auto& a, auto& r) { do_write(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_COMMIT, "COMMIT",
      rpc::typed_procedure<commit_args>(xp(xdr_commit_args),
                                        [this](auto& c, auto& a, auto& r) { do_commit(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_FSSTAT, "FSSTAT",
      rpc::typed_procedure<getattr_args>(
          xp(xdr_getattr_args), [this](auto& c, auto& a, auto& r) { do_fsstat(c, a, r); }));
  server->add_procedure(
      ODAFSPROC_GETREFS, "GETREFS",
      rpc::typed_procedure<getrefs_args>(
          xp(xdr_getrefs_args), [this](auto& c, auto& a, auto& r) { do_getrefs(c, a, r); }));
  server->add_procedure(ODAFSPROC_READ_DIRECT, "READ_DIRECT",
                        rpc::typed_procedure<read_direct_args>(
                            xp(xdr_read_direct_args),
                            [this](auto& c, auto& a, auto& r) { do_read_direct(c, a, r); }));
  server->add_procedure(ODAFSPROC_WRITE_DIRECT, "WRITE_DIRECT",
                        rpc::typed_procedure<write_direct_args>(
                            xp(xdr_write_direct_args),
                            [this](auto& c, auto& a, auto& r) { do_write_direct(c, a, r); }));
  server->add_procedure(ODAFSPROC_STATS, "STATS", [this](const CallContext&, XDR*, Reply& r) {
    do_stats(r);
    return true;
  });
}

void FileService::do_mount(const rpc::CallContext&, mount_args& a, rpc::Reply& r) {
  mount_res res{};
  NodeRef node = nodes_.root();
  struct stat st;
  // Walk the requested path one component at a time, like LOOKUP would.
  std::string path = a.path ? a.path : "/";
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
      return;
    }
    node = nodes_.lookup(*node, part.c_str(), &st);
    if (!node) {
      res.status = status_from_errno(errno);
      r.send(xp(xdr_mount_res), &res);
      return;
    }
  }
  if (!is_dir(*node)) {
    res.status = ODAFS_ERR_NOTDIR;
    r.send(xp(xdr_mount_res), &res);
    return;
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
  if (engine_) {
    ordma::Session session = sessions_.issue();
    res.mount_res_u.ok.session = session.id;
    std::memcpy(res.mount_res_u.ok.session_secret, session.secret.data(), session.secret.size());
  }
  r.send(xp(xdr_mount_res), &res);
}

void FileService::do_getattr(const rpc::CallContext&, getattr_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  attr_res res{};
  res.status = ODAFS_OK;
  fill_attr(st, &res.attr_res_u.attr);
  r.send(xp(xdr_attr_res), &res);
}

void FileService::do_setattr(const rpc::CallContext& ctx, setattr_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  IdentityScope as(ctx.cred, options_.auth_sys);
  int err = 0;
  if (a.mode.set && err == 0) {
    if (as.active() && as.permits(st, 0) && st.st_uid != ctx.cred->uid && ctx.cred->uid != 0) {
      err = EPERM;
    } else if (S_ISLNK(st.st_mode)) {
      err = EOPNOTSUPP;
    } else if (fchmod(node->fd, a.mode.odafs_set_u32_u.value & 07777) != 0) {
      if (errno != EBADF || chmod(ProcPath(node->fd).text, a.mode.odafs_set_u32_u.value & 07777))
        err = errno;
    }
  }
  if (a.size.set && err == 0) {
    u_quad_t size = a.size.odafs_set_u64_u.value;
    if (!S_ISREG(st.st_mode)) {
      err = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    } else if (!as.permits(st, W_OK)) {
      err = EACCES;
    } else if (size > static_cast<u_quad_t>(INT64_MAX)) {
      err = EFBIG;
    } else if (!nodes_.make_writable(*node)) {
      err = errno == EBADF ? EACCES : errno;
    } else if (ftruncate(node->fd, static_cast<off_t>(size)) != 0) {
      err = errno;
    } else {
      uint64_t bs = cache_.block_size();
      uint64_t old_last = st.st_size > 0 ? (static_cast<uint64_t>(st.st_size) - 1) / bs : 0;
      uint64_t first = size / bs;
      if (first <= old_last) cache_.invalidate(node->id, first, old_last);
    }
  }
  if ((a.atime.how != ODAFS_TIME_DONT_CHANGE || a.mtime.how != ODAFS_TIME_DONT_CHANGE) &&
      err == 0) {
    timespec times[2];
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
    if (utimensat(AT_FDCWD, ProcPath(node->fd).text, times, 0) != 0) err = errno;
  }
  attr_res res{};
  if (err != 0 || fstat(node->fd, &st) != 0) {
    res.status = status_from_errno(err != 0 ? err : errno);
  } else {
    res.status = ODAFS_OK;
    fill_attr(st, &res.attr_res_u.attr);
  }
  r.send(xp(xdr_attr_res), &res);
}

void FileService::reply_dirop(const Node& dir, const char* name, rpc::Reply& r) {
  struct stat st;
  NodeRef node = nodes_.lookup(dir, name, &st);
  dirop_res res{};
  if (!node) {
    res.status = status_from_errno(errno);
  } else {
    res.status = ODAFS_OK;
    WireHandle h = nodes_.handle_of(*node);
    std::memcpy(res.dirop_res_u.ok.fh, h.data(), h.size());
    fill_attr(st, &res.dirop_res_u.ok.attr);
  }
  r.send(xp(xdr_dirop_res), &res);
}

void FileService::do_lookup(const rpc::CallContext& ctx, diropargs& a, rpc::Reply& r) {
  struct stat st;
  NodeRef dir = resolve_or_reply(a.dir, r, &st);
  if (!dir) return;
  IdentityScope as(ctx.cred, options_.auth_sys);
  odafs_stat status = ODAFS_OK;
  if (!is_dir(*dir)) {
    status = ODAFS_ERR_NOTDIR;
  } else if (!as.permits(st, X_OK)) {
    status = ODAFS_ERR_ACCES;
  } else if (!NodeTable::valid_name(a.name) && std::strcmp(a.name, ".") != 0 &&
             std::strcmp(a.name, "..") != 0) {
    status = ODAFS_ERR_INVAL;
  }
  if (status != ODAFS_OK) return reply_status<dirop_res>(r, xp(xdr_dirop_res), status);
  reply_dirop(*dir, a.name, r);
}

void FileService::do_create(const rpc::CallContext& ctx, create_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef dir = resolve_or_reply(a.dir, r, &st);
  if (!dir) return;
  if (!is_dir(*dir)) return reply_status<dirop_res>(r, xp(xdr_dirop_res), ODAFS_ERR_NOTDIR);
  if (!NodeTable::valid_name(a.name)) {
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), ODAFS_ERR_INVAL);
  }
  IdentityScope as(ctx.cred, options_.auth_sys);
  int flags = O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_RDWR;
  if (a.how != ODAFS_CREATE_UNCHECKED) flags |= O_EXCL;
  int fd = openat(dir->fd, a.name, flags, a.mode & 07777);
  bool writable = true;
  if (fd < 0 && errno == EACCES && a.how == ODAFS_CREATE_UNCHECKED) {
    writable = false;  // exists, but not writable by us: open read-only like LOOKUP would
    fd = openat(dir->fd, a.name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  }
  struct stat created;
  if (fd < 0 || fstat(fd, &created) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    if (err == ELOOP) err = EEXIST;  // a symlink sits at the name
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), status_from_errno(err));
  }
  NodeRef node = nodes_.adopt(fd, created, writable);
  dirop_res res{};
  res.status = ODAFS_OK;
  WireHandle h = nodes_.handle_of(*node);
  std::memcpy(res.dirop_res_u.ok.fh, h.data(), h.size());
  fill_attr(created, &res.dirop_res_u.ok.attr);
  r.send(xp(xdr_dirop_res), &res);
}

void FileService::do_mkdir(const rpc::CallContext& ctx, mkdir_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef dir = resolve_or_reply(a.dir, r, &st);
  if (!dir) return;
  if (!is_dir(*dir)) return reply_status<dirop_res>(r, xp(xdr_dirop_res), ODAFS_ERR_NOTDIR);
  if (!NodeTable::valid_name(a.name)) {
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), ODAFS_ERR_INVAL);
  }
  IdentityScope as(ctx.cred, options_.auth_sys);
  if (mkdirat(dir->fd, a.name, a.mode & 07777) != 0) {
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), status_from_errno(errno));
  }
  reply_dirop(*dir, a.name, r);
}

void FileService::do_symlink(const rpc::CallContext& ctx, symlink_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef dir = resolve_or_reply(a.dir, r, &st);
  if (!dir) return;
  if (!is_dir(*dir)) return reply_status<dirop_res>(r, xp(xdr_dirop_res), ODAFS_ERR_NOTDIR);
  if (!NodeTable::valid_name(a.name) || a.target == nullptr || a.target[0] == '\0') {
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), ODAFS_ERR_INVAL);
  }
  IdentityScope as(ctx.cred, options_.auth_sys);
  // The target is stored as given: it is never followed by the server (every open uses
  // O_NOFOLLOW and walks by handle), so an absolute or ".." target cannot escape.
  if (symlinkat(a.target, dir->fd, a.name) != 0) {
    return reply_status<dirop_res>(r, xp(xdr_dirop_res), status_from_errno(errno));
  }
  reply_dirop(*dir, a.name, r);
}

void FileService::forget(const struct stat& st) {
  uint64_t id = nodes_.forget_if_unlinked(st.st_dev, st.st_ino);
  if (id != 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    cache_.invalidate(id, 0, (static_cast<uint64_t>(st.st_size) - 1) / cache_.block_size());
  }
}

void FileService::do_remove(const rpc::CallContext& ctx, diropargs& a, rpc::Reply& r,
                            bool dir_wanted) {
  struct stat st;
  NodeRef dir = resolve_or_reply(a.dir, r, &st);
  if (!dir) return;
  if (!is_dir(*dir)) return reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_NOTDIR);
  if (!NodeTable::valid_name(a.name)) {
    return reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_INVAL);
  }
  IdentityScope as(ctx.cred, options_.auth_sys);
  struct stat victim;
  if (fstatat(dir->fd, a.name, &victim, AT_SYMLINK_NOFOLLOW) != 0) {
    return reply_status<stat_res>(r, xp(xdr_stat_res), status_from_errno(errno));
  }
  if (dir_wanted != S_ISDIR(victim.st_mode)) {
    return reply_status<stat_res>(r, xp(xdr_stat_res),
                                  dir_wanted ? ODAFS_ERR_NOTDIR : ODAFS_ERR_ISDIR);
  }
  if (unlinkat(dir->fd, a.name, dir_wanted ? AT_REMOVEDIR : 0) != 0) {
    int err = errno == EEXIST ? ENOTEMPTY : errno;
    return reply_status<stat_res>(r, xp(xdr_stat_res), status_from_errno(err));
  }
  forget(victim);
  reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_OK);
}

void FileService::do_rename(const rpc::CallContext& ctx, rename_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef from = resolve_or_reply(a.from_dir, r, &st);
  if (!from) return;
  NodeRef to = resolve_or_reply(a.to_dir, r, &st);
  if (!to) return;
  if (!is_dir(*from) || !is_dir(*to)) {
    return reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_NOTDIR);
  }
  if (!NodeTable::valid_name(a.from_name) || !NodeTable::valid_name(a.to_name)) {
    return reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_INVAL);
  }
  IdentityScope as(ctx.cred, options_.auth_sys);
  struct stat replaced;
  bool had_target = fstatat(to->fd, a.to_name, &replaced, AT_SYMLINK_NOFOLLOW) == 0;
  if (renameat(from->fd, a.from_name, to->fd, a.to_name) != 0) {
    int err = errno == EEXIST ? ENOTEMPTY : errno;
    return reply_status<stat_res>(r, xp(xdr_stat_res), status_from_errno(err));
  }
  if (had_target) forget(replaced);
  reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_OK);
}

void FileService::do_readdir(const rpc::CallContext& ctx, readdir_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef dir = resolve_or_reply(a.dir, r, &st);
  if (!dir) return;
  if (!is_dir(*dir)) return reply_status<readdir_res>(r, xp(xdr_readdir_res), ODAFS_ERR_NOTDIR);
  IdentityScope as(ctx.cred, options_.auth_sys);
  if (!as.permits(st, R_OK)) {
    return reply_status<readdir_res>(r, xp(xdr_readdir_res), ODAFS_ERR_ACCES);
  }
  // A private descriptor: the node's own is shared by every thread, and so is its offset.
  int fd = openat(dir->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return reply_status<readdir_res>(r, xp(xdr_readdir_res), status_from_errno(errno));
  if (a.cookie != 0 && lseek(fd, static_cast<off_t>(a.cookie), SEEK_SET) < 0) {
    close(fd);
    return reply_status<readdir_res>(r, xp(xdr_readdir_res), ODAFS_ERR_BADCOOKIE);
  }
  thread_local std::vector<char> buf(64 * 1024);
  thread_local std::vector<odafs_dirent> entries;
  entries.clear();
  size_t budget = std::clamp<size_t>(a.max_bytes, 512, options_.max_io);
  size_t used = 64;  // reply header, status, eof, array length
  bool eof = false;
  bool full = false;
  size_t buf_used = 0;
  // getdents64 entries stay in buf until the reply is encoded, so names need no copies;
  // each round appends to buf so earlier names stay valid.
  while (!full) {
    if (buf.size() - buf_used < 4096) break;  // enough for one reply
    long n = syscall(SYS_getdents64, fd, buf.data() + buf_used, buf.size() - buf_used);
    if (n < 0) {
      int err = errno;
      close(fd);
      return reply_status<readdir_res>(r, xp(xdr_readdir_res), status_from_errno(err));
    }
    if (n == 0) {
      eof = true;
      break;
    }
    size_t off = buf_used;
    buf_used += static_cast<size_t>(n);
    while (off < buf_used) {
      struct linux_dirent64 {
        ino64_t d_ino;
        off64_t d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[];
      };
      auto* d = reinterpret_cast<linux_dirent64*>(buf.data() + off);
      off += d->d_reclen;
      if (std::strcmp(d->d_name, ".") == 0 || std::strcmp(d->d_name, "..") == 0) continue;
      size_t len = std::strlen(d->d_name);
      size_t cost = 8 + 4 + 4 + ((len + 3) & ~size_t{3}) + 8 + 4;
      if (used + cost > budget) {
        full = true;
        break;
      }
      used += cost;
      odafs_dirent e{};
      e.fileid = d->d_ino;
      switch (d->d_type) {
        case DT_DIR:
          e.type = ODAFS_DIR;
          break;
        case DT_LNK:
          e.type = ODAFS_LNK;
          break;
        case DT_BLK:
          e.type = ODAFS_BLK;
          break;
        case DT_CHR:
          e.type = ODAFS_CHR;
          break;
        case DT_SOCK:
          e.type = ODAFS_SOCK;
          break;
        case DT_FIFO:
          e.type = ODAFS_FIFO;
          break;
        default:
          e.type = ODAFS_REG;
          break;
      }
      e.name = d->d_name;
      e.cookie = static_cast<u_quad_t>(d->d_off);
      entries.push_back(e);
    }
  }
  close(fd);
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
  NodeRef node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  if (!S_ISLNK(st.st_mode)) {
    return reply_status<readlink_res>(r, xp(xdr_readlink_res), ODAFS_ERR_INVAL);
  }
  char target[ODAFS_MAXPATHLEN + 1];
  ssize_t n = readlinkat(node->fd, "", target, ODAFS_MAXPATHLEN);
  if (n < 0) return reply_status<readlink_res>(r, xp(xdr_readlink_res), status_from_errno(errno));
  target[n] = '\0';
  readlink_res res{};
  res.status = ODAFS_OK;
  res.readlink_res_u.target = target;
  r.send(xp(xdr_readlink_res), &res);
}

void FileService::do_read(const rpc::CallContext& ctx, read_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  if (!S_ISREG(st.st_mode)) {
    return reply_status<read_res>(r, xp(xdr_read_res),
                                  S_ISDIR(st.st_mode) ? ODAFS_ERR_ISDIR : ODAFS_ERR_INVAL);
  }
  {
    IdentityScope as(ctx.cred, options_.auth_sys);
    if (!as.permits(st, R_OK)) return reply_status<read_res>(r, xp(xdr_read_res), ODAFS_ERR_ACCES);
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t offset = a.offset;
  uint32_t count = std::min(a.count, options_.max_io);
  uint32_t len =
      offset >= size ? 0 : static_cast<uint32_t>(std::min<uint64_t>(count, size - offset));
  bool eof = offset + len >= size;

  // Encode status, attributes and eof, then copy the data from cache blocks straight into
  // the reply buffer (the one copy the RPC path needs).
  XDR* x = r.results();
  odafs_stat status = ODAFS_OK;
  odafs_fattr attr;
  fill_attr(st, &attr);
  bool_t eof_flag = eof;
  u_int data_len = len;
  xdr_odafs_stat(x, &status);
  xdr_odafs_fattr(x, &attr);
  xdr_bool(x, &eof_flag);
  xdr_u_int(x, &data_len);
  uint32_t padded = (len + 3) & ~3u;
  auto* dst = reinterpret_cast<char*>(xdr_inline(x, static_cast<int>(padded)));
  if (dst == nullptr) {
    ODAFS_LOG_ERROR("READ reply of %u bytes does not fit the reply buffer", len);
    return reply_status<read_res>(r, xp(xdr_read_res), ODAFS_ERR_SERVERFAULT);
  }
  std::memset(dst + len, 0, padded - len);
  const uint64_t bs = cache_.block_size();
  const int fd = node->fd;
  const bool want_refs = engine_ != nullptr && a.session != 0;
  thread_local std::vector<odafs_ref> refs;
  refs.clear();
  uint64_t pos = offset;
  uint32_t done = 0;
  cache::BlockCache::ReadPin pin;
  while (done < len) {
    uint64_t index = pos / bs;
    uint64_t in_block = pos % bs;
    uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(bs - in_block, len - done));
    uint32_t need = static_cast<uint32_t>(std::min<uint64_t>(bs, size - index * bs));
    int err = 0;
    if (!pin_block(*node, index, need, &pin, &err)) {
      return reply_status<read_res>(r, xp(xdr_read_res), status_from_errno(err));
    }
    if (pin.bypass()) {
      ssize_t k = pread(fd, dst + done, chunk, static_cast<off_t>(pos));
      if (k < 0) return reply_status<read_res>(r, xp(xdr_read_res), status_from_errno(errno));
      if (static_cast<uint32_t>(k) < chunk) std::memset(dst + done + k, 0, chunk - k);
    } else {
      uint32_t have = pin.valid() > in_block ? pin.valid() - static_cast<uint32_t>(in_block) : 0;
      uint32_t copy = std::min(have, chunk);
      std::memcpy(dst + done, pin.data() + in_block, copy);
      // Bytes past the block's valid end are a hole the file grew over: zeros.
      if (copy < chunk) std::memset(dst + done + copy, 0, chunk - copy);
      odafs_ref ref;
      if (want_refs && pin.valid() > 0 && make_ref(pin, index, a.session, &ref)) {
        refs.push_back(ref);
      }
    }
    done += chunk;
    pos += chunk;
  }
  // The trailer: references to the blocks this read touched.
  u_int nrefs = static_cast<u_int>(refs.size());
  bool fits = xdr_u_int(x, &nrefs);
  for (odafs_ref& ref : refs) fits = fits && xdr_odafs_ref(x, &ref);
  if (!fits) {
    ODAFS_LOG_ERROR("READ references do not fit the reply buffer");
    return reply_status<read_res>(r, xp(xdr_read_res), ODAFS_ERR_SERVERFAULT);
  }
  bytes_read_.fetch_add(len, std::memory_order_relaxed);
}

void FileService::do_read_direct(const rpc::CallContext& ctx, read_direct_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  auto fail = [&](odafs_stat status) {
    reply_status<read_direct_res>(r, xp(xdr_read_direct_res), status);
  };
  if (!S_ISREG(st.st_mode)) return fail(S_ISDIR(st.st_mode) ? ODAFS_ERR_ISDIR : ODAFS_ERR_INVAL);
  {
    IdentityScope as(ctx.cred, options_.auth_sys);
    if (!as.permits(st, R_OK)) return fail(ODAFS_ERR_ACCES);
  }
  if (!engine_ || a.session == 0) return fail(ODAFS_ERR_NOTSUPP);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  uint32_t count = std::min(a.count, options_.max_io);
  uint32_t len =
      a.offset >= size ? 0 : static_cast<uint32_t>(std::min<uint64_t>(count, size - a.offset));

  // Gather the bytes as a list of pieces of pinned cache blocks (no copy yet); the
  // engine copies them once, into the client's connection.
  const uint64_t bs = cache_.block_size();
  thread_local std::vector<cache::BlockCache::ReadPin> pins;
  thread_local std::vector<iovec> parts;
  thread_local std::vector<char> scratch;  // bypassed blocks and holes
  pins.clear();
  parts.clear();
  scratch.assign(len, 0);  // sized up front: parts point into it
  uint64_t pos = a.offset;
  for (uint32_t done = 0; done < len;) {
    uint64_t index = pos / bs;
    uint64_t in_block = pos % bs;
    uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(bs - in_block, len - done));
    uint32_t need = static_cast<uint32_t>(std::min<uint64_t>(bs, size - index * bs));
    int err = 0;
    pins.emplace_back();
    if (!pin_block(*node, index, need, &pins.back(), &err)) {
      pins.clear();
      return fail(status_from_errno(err));
    }
    const cache::BlockCache::ReadPin& pin = pins.back();
    if (pin.bypass()) {
      ssize_t k = pread(node->fd, scratch.data() + done, chunk, static_cast<off_t>(pos));
      if (k < 0) {
        pins.clear();
        return fail(status_from_errno(errno));
      }
      parts.push_back({scratch.data() + done, chunk});
    } else {
      uint32_t have = pin.valid() > in_block ? pin.valid() - static_cast<uint32_t>(in_block) : 0;
      uint32_t copy = std::min(have, chunk);
      if (copy > 0) {
        parts.push_back({const_cast<std::byte*>(pin.data()) + in_block, copy});
      }
      if (copy < chunk) parts.push_back({scratch.data() + done + copy, chunk - copy});  // zeros
    }
    done += chunk;
    pos += chunk;
  }
  ordma::Fault f = engine_->push(a.session, a.buffer, a.buffer_offset, a.tag, parts.data(),
                                 static_cast<int>(parts.size()));
  pins.clear();
  if (f == ordma::Fault::kWrongSession) return fail(ODAFS_ERR_NOTSUPP);  // no engine link
  if (f != ordma::Fault::kNone) return fail(ODAFS_ERR_IO);
  bytes_read_.fetch_add(len, std::memory_order_relaxed);
  read_direct_res res{};
  res.status = ODAFS_OK;
  fill_attr(st, &res.read_direct_res_u.ok.attr);
  res.read_direct_res_u.ok.eof = a.offset + len >= size;
  res.read_direct_res_u.ok.count = len;
  r.send(xp(xdr_read_direct_res), &res);
}

void FileService::do_getrefs(const rpc::CallContext&, getrefs_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  if (!S_ISREG(st.st_mode)) {
    return reply_status<getrefs_res>(r, xp(xdr_getrefs_res),
                                     S_ISDIR(st.st_mode) ? ODAFS_ERR_ISDIR : ODAFS_ERR_INVAL);
  }
  if (!engine_ || a.session == 0) {
    return reply_status<getrefs_res>(r, xp(xdr_getrefs_res), ODAFS_ERR_NOTSUPP);
  }
  const uint64_t bs = cache_.block_size();
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t end = std::min<uint64_t>(size, a.offset + std::min<uint64_t>(a.count, options_.max_io));
  thread_local std::vector<odafs_ref> refs;
  refs.clear();
  cache::BlockCache::ReadPin pin;
  for (uint64_t index = a.offset / bs; index * bs < end && refs.size() < ODAFS_MAXREFS; ++index) {
    uint32_t need = static_cast<uint32_t>(std::min<uint64_t>(bs, size - index * bs));
    int err = 0;
    if (!pin_block(*node, index, need, &pin, &err)) {
      return reply_status<getrefs_res>(r, xp(xdr_getrefs_res), status_from_errno(err));
    }
    if (pin.bypass()) break;  // the cache is saturated: no more blocks to hand out
    odafs_ref ref;
    if (pin.valid() > 0 && make_ref(pin, index, a.session, &ref)) refs.push_back(ref);
  }
  pin = {};
  getrefs_res res{};
  res.status = ODAFS_OK;
  res.getrefs_res_u.ok.refs.refs_len = static_cast<u_int>(refs.size());
  res.getrefs_res_u.ok.refs.refs_val = refs.data();
  r.send(xp(xdr_getrefs_res), &res);
}

odafs_stat FileService::check_write(const rpc::CallContext& ctx, Node& node, const struct stat& st,
                                    uint64_t offset, size_t len) {
  if (!S_ISREG(st.st_mode)) return S_ISDIR(st.st_mode) ? ODAFS_ERR_ISDIR : ODAFS_ERR_INVAL;
  {
    IdentityScope as(ctx.cred, options_.auth_sys);
    if (!as.permits(st, W_OK)) return ODAFS_ERR_ACCES;
  }
  if (len > options_.max_io) return ODAFS_ERR_FBIG;
  if (offset > static_cast<u_quad_t>(INT64_MAX) - len) return ODAFS_ERR_FBIG;
  if (!nodes_.make_writable(node)) return ODAFS_ERR_ACCES;
  return ODAFS_OK;
}

void FileService::do_write(const rpc::CallContext& ctx, write_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  odafs_stat status = check_write(ctx, *node, st, a.offset, a.data.data_len);
  if (status != ODAFS_OK) return reply_status<write_res>(r, xp(xdr_write_res), status);
  write_through(*node, a.offset, a.stable, a.data.data_val, a.data.data_len, r);
}

void FileService::do_write_direct(const rpc::CallContext& ctx, write_direct_args& a,
                                  rpc::Reply& r) {
  struct stat st;
  NodeRef node = resolve_or_reply(a.fh, r, &st);
  // Every failure before the transfer cancels the client's wait on the engine.
  auto cancel = [&] {
    if (engine_ && a.session != 0) engine_->cancel(a.session, a.tag, ordma::Fault::kBadRequest);
  };
  if (!node) return cancel();
  odafs_stat status = check_write(ctx, *node, st, a.offset, a.count);
  if (status == ODAFS_OK && (!engine_ || a.session == 0)) status = ODAFS_ERR_NOTSUPP;
  // Take a place among the writes that may wait on their clients (see Options); without
  // one the client writes by RPC instead.
  if (status == ODAFS_OK && direct_writes_waiting_.fetch_add(1, std::memory_order_acq_rel) >=
                                options_.max_direct_writes) {
    direct_writes_waiting_.fetch_sub(1, std::memory_order_acq_rel);
    direct_writes_refused_.fetch_add(1, std::memory_order_relaxed);
    status = ODAFS_ERR_NOTSUPP;
  }
  if (status != ODAFS_OK) {
    cancel();
    return reply_status<write_res>(r, xp(xdr_write_res), status);
  }
  thread_local std::vector<char> data;
  ordma::Fault f =
      engine_->pull(a.session, a.buffer, a.buffer_offset, a.tag, a.count, kPullTimeoutMs, &data);
  direct_writes_waiting_.fetch_sub(1, std::memory_order_acq_rel);
  if (f != ordma::Fault::kNone) {
    if (f == ordma::Fault::kTransport) cancel();  // timed out: the client may still wait
    ODAFS_LOG_WARN("WRITE_DIRECT: pulling from the client failed: %s", ordma::fault_name(f));
    return reply_status<write_res>(
        r, xp(xdr_write_res), f == ordma::Fault::kWrongSession ? ODAFS_ERR_NOTSUPP : ODAFS_ERR_IO);
  }
  write_through(*node, a.offset, a.stable, data.data(), a.count, r);
}

void FileService::write_through(Node& node, uint64_t offset, odafs_stable_how stable,
                                const char* src, size_t len, rpc::Reply& r) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = pwrite(node.fd, src + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // A short write (ENOSPC half-way) still reaches the cache below for what landed;
      // report the error so the client knows the write did not complete.
      int err = n < 0 ? errno : EIO;
      if (done == 0) return reply_status<write_res>(r, xp(xdr_write_res), status_from_errno(err));
      len = done;
      break;
    }
    done += static_cast<size_t>(n);
  }
  // Write-through done; now bring cached blocks up to date.
  const uint64_t bs = cache_.block_size();
  for (size_t pos = 0; pos < len;) {
    uint64_t abs = offset + pos;
    uint64_t in_block = abs % bs;
    size_t chunk = std::min<size_t>(bs - in_block, len - pos);
    cache_.update(cache::BlockKey{node.id, abs / bs}, static_cast<uint32_t>(in_block), src + pos,
                  chunk);
    pos += chunk;
  }
  odafs_stable_how committed = ODAFS_UNSTABLE;
  if (stable == ODAFS_FILE_SYNC) {
    if (fsync(node.fd) != 0) {
      return reply_status<write_res>(r, xp(xdr_write_res), status_from_errno(errno));
    }
    committed = ODAFS_FILE_SYNC;
  } else if (stable == ODAFS_DATA_SYNC) {
    if (fdatasync(node.fd) != 0) {
      return reply_status<write_res>(r, xp(xdr_write_res), status_from_errno(errno));
    }
    committed = ODAFS_DATA_SYNC;
  }
  bytes_written_.fetch_add(len, std::memory_order_relaxed);
  write_res res{};
  res.status = ODAFS_OK;
  res.write_res_u.ok.count = static_cast<u_int>(len);
  res.write_res_u.ok.committed = committed;
  std::memcpy(res.write_res_u.ok.verf, write_verf_.data(), write_verf_.size());
  struct stat st;
  fstat(node.fd, &st);
  fill_attr(st, &res.write_res_u.ok.attr);
  r.send(xp(xdr_write_res), &res);
}

void FileService::do_commit(const rpc::CallContext&, commit_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  if (!S_ISREG(st.st_mode)) {
    return reply_status<commit_res>(r, xp(xdr_commit_res), ODAFS_ERR_INVAL);
  }
  if (fsync(node->fd) != 0) {
    return reply_status<commit_res>(r, xp(xdr_commit_res), status_from_errno(errno));
  }
  commit_res res{};
  res.status = ODAFS_OK;
  std::memcpy(res.commit_res_u.verf, write_verf_.data(), write_verf_.size());
  r.send(xp(xdr_commit_res), &res);
}

void FileService::do_fsstat(const rpc::CallContext&, getattr_args& a, rpc::Reply& r) {
  struct stat st;
  NodeRef node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  struct statvfs vfs;
  if (fstatvfs(node->fd, &vfs) != 0) {
    return reply_status<fsstat_res>(r, xp(xdr_fsstat_res), status_from_errno(errno));
  }
  fsstat_res res{};
  res.status = ODAFS_OK;
  fsstat_ok& ok = res.fsstat_res_u.ok;
  ok.total_bytes = static_cast<u_quad_t>(vfs.f_blocks) * vfs.f_frsize;
  ok.free_bytes = static_cast<u_quad_t>(vfs.f_bfree) * vfs.f_frsize;
  ok.avail_bytes = static_cast<u_quad_t>(vfs.f_bavail) * vfs.f_frsize;
  ok.total_files = vfs.f_files;
  ok.free_files = vfs.f_ffree;
  ok.block_size = static_cast<u_int>(vfs.f_bsize);
  ok.max_name = static_cast<u_int>(vfs.f_namemax);
  r.send(xp(xdr_fsstat_res), &res);
}

void FileService::do_stats(rpc::Reply& r) {
  std::vector<std::pair<std::string, uint64_t>> values;
  for (uint32_t p = 0; p < server_->procedure_count(); ++p) {
    if (const char* name = server_->procedure_name(p)) {
      values.emplace_back(std::string("calls.") + name, server_->calls(p));
    }
  }
  const auto& rc = server_->counters();
  values.emplace_back("rpc.connections", rc.connections.load());
  values.emplace_back("rpc.records", rc.records.load());
  values.emplace_back("rpc.garbage_records", rc.garbage_records.load());
  values.emplace_back("rpc.garbage_args", rc.garbage_args.load());
  values.emplace_back("rpc.rejected", rc.rejected.load());
  values.emplace_back("rpc.oversized", rc.oversized.load());
  values.emplace_back("rpc.slow_readers", rc.slow_readers.load());
  values.emplace_back("rpc.refused", rc.refused.load());
  values.emplace_back("rpc.bytes_in", rc.bytes_in.load());
  values.emplace_back("rpc.bytes_out", rc.bytes_out.load());
  values.emplace_back("io.bytes_read", bytes_read_.load());
  values.emplace_back("io.bytes_written", bytes_written_.load());
  const auto& cs = cache_.stats();
  values.emplace_back("cache.hits", cs.hits.load());
  values.emplace_back("cache.misses", cs.misses.load());
  values.emplace_back("cache.evictions", cs.evictions.load());
  values.emplace_back("cache.bypasses", cs.bypasses.load());
  values.emplace_back("cache.fill_errors", cs.fill_errors.load());
  values.emplace_back("cache.blocks", cache_.block_count());
  values.emplace_back("cache.block_size", cache_.block_size());
  values.emplace_back("nodes.live", nodes_.size());
  values.emplace_back("direct_writes.refused_busy", direct_writes_refused_.load());
  if (engine_) {
    const ordma::EngineStats& es = engine_->stats();
    values.emplace_back("engine.connections", es.connections.load());
    values.emplace_back("engine.rings", es.rings.load());
    values.emplace_back("engine.reads", es.reads.load());
    values.emplace_back("engine.bytes", es.bytes.load());
    values.emplace_back("engine.pushes", es.pushes.load());
    values.emplace_back("engine.push_bytes", es.push_bytes.load());
    values.emplace_back("engine.pulls", es.pulls.load());
    values.emplace_back("engine.pull_bytes", es.pull_bytes.load());
    values.emplace_back("engine.bad_handshakes", es.bad_handshakes.load());
    values.emplace_back("engine.bad_frames", es.bad_frames.load());
    for (int f = 1; f < ordma::kFaultKinds; ++f) {
      values.emplace_back(
          std::string("engine.fault.") + ordma::fault_name(static_cast<ordma::Fault>(f)),
          es.faults[static_cast<size_t>(f)].load());
    }
  }
  uint64_t total = 0;
  for (const auto& [group, us] : cpu_->usage_us()) {
    values.emplace_back("cpu_us." + group, us);
    total += us;
  }
  values.emplace_back("cpu_us.total", total);

  std::vector<odafs_counter> counters(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    counters[i].name = values[i].first.data();
    counters[i].value = values[i].second;
  }
  stats_res res{};
  res.counters.counters_len = static_cast<u_int>(counters.size());
  res.counters.counters_val = counters.data();
  r.send(xp(xdr_stats_res), &res);
}

}  // namespace odafs::server
