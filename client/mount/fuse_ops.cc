// FuseFs: construction, the operation table, and the namespace operations.
#include "client/mount/fuse_ops.h"

#include <linux/fs.h>  // RENAME_NOREPLACE, RENAME_EXCHANGE
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <new>

#include "base/setid.h"

namespace odafs::mount {

int errno_of_exception(const std::exception& e) {
  if (const auto* oe = dynamic_cast<const Error*>(&e)) {
    int err = oe->errno_value();
    return err > 0 ? err : EIO;
  }
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return ENOMEM;
  return EIO;
}

namespace {

std::string host_name() {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace

FuseFs::FuseFs(Client& client, const Attr& root, FsOptions options)
    : client_(client),
      machine_(host_name()),
      inodes_(root.fileid),
      options_(options),
      block_size_(client.limits().block_size ? client.limits().block_size : 4096),
      io_size_(
          std::max(block_size_, std::min(client.limits().max_read, client.limits().max_write))) {}

FuseFs::~FuseFs() { close_left_open(); }

void FuseFs::close_left_open() {
  std::vector<uint64_t> left;
  {
    std::lock_guard<std::mutex> lock(open_mu_);
    for (const auto& [node, owned] : open_) left.push_back(reinterpret_cast<uint64_t>(node));
  }
  if (!left.empty()) {
    ODAFS_LOG_INFO("odafs-mount: closing %zu files and directories left open", left.size());
  }
  for (uint64_t fh : left) discard_open(fh);
}

uint64_t FuseFs::adopt(std::unique_ptr<OpenNode> node) {
  OpenNode* raw = node.get();
  std::lock_guard<std::mutex> lock(open_mu_);
  open_.emplace(raw, std::move(node));
  return reinterpret_cast<uint64_t>(raw);
}

std::unique_ptr<FuseFs::OpenNode> FuseFs::release(uint64_t fh) {
  std::lock_guard<std::mutex> lock(open_mu_);
  auto it = open_.find(reinterpret_cast<OpenNode*>(fh));
  if (it == open_.end()) return nullptr;
  std::unique_ptr<OpenNode> node = std::move(it->second);
  open_.erase(it);
  return node;
}

const fuse_lowlevel_ops& FuseFs::ops() {
  static const fuse_lowlevel_ops table = [] {
    fuse_lowlevel_ops o{};
    o.init = op_init;
    o.lookup = op_lookup;
    o.forget = op_forget;
    o.forget_multi = op_forget_multi;
    o.getattr = op_getattr;
    o.setattr = op_setattr;
    o.access = op_access;
    o.readlink = op_readlink;
    o.mknod = op_mknod;
    o.mkdir = op_mkdir;
    o.unlink = op_unlink;
    o.rmdir = op_rmdir;
    o.symlink = op_symlink;
    o.rename = op_rename;
    o.link = op_link;
    o.statfs = op_statfs;
    o.open = op_open;
    o.create = op_create;
    o.read = op_read;
    o.write = op_write;
    o.flush = op_flush;
    o.release = op_release;
    o.fsync = op_fsync;
    o.opendir = op_opendir;
    o.readdir = op_readdir;
    o.readdirplus = op_readdirplus;
    o.releasedir = op_releasedir;
    o.fsyncdir = op_fsyncdir;
    return o;
  }();
  return table;
}

rpc::CallerCred FuseFs::caller_of(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  rpc::CallerCred id;
  id.auth_sys = true;
  id.uid = ctx->uid;
  id.gid = ctx->gid;
  self(req).groups_.fill(req, &id);
  return id;
}

FuseFs::OpenFile* FuseFs::open_file_of(const fuse_file_info* fi) {
  if (fi == nullptr || fi->fh == 0) return nullptr;
  auto* node = reinterpret_cast<OpenNode*>(fi->fh);
  if (node->kind != OpenNode::Kind::kFile) return nullptr;
  return static_cast<OpenFile*>(node);
}

File* FuseFs::file_of(const fuse_file_info* fi) {
  OpenFile* f = open_file_of(fi);
  return f != nullptr ? &f->file : nullptr;
}

struct stat FuseFs::to_stat(const Attr& a) const {
  // st_ino is the server's file id (FUSE reports attr.ino, not the node id), so that
  // programs that compare inode numbers (find, tar, cp -a) see stable ones.
  return odafs::to_stat(a, io_size_);
}

void FuseFs::reply_entry(fuse_req_t req, Ino parent, const std::string& name, const Attr& a) {
  fuse_entry_param e{};
  e.ino = inodes_.add_lookup(parent, name, a.fileid, a.type == FileType::kDirectory);
  e.generation = 0;  // inode numbers are never reused
  e.attr = to_stat(a);
  e.attr_timeout = options_.attr_timeout;
  e.entry_timeout = options_.entry_timeout;
  // An interrupted request's reply is dropped: the kernel never counts that lookup.
  if (fuse_reply_entry(req, &e) != 0) inodes_.forget(e.ino, 1);
}

Attr FuseFs::attr_of(Ino ino) {
  Attr a = client_.lstat(inodes_.path(ino));
  uint64_t known = inodes_.fileid(ino);
  if (ino != kRootIno && known != 0 && known != a.fileid) {
    // The name holds another file now (replaced, e.g. by another client's rename over
    // it). Answering with that file's attributes would change the inode under the kernel
    // (a different type even makes it mark the inode bad); instead the node lets go of
    // the name and fails ESTALE, on which the VFS looks the name up again and retries
    // (stat, open, chmod... do), and gets a fresh node for the new file.
    inodes_.detach(ino);
    throw Error(ESTALE, "odafs-mount: the name holds another file now");
  }
  return a;
}

void FuseFs::hide_open(Ino parent, const std::string& name, Ino ino) {
  static std::atomic<uint64_t> counter{0};
  std::string hidden = ".odafs-hidden-" + std::to_string(ino) + "-" + std::to_string(++counter);
  std::string dir = inodes_.path(parent);
  std::string prefix = dir.empty() ? "" : dir + "/";
  client_.rename(prefix + name, prefix + hidden);
  inodes_.renamed(parent, name, parent, hidden);
  if (!inodes_.mark_hidden(ino)) {  // closed meanwhile: nothing keeps it
    client_.unlink(prefix + hidden);
    inodes_.removed(parent, hidden);
  }
}

void FuseFs::released(Ino ino) {
  if (!inodes_.release_open(ino)) return;
  // Part of a release (discard_open), which has no error to reply with: a failure (another
  // client removed the file, say) is logged, never thrown.
  try {
    client_.unlink(inodes_.path(ino));
    inodes_.detach(ino);
  } catch (const std::exception& e) {
    ODAFS_LOG_WARN("odafs-mount: removing a hidden file at its last close: %s", e.what());
  }
}

void FuseFs::op_init(void* userdata, fuse_conn_info* conn) {
  // O_TRUNC travels with the open, which truncates (saves the kernel's separate SETATTR).
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  // No writeback cache: every write goes to the server before write(2) returns, which is
  // what another client's close-to-open view depends on.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Dropping setuid/setgid bits at a write, truncation or chown is ours where libfuse can
  // say so (it cannot before 3.16): the server drops them at WRITE and at SETATTR of the
  // size (the root it runs as would keep them), and at a chown (as the kernel does for
  // any chown). Otherwise the kernel drops them itself, by a chmod as a writer without
  // CAP_FSETID (op_setattr lets pass the one a server acting as the writer refuses).
  if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV) conn->want |= FUSE_CAP_HANDLE_KILLPRIV;
  // readdirplus for every slice of a listing, not the kernel's adaptive mode (which asks
  // for attributes after the first slice only once a name of it was looked up): the
  // listing is fetched whole, with attributes, at opendir anyway, and programs that read
  // a whole directory before they stat it (find, fts) then need no LOOKUP either
  // (bench/mount/run_listing.sh: find 10x faster, plain ls 3 us per entry slower).
  FuseFs& fs = *static_cast<FuseFs*>(userdata);
  if (fs.options_.readdirplus && (conn->capable & FUSE_CAP_READDIRPLUS)) {
    conn->want |= FUSE_CAP_READDIRPLUS;
    conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  } else {
    conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
  }
}

void FuseFs::op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  guard(req, "lookup", [&] {
    FuseFs& fs = self(req);
    Result<Attr> a = fs.client_.try_lstat(fs.inodes_.child_path(parent, name));
    if (a.errno_value() == ENOENT && fs.options_.negative_timeout > 0) {
      fuse_entry_param none{};  // ino 0: the kernel keeps "no such name" entry_timeout long
      none.entry_timeout = fs.options_.negative_timeout;
      fuse_reply_entry(req, &none);
      return;
    }
    fs.reply_entry(req, parent, name, or_throw(std::move(a)));
  });
}

void FuseFs::op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  self(req).inodes_.forget(ino, nlookup);
  fuse_reply_none(req);
}

