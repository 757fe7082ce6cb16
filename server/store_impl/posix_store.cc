#include "server/store_impl/posix_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "server/identity.h"
#include "server/store_impl/move_bytes.h"

namespace odafs::server {
namespace {

// Path of an open descriptor, for the calls that have no descriptor form for O_PATH
// descriptors.
struct ProcPath {
  explicit ProcPath(int fd) { std::snprintf(text, sizeof text, "/proc/self/fd/%d", fd); }
  char text[40];
};

constexpr int kHold = O_PATH | O_NOFOLLOW | O_CLOEXEC;

// Opens the object an O_PATH descriptor holds again, for bytes (how: O_RDONLY, O_RDWR or
// O_RDONLY | O_DIRECTORY), checked against the caller's permission: the very object held,
// whatever its name means by now. This is how the store opens a name without ever opening
// something else: held first (O_PATH runs no open of a FIFO or device, and inotify sees no
// IN_OPEN), its type checked, then this. REQUIRES: the held object is a regular file or a
// directory (fstat): a FIFO or device opened here would be opened for real.
int reopen_held(int held, int how) {
  return ::open(ProcPath(held).text, how | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
}

// Whether a refused open for writing may still open the file for reading.
bool read_only_may_do(int err) {
  return err == EACCES || err == EROFS || err == ETXTBSY || err == EPERM;
}

}  // namespace

Result<std::unique_ptr<PosixStore>> PosixStore::open_export(const std::string& root, FileEnv* env) {
  const int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Status(err, "export " + root);
  }
  return std::unique_ptr<PosixStore>(new PosixStore(fd, env != nullptr ? env : &posix_file_env()));
}

PosixStore::~PosixStore() { ::close(root_fd_); }

void PosixStore::release(uintptr_t native) { ::close(static_cast<int>(native)); }

auth_stat PosixStore::begin_caller(const rpc::CallerCred* cred, bool acting, uintptr_t* restore) {
  *restore = 0;
  if (!acting) return AUTH_OK;
  if (auth_stat why = act_as_caller(cred); why != AUTH_OK) return why;
  *restore = 1;
  return AUTH_OK;
}

void PosixStore::end_caller(uintptr_t restore) {
  if (restore != 0) act_as_server();
}

Result<Object> PosixStore::root() {
  const int fd = ::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return Status::from_errno("root");
  return adopt(fd);
}

Result<Object> PosixStore::lookup(const Object& dir, const char* name, struct stat* st) {
  const int fd = ::openat(fd_of(dir), name, kHold);
  if (fd < 0) return Status::from_errno("lookup");
  Object held = adopt(fd);
  if (::fstat(fd, st) != 0) return Status::from_errno("lookup: fstat");
  return held;
}

Status PosixStore::stat_at(const Object& dir, const char* name, struct stat* st) {
  if (::fstatat(fd_of(dir), name, st, AT_SYMLINK_NOFOLLOW) != 0) {
    return Status::from_errno("stat");
  }
  return Status();
}

Status PosixStore::stat(const Object& obj, struct stat* st) {
  if (::fstat(fd_of(obj), st) != 0) return Status::from_errno("stat");
  return Status();
}

ObjectId PosixStore::id_of(const struct stat& st) const {
  return ObjectId{static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_dev)};
}

Result<Object> PosixStore::find(const ObjectId&, struct stat*, Access*) {
  return Status(ENOTSUP, "a local export finds objects by name only");
}

