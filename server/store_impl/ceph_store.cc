// Built with _FILE_OFFSET_BITS=64 (libcephfs.h refuses glibc's other names); see
// ceph_store.h.
#include "server/store_impl/ceph_store.h"

#include <cephfs/libcephfs.h>
#include <dirent.h>
#include <fcntl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/log.h"
#include "rpc/call_credential.h"
#include "rpc/server.h"
#include "server/store_impl/ceph_object.h"
#include "server/store_impl/move_bytes.h"

// libcephfs declares inodeno_t only for C++ callers; it is one 64-bit inode number, passed
// by value (the C definition in ceph_ll_client.h).
struct inodeno_t {
  uint64_t val;
};

namespace odafs::server {
namespace {

using ceph::ceph_status;
using ceph::CephObject;
using ceph::obj_of;

// Before every CephFS call a handler makes: any of them may wait on the cluster, for the
// MDS to revoke another client's capabilities (a second or more while its locks settle
// after a writer; the session timeout, 30 s or more, when that client is stopped or gone)
// or for the OSDs. A lookup or getattr waits too: the attributes it asks for (size, times)
// need the capabilities a writer holds. The RPC thread's event loop goes on without the
// call (rpc::before_blocking), so such a wait stalls its caller only, not every client of
// the loop. The price, two context switches per call, is measured in docs/ceph.md; the
// stat of a leased file, answered from the capabilities the lease holds, does not pay it.
void may_wait_on_cluster() { rpc::before_blocking(rpc::Wait::kLong); }

constexpr unsigned kWant = CEPH_STATX_BASIC_STATS | CEPH_STATX_RDEV;

void to_stat(const struct ceph_statx& x, struct stat* st) {
  *st = {};
  st->st_dev = x.stx_dev;
  st->st_ino = x.stx_ino;
  st->st_mode = x.stx_mode;
  st->st_nlink = x.stx_nlink;
  st->st_uid = x.stx_uid;
  st->st_gid = x.stx_gid;
  st->st_rdev = x.stx_rdev;
  st->st_size = static_cast<off_t>(x.stx_size);
  st->st_blksize = x.stx_blksize;
  st->st_blocks = static_cast<blkcnt_t>(x.stx_blocks);
  st->st_atim = x.stx_atime;
  st->st_mtim = x.stx_mtime;
  st->st_ctim = x.stx_ctime;
}

// The caller this thread acts as (CallerScope), and the UserPerm for it, kept and reused
// while the same caller comes again. Destroyed with the thread.
struct ThreadCaller {
  bool acting = false;
  rpc::CallerCred cred;  // valid while acting
  UserPerm* perm = nullptr;
  ~ThreadCaller() {
    if (perm != nullptr) ceph_userperm_destroy(perm);
  }
};
thread_local ThreadCaller t_caller;

bool same_cred(const rpc::CallerCred& a, const rpc::CallerCred& b) {
  return a.uid == b.uid && a.gid == b.gid && a.ngids == b.ngids &&
         std::equal(a.gids, a.gids + std::min<uint32_t>(a.ngids, 16), b.gids);
}

// The permission set a call runs with: the caller's, or the mount's own.
const UserPerm* current_perm(ceph_mount_info* cm) {
  return t_caller.acting ? t_caller.perm : ceph_mount_perms(cm);
}

}  // namespace

Result<std::unique_ptr<CephStore>> CephStore::connect(const Options& options) {
  ceph_mount_info* cm = nullptr;
  int rc = ceph_create(&cm, options.client_id.empty() ? nullptr : options.client_id.c_str());
  if (rc != 0) return ceph_status(rc, "ceph_create");
  std::unique_ptr<CephStore> store(new CephStore(cm));  // releases cm from here on
  if (!options.conf.empty() && (rc = ceph_conf_read_file(cm, options.conf.c_str())) != 0) {
    return Status(-rc, "reading " + options.conf);
  }
  if (!options.gateway_name.empty()) {
    if (Status s = ceph::name_gateway(cm, options.gateway_name); !s.ok()) return s;
  }
  if (!options.session_uuid.empty()) {
    if (Status s = ceph::reclaim_session(cm, options.session_uuid); !s.ok()) return s;
  }
  if ((rc = ceph_mount(cm, options.path.c_str())) != 0) {
    return Status(-rc, "mounting CephFS path " + options.path);
  }
  if (options.lease_timeout_s > 0) {
    rc = ceph_set_deleg_timeout(cm, options.lease_timeout_s);
    if (rc == 0) {
      store->leases_ = true;
    } else {
      ODAFS_LOG_WARN(
          "cephfs: no delegations (timeout %us: %s): cached blocks are only "
          "checked against change times",
          options.lease_timeout_s, std::strerror(-rc));
    }
  }
  return store;
}

CephStore::~CephStore() {
  ceph_unmount(cm_);  // harmless when the mount never succeeded
  ceph_release(cm_);
}

void CephStore::release(uintptr_t native) {
  auto* o = reinterpret_cast<CephObject*>(native);
  if (o->leased != nullptr) give_back_delegation(o->leased);  // the last holder: no lock
  if (Fh* fh = o->fh.load(); fh != nullptr) ceph_ll_close(cm_, fh);
  for (Fh* fh : o->retired) ceph_ll_close(cm_, fh);
  if (o->owned_in && o->in != nullptr) ceph_ll_put(cm_, o->in);
  delete o;
}

auth_stat CephStore::begin_caller(const rpc::CallerCred* cred, bool acting, uintptr_t* restore) {
  *restore = 0;
  if (!acting) return AUTH_OK;
  if (cred == nullptr || !cred->auth_sys) return AUTH_TOOWEAK;
  if (t_caller.perm == nullptr || !same_cred(t_caller.cred, *cred)) {
    gid_t groups[16];
    const uint32_t n = std::min<uint32_t>(cred->ngids, 16);
    std::copy(cred->gids, cred->gids + n, groups);
    UserPerm* perm = ceph_userperm_new(cred->uid, cred->gid, static_cast<int>(n), groups);
    if (perm == nullptr) return AUTH_BADCRED;
    if (t_caller.perm != nullptr) ceph_userperm_destroy(t_caller.perm);
    t_caller.perm = perm;
    t_caller.cred = *cred;
  }
  t_caller.acting = true;
  *restore = 1;
  return AUTH_OK;
}

void CephStore::end_caller(uintptr_t restore) {
  if (restore != 0) t_caller.acting = false;
}

Result<Object> CephStore::root() {
  may_wait_on_cluster();
  Inode* in = nullptr;
  if (int rc = ceph_ll_lookup_root(cm_, &in); rc != 0) return ceph_status(rc, "root");
  return Object(this, reinterpret_cast<uintptr_t>(new CephObject(in, nullptr, true)));
}

int CephStore::lookup_inode(const Object& dir, const char* name, Inode** in, struct stat* st) {
  may_wait_on_cluster();
  struct ceph_statx x {};
  const int rc = ceph_ll_lookup(cm_, obj_of(dir).in, name, in, &x, kWant, AT_SYMLINK_NOFOLLOW,
                                current_perm(cm_));
  if (rc == 0) to_stat(x, st);
  return rc;
}

Result<Object> CephStore::lookup(const Object& dir, const char* name, struct stat* st) {
  Inode* in = nullptr;
  if (int rc = lookup_inode(dir, name, &in, st); rc != 0) return ceph_status(rc, "lookup");
  return Object(this, reinterpret_cast<uintptr_t>(new CephObject(in, nullptr, true)));
}

Status CephStore::stat_at(const Object& dir, const char* name, struct stat* st) {
  // lookup() without wrapping the inode in an Object: nothing to allocate per call.
  Inode* in = nullptr;
  if (int rc = lookup_inode(dir, name, &in, st); rc != 0) return ceph_status(rc, "stat");
  ceph_ll_put(cm_, in);
  return Status();
}

Status CephStore::stat(const Object& obj, struct stat* st) {
  // Under the lease nobody else writes the file: its attributes come from the capabilities
  // the lease holds, at once. Every READ stats its file (post-operation attributes), so
  // this is the hot path the hand-over would cost most on (a fifth of the RPC reads/s).
  if (!obj_of(obj).under_lease.load(std::memory_order_relaxed)) may_wait_on_cluster();
  struct ceph_statx x {};
  const int rc =
      ceph_ll_getattr(cm_, obj_of(obj).in, &x, kWant, AT_SYMLINK_NOFOLLOW, current_perm(cm_));
  if (rc != 0) return ceph_status(rc, "stat");
  to_stat(x, st);
  return Status();
}

ObjectId CephStore::id_of(const struct stat& st) const {
  return ObjectId{static_cast<uint64_t>(st.st_ino), 0};  // the head, not a snapshot
}

Result<Object> CephStore::find(const ObjectId& id, struct stat* st, Access* access) {
  may_wait_on_cluster();
  if (id.space != 0) return Status(ESTALE, "find: snapshots are not exported");
  Inode* in = nullptr;
  const int rc = ceph_ll_lookup_inode(cm_, inodeno_t{id.ino}, &in);
  if (rc == -ENOENT || rc == -ESTALE) return Status(ESTALE, "find: no such inode any more");
  if (rc != 0) return ceph_status(rc, "find");
  Object held(this, reinterpret_cast<uintptr_t>(new CephObject(in, nullptr, true)));
  if (Status s = stat(held, st); !s.ok()) return s;
  if (st->st_nlink == 0) return Status(ESTALE, "find: removed");
  if (Status s = open_held(held, *st, access); !s.ok()) return s;
  return held;
}

Status CephStore::open_held(const Object& held, const struct stat& st, Access* access) {
  may_wait_on_cluster();
  *access = Access{};
  if (S_ISDIR(st.st_mode)) {
    access->readable = true;  // listed through the inode (ll_opendir): nothing to open
    return Status();
  }
  if (!S_ISREG(st.st_mode)) return Status();
  // For reading only, unlike the POSIX store: while two clients of a CephFS have a file
  // open for writing, the MDS lets none of them cache it (every read and stat goes to the
  // MDS and the OSDs; measured: 90 µs RPC reads became 1.5 ms). A gateway becomes a writer
  // of a file when it writes it (NodeTable::make_writable, reopen_in_place).
  Fh* fh = nullptr;
  CephObject& o = obj_of(held);
  const int rc = ceph_ll_open(cm_, o.in, O_RDONLY, &fh, current_perm(cm_));
  if (rc == 0) access->readable = true;
  if (rc == -EACCES || rc == -EPERM) return Status();  // held only
  if (rc != 0) return ceph_status(rc, "open");
  o.fh.store(fh, std::memory_order_release);
  return Status();
}

Result<Object> CephStore::open_at(const Object& dir, const char* name, struct stat* st,
                                  Access* access) {
  *access = Access{};
  const ino_t expected = st->st_ino;
  Result<Object> held = lookup(dir, name, st);
  if (!held) return held;
  if (st->st_ino != expected) return Status(ESTALE, "open_at: replaced since its stat");
  if (Status s = open_held(*held, *st, access); !s.ok()) return s;
  return held;
}

Status CephStore::reopen_in_place(const Object& obj, bool write, Access* access) {
  may_wait_on_cluster();
  struct stat st;
  if (Status s = stat(obj, &st); !s.ok()) return s;
  if (!S_ISREG(st.st_mode)) return Status(EISDIR, "reopen in place: not a regular file");
  CephObject& o = obj_of(obj);
  Fh* fh = nullptr;
  int rc = ceph_ll_open(cm_, o.in, O_RDWR, &fh, current_perm(cm_));
  const bool rdwr = rc == 0;
  if (rc != 0 && !write && (rc == -EACCES || rc == -EROFS)) {
    rc = ceph_ll_open(cm_, o.in, O_RDONLY, &fh, current_perm(cm_));
  }
  if (rc != 0) return ceph_status(rc, "reopen in place");
  std::lock_guard lock(o.mu);
  if (Fh* before = o.fh.exchange(fh, std::memory_order_acq_rel); before != nullptr) {
    o.retired.push_back(before);  // a reader may be inside it right now
  }
  *access = Access{true, rdwr};
  return Status();
}

std::string CephStore::durable_key(const Object&) {
  return {};  // CephFS never reuses an inode number
}

Result<Object> CephStore::open(const Object& obj, int flags) {
  may_wait_on_cluster();
  struct stat st;
  if (Status s = stat(obj, &st); !s.ok()) return s;
  Result<int> how = open_flags(st.st_mode, flags);
  if (!how) return how.status();
  Fh* fh = nullptr;
  if (int rc = ceph_ll_open(cm_, obj_of(obj).in, *how, &fh, current_perm(cm_)); rc != 0) {
    return ceph_status(rc, "open");
  }
  return Object(this, reinterpret_cast<uintptr_t>(new CephObject(obj_of(obj).in, fh, false)));
}

Result<Object> CephStore::create(const Object& dir, const char* name, mode_t mode, bool exclusive,
                                 struct stat* st, bool* created, bool* writable) {
  may_wait_on_cluster();
  *created = false;
  *writable = true;
  const UserPerm* perm = current_perm(cm_);
  for (int attempt = 0; attempt < 3; ++attempt) {
    Inode* in = nullptr;
    Fh* fh = nullptr;
    struct ceph_statx x {};
    int rc = ceph_ll_create(cm_, obj_of(dir).in, name, mode & 07777, O_RDWR | O_CREAT | O_EXCL, &in,
                            &fh, &x, kWant, 0, perm);
    if (rc == 0) {
      *created = true;
      to_stat(x, st);
      // The open file pins the inode; the lookup reference is given back at release.
      return Object(this, reinterpret_cast<uintptr_t>(new CephObject(in, fh, true)));
    }
    if (rc != -EEXIST || exclusive) return ceph_status(rc, "create");
    Result<Object> there = lookup(dir, name, st);
    if (!there && there.errno_value() == ENOENT) continue;  // removed meanwhile: create it
    if (!there) return there.status();
    if (!S_ISREG(st->st_mode)) return Status(EEXIST, "create: not a regular file at the name");
    Result<Object> opened = open(*there, O_RDWR);
    if (!opened && opened.errno_value() == EACCES) {
      *writable = false;  // there, but the caller may not write it: read-only, as LOOKUP
      opened = open(*there, O_RDONLY);
    }
    // The open file pins the inode after `there` gives its reference back.
    return opened;
  }
  return Status(EAGAIN, "create: the name kept changing");
}

Status CephStore::mkdir(const Object& dir, const char* name, mode_t mode) {
  may_wait_on_cluster();
  Inode* out = nullptr;
  struct ceph_statx x {};
  const int rc =
      ceph_ll_mkdir(cm_, obj_of(dir).in, name, mode & 07777, &out, &x, 0, 0, current_perm(cm_));
  if (rc != 0) return ceph_status(rc, "mkdir");
  ceph_ll_put(cm_, out);
  return Status();
}

Status CephStore::symlink(const Object& dir, const char* name, const char* target) {
  may_wait_on_cluster();
  Inode* out = nullptr;
  struct ceph_statx x {};
  const int rc =
      ceph_ll_symlink(cm_, obj_of(dir).in, name, target, &out, &x, 0, 0, current_perm(cm_));
  if (rc != 0) return ceph_status(rc, "symlink");
  ceph_ll_put(cm_, out);
  return Status();
}

Status CephStore::mknod(const Object& dir, const char* name, mode_t mode, dev_t rdev) {
  may_wait_on_cluster();
  Inode* out = nullptr;
  struct ceph_statx x {};
  const int rc =
      ceph_ll_mknod(cm_, obj_of(dir).in, name, mode, rdev, &out, &x, 0, 0, current_perm(cm_));
  if (rc != 0) return ceph_status(rc, "mknod");
  ceph_ll_put(cm_, out);
  return Status();
}

Status CephStore::remove(const Object& dir, const char* name, bool directory) {
  may_wait_on_cluster();
  const int rc = directory ? ceph_ll_rmdir(cm_, obj_of(dir).in, name, current_perm(cm_))
                           : ceph_ll_unlink(cm_, obj_of(dir).in, name, current_perm(cm_));
  if (rc == -EEXIST) return Status(ENOTEMPTY, "rmdir");
  if (rc != 0) return ceph_status(rc, directory ? "rmdir" : "unlink");
  return Status();
}

Status CephStore::rename(const Object& from_dir, const char* from_name, const Object& to_dir,
                         const char* to_name) {
  may_wait_on_cluster();
  // rename(2) does nothing when both names are links of one object; libcephfs 16.2's
  // ll_rename of a name onto itself instead loses the name (ENOENT after), so that case
  // is answered here.
  struct stat from_st;
  struct stat to_st;
  if (Status s = stat_at(from_dir, from_name, &from_st); !s.ok()) return s;
  if (stat_at(to_dir, to_name, &to_st).ok() && to_st.st_ino == from_st.st_ino) return Status();
  const int rc = ceph_ll_rename(cm_, obj_of(from_dir).in, from_name, obj_of(to_dir).in, to_name,
                                current_perm(cm_));
  if (rc == -EEXIST) return Status(ENOTEMPTY, "rename");
  if (rc != 0) return ceph_status(rc, "rename");
  return Status();
}

Status CephStore::link(const Object& obj, const Object& dir, const char* name) {
  may_wait_on_cluster();
  const int rc = ceph_ll_link(cm_, obj_of(obj).in, obj_of(dir).in, name, current_perm(cm_));
  if (rc != 0) return ceph_status(rc, "link");
  return Status();
}

Result<size_t> CephStore::readlink(const Object& obj, char* buf, size_t cap) {
  may_wait_on_cluster();
  const int rc = ceph_ll_readlink(cm_, obj_of(obj).in, buf, cap, current_perm(cm_));
  if (rc < 0) return ceph_status(rc, "readlink");
  return static_cast<size_t>(rc);
}

Status CephStore::statfs(const Object& obj, struct statvfs* out) {
  may_wait_on_cluster();
  if (int rc = ceph_ll_statfs(cm_, obj_of(obj).in, out); rc != 0) {
    return ceph_status(rc, "statfs");
  }
  return Status();
}

Status CephStore::set_attributes(const Object& obj, const AttrChange& change) {
  may_wait_on_cluster();
  Inode* in = obj_of(obj).in;
  const UserPerm* perm = current_perm(cm_);
  // One change at a time, in the order the interface states, so that a refused one leaves
  // the later ones undone as the POSIX store does.
  if (change.set_mode) {
    struct stat st;
    if (Status s = stat(obj, &st); !s.ok()) return s;
    if (S_ISLNK(st.st_mode)) return Status(EOPNOTSUPP, "chmod of a symlink");
    struct ceph_statx x {};
    x.stx_mode = static_cast<uint16_t>(change.mode & 07777);
    if (int rc = ceph_ll_setattr(cm_, in, &x, CEPH_SETATTR_MODE, perm); rc != 0) {
      return ceph_status(rc, "chmod");
    }
  }
  if (change.set_owner) {
    struct ceph_statx x {};
    int mask = 0;
    if (change.uid != static_cast<uid_t>(-1)) {
      x.stx_uid = change.uid;
      mask |= CEPH_SETATTR_UID;
    }
    if (change.gid != static_cast<gid_t>(-1)) {
      x.stx_gid = change.gid;
      mask |= CEPH_SETATTR_GID;
    }
    if (mask != 0) {
      if (int rc = ceph_ll_setattr(cm_, in, &x, mask, perm); rc != 0) {
        return ceph_status(rc, "chown");
      }
    }
  }
  if (change.set_times) {
    struct ceph_statx x {};
    int mask = 0;
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);  // UTIME_NOW: this gateway's clock, as a kernel's
    const timespec* t = change.times;
    auto pick = [&](const timespec& in_time) {
      return in_time.tv_nsec == UTIME_NOW ? now : in_time;
    };
    if (t[0].tv_nsec != UTIME_OMIT) {
      x.stx_atime = pick(t[0]);
      mask |= CEPH_SETATTR_ATIME;
    }
    if (t[1].tv_nsec != UTIME_OMIT) {
      x.stx_mtime = pick(t[1]);
      mask |= CEPH_SETATTR_MTIME;
    }
    if (mask != 0) {
      if (int rc = ceph_ll_setattr(cm_, in, &x, mask, perm); rc != 0) {
        return ceph_status(rc, "utimens");
      }
    }
  }
  return Status();
}