void FuseFs::op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  FuseFs& fs = self(req);
  for (size_t i = 0; i < count; ++i) fs.inodes_.forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void FuseFs::op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guard(req, "getattr", [&] {
    FuseFs& fs = self(req);
    // Through an open file (fstat, and the kernel's size checks on read): that file's
    // attributes, even if its name changed or went away.
    OpenFile* of = open_file_of(fi);
    Attr a;
    double keep = fs.options_.attr_timeout;
    // A write may have dropped setuid/setgid bits at the server (base/setid.h), which
    // only the server knows it did: such a file's attributes come from the server.
    if (of != nullptr && of->attr_epoch == fs.attr_epoch_.load() &&
        !(of->written.load() && setid_bits_to_drop(of->file.attributes_at_open().mode) != 0)) {
      a = of->file.attributes_at_open();  // from the open's OPEN or its delegation
      a.size = of->file.known_size();     // with this client's writes
      if (of->answered.exchange(true) || of->written.load()) keep = 0;
    } else {
      a = of != nullptr ? of->file.stat() : fs.attr_of(ino);
    }
    // An open file unlinked here lives on the server under a hidden name (hide_open):
    // that link is ours, not the program's, which must see the file's last link gone.
    if (a.nlink > 0 && fs.inodes_.hidden(ino)) --a.nlink;
    struct stat st = fs.to_stat(a);
    fuse_reply_attr(req, &st, keep);
  });
}

