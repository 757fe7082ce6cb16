// odafs-mount and the objects POSIX names: FIFOs, sockets and device nodes (MKNOD), the mode
// a caller asks for (no second umask at the server), one inode per file whatever name
// reaches it, and the permission rules of open(2) and write(2) that programs rely on
// (O_TRUNC needs write permission and discards nothing when refused; a descriptor opened
// for writing truncates and writes whatever the mode says since; an unprivileged write
// drops setuid at once; an open file unlinked reports no links).
// Skipped (with the reason) where FUSE cannot mount; the cases acting as other users also
// need root.
#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "tests/support/mount_process.h"
#include "tests/support/mounted.h"
#include "tests/support/server_process.h"

using odafs::test::as_nobody;
using odafs::test::cat;
using odafs::test::failed_with;
using odafs::test::in_child;
using odafs::test::kNobody;
using odafs::test::Mounted;
using odafs::test::read_local;
using odafs::test::write_local;

#define MOUNT_TEST(name) ODAFS_MOUNT_TEST(name)
#define ROOT_MOUNT_TEST(name) ODAFS_ROOT_MOUNT_TEST(name)

namespace {

struct stat lstat_of(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) st.st_mode = 0;
  return st;
}

mode_t mode_of(const std::string& path) { return lstat_of(path).st_mode & 07777; }

// The d_type readdir(3) gives `name` in dir; DT_UNKNOWN if absent.
unsigned char dirent_type(const std::string& dir, const std::string& name) {
  unsigned char type = DT_UNKNOWN;
  DIR* d = opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) {
    if (name == e->d_name) type = e->d_type;
  }
  closedir(d);
  return type;
}

// A Unix socket bound at path (the socket file stays after the descriptor is closed).
int bind_unix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// Restores the process's umask at scope end.
struct UmaskScope {
  explicit UmaskScope(mode_t m) : old(umask(m)) {}
  ~UmaskScope() { umask(old); }
  mode_t old;
};

}  // namespace

MOUNT_TEST("a FIFO through the mount carries bytes between two processes; its type everywhere") {
  Mounted fs;
  const std::string pipe = fs / "pipe";
  REQUIRE(mkfifo(pipe.c_str(), 0640) == 0);
  CHECK(S_ISFIFO(lstat_of(pipe).st_mode));
  CHECK(S_ISFIFO(lstat_of(fs.local("pipe")).st_mode));  // a FIFO on the server too
  CHECK(mode_of(pipe) == 0640);
  CHECK(dirent_type(fs.mnt.path(), "pipe") == DT_FIFO);
  CHECK(failed_with(mkfifo(pipe.c_str(), 0640) != 0) == EEXIST);

  // A writer and a reader, each opening the FIFO by its path in the mount.
  pid_t writer = fork();
  if (writer == 0) {
    int fd = open(pipe.c_str(), O_WRONLY);
    bool ok = fd >= 0 && write(fd, "through the pipe", 16) == 16;
    _exit(ok && close(fd) == 0 ? 0 : 1);
  }
  int reader = in_child(std::chrono::seconds(10), [&] {
    int fd = open(pipe.c_str(), O_RDONLY);
    if (fd < 0) return 1;
    char buf[64];
    std::string got;
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
    close(fd);
    return got == "through the pipe" ? 0 : 2;
  });
  if (reader != 0) kill(writer, SIGKILL);
  int status = 0;
  waitpid(writer, &status, 0);
  CHECK(reader == 0);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  // Its bytes never reached the server: a FIFO's data is the kernel's.
  CHECK(lstat_of(fs.local("pipe")).st_size == 0);
  // Attributes, links and renames of a FIFO, as of any file (the server must never open
  // it for reading or writing: that would wait for a peer).
  CHECK(chmod(pipe.c_str(), 0600) == 0);
  CHECK(mode_of(fs.local("pipe")) == 0600);
  const struct timespec times[2] = {{1000000000, 0}, {1000000001, 0}};
  CHECK(utimensat(AT_FDCWD, pipe.c_str(), times, 0) == 0);
  CHECK(lstat_of(fs.local("pipe")).st_mtim.tv_sec == 1000000001);
  if (geteuid() == 0) {
    CHECK(lchown(pipe.c_str(), 4242, 4243) == 0);
    CHECK(lstat_of(fs.local("pipe")).st_uid == 4242);
  }
  CHECK(link(pipe.c_str(), (fs / "pipe2").c_str()) == 0);
  CHECK(lstat_of(fs / "pipe").st_nlink == 2);
  CHECK(rename((fs / "pipe2").c_str(), (fs / "pipe3").c_str()) == 0);
  CHECK(S_ISFIFO(lstat_of(fs.local("pipe3")).st_mode));
  CHECK(unlink((fs / "pipe3").c_str()) == 0);
  CHECK(unlink(pipe.c_str()) == 0);
  CHECK(lstat_of(fs.local("pipe")).st_mode == 0);  // gone from the server
}

