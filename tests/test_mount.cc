// odafs-mount end to end: a real odafsd, a real `odafs-mount -f` on a temporary mountpoint,
// and plain system calls on the mount. Skipped (with the reason) where FUSE cannot mount.
#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <linux/fs.h>  // RENAME_NOREPLACE, RENAME_EXCHANGE
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/mount_process.h"
#include "tests/support/mounted.h"
#include "tests/support/server_process.h"

using odafs::test::cat;
using odafs::test::eventually;
using odafs::test::failed_with;
using odafs::test::in_child;
using odafs::test::list;
using odafs::test::Mounted;
using odafs::test::MountProcess;
using odafs::test::pattern;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_at;
using odafs::test::write_local;
using Clock = std::chrono::steady_clock;

#define MOUNT_TEST(name) ODAFS_MOUNT_TEST(name)

namespace {
// Mount options for tests that wait out the kernel's caches: it trusts attributes and name
// lookups for 0.5 s (the default is 1 s), and kPastCacheTimes is past that.
const std::vector<std::string> kShortCacheTimes = {"attr_timeout=0.5", "entry_timeout=0.5"};
constexpr std::chrono::milliseconds kPastCacheTimes{600};
}  // namespace

MOUNT_TEST("files: create, read, write, append, truncate, O_EXCL, O_TRUNC, sparse") {
  Mounted fs;
  // Create and read back; the bytes reach other clients of the server.
  write_local(fs / "a", "hello");
  CHECK(cat(fs / "a") == "hello");
  CHECK(fs.read_by_another_client("a") == "hello");
  // Overwrite in the middle, then a large write that spans many server blocks.
  int fd = open((fs / "a").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  CHECK(write_at(fd, "J", 0) == 1);
  std::string big = pattern(3 * 1024 * 1024 + 17, 1);
  CHECK(write_at(fd, big, 5) == static_cast<ssize_t>(big.size()));
  CHECK(fsync(fd) == 0);
  CHECK(close(fd) == 0);
  CHECK(cat(fs / "a") == "Jello" + big);
  // O_APPEND goes to the end, also past another writer's bytes.
  write_local(fs / "log", "one\n");
  fd = open((fs / "log").c_str(), O_WRONLY | O_APPEND);
  REQUIRE(fd >= 0);
  fs.write_by_another_client("log", "one\ntwo\n");  // someone else appends meanwhile
  CHECK(write(fd, "three\n", 6) == 6);
  CHECK(close(fd) == 0);
  CHECK(cat(fs / "log") == "one\ntwo\nthree\n");
  // truncate: grow (zeros), shrink, through the path and through a descriptor.
  CHECK(truncate((fs / "log").c_str(), 20) == 0);
  CHECK(cat(fs / "log") == std::string("one\ntwo\nthree\n") + std::string(6, '\0'));
  CHECK(truncate((fs / "log").c_str(), 3) == 0);
  CHECK(cat(fs / "log") == "one");
  fd = open((fs / "log").c_str(), O_RDWR);
  CHECK(ftruncate(fd, 1) == 0);
  struct stat st {};
  CHECK(fstat(fd, &st) == 0);
  CHECK(st.st_size == 1);
  close(fd);
  CHECK(cat(fs / "log") == "o");
  // O_EXCL on an existing name; O_TRUNC empties.
  CHECK(failed_with(open((fs / "a").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644) < 0) == EEXIST);
  fd = open((fs / "new").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0640);
  CHECK(fd >= 0);
  close(fd);
  CHECK(stat((fs / "new").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  fd = open((fs / "a").c_str(), O_WRONLY | O_TRUNC);
  CHECK(fd >= 0);
  close(fd);
  CHECK(stat((fs / "a").c_str(), &st) == 0);
  CHECK(st.st_size == 0);
  // ENOENT, EISDIR, ENOTDIR.
  CHECK(failed_with(open((fs / "missing").c_str(), O_RDONLY) < 0) == ENOENT);
  CHECK(mkdir((fs / "d").c_str(), 0755) == 0);
  CHECK(failed_with(open((fs / "d").c_str(), O_WRONLY) < 0) == EISDIR);
  CHECK(failed_with(open((fs / "a/x").c_str(), O_RDONLY) < 0) == ENOTDIR);
  // A sparse file: one byte at 64 MiB; the hole reads as zeros and takes no space.
  fd = open((fs / "sparse").c_str(), O_CREAT | O_RDWR, 0644);
  REQUIRE(fd >= 0);
  const off_t far = 64 << 20;
  CHECK(write_at(fd, "x", far) == 1);
  CHECK(fstat(fd, &st) == 0);
  CHECK(st.st_size == far + 1);
  char buf[4096];
  CHECK(pread(fd, buf, sizeof(buf), 1 << 20) == static_cast<ssize_t>(sizeof(buf)));
  CHECK(std::all_of(buf, buf + sizeof(buf), [](char c) { return c == 0; }));
  CHECK(pread(fd, buf, 2, far) == 1);
  CHECK(buf[0] == 'x');
  close(fd);
  CHECK(stat((fs / "sparse").c_str(), &st) == 0);
  CHECK(st.st_blocks * 512 < (1 << 20));
}

MOUNT_TEST("a cp's 128 KiB writes reach the server gathered, a WRITE per MiB (write_behind)") {
  Mounted fs({"write_behind=1048576"});
  const std::string data = pattern(4 << 20, 7);
  auto other = odafs::Client::mount(fs.server.url());
  const uint64_t before = odafs::test::server_stat(*other, "calls.WRITE");
  int fd = open((fs / "big").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  constexpr size_t kPiece = 128 << 10;  // what cp hands the kernel at a time
  for (size_t off = 0; off < data.size(); off += kPiece) {
    REQUIRE(write(fd, data.data() + off, kPiece) == static_cast<ssize_t>(kPiece));
  }
  CHECK(close(fd) == 0);
  // Another client's read recalls a delegation that kept them: every byte is on the server.
  CHECK(odafs::test::read_all(*other, "big", data.size()) == data);
  // 4 with 1 MiB runs; 32, one per write(2), when each went on its own.
  CHECK(odafs::test::server_stat(*other, "calls.WRITE") - before <= 8);
}

MOUNT_TEST(
    "a close of a read-only descriptor sends nothing (FOPEN_NOFLUSH); the writer's close "
    "sends and commits its bytes") {
  Mounted fs({}, {"--no-delegations"});  // no delegation keeps the writer's bytes
  auto other = odafs::Client::mount(fs.server.url());
  const int writer = open((fs / "f").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(writer >= 0);
  const std::string data = pattern(3000, 3);
  REQUIRE(write(writer, data.data(), data.size()) == static_cast<ssize_t>(data.size()));
  const int reader = open((fs / "f").c_str(), O_RDONLY);  // the write is still behind
  REQUIRE(reader >= 0);
  const uint64_t writes = odafs::test::server_stat(*other, "calls.WRITE");
  const uint64_t commits = odafs::test::server_stat(*other, "calls.COMMIT");
  CHECK(close(reader) == 0);
  // The kernel sends the RELEASE after close(2) returned, on its own time: give it that.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Before, the kernel's FLUSH at this close committed every open's writes of the file (and
  // the release's close did again).
  CHECK(odafs::test::server_stat(*other, "calls.WRITE") == writes);
  CHECK(odafs::test::server_stat(*other, "calls.COMMIT") == commits);
  CHECK(close(writer) == 0);
  CHECK(odafs::test::server_stat(*other, "calls.WRITE") > writes);
  CHECK(odafs::test::read_all(*other, "f", data.size()) == data);
}

MOUNT_TEST("the mount's source in mountinfo (df, findmnt) is its URL") {
  Mounted fs;
  std::ifstream info("/proc/self/mountinfo");
  std::string line, source;
  while (std::getline(info, line)) {
    // "... MOUNTPOINT OPTIONS ... - FSTYPE SOURCE SUPEROPTIONS"
    if (line.find(" " + fs.mnt.path() + " ") == std::string::npos) continue;
    const size_t dash = line.find(" - ");
    REQUIRE(dash != std::string::npos);
    std::istringstream rest(line.substr(dash + 3));
    std::string type;
    rest >> type >> source;
    CHECK(type == "fuse.odafs-mount");
  }
  CHECK(source == fs.server.url());
}

MOUNT_TEST("st_blksize is the largest WRITE, and a write(2) of it is one WRITE (defaults)") {
  Mounted fs;
  auto other = odafs::Client::mount(fs.server.url());
  const uint32_t io = std::min(other->limits().max_read, other->limits().max_write);
  write_local(fs / "f", "x");
  struct stat st {};
  REQUIRE(stat((fs / "f").c_str(), &st) == 0);
  // cp and cat size their buffers by it (8 KiB, the server's block, before: cp then wrote
  // 128 KiB at a time, a FUSE round trip each).
  CHECK(st.st_blksize == static_cast<blksize_t>(io));
  const std::string data = pattern(4 * size_t{io}, 3);
  const uint64_t before = odafs::test::server_stat(*other, "calls.WRITE");
  int fd = open((fs / "big").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  for (size_t off = 0; off < data.size(); off += st.st_blksize) {
    REQUIRE(write(fd, data.data() + off, st.st_blksize) == st.st_blksize);
  }
  CHECK(close(fd) == 0);
  CHECK(odafs::test::read_all(*other, "big", data.size()) == data);
  CHECK(odafs::test::server_stat(*other, "calls.WRITE") - before == 4);
}

MOUNT_TEST("names: rename over files and directories, unlink and rmdir errors, long names") {
  Mounted fs;
  write_local(fs / "f1", "one");
  write_local(fs / "f2", "two");
  // A file over a file replaces it; the old name is gone.
  CHECK(rename((fs / "f1").c_str(), (fs / "f2").c_str()) == 0);
  CHECK(cat(fs / "f2") == "one");
  CHECK(failed_with(access((fs / "f1").c_str(), F_OK) != 0) == ENOENT);
  // Directories: over an empty one works, over a non-empty one is ENOTEMPTY (or EEXIST).
  CHECK(mkdir((fs / "d1").c_str(), 0755) == 0);
  write_local(fs / "d1/inner", "in");
  CHECK(mkdir((fs / "d2").c_str(), 0755) == 0);
  CHECK(rename((fs / "d1").c_str(), (fs / "d2").c_str()) == 0);
  CHECK(cat(fs / "d2/inner") == "in");
  CHECK(mkdir((fs / "d3").c_str(), 0755) == 0);
  write_local(fs / "d3/x", "x");
  int err = failed_with(rename((fs / "d2").c_str(), (fs / "d3").c_str()) != 0);
  CHECK((err == ENOTEMPTY || err == EEXIST));
  // Type mismatches.
  CHECK(failed_with(rename((fs / "f2").c_str(), (fs / "d3").c_str()) != 0) == EISDIR);
  CHECK(failed_with(rename((fs / "d3").c_str(), (fs / "f2").c_str()) != 0) == ENOTDIR);
  // A directory moved into another: what was under it follows (the inode table's paths).
  CHECK(rename((fs / "d2").c_str(), (fs / "d3/moved").c_str()) == 0);
  CHECK(cat(fs / "d3/moved/inner") == "in");
  write_local(fs / "d3/moved/more", "more");
  CHECK(fs.read_by_another_client("d3/moved/more") == "more");
  // RENAME_NOREPLACE is honoured; RENAME_EXCHANGE is not supported.
  write_local(fs / "g", "g");
  CHECK(failed_with(renameat2(AT_FDCWD, (fs / "g").c_str(), AT_FDCWD, (fs / "f2").c_str(),
                              RENAME_NOREPLACE) != 0) == EEXIST);
  CHECK(renameat2(AT_FDCWD, (fs / "g").c_str(), AT_FDCWD, (fs / "h").c_str(), RENAME_NOREPLACE) ==
        0);
  CHECK(failed_with(renameat2(AT_FDCWD, (fs / "h").c_str(), AT_FDCWD, (fs / "f2").c_str(),
                              RENAME_EXCHANGE) != 0) == EINVAL);
  // unlink and rmdir errors.
  CHECK(failed_with(unlink((fs / "nope").c_str()) != 0) == ENOENT);
  CHECK(failed_with(unlink((fs / "d3").c_str()) != 0) == EISDIR);
  CHECK(failed_with(rmdir((fs / "d3").c_str()) != 0) == ENOTEMPTY);
  CHECK(failed_with(rmdir((fs / "f2").c_str()) != 0) == ENOTDIR);
  CHECK(failed_with(rmdir((fs / "nope").c_str()) != 0) == ENOENT);
  CHECK(unlink((fs / "f2").c_str()) == 0);
  CHECK(failed_with(access((fs / "f2").c_str(), F_OK) != 0) == ENOENT);
  CHECK(rmdir((fs / "d3/moved/..").c_str()) != 0);  // the kernel refuses ".."
  // Long names: 255 bytes is fine, 256 is ENAMETOOLONG.
  std::string ok(255, 'n');
  write_local(fs / ok, "long");
  CHECK(cat(fs / ok) == "long");
  std::string too_long(256, 'n');
  CHECK(failed_with(open((fs / too_long).c_str(), O_CREAT | O_WRONLY, 0644) < 0) == ENAMETOOLONG);
  CHECK(failed_with(mkdir((fs / too_long).c_str(), 0755) != 0) == ENAMETOOLONG);
  // Hard links: one file under two names, the same inode number, counted; either name
  // outlives the other. Special files: the protocol has none.
  write_local(fs / "h", "hard");
  CHECK(link((fs / "h").c_str(), (fs / "h2").c_str()) == 0);
  struct stat h {
  }, h2{};
  CHECK(stat((fs / "h").c_str(), &h) == 0);
  CHECK(stat((fs / "h2").c_str(), &h2) == 0);
  CHECK(h.st_ino == h2.st_ino);
  CHECK(h2.st_nlink == 2);
  write_local(fs / "h2", "HARD");
  CHECK(cat(fs / "h") == "HARD");
  CHECK(unlink((fs / "h").c_str()) == 0);
  CHECK(cat(fs / "h2") == "HARD");
  write_local(fs / "taken", "t");
  CHECK(failed_with(link((fs / "h2").c_str(), (fs / "taken").c_str()) != 0) == EEXIST);
  CHECK(failed_with(link((fs / "d3").c_str(), (fs / "d4").c_str()) != 0) == EPERM);
  CHECK(failed_with(mkfifo((fs / "h2").c_str(), 0644) != 0) ==
        EEXIST);  // FIFOs: test_mount_objects
}

MOUNT_TEST("symlinks: symlink, readlink, relative and absolute targets, ELOOP") {
  Mounted fs;
  write_local(fs / "target", "data");
  CHECK(symlink("target", (fs / "link").c_str()) == 0);
  char buf[256];
  ssize_t n = readlink((fs / "link").c_str(), buf, sizeof(buf));
  REQUIRE(n == 6);
  CHECK(std::string(buf, n) == "target");
  CHECK(cat(fs / "link") == "data");
  struct stat st {};
  CHECK(lstat((fs / "link").c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  CHECK(st.st_size == 6);
  // The kernel follows symlinks itself: a target outside the mount is its business.
  TempDir outside;
  write_local(outside / "o", "outside");
  CHECK(symlink((outside / "o").c_str(), (fs / "abs").c_str()) == 0);
  CHECK(cat(fs / "abs") == "outside");
  // A loop.
  CHECK(symlink("loop2", (fs / "loop1").c_str()) == 0);
  CHECK(symlink("loop1", (fs / "loop2").c_str()) == 0);
  CHECK(failed_with(open((fs / "loop1").c_str(), O_RDONLY) < 0) == ELOOP);
  // A dangling link: lstat works, stat is ENOENT, unlink removes the link only.
  CHECK(symlink("nothing", (fs / "dangling").c_str()) == 0);
  CHECK(lstat((fs / "dangling").c_str(), &st) == 0);
  CHECK(failed_with(stat((fs / "dangling").c_str(), &st) != 0) == ENOENT);
  // A symlink's own times (lutimes), its target's left alone; and the target's through it.
  struct stat target_before {};
  REQUIRE(stat(fs.local("target").c_str(), &target_before) == 0);
  const timespec link_times[2] = {{1000000000, 5}, {1100000000, 7}};
  CHECK(utimensat(AT_FDCWD, (fs / "link").c_str(), link_times, AT_SYMLINK_NOFOLLOW) == 0);
  CHECK(lstat(fs.local("link").c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec == 1100000000);
  CHECK(st.st_mtim.tv_nsec == 7);
  CHECK(lstat((fs / "link").c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec == 1100000000);
  CHECK(stat(fs.local("target").c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec == target_before.st_mtim.tv_sec);
  const timespec target_times[2] = {{1200000000, 0}, {1200000000, 0}};
  CHECK(utimensat(AT_FDCWD, (fs / "link").c_str(), target_times, 0) == 0);
  CHECK(stat(fs.local("target").c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec == 1200000000);
  CHECK(lstat(fs.local("link").c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec == 1100000000);
  CHECK(unlink((fs / "link").c_str()) == 0);
  CHECK(cat(fs / "target") == "data");
}

MOUNT_TEST("attributes: chmod, utimensat with UTIME_NOW and UTIME_OMIT, chown, statfs") {
  Mounted fs;
  write_local(fs / "f", "x");
  CHECK(chmod((fs / "f").c_str(), 0600) == 0);
  struct stat st {};
  CHECK(stat((fs / "f").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  struct stat local {};
  CHECK(stat(fs.local("f").c_str(), &local) == 0);
  CHECK((local.st_mode & 07777) == 0600);
  // mtime set, atime left alone.
  CHECK(stat((fs / "f").c_str(), &st) == 0);
  const timespec atime_before = st.st_atim;
  timespec t[2];
  t[0].tv_sec = 0;
  t[0].tv_nsec = UTIME_OMIT;
  t[1].tv_sec = 1000000000;
  t[1].tv_nsec = 123456789;
  CHECK(utimensat(AT_FDCWD, (fs / "f").c_str(), t, 0) == 0);
  CHECK(stat((fs / "f").c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec == 1000000000);
  CHECK(st.st_mtim.tv_nsec == 123456789);
  CHECK(st.st_atim.tv_sec == atime_before.tv_sec);
  CHECK(st.st_atim.tv_nsec == atime_before.tv_nsec);
  // atime now, mtime left alone.
  t[0].tv_nsec = UTIME_NOW;
  t[1].tv_nsec = UTIME_OMIT;
  time_t now = time(nullptr);
  CHECK(utimensat(AT_FDCWD, (fs / "f").c_str(), t, 0) == 0);
  CHECK(stat((fs / "f").c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec == 1000000000);
  CHECK(st.st_atim.tv_sec >= now - 5);
  CHECK(st.st_atim.tv_sec <= now + 5);
  CHECK(stat(fs.local("f").c_str(), &local) == 0);
  CHECK(local.st_mtim.tv_sec == 1000000000);
  // Both now (touch).
  CHECK(utimensat(AT_FDCWD, (fs / "f").c_str(), nullptr, 0) == 0);
  CHECK(stat((fs / "f").c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec >= now - 5);
  // chown: to the owner it already has is fine; another owner as the server may (it acts
  // as itself for everyone here: root may, anyone else may not).
  CHECK(chown((fs / "f").c_str(), st.st_uid, st.st_gid) == 0);
  const int chowned = failed_with(chown((fs / "f").c_str(), st.st_uid + 1, st.st_gid + 2) != 0);
  if (geteuid() == 0) {
    CHECK(chowned == 0);
    CHECK(stat(fs.local("f").c_str(), &local) == 0);
    CHECK(local.st_uid == st.st_uid + 1);
    CHECK(local.st_gid == st.st_gid + 2);
    struct stat after {};
    CHECK(stat((fs / "f").c_str(), &after) == 0);
    CHECK(after.st_uid == st.st_uid + 1);
    // -1 leaves one as it is.
    CHECK(chown((fs / "f").c_str(), static_cast<uid_t>(-1), st.st_gid) == 0);
    CHECK(stat(fs.local("f").c_str(), &local) == 0);
    CHECK(local.st_uid == st.st_uid + 1);
    CHECK(local.st_gid == st.st_gid);
    // lchown: a symlink's own owner, not its target's.
    CHECK(symlink("f", (fs / "l").c_str()) == 0);
    CHECK(lchown((fs / "l").c_str(), st.st_uid + 3, static_cast<gid_t>(-1)) == 0);
    CHECK(lstat(fs.local("l").c_str(), &local) == 0);
    CHECK(local.st_uid == st.st_uid + 3);
    CHECK(stat(fs.local("f").c_str(), &local) == 0);
    CHECK(local.st_uid == st.st_uid + 1);
  } else {
    CHECK(chowned == EPERM);
  }
  // statfs reports the export's file system.
  struct statvfs v {
  }, lv{};
  CHECK(statvfs(fs.m.mountpoint().c_str(), &v) == 0);
  CHECK(statvfs(fs.exp.path().c_str(), &lv) == 0);
  CHECK(v.f_blocks > 0);
  CHECK(v.f_bsize > 0);
  const double total = static_cast<double>(v.f_blocks) * v.f_frsize;
  const double ltotal = static_cast<double>(lv.f_blocks) * lv.f_frsize;
  CHECK(total == doctest::Approx(ltotal).epsilon(0.01));
  CHECK(v.f_namemax == 255);
}

MOUNT_TEST("a listing's attributes (readdirplus) are what stat says, whoever holds newer bytes") {
  Mounted fs(kShortCacheTimes);
  CHECK(mkdir((fs / "d").c_str(), 0755) == 0);
  for (int i = 0; i < 300; ++i) {
    write_local(fs.local("d/f" + std::to_string(i)), std::string(static_cast<size_t>(i), 'x'));
  }
  CHECK(mkdir(fs.local("d/sub").c_str(), 0700) == 0);
  CHECK(symlink("f1", fs.local("d/link").c_str()) == 0);
  // What ls -l does: each entry stat'ed as it is read (a lookup of one makes the kernel
  // ask for the next slice with attributes).
  auto ls_l = [&] {
    std::map<std::string, struct stat> seen;
    DIR* d = opendir((fs / "d").c_str());
    REQUIRE(d != nullptr);
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      struct stat st {};
      CHECK(lstat((fs / ("d/" + name)).c_str(), &st) == 0);
      seen[name] = st;
    }
    closedir(d);
    return seen;
  };
  // Every entry as the export has it.
  auto check_all = [&] {
    const auto seen = ls_l();
    CHECK(seen.size() == 300 + 2);
    int wrong = 0;
    for (const auto& [name, here] : seen) {
      struct stat there {};
      if (lstat(fs.local("d/" + name).c_str(), &there) != 0 || here.st_size != there.st_size ||
          here.st_mode != there.st_mode || here.st_ino != there.st_ino ||
          here.st_mtim.tv_sec != there.st_mtim.tv_sec || here.st_nlink != there.st_nlink) {
        ++wrong;
      }
    }
    CHECK(wrong == 0);
  };
  check_all();
  // Another client writes files and keeps the bytes (its write delegations): the listing
  // must not show the server's stale sizes; stat gets the recalled ones.
  auto other = odafs::Client::mount(fs.server.url());
  for (int i = 0; i < 300; i += 30) {
    odafs::File f = other->open("d/f" + std::to_string(i), O_RDWR);
    f.pwrite("0123456789abcdef", 16, 300);
    f.close();  // kept by the other client
  }
  // Lets time pass for attr_timeout: the kernel asks again.
  std::this_thread::sleep_for(kPastCacheTimes);
  auto seen = ls_l();
  for (int i = 0; i < 300; i += 30) CHECK(seen["f" + std::to_string(i)].st_size == 316);
  // This mount's own writes not yet sent: its listing keeps to what it knows.
  int fd = open((fs / "d/f7").c_str(), O_WRONLY | O_APPEND);
  REQUIRE(fd >= 0);
  CHECK(write(fd, "more", 4) == 4);
  std::this_thread::sleep_for(kPastCacheTimes);  // lets time pass for attr_timeout
  CHECK(ls_l()["f7"].st_size == 7 + 4);
  CHECK(close(fd) == 0);
  // Renamed and removed behind its back: the next listing and its attributes follow.
  CHECK(rename(fs.local("d/f9").c_str(), fs.local("d/moved").c_str()) == 0);
  CHECK(unlink(fs.local("d/f11").c_str()) == 0);
  write_local(fs.local("d/f11"), "new file");
  // Written back (the other client's unmount; another's read recalls the mount's), so the
  // export has them too.
  other.reset();
  CHECK(read_local(fs.local("d/f30")).size() == 316);
  CHECK(fs.read_by_another_client("d/f7") == std::string(7, 'x') + "more");
  // Lets time pass for attr_timeout and entry_timeout: the kernel looks the names up again.
  std::this_thread::sleep_for(kPastCacheTimes);
  check_all();
  seen = ls_l();
  CHECK(seen.count("f9") == 0);
  CHECK(seen["moved"].st_size == 9);
  CHECK(seen["f11"].st_size == 8);
}

MOUNT_TEST("a listing read slowly does not bring back attributes this mount changed since") {
  Mounted fs;
  for (int i = 0; i < 2000; ++i) write_local(fs.local("f" + std::to_string(i)), "x");
  // The server lists in the export's order: its last name comes in the listing's last
  // slice, long after opendir fetched the listing (and its attributes).
  std::string last;
  {
    DIR* local = opendir(fs.exp.path().c_str());
    REQUIRE(local != nullptr);
    while (dirent* e = readdir(local)) last = e->d_name;
    closedir(local);
  }
  REQUIRE(last.rfind("f", 0) == 0);
  DIR* d = opendir(fs.m.mountpoint().c_str());
  REQUIRE(d != nullptr);
  REQUIRE(readdir(d) != nullptr);  // the first slice
  // This mount appends to the last file (and fsyncs: the server has it too).
  int fd = open((fs / last).c_str(), O_WRONLY | O_APPEND);
  REQUIRE(fd >= 0);
  CHECK(write(fd, "yz", 2) == 2);
  CHECK(fsync(fd) == 0);
  CHECK(close(fd) == 0);
  size_t seen = 1;
  while (readdir(d) != nullptr) ++seen;  // the rest, the last file's slice among them
  closedir(d);
  CHECK(seen == 2000 + 2);
  struct stat st {};
  CHECK(stat((fs / last).c_str(), &st) == 0);
  CHECK(st.st_size == 3);
}

MOUNT_TEST("a listing's attributes leave out files with writes behind (no delegations)") {
  Mounted fs(kShortCacheTimes, {"--no-delegations"});
  for (int i = 0; i < 100; ++i) write_local(fs.local("f" + std::to_string(i)), "x");
  // Writes gathered behind and not sent while the files stay open: the server's sizes
  // are stale, and a listing's attributes must not stand in for what this mount knows.
  std::vector<int> fds;
  for (int i = 0; i < 100; i += 10) {
    int fd = open((fs / ("f" + std::to_string(i))).c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    CHECK(write_at(fd, "0123456789", 0) == 10);
    fds.push_back(fd);
  }
  // Lets time pass for attr_timeout: the listing's attributes are asked for, not the opens'.
  std::this_thread::sleep_for(kPastCacheTimes);
  DIR* d = opendir(fs.m.mountpoint().c_str());
  REQUIRE(d != nullptr);
  int wrong = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    CHECK(lstat((fs / name).c_str(), &st) == 0);
    const bool written = std::stoi(name.substr(1)) % 10 == 0;
    wrong += st.st_size != (written ? 10 : 1);
  }
  closedir(d);
  CHECK(wrong == 0);
  for (int fd : fds) CHECK(close(fd) == 0);
}

MOUNT_TEST("two mounts of one export see each other's changes after close and open") {
  Mounted a;
  TempDir mnt2;
  MountProcess b(a.server.url(), mnt2.path());
  write_local(a / "shared", "version 1");
  CHECK(cat(b / "shared") == "version 1");
  // A rewrite that grows the file: b's next open sees all of it (no stale size or pages).
  write_local(a / "shared", "version 2, which is longer");
  CHECK(cat(b / "shared") == "version 2, which is longer");
  // Replaced by rename (an editor's save): b opens the new file.
  write_local(a / ".shared.tmp", "version 3");
  CHECK(rename((a / ".shared.tmp").c_str(), (a / "shared").c_str()) == 0);
  CHECK(cat(b / "shared") == "version 3");
  struct stat sa {
  }, sb{};
  CHECK(stat((a / "shared").c_str(), &sa) == 0);
  CHECK(stat((b / "shared").c_str(), &sb) == 0);
  CHECK(sa.st_ino == sb.st_ino);
  CHECK(sb.st_size == 9);
  // Names made and removed by one appear and go in the other (after the entry timeout at
  // most: the kernel caches lookups for 1 s).
  CHECK(mkdir((b / "fromb").c_str(), 0755) == 0);
  write_local(b / "fromb/file", "b");
  CHECK(cat(a / "fromb/file") == "b");
  CHECK(list(a.m.mountpoint()).count("fromb") == 1);
  CHECK(unlink((b / "fromb/file").c_str()) == 0);
  CHECK(eventually(
      [&] { return failed_with(access((a / "fromb/file").c_str(), F_OK) != 0) == ENOENT; }, 3));
}

MOUNT_TEST("a stopped or killed server fails operations within the timeout, never hangs") {
  // The unmount at the end finds the server gone: what the mount may still keep of f goes
  // to a rescue file here at once (test_mount_unmount tests the wait).
  TempDir rescue;
  Mounted fs({"timeout_ms=2000", "unmount_wait_ms=0", "rescue_dir=" + rescue.path()});
  write_local(fs / "f", "before");
  CHECK(cat(fs / "f") == "before");
  // Stopped: calls time out.
  REQUIRE(odafs::test::stop_child(fs.server.pid()));
  auto start = Clock::now();
  int rc = in_child(std::chrono::seconds(15), [&] {
    struct stat st {};
    return stat((fs / "not-cached-name").c_str(), &st) == 0 ? 0 : 10;
  });
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  CHECK(rc == 10);
  CHECK(secs < 10);
  // Killed: calls fail at once (connection refused), including reads and writes. (Once
  // the mount has seen its connection close: until then its delegation on f is trusted,
  // and the open of f succeeds without a call.)
  fs.server.kill_hard();
  CHECK(eventually([&] {
    start = Clock::now();
    rc = in_child(std::chrono::seconds(15), [&] {
      int fd = open((fs / "f").c_str(), O_RDWR);
      if (fd >= 0) return 1;
      int fd2 = open((fs / "g").c_str(), O_CREAT | O_WRONLY, 0644);
      return fd2 >= 0 ? 2 : 10;
    });
    secs = std::chrono::duration<double>(Clock::now() - start).count();
    return rc != 1;
  }));
  CHECK(rc == 10);
  CHECK(secs < 10);
  // And the mount can still be taken down.
  fs.m.unmount();
  CHECK_FALSE(odafs::test::is_odafs_mounted(fs.mnt.path()));
  for (const auto& e : std::filesystem::directory_iterator(rescue.path())) {
    CHECK(read_local(e.path().string()) == "before");  // if the close still kept it
  }
}

MOUNT_TEST("SIGTERM to a foreground odafs-mount unmounts and exits 0") {
  Mounted fs;
  write_local(fs / "f", "x");
  // A file still open at the signal: the kernel never releases it; odafs-mount closes it
  // at its end (under ASan, a leak report would make the exit status SIGABRT's).
  int held = open((fs / "held").c_str(), O_CREAT | O_WRONLY, 0644);
  REQUIRE(held >= 0);
  CHECK(write_at(held, "kept", 0) == 4);
  REQUIRE(kill(fs.m.pid(), SIGTERM) == 0);
  int status = 0;
  CHECK(eventually([&] { return waitpid(fs.m.pid(), &status, WNOHANG) == fs.m.pid(); }, 10));
  INFO("wait status " << status << "; odafs-mount said: " << fs.m.stderr_text());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(odafs::test::is_odafs_mounted(fs.mnt.path()));
  CHECK(read_local(fs.local("f")) == "x");
  CHECK(read_local(fs.local("held")) == "kept");
  close(held);
}

MOUNT_TEST("a file removed or renamed over while open stays usable until closed") {
  Mounted fs;
  write_local(fs / "f", "old contents");
  int fd = open((fs / "f").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  CHECK(unlink((fs / "f").c_str()) == 0);
  CHECK(failed_with(access((fs / "f").c_str(), F_OK) != 0) == ENOENT);
  char buf[64] = {};
  CHECK(pread(fd, buf, sizeof(buf), 0) == 12);
  CHECK(std::string(buf, 12) == "old contents");
  CHECK(write_at(fd, "OLD", 0) == 3);
  struct stat st {};
  CHECK(fstat(fd, &st) == 0);
  CHECK(st.st_size == 12);
  // It lives on under a hidden name (as NFS's .nfsXXXX), gone at the last close.
  CHECK(list(fs.exp.path()).size() == 3);  // ".", "..", the hidden file
  CHECK(close(fd) == 0);
  // RELEASE follows close(2) asynchronously.
  CHECK(eventually([&] { return list(fs.exp.path()) == std::set<std::string>{".", ".."}; }));
  // Renamed over (an editor's save) while a reader holds the old file.
  write_local(fs / "doc", "version 1");
  fd = open((fs / "doc").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  write_local(fs / "doc.tmp", "version 2");
  CHECK(rename((fs / "doc.tmp").c_str(), (fs / "doc").c_str()) == 0);
  CHECK(cat(fs / "doc") == "version 2");
  CHECK(pread(fd, buf, sizeof(buf), 0) == 9);
  CHECK(std::string(buf, 9) == "version 1");
  CHECK(close(fd) == 0);
  CHECK(eventually([&] { return list(fs.exp.path()) == std::set<std::string>{".", "..", "doc"}; }));
}

MOUNT_TEST("several threads at once: create, write, read, rename, remove in their own trees") {
  Mounted fs;
  constexpr int kThreads = 4;
  constexpr int kFiles = 40;
  std::vector<int> errors(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&fs, &errors, t] {
      std::string dir = fs / ("t" + std::to_string(t));
      if (mkdir(dir.c_str(), 0755) != 0) ++errors[t];
      for (int i = 0; i < kFiles; ++i) {
        std::string name = dir + "/f" + std::to_string(i);
        std::string data = pattern(1000 + 97 * i, t * 1000 + i);
        int fd = open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0644);
        if (fd < 0 || write_at(fd, data, 0) != static_cast<ssize_t>(data.size())) ++errors[t];
        if (fd >= 0) close(fd);
        if (read_local(name) != data) ++errors[t];
        if (i % 2 == 0 && rename(name.c_str(), (name + ".r").c_str()) != 0) ++errors[t];
        if (i % 4 == 0 && unlink((name + ".r").c_str()) != 0) ++errors[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    CHECK(errors[t] == 0);
    std::set<std::string> names = list(fs.local("t" + std::to_string(t)));
    CHECK(names.size() == 2 + kFiles - kFiles / 4);
    CHECK(names.count("f1") == 1);
    CHECK(names.count("f2.r") == 1);
    CHECK(names.count("f4.r") == 0);
  }
}

MOUNT_TEST("listings with attributes while names change under them; the kernel forgets all") {
  Mounted fs(kShortCacheTimes);
  CHECK(mkdir((fs / "d").c_str(), 0755) == 0);
  for (int i = 0; i < 200; ++i) write_local(fs.local("d/f" + std::to_string(i)), "x");
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::atomic<int> listings{0};
  // Listers stat every name they read (what ls -l does); names may go between the two
  // (ENOENT), nothing else may fail.
  auto lister = [&] {
    while (!stop.load()) {
      DIR* d = opendir((fs / "d").c_str());
      if (d == nullptr) {
        ++errors;
        continue;
      }
      while (dirent* e = readdir(d)) {
        struct stat st {};
        if (lstat((fs / (std::string("d/") + e->d_name)).c_str(), &st) != 0 && errno != ENOENT) {
          ++errors;
        }
      }
      closedir(d);
      ++listings;
    }
  };
  // One mutator through the mount, one behind its back (another client of the server).
  auto here = [&] {
    for (int round = 0; !stop.load(); ++round) {
      const std::string a = fs / ("d/f" + std::to_string(round % 200));
      const std::string b = fs / ("d/m" + std::to_string(round % 200));
      if (rename(a.c_str(), b.c_str()) != 0 && errno != ENOENT) ++errors;
      if (rename(b.c_str(), a.c_str()) != 0 && errno != ENOENT) ++errors;
      int fd = open(a.c_str(), O_WRONLY | O_APPEND);
      if (fd >= 0) {
        if (write(fd, "y", 1) != 1) ++errors;
        close(fd);
      }
    }
  };
  auto there = [&] {
    auto other = odafs::Client::mount(fs.server.url());
    for (int round = 0; !stop.load(); ++round) {
      const std::string name = "d/n" + std::to_string(round % 50);
      try {
        other->open(name, O_CREAT | O_WRONLY, 0644).close();
        other->unlink(name);
      } catch (const odafs::Error&) {
        ++errors;
      }
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(lister);
  threads.emplace_back(lister);
  threads.emplace_back(here);
  threads.emplace_back(there);
  // The threads race for 4 s: the length of the load, not a wait for anything.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  stop = true;
  for (auto& t : threads) t.join();
  CHECK(errors.load() == 0);
  CHECK(listings.load() > 0);
  // The kernel drops every inode it may (as under memory pressure): the FORGETs must leave
  // odafs-mount's table right, and everything still reachable.
  if (geteuid() == 0) {
    std::ofstream("/proc/sys/vm/drop_caches") << "2\n";
  }
  // Lets time pass for attr_timeout and entry_timeout: every name and size is asked again.
  std::this_thread::sleep_for(kPastCacheTimes);
  int wrong = 0;
  size_t seen = 0;
  DIR* d = opendir((fs / "d").c_str());
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    ++seen;
    // The export may not have this mount's appends yet (kept under its write
    // delegations): sizes are checked against what the mount reads.
    struct stat here {
    }, there{};
    if (lstat((fs / ("d/" + name)).c_str(), &here) != 0 ||
        lstat(fs.local("d/" + name).c_str(), &there) != 0 || here.st_ino != there.st_ino ||
        here.st_size != static_cast<off_t>(cat(fs / ("d/" + name)).size())) {
      ++wrong;
    }
  }
  closedir(d);
  CHECK(wrong == 0);
  CHECK(seen == 200);
  CHECK(cat(fs / "d/f0").substr(0, 1) == "x");
}

MOUNT_TEST("the kernel keeps a file's pages across opens while nobody changed the file") {
  Mounted fs;
  const std::string data = pattern(1 << 20, 7);
  write_local(fs.local("f"), data);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t pages = data.size() / page;
  // Opens the file (which keeps or drops the kernel's pages) and counts the pages of it
  // the kernel holds, without reading any.
  auto resident_after_open = [&] {
    int fd = open((fs / "f").c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    void* map = mmap(nullptr, data.size(), PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED);
    std::vector<unsigned char> in(pages);
    REQUIRE(mincore(map, data.size(), in.data()) == 0);
    munmap(map, data.size());
    close(fd);
    size_t n = 0;
    for (unsigned char c : in) n += c & 1;
    return n;
  };
  CHECK(cat(fs / "f") == data);  // the pages come in
  CHECK(resident_after_open() == pages);
  CHECK(cat(fs / "f") == data);
  // Another client changes the bytes, not the size: the next open drops the pages.
  // Lets time pass for the file system's coarse clock: the rewrite's mtime is a later tick.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string changed = pattern(1 << 20, 8);
  fs.write_by_another_client("f", changed);
  CHECK(resident_after_open() == 0);
  CHECK(cat(fs / "f") == changed);
  CHECK(resident_after_open() == pages);
  // This mount's own writes go through the pages it keeps.
  int fd = open((fs / "f").c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  CHECK(write_at(fd, "written here", 4096) == 12);
  CHECK(close(fd) == 0);
  std::string expect = changed;
  expect.replace(4096, 12, "written here");
  CHECK(cat(fs / "f") == expect);
  CHECK(fs.read_by_another_client("f") == expect);
}

MOUNT_TEST("a write that fails with EFBIG leaves the file's size as it was") {
  Mounted fs;
  int fd = open((fs / "f").c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  CHECK(pwrite(fd, "hello", 5, 0) == 5);
  // Past any file system's limit: gathered behind by the mount, refused by the server.
  const off_t far = off_t{1} << 62;
  const ssize_t n = pwrite(fd, "x", 1, far);
  const int err = n < 0 ? errno : (fsync(fd) != 0 ? errno : 0);
  CHECK(err == EFBIG);
  struct stat st {};
  CHECK(fstat(fd, &st) == 0);
  CHECK(st.st_size == 5);  // the old mount said 2^62 + 1
  close(fd);
  CHECK(stat((fs / "f").c_str(), &st) == 0);
  CHECK(st.st_size == 5);
  CHECK(fs.read_by_another_client("f") == "hello");
}
