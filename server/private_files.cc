#include "server/private_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace odafs::server {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Whose a directory or file may be: root's or this process's user's.
bool trusted_owner(const struct stat& st) { return st.st_uid == 0 || st.st_uid == geteuid(); }

// Why `path` (status st) may not hold private files, or "" when it may. `above`: a
// directory above the one asked for, where a sticky bit makes others' writes harmless.
std::string distrust(const std::string& path, const struct stat& st, bool above) {
  if (!S_ISDIR(st.st_mode)) return path + " is not a directory";
  if (!trusted_owner(st)) {
    return path + " belongs to uid " + std::to_string(st.st_uid) +
           " (only root or odafsd's user may own it)";
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !(above && (st.st_mode & S_ISVTX) != 0)) {
    return path + " may be written by " + ((st.st_mode & S_IWOTH) != 0 ? "others" : "its group") +
           " (chmod go-w it" + (above ? ", or make it sticky" : "") + ")";
  }
  return "";
}

// mkdir -p with mode 0700 for what it makes. Returns 0 or the errno.
int make_dirs(const std::string& dir) {
  if (dir.empty()) return 0;
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    if (int err = make_dirs(dir.substr(0, slash))) return err;
  }
  return ::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST ? 0 : errno;
}

}  // namespace

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Result<int> open_private_dir(const std::string& dir, bool make) {
  if (make) {
    if (int err = make_dirs(dir)) return Status(err, dir + ": cannot make it: " + errno_text(err));
  }
  // Resolved first: the directories checked are the ones the kernel walks. None of them
  // can change after the check but by root or this user, so opening the resolved path
  // then reaches what was checked.
  char* resolved = realpath(dir.c_str(), nullptr);
  if (resolved == nullptr) {
    const int err = errno;
    return Status(err, dir + ": " + errno_text(err));
  }
  const std::string real = resolved;
  std::free(resolved);
  // Above "/a/b": "/" and "/a".
  std::vector<std::string> above;
  if (real != "/") above.push_back("/");
  for (size_t slash = real.find('/', 1); slash != std::string::npos;
       slash = real.find('/', slash + 1)) {
    above.push_back(real.substr(0, slash));
  }
  for (const std::string& path : above) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      const int err = errno;
      return Status(err, path + ": " + errno_text(err));
    }
    if (std::string why = distrust(path, st, true); !why.empty()) {
      return Status(EPERM, "above " + dir + ": " + why);
    }
  }
  const int fd = ::open(real.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Status(err, dir + ": " + errno_text(err));
  }
  struct stat st;
  std::string why = ::fstat(fd, &st) != 0 ? errno_text(errno) : distrust(dir, st, false);
  if (!why.empty()) {
    ::close(fd);
    return Status(EPERM, why);
  }
  return fd;
}

Result<int> open_private_file(int dirfd, const std::string& name, int flags, struct stat* st) {
  const int fd =
      ::openat(dirfd, name.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Status(err, err == ELOOP ? name + " is a symbolic link (never followed)"
                                    : name + ": " + errno_text(err));
  }
  std::string why;
  if (::fstat(fd, st) != 0) {
    why = name + ": " + errno_text(errno);
  } else if (!S_ISREG(st->st_mode)) {
    why = name + " is not a regular file";
  } else if (!trusted_owner(*st)) {
    why = name + " belongs to uid " + std::to_string(st->st_uid) +
          " (only root or odafsd's user may own it)";
  } else if ((st->st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    why = name + " may be written by others (chmod go-w it)";
  }
  if (!why.empty()) {
    ::close(fd);
    return Status(EPERM, why);
  }
  return fd;
}

Result<std::string> read_private_file(int dirfd, const std::string& name, size_t max,
                                      struct stat* st) {
  Result<int> fd = open_private_file(dirfd, name, O_RDONLY, st);
  if (!fd.ok()) return fd.status();
  std::string bytes;
  char buf[4096];
  ssize_t n;
  // One byte past max tells a file over the bound from one at it.
  while (bytes.size() <= max && (n = ::read(*fd, buf, sizeof buf)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(*fd);
      return Status(err, name + ": " + errno_text(err));
    }
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(*fd);
  if (bytes.size() > max) {
    return Status(EFBIG, name + " holds more than " + std::to_string(max) + " bytes");
  }
  return bytes;
}

}  // namespace odafs::server