MOUNT_TEST("a Unix socket bound in the mount: a socket on the server, connectable here") {
  Mounted fs;
  const std::string path = fs / "sock";
  int listener = bind_unix(path);
  REQUIRE(listener >= 0);
  REQUIRE(listen(listener, 4) == 0);
  CHECK(S_ISSOCK(lstat_of(path).st_mode));
  CHECK(S_ISSOCK(lstat_of(fs.local("sock")).st_mode));
  CHECK(dirent_type(fs.mnt.path(), "sock") == DT_SOCK);
  int client = in_child(std::chrono::seconds(10), [&] {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 1;
    return write(fd, "hi", 2) == 2 ? 0 : 2;
  });
  CHECK(client == 0);
  int conn = accept(listener, nullptr, nullptr);
  CHECK(conn >= 0);
  char buf[2] = {};
  if (conn >= 0) {
    CHECK(read(conn, buf, 2) == 2);
    close(conn);
  }
  CHECK(std::string(buf, 2) == "hi");
  close(listener);
  // A second bind at the name finds it taken, as on a local file system.
  CHECK(failed_with(bind_unix(path) < 0) == EADDRINUSE);
}

MOUNT_TEST("new objects get the mode asked for after the caller's umask, and no other bits") {
  Mounted fs;
  {
    UmaskScope none(0);
    int fd = open((fs / "f0620").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0620);
    REQUIRE(fd >= 0);
    close(fd);
    CHECK(mode_of(fs / "f0620") == 0620);
    CHECK(mode_of(fs.local("f0620")) == 0620);
    CHECK(mkdir((fs / "d0777").c_str(), 0777) == 0);
    CHECK(mode_of(fs / "d0777") == 0777);
    CHECK(mode_of(fs.local("d0777")) == 0777);
    CHECK(mkfifo((fs / "p0666").c_str(), 0666) == 0);
    CHECK(mode_of(fs.local("p0666")) == 0666);
  }
  {
    UmaskScope some(027);
    CHECK(mkdir((fs / "d0750").c_str(), 0777) == 0);
    CHECK(mode_of(fs.local("d0750")) == 0750);
    int fd = open((fs / "f0640").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0666);
    REQUIRE(fd >= 0);
    close(fd);
    CHECK(mode_of(fs.local("f0640")) == 0640);
  }
}

MOUNT_TEST("one inode per file: a change through one name shows through every other at once") {
  Mounted fs;
  write_local(fs / "a", "linked");
  REQUIRE(link((fs / "a").c_str(), (fs / "b").c_str()) == 0);
  struct stat a = lstat_of(fs / "a");
  struct stat b = lstat_of(fs / "b");
  CHECK(a.st_ino == b.st_ino);
  CHECK(a.st_nlink == 2);
  CHECK(b.st_nlink == 2);
  // Within the attribute timeout: the same inode, so no stale copy to show.
  REQUIRE(chmod((fs / "a").c_str(), 0600) == 0);
  CHECK(mode_of(fs / "b") == 0600);
  REQUIRE(unlink((fs / "a").c_str()) == 0);
  CHECK(lstat_of(fs / "b").st_nlink == 1);
  CHECK(cat(fs / "b") == "linked");
  // A third name, made through the second, then the second renamed: one file throughout.
  REQUIRE(link((fs / "b").c_str(), (fs / "c").c_str()) == 0);
  REQUIRE(rename((fs / "b").c_str(), (fs / "d").c_str()) == 0);
  CHECK(lstat_of(fs / "c").st_nlink == 2);
  CHECK(lstat_of(fs / "d").st_ino == lstat_of(fs / "c").st_ino);
  write_local(fs / "d", "changed");
  CHECK(cat(fs / "c") == "changed");
}