int CephStore::access(const Object& obj, int want) {
  may_wait_on_cluster();
  struct stat st;
  if (!stat(obj, &st).ok()) return 0;
  if (S_ISLNK(st.st_mode)) return want;  // a symlink's own bits are all set, never checked
  // libcephfs has no access call of the low-level kind: the same POSIX rule the client
  // library applies, on the attributes it has, for the caller (root as the server).
  rpc::CallerCred server;
  server.auth_sys = true;
  const rpc::CallerCred& who = t_caller.acting ? t_caller.cred : server;
  int granted = 0;
  for (int bit : {R_OK, W_OK, X_OK}) {
    if ((want & bit) != 0 && rpc::caller_permits(who, st.st_mode & 07777, st.st_uid, st.st_gid,
                                                 S_ISDIR(st.st_mode), bit)) {
      granted |= bit;
    }
  }
  return granted;
}

Status CephStore::list(const Object& dir, uint64_t cookie, DirVisitor& visitor, bool* eof) {
  may_wait_on_cluster();
  *eof = false;
  ceph_dir_result* dirp = nullptr;
  if (int rc = ceph_ll_opendir(cm_, obj_of(dir).in, &dirp, current_perm(cm_)); rc != 0) {
    return ceph_status(rc, "list");
  }
  if (cookie != 0) ceph_seekdir(cm_, dirp, static_cast<int64_t>(cookie));
  // Names are copied here, so that those visited stay valid until the listing ends (as
  // the POSIX store's do): full, the listing stops and the visitor resumes by cookie.
  thread_local std::vector<char> names(64 * 1024);
  size_t used = 0;
  Status result;
  for (;;) {
    struct dirent de;
    const int rc = ceph_readdir_r(cm_, dirp, &de);
    if (rc < 0) {
      result = ceph_status(rc, "list");
      break;
    }
    if (rc == 0) {
      *eof = true;
      break;
    }
    if (std::strcmp(de.d_name, ".") == 0 || std::strcmp(de.d_name, "..") == 0) continue;
    const size_t len = std::strlen(de.d_name) + 1;
    if (names.size() - used < len) break;  // full
    char* name = names.data() + used;
    std::memcpy(name, de.d_name, len);
    used += len;
    const StoreDirEntry entry{name, de.d_ino, static_cast<mode_t>(DTTOIF(de.d_type)),
                              static_cast<uint64_t>(ceph_telldir(cm_, dirp))};
    if (!visitor.visit(entry)) break;
  }
  ceph_ll_releasedir(cm_, dirp);
  return result;
}