Result<Object> PosixStore::open_at(const Object& dir, const char* name, struct stat* st,
                                   Access* access) {
  *access = Access{};
  // Held first and checked to be what the caller looked at: the name may have become a
  // FIFO or a device since (any client may make one), which must never be opened. A file
  // is then opened read-write where allowed, else read-only; a directory for reading;
  // anything (or anything refused) else stays held O_PATH.
  const int held = ::openat(fd_of(dir), name, kHold);
  if (held < 0) return Status::from_errno("open_at");
  Object held_object = adopt(held);
  struct stat now;
  if (::fstat(held, &now) != 0) return Status::from_errno("open_at: fstat");
  if (now.st_ino != st->st_ino || now.st_dev != st->st_dev) {
    return Status(ESTALE, "open_at: replaced between stat and open");
  }
  *st = now;
  int fd = -1;
  int err = 0;
  if (S_ISREG(now.st_mode)) {
    fd = reopen_held(held, O_RDWR);
    if (fd >= 0) {
      *access = Access{true, true};
    } else if (read_only_may_do(errno)) {
      fd = reopen_held(held, O_RDONLY);
      if (fd >= 0) access->readable = true;
    }
    err = errno;
  } else if (S_ISDIR(now.st_mode)) {
    fd = reopen_held(held, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) access->readable = true;
    err = errno;
  }
  if (fd >= 0) return adopt(fd);
  if (S_ISREG(now.st_mode) || S_ISDIR(now.st_mode)) {
    if (err != EACCES && err != EPERM) return Status(err, "open_at");
  }
  return held_object;
}

Status PosixStore::reopen_in_place(const Object& obj, bool write, Access* access) {
  const int old_fd = fd_of(obj);
  struct stat before;
  if (::fstat(old_fd, &before) != 0) return Status::from_errno("reopen in place: fstat");
  if (!S_ISREG(before.st_mode)) return Status(EISDIR, "reopen in place: not a regular file");
  const ProcPath path(old_fd);
  int fd = ::open(path.text, O_RDWR | O_CLOEXEC | O_NOCTTY);
  const bool rdwr = fd >= 0;
  if (fd < 0 && !write && (errno == EACCES || errno == EROFS || errno == ETXTBSY)) {
    fd = ::open(path.text, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  }
  if (fd < 0) return Status::from_errno("reopen in place: open");
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_ino != before.st_ino || st.st_dev != before.st_dev) {
    ::close(fd);
    return Status(ESTALE, "reopen in place: replaced");
  }
  // dup3 swaps the descriptor under the same number, so concurrent users never see a
  // closed one.
  if (::dup3(fd, old_fd, O_CLOEXEC) < 0) {
    Status failed = Status::from_errno("reopen in place: dup3");
    ::close(fd);
    return failed;
  }
  ::close(fd);
  *access = Access{true, rdwr};
  return Status();
}

std::string PosixStore::durable_key(const Object& obj) {
  // The kernel's file handle (handle type, then its bytes): unlike the inode number it is
  // not reused when the object is deleted and another created (it carries the inode's
  // generation). name_to_handle_at needs no privilege (open_by_handle_at does).
  alignas(file_handle) unsigned char buf[sizeof(file_handle) + MAX_HANDLE_SZ];
  auto* h = reinterpret_cast<file_handle*>(buf);
  h->handle_bytes = MAX_HANDLE_SZ;
  int mount_id;
  if (::name_to_handle_at(fd_of(obj), "", h, &mount_id, AT_EMPTY_PATH) != 0) return {};
  std::string out(sizeof h->handle_type + h->handle_bytes, '\0');
  std::memcpy(out.data(), &h->handle_type, sizeof h->handle_type);
  std::memcpy(out.data() + sizeof h->handle_type, h->f_handle, h->handle_bytes);
  return out;
}

Result<Object> PosixStore::open(const Object& obj, int flags) {
  struct stat st;
  if (::fstat(fd_of(obj), &st) != 0) return Status::from_errno("open: fstat");
  Result<int> how = open_flags(st.st_mode, flags);
  if (!how) return how.status();
  // Through /proc: a new open, checked against the caller's permission, of this very
  // object (an O_PATH descriptor cannot be reopened by openat).
  const int fd = reopen_held(fd_of(obj), *how);
  if (fd < 0) return Status::from_errno("open");
  return adopt(fd);
}