MOUNT_TEST("an open file whose last name is unlinked reports no links, and reads on") {
  Mounted fs;
  write_local(fs / "f", "still here");
  int fd = open((fs / "f").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(unlink((fs / "f").c_str()) == 0);
  struct stat st {};
  CHECK(fstat(fd, &st) == 0);
  CHECK(st.st_nlink == 0);
  char buf[16] = {};
  CHECK(pread(fd, buf, sizeof buf, 0) == 10);
  CHECK(std::string(buf) == "still here");
  close(fd);
}

ROOT_MOUNT_TEST("as callers: O_TRUNC without write permission is refused and discards nothing") {
  Mounted fs({"allow_other"}, {"--auth-sys"});
  REQUIRE(chmod(fs.exp.path().c_str(), 0777) == 0);
  // Root's bytes, written and still open: they may be held in the mount, not yet sent.
  const std::string f = fs / "kept";
  int fd = open(f.c_str(), O_CREAT | O_WRONLY, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, "hello", 5) == 5);
  CHECK(as_nobody([&] { return failed_with(open(f.c_str(), O_RDONLY | O_TRUNC) < 0); }) == EACCES);
  CHECK(as_nobody([&] { return failed_with(open(f.c_str(), O_WRONLY | O_TRUNC) < 0); }) == EACCES);
  CHECK(close(fd) == 0);
  CHECK(cat(f) == "hello");
  // Every other way another user might drop bytes this mount keeps for root, refused,
  // drops none: in a directory of root's, a truncation, an unlink, a rename over it.
  REQUIRE(mkdir((fs / "d").c_str(), 0755) == 0);
  const std::string g = fs / "d/kept";
  fd = open(g.c_str(), O_CREAT | O_WRONLY, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, "world", 5) == 5);
  CHECK(close(fd) == 0);  // kept under the write delegation, not yet sent
  CHECK(as_nobody([&] { return failed_with(truncate(g.c_str(), 0) != 0); }) == EACCES);
  CHECK(as_nobody([&] { return failed_with(unlink(g.c_str()) != 0); }) == EACCES);
  write_local(fs / "theirs", "x");
  CHECK(as_nobody([&] { return failed_with(rename((fs / "theirs").c_str(), g.c_str()) != 0); }) ==
        EACCES);
  CHECK(cat(g) == "world");
  CHECK(fs.read_by_another_client("d/kept") == "world");
  CHECK(fs.read_by_another_client("kept") == "hello");
  // Root (who may write it) truncates with O_RDONLY too, as Linux does.
  fd = open(f.c_str(), O_RDONLY | O_TRUNC);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECK(cat(f).empty());
}

ROOT_MOUNT_TEST(
    "as callers: a descriptor opened for writing truncates and writes a file its mode "
    "forbids since") {
  Mounted fs({"allow_other"}, {"--auth-sys"});
  REQUIRE(chmod(fs.exp.path().c_str(), 0777) == 0);
  const std::string f = fs / "zero";
  CHECK(as_nobody([&] {
          int fd = open(f.c_str(), O_CREAT | O_EXCL | O_RDWR, 0);
          if (fd < 0) return 1;
          if (ftruncate(fd, 10) != 0) return 2;
          if (pwrite(fd, "abc", 3, 0) != 3) return 3;
          char buf[3];
          if (pread(fd, buf, 3, 0) != 3 || std::memcmp(buf, "abc", 3) != 0) return 4;
          if (fsync(fd) != 0) return 5;
          return close(fd) == 0 ? 0 : 6;
        }) == 0);
  struct stat st = lstat_of(fs.local("zero"));
  CHECK(st.st_size == 10);
  CHECK((st.st_mode & 07777) == 0);
  CHECK(st.st_uid == kNobody);
  // A new open, or a truncation by name, is judged by the mode: refused, owner or not.
  CHECK(as_nobody([&] { return failed_with(open(f.c_str(), O_RDONLY) < 0); }) == EACCES);
  CHECK(as_nobody([&] { return failed_with(truncate(f.c_str(), 0) != 0); }) == EACCES);
  CHECK(lstat_of(fs.local("zero")).st_size == 10);
}