void FuseFs::op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                        fuse_file_info* fi) {
  guard(req, "setattr", [&] {
    FuseFs& fs = self(req);
    fs.changing();
    fs.attr_epoch_.fetch_add(1);  // opens stop answering getattrs from what they knew
    File* f = file_of(fi);
    if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
      // The server judges it as the caller (--auth-sys) and drops setuid/setgid bits as
      // chown(2) does (the kernel leaves that to us: FUSE_CAP_HANDLE_KILLPRIV, op_init;
      // without it, it sends the mode without them too, below). The inode is the object
      // itself, a symlink included (lchown).
      fs.client_.chown(fs.inodes_.path(ino),
                       (to_set & FUSE_SET_ATTR_UID) ? attr->st_uid : static_cast<uid_t>(-1),
                       (to_set & FUSE_SET_ATTR_GID) ? attr->st_gid : static_cast<gid_t>(-1));
    }
    if (to_set & FUSE_SET_ATTR_SIZE) {
      if (f != nullptr) {
        f->truncate(static_cast<uint64_t>(attr->st_size));
      } else {
        // truncate(2) by name goes by the mode. The server lets a file's owner truncate
        // it whatever its mode (what a descriptor opened for writing needs, above), so
        // that one case is refused here: an unprivileged owner without its write bit.
        // Every other refusal (others' files, a read-only export) is the server's.
        const uid_t uid = fuse_req_ctx(req)->uid;
        const Attr now = fs.attr_of(ino);
        if (uid != 0 && uid == now.uid && (now.mode & S_IWUSR) == 0) {
          throw Error(EACCES, "truncate");
        }
        fs.client_.truncate(fs.inodes_.path(ino), static_cast<uint64_t>(attr->st_size));
      }
    }
    if (to_set & FUSE_SET_ATTR_MODE) {
      const mode_t mode = attr->st_mode & 07777;
      Status changed = fs.client_.try_chmod(fs.inodes_.path(ino), mode);
      // The kernel's own drop of setuid/setgid bits before a write or truncation by a
      // caller without CAP_FSETID (op_init) comes as a chmod as that caller, which a server
      // acting as its callers refuses to any but the owner. The server drops the bits
      // itself at the WRITE or truncation that follows, so a refused chmod that would only
      // drop them (or change nothing) passes.
      if (changed.errno_value() == EPERM) {
        const Attr cur = f != nullptr ? f->stat() : fs.attr_of(ino);
        if (mode == (cur.mode & 07777 & ~setid_bits_to_drop(cur.mode))) changed = Status();
      }
      or_throw(changed);
    }
    // The inode is the object itself, a symlink included (lutimes: the kernel resolved
    // every symlink it was to follow).
    if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
      struct timespec t[2];
      t[0].tv_sec = t[1].tv_sec = 0;
      t[0].tv_nsec = t[1].tv_nsec = UTIME_OMIT;
      if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
        t[0].tv_nsec = UTIME_NOW;
      } else if (to_set & FUSE_SET_ATTR_ATIME) {
        t[0] = attr->st_atim;
      }
      if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
        t[1].tv_nsec = UTIME_NOW;
      } else if (to_set & FUSE_SET_ATTR_MTIME) {
        t[1] = attr->st_mtim;
      }
      fs.client_.utimens(fs.inodes_.path(ino), t, /*follow_last=*/false);
    }
    Attr a = f != nullptr ? f->stat() : fs.attr_of(ino);
    struct stat st = fs.to_stat(a);
    fuse_reply_attr(req, &st, fs.options_.attr_timeout);
  });
}