Result<Object> PosixStore::create(const Object& dir, const char* name, mode_t mode, bool exclusive,
                                  struct stat* st, bool* created, bool* writable) {
  // Exclusive first, so that the store knows whether it created the file (O_EXCL opens
  // nothing that was there, a link included); a name removed between the two tries is
  // created on the next. What is there already is held first and opened only if it is a
  // regular file: a FIFO or device at the name is never opened (reopen_held).
  *created = false;
  *writable = true;
  int fd = -1;
  int err = 0;
  for (int attempt = 0; attempt < 3 && fd < 0; ++attempt) {
    fd = ::openat(fd_of(dir), name, O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_RDWR,
                  mode & 07777);
    err = errno;
    *created = fd >= 0;
    if (fd >= 0 || err != EEXIST || exclusive) break;
    const int held = ::openat(fd_of(dir), name, kHold);
    err = errno;
    if (held < 0 && err == ENOENT) continue;
    if (held < 0) break;
    Object held_object = adopt(held);
    if (::fstat(held, st) != 0) return Status::from_errno("create: fstat");
    if (!S_ISREG(st->st_mode)) return Status(EEXIST, "create: not a regular file at the name");
    fd = reopen_held(held, O_RDWR);
    if (fd < 0 && errno == EACCES) {
      *writable = false;  // there, but the caller may not write it: read-only, as LOOKUP
      fd = reopen_held(held, O_RDONLY);
    }
    err = errno;
    break;
  }
  if (fd < 0) return Status(err, "create");
  Object file = adopt(fd);
  if (::fstat(fd, st) != 0) return Status::from_errno("create: fstat");
  if (!S_ISREG(st->st_mode)) return Status(EEXIST, "create: not a regular file at the name");
  return file;
}

Status PosixStore::mkdir(const Object& dir, const char* name, mode_t mode) {
  if (::mkdirat(fd_of(dir), name, mode & 07777) != 0) return Status::from_errno("mkdir");
  return Status();
}

Status PosixStore::symlink(const Object& dir, const char* name, const char* target) {
  if (::symlinkat(target, fd_of(dir), name) != 0) return Status::from_errno("symlink");
  return Status();
}

Status PosixStore::mknod(const Object& dir, const char* name, mode_t mode, dev_t rdev) {
  if (::mknodat(fd_of(dir), name, mode, rdev) != 0) return Status::from_errno("mknod");
  return Status();
}

Status PosixStore::remove(const Object& dir, const char* name, bool directory) {
  if (::unlinkat(fd_of(dir), name, directory ? AT_REMOVEDIR : 0) != 0) {
    // Some file systems say EEXIST for a directory that is not empty.
    return Status(errno == EEXIST ? ENOTEMPTY : errno, directory ? "rmdir" : "unlink");
  }
  return Status();
}

Status PosixStore::rename(const Object& from_dir, const char* from_name, const Object& to_dir,
                          const char* to_name) {
  if (::renameat(fd_of(from_dir), from_name, fd_of(to_dir), to_name) != 0) {
    return Status(errno == EEXIST ? ENOTEMPTY : errno, "rename");
  }
  return Status();
}

Status PosixStore::link(const Object& obj, const Object& dir, const char* name) {
  // linkat through /proc/self/fd needs no privilege (AT_EMPTY_PATH would need
  // CAP_DAC_READ_SEARCH).
  if (::linkat(AT_FDCWD, ProcPath(fd_of(obj)).text, fd_of(dir), name, AT_SYMLINK_FOLLOW) != 0) {
    return Status::from_errno("link");
  }
  return Status();
}

Result<size_t> PosixStore::readlink(const Object& obj, char* buf, size_t cap) {
  const ssize_t n = ::readlinkat(fd_of(obj), "", buf, cap);
  if (n < 0) return Status::from_errno("readlink");
  return static_cast<size_t>(n);
}

