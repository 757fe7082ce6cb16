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

namespace odafs::server {
namespace {

int fd_of(const Object& o) { return static_cast<int>(o.native()); }

// Path of an open descriptor, for the calls that have no descriptor form for O_PATH
// descriptors.
struct ProcPath {
  explicit ProcPath(int fd) { std::snprintf(text, sizeof text, "/proc/self/fd/%d", fd); }
  char text[40];
};

constexpr int kHold = O_PATH | O_NOFOLLOW | O_CLOEXEC;

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

uintptr_t PosixStore::begin_caller(const rpc::CallerCred* cred, bool acting) {
  if (acting) act_as_caller(cred);
  return acting ? 1 : 0;
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
  return ObjectId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

Result<Object> PosixStore::find(const ObjectId&) {
  return Status(ENOTSUP, "a local export finds objects by name only");
}

Result<Object> PosixStore::open(const Object& obj, int flags) {
  struct stat st;
  if (::fstat(fd_of(obj), &st) != 0) return Status::from_errno("open: fstat");
  int how = 0;
  if (S_ISDIR(st.st_mode)) {
    if ((flags & O_ACCMODE) != O_RDONLY) return Status(EISDIR, "open");
    how = O_RDONLY | O_DIRECTORY;
  } else if (S_ISREG(st.st_mode)) {
    how = (flags & O_ACCMODE) == O_RDONLY ? O_RDONLY : O_RDWR;
  } else {
    return Status(EINVAL, "open: only files and directories are opened for bytes");
  }
  // Through /proc: a new open, checked against the caller's permission, of this very
  // object (an O_PATH descriptor cannot be reopened by openat).
  const int fd = ::open(ProcPath(fd_of(obj)).text, how | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return Status::from_errno("open");
  return adopt(fd);
}

Result<Object> PosixStore::create(const Object& dir, const char* name, mode_t mode, bool exclusive,
                                  struct stat* st, bool* created, bool* writable) {
  // Exclusive first, so that the store knows whether it created the file; a name removed
  // between the two tries is created on the next. O_NONBLOCK: a FIFO at the name must not
  // hold the thread until a writer comes (it is refused below).
  constexpr int kOpen = O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_RDWR;
  int fd = -1;
  *created = false;
  *writable = true;
  for (int attempt = 0; attempt < 3 && fd < 0; ++attempt) {
    fd = ::openat(fd_of(dir), name, kOpen | O_CREAT | O_EXCL, mode & 07777);
    *created = fd >= 0;
    if (fd >= 0 || errno != EEXIST || exclusive) break;
    fd = ::openat(fd_of(dir), name, kOpen);
    if (fd < 0 && errno == EACCES) {
      *writable = false;  // there, but the caller may not write it: read-only, as LOOKUP
      fd = ::openat(fd_of(dir), name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    }
    if (fd < 0 && errno != ENOENT) break;
  }
  if (fd < 0) {
    const int err = errno == ELOOP ? EEXIST : errno;  // ELOOP: a symlink sits at the name
    return Status(err, "create");
  }
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
  const int fd = ::openat(fd_of(dir), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
      const StoreDirEntry entry{d->d_name, d->d_ino, DTTOIF(d->d_type),
                                static_cast<uint64_t>(d->d_off)};
      if (!visitor.visit(entry)) return Status();
    }
  }
}

Result<size_t> PosixStore::read(const Object& file, void* buf, size_t len, uint64_t offset) {
  size_t got = 0;
  while (got < len) {
    const ssize_t n = env_->pread(fd_of(file), static_cast<char*>(buf) + got, len - got,
                                  static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno("read");
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

Result<size_t> PosixStore::write(const Object& file, const void* buf, size_t len, uint64_t offset) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = env_->pwrite(fd_of(file), static_cast<const char*>(buf) + done, len - done,
                                   static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno("write");
    if (n == 0) return Status(EIO, "write: no progress");
    done += static_cast<size_t>(n);
  }
  return done;
}

Status PosixStore::truncate(const Object& file, uint64_t size) {
  if (env_->ftruncate(fd_of(file), static_cast<off_t>(size)) != 0) {
    return Status::from_errno("truncate");
  }
  return Status();
}

Status PosixStore::sync(const Object& file, bool data_only) {
  const int rc = data_only ? env_->fdatasync(fd_of(file)) : env_->fsync(fd_of(file));
  if (rc != 0) return Status::from_errno("sync");
  return Status();
}

}  // namespace odafs::server