void FuseFs::op_access(fuse_req_t req, fuse_ino_t ino, int mask) {
  guard(req, "access", [&] {
    FuseFs& fs = self(req);
    const int want = mask & (R_OK | W_OK | X_OK);
    // The inode is the object itself (faccessat with AT_SYMLINK_NOFOLLOW reaches a
    // symlink's, which has every bit).
    if (want != 0 && fs.client_.access(fs.inodes_.path(ino), want, false) != want) {
      throw Error(EACCES, "access");
    }
    fuse_reply_err(req, 0);
  });
}

void FuseFs::op_readlink(fuse_req_t req, fuse_ino_t ino) {
  guard(req, "readlink", [&] {
    FuseFs& fs = self(req);
    std::string target = fs.client_.readlink(fs.inodes_.path(ino));
    fuse_reply_readlink(req, target.c_str());
  });
}

void FuseFs::op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                      dev_t rdev) {
  guard(req, "mknod", [&] {
    FuseFs& fs = self(req);
    fs.changing();
    std::string path = fs.inodes_.child_path(parent, name);
    Attr a;
    if (S_ISREG(mode)) {  // mknod(2) of a regular file: an exclusive create
      File f = fs.client_.open(path, O_WRONLY | O_CREAT | O_EXCL, mode & 07777);
      a = f.stat();
      f.close();
    } else {
      // FIFOs, sockets and devices live on the server as what they are; the kernel opens
      // a FIFO or socket of this mount locally (it never asks us to read one), so two
      // processes on one host talk through it as on a local file system.
      a = fs.client_.mknod(path, mode, rdev);
    }
    fs.reply_entry(req, parent, name, a);
  });
}

void FuseFs::op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  guard(req, "mkdir", [&] {
    FuseFs& fs = self(req);
    fs.changing();
    std::string path = fs.inodes_.child_path(parent, name);
    fs.client_.mkdir(path, mode & 07777);
    fs.reply_entry(req, parent, name, fs.client_.lstat(path));
  });
}