Status PosixStore::statfs(const Object& obj, struct statvfs* out) {
  if (::fstatvfs(fd_of(obj), out) != 0) return Status::from_errno("statfs");
  return Status();
}

Status PosixStore::set_attributes(const Object& obj, const AttrChange& change) {
  const int fd = fd_of(obj);
  const ProcPath path(fd);
  if (change.set_mode) {
    struct stat st;
    if (::fstat(fd, &st) != 0) return Status::from_errno("chmod: fstat");
    if (S_ISLNK(st.st_mode)) return Status(EOPNOTSUPP, "chmod of a symlink");
    // fchmod refuses O_PATH descriptors (EBADF); chmod by /proc reaches the same object.
    if (::fchmod(fd, change.mode & 07777) != 0 &&
        (errno != EBADF || ::chmod(path.text, change.mode & 07777) != 0)) {
      return Status::from_errno("chmod");
    }
  }
  // By the descriptor: a symlink's own owner changes (lchown).
  if (change.set_owner && ::fchownat(fd, "", change.uid, change.gid, AT_EMPTY_PATH) != 0) {
    return Status::from_errno("chown");
  }
  if (change.set_times && ::utimensat(AT_FDCWD, path.text, change.times, 0) != 0) {
    return Status::from_errno("utimens");
  }
  return Status();
}

int PosixStore::access(const Object& obj, int want) {
  struct stat st;
  if (::fstat(fd_of(obj), &st) != 0) return 0;
  if (S_ISLNK(st.st_mode)) return want;  // a symlink's own bits are all set, never checked
  // The kernel decides, with the thread's file-system ids (AT_EACCESS), so ACLs and a
  // read-only mount count too. One bit at a time: a caller may have some of what it asks.
  const ProcPath path(fd_of(obj));
  int granted = 0;
  for (int bit : {R_OK, W_OK, X_OK}) {
    if ((want & bit) != 0 && ::faccessat(AT_FDCWD, path.text, bit, AT_EACCESS) == 0) {
      granted |= bit;
    }
  }
  return granted;
}