Result<size_t> CephStore::read(const Object& file, void* buf, size_t len, uint64_t offset) {
  may_wait_on_cluster();
  Fh* fh = obj_of(file).fh.load(std::memory_order_acquire);
  return move_bytes(len, false, "read", [&](size_t done) -> ssize_t {
    return ceph_ll_read(cm_, fh, static_cast<int64_t>(offset + done), len - done,
                        static_cast<char*>(buf) + done);
  });
}

Result<size_t> CephStore::write(const Object& file, const void* buf, size_t len, uint64_t offset) {
  may_wait_on_cluster();
  Fh* fh = obj_of(file).fh.load(std::memory_order_acquire);
  return move_bytes(len, true, "write", [&](size_t done) -> ssize_t {
    return ceph_ll_write(cm_, fh, static_cast<int64_t>(offset + done), len - done,
                         static_cast<const char*>(buf) + done);
  });
}

Status CephStore::truncate(const Object& file, uint64_t size) {
  may_wait_on_cluster();
  struct ceph_statx x {};
  x.stx_size = size;
  if (int rc = ceph_ll_setattr(cm_, obj_of(file).in, &x, CEPH_SETATTR_SIZE, current_perm(cm_));
      rc != 0) {
    return ceph_status(rc, "truncate");
  }
  return Status();
}

Status CephStore::sync(const Object& file, bool data_only) {
  may_wait_on_cluster();
  if (int rc =
          ceph_ll_fsync(cm_, obj_of(file).fh.load(std::memory_order_acquire), data_only ? 1 : 0);
      rc != 0) {
    return ceph_status(rc, "sync");
  }
  return Status();
}

}  // namespace odafs::server