void FuseFs::op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  guard(req, "unlink", [&] {
    FuseFs& fs = self(req);
    fs.changing();
    if (Ino open = fs.inodes_.open_node_at(parent, name)) {
      fs.hide_open(parent, name, open);
    } else {
      fs.client_.unlink(fs.inodes_.child_path(parent, name));
      fs.inodes_.removed(parent, name);
    }
    fuse_reply_err(req, 0);
  });
}

void FuseFs::op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  guard(req, "rmdir", [&] {
    FuseFs& fs = self(req);
    fs.changing();
    fs.client_.rmdir(fs.inodes_.child_path(parent, name));
    fs.inodes_.removed(parent, name);
    fuse_reply_err(req, 0);
  });
}

void FuseFs::op_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  guard(req, "symlink", [&] {
    FuseFs& fs = self(req);
    fs.changing();
    std::string path = fs.inodes_.child_path(parent, name);
    fs.client_.symlink(link, path);
    fs.reply_entry(req, parent, name, fs.client_.lstat(path));
  });
}

void FuseFs::op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                       const char* newname, unsigned int flags) {
  guard(req, "rename", [&] {
    FuseFs& fs = self(req);
    fs.changing();
    // RENAME_EXCHANGE needs an atomic swap the protocol lacks; RENAME_WHITEOUT is for
    // overlay file systems. RENAME_NOREPLACE is emulated: a look at the target first, so
    // a name another client creates in between is replaced (documented in docs/mount.md).
    if (flags & ~static_cast<unsigned>(RENAME_NOREPLACE)) {
      throw Error(EINVAL, "odafs-mount: rename flags other than RENAME_NOREPLACE");
    }
    std::string from = fs.inodes_.child_path(parent, name);
    std::string to = fs.inodes_.child_path(newparent, newname);
    if (flags & RENAME_NOREPLACE) {
      Result<Attr> target = fs.client_.try_lstat(to);
      if (target.ok()) throw Error(EEXIST, "odafs-mount: rename target exists");
      if (target.errno_value() != ENOENT) or_throw(target.status());
    }
    // A file open here that the rename would replace is moved aside first (not atomic:
    // for a moment the target name does not exist, as with NFS clients).
    if (Ino open = fs.inodes_.open_node_at(newparent, newname)) {
      fs.hide_open(newparent, newname, open);
    }
    fs.client_.rename(from, to);
    fs.inodes_.renamed(parent, name, newparent, newname);
    fuse_reply_err(req, 0);
  });
}

void FuseFs::op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  guard(req, "link", [&] {
    FuseFs& fs = self(req);
    fs.changing();
    // The new name gets a node of its own (nodes go by name here); st_ino is the server's
    // file id for both, so programs comparing inode numbers (tar, cp -a, du) see one file.
    std::string path = fs.inodes_.child_path(newparent, newname);
    Attr a = fs.client_.link(fs.inodes_.path(ino), path);
    fs.reply_entry(req, newparent, newname, a);
  });
}

void FuseFs::op_statfs(fuse_req_t req, fuse_ino_t ino) {
  (void)ino;
  guard(req, "statfs", [&] {
    FuseFs& fs = self(req);
    FsStat s = fs.client_.statfs();
    struct statvfs v {};
    uint64_t bs = s.block_size ? s.block_size : fs.block_size_;
    v.f_bsize = bs;
    v.f_frsize = bs;
    v.f_blocks = s.total_bytes / bs;
    v.f_bfree = s.free_bytes / bs;
    v.f_bavail = s.avail_bytes / bs;
    v.f_files = s.total_files;
    v.f_ffree = s.free_files;
    v.f_favail = s.free_files;
    v.f_namemax = s.max_name ? s.max_name : 255;
    fuse_reply_statfs(req, &v);
  });
}

}  // namespace odafs::mount