Status PosixStore::list(const Object& dir, uint64_t cookie, DirVisitor& visitor, bool* eof) {
  *eof = false;
  // A private descriptor: a held one is shared by every thread, and so is its offset.
  // Through /proc, as the caller: listing needs read permission only (POSIX), and
  // openat(dir, ".") would resolve "." in the directory, which needs search permission.
  const int fd = ::open(ProcPath(fd_of(dir)).text, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::from_errno("list");
  const Object listing = adopt(fd);
  if (cookie != 0 && ::lseek(fd, static_cast<off_t>(cookie), SEEK_SET) < 0) {
    return Status(EINVAL, "list: a cookie this directory cannot resume from");
  }
  // getdents64 records stay in buf until the listing ends, so the names visited stay
  // valid until then with no copies; each round appends.
  thread_local std::vector<char> buf(64 * 1024);
  size_t used = 0;
  for (;;) {
    if (buf.size() - used < 4096) return Status();  // full: the visitor resumes by cookie
    const long n = ::syscall(SYS_getdents64, fd, buf.data() + used, buf.size() - used);
    if (n < 0) return Status::from_errno("list");
    if (n == 0) {
      *eof = true;
      return Status();
    }
    size_t off = used;
    used += static_cast<size_t>(n);
    while (off < used) {
      struct linux_dirent64 {
        ino64_t d_ino;
        off64_t d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[];
      };
      const auto* d = reinterpret_cast<const linux_dirent64*>(buf.data() + off);
      off += d->d_reclen;
      if (std::strcmp(d->d_name, ".") == 0 || std::strcmp(d->d_name, "..") == 0) continue;
      const StoreDirEntry entry{d->d_name, d->d_ino, static_cast<mode_t>(DTTOIF(d->d_type)),
                                static_cast<uint64_t>(d->d_off)};
      if (!visitor.visit(entry)) return Status();
    }
  }
}

Result<size_t> PosixStore::read(const Object& file, void* buf, size_t len, uint64_t offset) {
  return move_bytes(len, false, "read", [&](size_t done) -> ssize_t {
    const ssize_t n = env_->pread(fd_of(file), static_cast<char*>(buf) + done, len - done,
                                  static_cast<off_t>(offset + done));
    return n < 0 ? -errno : n;
  });
}

Result<size_t> PosixStore::write(const Object& file, const void* buf, size_t len, uint64_t offset) {
  return move_bytes(len, true, "write", [&](size_t done) -> ssize_t {
    const ssize_t n = env_->pwrite(fd_of(file), static_cast<const char*>(buf) + done, len - done,
                                   static_cast<off_t>(offset + done));
    return n < 0 ? -errno : n;
  });
}

Status PosixStore::truncate(const Object& file, uint64_t size) {
  if (env_->ftruncate(fd_of(file), static_cast<off_t>(size)) != 0) {
    return Status::from_errno("truncate");
  }
  return Status();
}

namespace {

// Space reserved or released changes no byte, but ext4 stamps both as a modification: the
// modification time goes back to `before`'s (the change time cannot). As a caller who does
// not own the file the time stays changed.
void keep_mtime(int fd, const struct stat& before) {
  struct stat after;
  if (::fstat(fd, &after) != 0 || (after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
                                   after.st_mtim.tv_nsec == before.st_mtim.tv_nsec)) {
    return;
  }
  const timespec times[2] = {{0, UTIME_OMIT}, before.st_mtim};
  (void)::futimens(fd, times);
}

}  // namespace

Status PosixStore::reserve_space(const Object& file, uint64_t offset, uint64_t len) {
  const int fd = fd_of(file);
  struct stat before;
  if (::fstat(fd, &before) != 0) return Status::from_errno("reserve space: fstat");
  const int rc =
      ::fallocate(fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset), static_cast<off_t>(len));
  const int err = errno;
  keep_mtime(fd, before);
  if (rc != 0) return Status(err, std::string("reserve space: ") + strerror(err));
  return Status();
}

Result<bool> PosixStore::has_hole(const Object& file, uint64_t size) {
  if (size == 0) return false;
  // The first hole at or after 0; the end of the file counts as one (SEEK_HOLE's rule).
  const off_t hole = ::lseek(fd_of(file), 0, SEEK_HOLE);
  if (hole < 0) return Status::from_errno("seek a hole");
  return static_cast<uint64_t>(hole) < size;
}

Status PosixStore::release_space(const Object& file) {
  const int fd = fd_of(file);
  struct stat before;
  if (::fstat(fd, &before) != 0) return Status::from_errno("release space: fstat");
  // Blocks past the end show as more allocated than the size needs (a sparse file's holes
  // can hide them: they are then kept until the file's next truncation or removal).
  const uint64_t size = static_cast<uint64_t>(before.st_size);
  const uint64_t block = before.st_blksize > 0 ? static_cast<uint64_t>(before.st_blksize) : 4096;
  const uint64_t needed = (size + block - 1) / block * block;
  if (static_cast<uint64_t>(before.st_blocks) * 512 <= needed) return Status();
  // A truncation to the size it has frees what lies past the end (ext4, XFS, tmpfs).
  const int rc = env_->ftruncate(fd, before.st_size);
  const int err = errno;
  keep_mtime(fd, before);
  if (rc != 0) return Status(err, std::string("release space: ") + strerror(err));
  return Status();
}

Status PosixStore::sync(const Object& file, bool data_only) {
  const int rc = data_only ? env_->fdatasync(fd_of(file)) : env_->fsync(fd_of(file));
  if (rc != 0) return Status::from_errno("sync");
  return Status();
}

}  // namespace odafs::server