ROOT_MOUNT_TEST("as callers: an unprivileged write drops setuid and setgid at once") {
  Mounted fs({"allow_other"}, {"--auth-sys"});
  REQUIRE(chmod(fs.exp.path().c_str(), 0755) == 0);
  const std::string f = fs / "suid";
  write_local(f, "x");
  REQUIRE(chmod(f.c_str(), 06777) == 0);
  CHECK(as_nobody([&] {
          int fd = open(f.c_str(), O_WRONLY);
          if (fd < 0) return 1;
          if (write(fd, "y", 1) != 1) return 2;
          struct stat st {};
          if (fstat(fd, &st) != 0) return 3;
          const mode_t seen = st.st_mode & 07777;
          close(fd);
          return seen == 0777 ? 0 : 4;
        }) == 0);
  CHECK(mode_of(fs.local("suid")) == 0777);
}

ROOT_MOUNT_TEST(
    "as callers: device nodes only where the export rule says devices; EACCES in a "
    "directory the caller may not write") {
  const dev_t null_dev = makedev(1, 3);
  {
    Mounted fs({"allow_other"}, {"--auth-sys", "--clients", "127.0.0.1(rw,no_root_squash)"});
    CHECK(failed_with(mknod((fs / "null").c_str(), S_IFCHR | 0666, null_dev) != 0) == EPERM);
    CHECK(lstat_of(fs.local("null")).st_mode == 0);  // not made
    REQUIRE(mkdir((fs / "ro").c_str(), 0555) == 0);
    CHECK(as_nobody([&] { return failed_with(mkfifo((fs / "ro/p").c_str(), 0644) != 0); }) ==
          EACCES);
    REQUIRE(chmod(fs.exp.path().c_str(), 0777) == 0);
    CHECK(as_nobody([&] { return mkfifo((fs / "theirs").c_str(), 0600) == 0 ? 0 : 1; }) == 0);
    CHECK(lstat_of(fs.local("theirs")).st_uid == kNobody);
  }
  {
    // The loopback default says `devices` (its root is this host's root).
    Mounted fs({"allow_other"}, {"--auth-sys"});
    REQUIRE(mknod((fs / "null").c_str(), S_IFCHR | 0666, null_dev) == 0);
    struct stat st = lstat_of(fs / "null");
    CHECK(S_ISCHR(st.st_mode));
    CHECK(st.st_rdev == null_dev);
    struct stat there = lstat_of(fs.local("null"));
    CHECK(S_ISCHR(there.st_mode));
    CHECK(there.st_rdev == null_dev);
    CHECK(dirent_type(fs.mnt.path(), "null") == DT_CHR);
    REQUIRE(chmod(fs.exp.path().c_str(), 0777) == 0);
    // The rule allows devices; the kernel still wants CAP_MKNOD, which only root has.
    CHECK(as_nobody([&] {
            return failed_with(mknod((fs / "mine").c_str(), S_IFBLK | 0600, makedev(7, 0)) != 0);
          }) == EPERM);
  }
}

ROOT_MOUNT_TEST(
    "as callers: search permission on a directory on the way holds for names already "
    "resolved for another caller") {
  Mounted fs({"allow_other"}, {"--auth-sys"});
  REQUIRE(chmod(fs.exp.path().c_str(), 0755) == 0);
  REQUIRE(mkdir((fs / "priv").c_str(), 0700) == 0);
  write_local(fs / "priv/f", "behind a closed door");
  REQUIRE(chmod((fs / "priv/f").c_str(), 0644) == 0);
  // Root's walks leave the names resolved in the kernel and in libodafs.
  CHECK(cat(fs / "priv/f") == "behind a closed door");
  CHECK(S_ISREG(lstat_of(fs / "priv/f").st_mode));
  CHECK(as_nobody([&] {
          struct stat st {};
          return failed_with(stat((fs / "priv/f").c_str(), &st) != 0);
        }) == EACCES);
  CHECK(as_nobody([&] { return failed_with(open((fs / "priv/f").c_str(), O_RDONLY) < 0); }) ==
        EACCES);
  REQUIRE(chmod((fs / "priv").c_str(), 0711) == 0);  // search, no listing
  CHECK(as_nobody([&] { return read_local(fs / "priv/f") == "behind a closed door" ? 0 : 1; }) ==
        0);
}
