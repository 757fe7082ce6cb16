// Integration: an export on a file system that fills up. odafsd exports a 1 MiB tmpfs; a
// client fills it until a write fails. The failure must reach the writer as ENOSPC (on the
// RPC and the direct write path), nothing written before may change, the server must keep
// serving everyone, and freeing space must make writes work again. And the space a write
// delegation promises (open_ok.space_limit) is held: a file whose writes and close all
// succeeded is whole on the disk, through the library and through odafs-mount, however
// full later files make it.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/support/client_util.h"
#include "tests/support/mount_process.h"
#include "tests/support/server_process.h"
#include "tests/support/tmpfs.h"

using odafs::Client;
using odafs::Error;
using odafs::File;
using odafs::test::pattern;
using odafs::test::read_all;
using odafs::test::read_local;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::Tmpfs;
using odafs::test::tmpfs_skip_reason;

namespace {

constexpr size_t kChunk = 64 * 1024;

// The errno and message of the Error fn throws (0 and "" if it throws none).
std::pair<int, std::string> error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return {e.errno_value(), e.what()};
  }
  return {0, ""};
}

// A tmpfs of `size` ("size=8m") exported by odafsd (given `args`). REQUIRES:
// tmpfs_skip_reason() is "".
struct SmallExport {
  explicit SmallExport(const char* size, std::vector<std::string> args = {})
      : fs(dir / "export", size), server(mounted(fs), std::move(args)) {}
  const std::string& root() const { return fs.dir; }
  static const std::string& mounted(const Tmpfs& t) {
    REQUIRE(t.mounted);
    return t.dir;
  }
  TempDir dir;
  Tmpfs fs;
  ServerProcess server;
};

// Checks that file `path` on the export's disk holds the MiB written from pattern seed.
void check_whole_mib(const std::string& path, uint64_t seed) {
  CAPTURE(path);
  const std::string on_disk = read_local(path);
  CHECK(on_disk.size() == size_t{1} << 20);
  CHECK((on_disk == pattern(1 << 20, seed)));
}

// The file system's free space for unprivileged writers at path, in bytes.
uint64_t disk_avail(const std::string& path) {
  struct statvfs vfs;
  REQUIRE(statvfs(path.c_str(), &vfs) == 0);
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

// Appends 64 KiB chunks to f, each synced (*filled counts the bytes that succeeded), until
// one fails or enough() says stop; the failure's errno and message (0 and "" if stopped).
std::pair<int, std::string> fill_up(File& f, uint64_t* filled,
                                    const std::function<bool()>& enough) {
  for (int i = 0; i < 256 && !enough(); ++i) {
    const std::string chunk = pattern(kChunk, 200 + static_cast<uint64_t>(i));
    auto failure = error_of([&] {
      f.pwrite(chunk.data(), chunk.size(), *filled);
      f.fsync();
    });
    if (failure.first != 0) return failure;
    *filled += kChunk;
  }
  return {0, ""};
}

// Writes file `path` until its file system has no room left.
void fill_disk(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  const std::string chunk(64 * 1024, 'f');
  while (::write(fd, chunk.data(), chunk.size()) > 0) {
  }
  ::close(fd);
}

// Why a test of a full export through odafs-mount cannot run here ("" when it can).
const char* full_mount_skip() {
  if (*tmpfs_skip_reason() != '\0') return tmpfs_skip_reason();
  return odafs::test::fuse_available() ? "" : odafs::test::fuse_skip_description();
}

// Writes `bytes` to a new file at path as `head -c 1M src > path` does: open, write()s of
// 8 KiB, close, every return checked. True when all succeeded; *err is the first errno.
bool write_like_head(const std::string& path, const std::string& bytes, int* err) {
  *err = 0;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    *err = errno;
    return false;
  }
  for (size_t done = 0; done < bytes.size() && *err == 0;) {
    const ssize_t n = ::write(fd, bytes.data() + done, std::min<size_t>(8192, bytes.size() - done));
    if (n <= 0) {
      *err = n < 0 ? errno : EIO;
    } else {
      done += static_cast<size_t>(n);
    }
  }
  if (::close(fd) != 0 && *err == 0) *err = errno;
  return *err == 0;
}

}  // namespace

TEST_CASE(
    "a full export: ENOSPC reaches the writer, nothing written before changes, the server "
    "keeps serving, and freed space makes writes work again" *
    doctest::skip(*tmpfs_skip_reason() != '\0') * doctest::description(tmpfs_skip_reason())) {
  TempDir dir;
  Tmpfs fs_guard(dir / "export");
  REQUIRE(fs_guard.mounted);
  const std::string root = fs_guard.dir;
  ServerProcess server(root);

  // Files written (and closed: committed) before the file system fills, of sizes that end
  // mid-block and mid-page, one in a subdirectory.
  std::map<std::string, std::string> before = {{"a", pattern(100000, 1)},
                                               {"b", pattern(4097, 2)},
                                               {"c", pattern(1, 3)},
                                               {"d/e", pattern(3 * kChunk + 17, 4)}};
  auto writer = Client::mount(server.url());
  writer->mkdir("d");
  for (const auto& [name, bytes] : before) {
    File f = writer->open(name, O_RDWR | O_CREAT | O_EXCL, 0644);
    REQUIRE(f.pwrite(bytes.data(), bytes.size(), 0) == bytes.size());
    f.close();
    // A close under a write delegation may keep its last run in space the server holds for
    // it (open_ok.space_limit): the fill below cannot take that space, and the bytes reach
    // the disk when another client reads the file (checked below).
  }

  // Fill: 64 KiB chunks until one fails. 1 MiB holds fewer than 16 of them beside the rest.
  File fill = writer->open("fill", O_RDWR | O_CREAT, 0644);
  std::string acked;  // every byte of "fill" a write acknowledged
  std::pair<int, std::string> failure{0, ""};
  for (int i = 0; i < 32 && failure.first == 0; ++i) {
    std::string chunk = pattern(kChunk, 100 + static_cast<uint64_t>(i));
    failure = error_of([&] { fill.pwrite(chunk.data(), chunk.size(), acked.size()); });
    if (failure.first == 0) acked += chunk;
  }
  REQUIRE_MESSAGE(failure.first == ENOSPC, failure.second);
  CHECK(failure.second.find(strerror(ENOSPC)) != std::string::npos);  // a clear message
  CHECK(acked.size() >= kChunk);  // it filled up by the writes, not before them
  INFO("filled after ", acked.size(), " bytes of fill");

  // Full stays full: another write by the same client, a new file by it, and a direct write
  // (the engine pulls the bytes, the server writes them) by another all fail the same way.
  std::string more = pattern(kChunk, 999);
  CHECK(odafs::test::errno_of([&] { fill.pwrite(more.data(), more.size(), acked.size()); }) ==
        ENOSPC);
  odafs::MountOptions direct;
  direct.direct_writes = true;
  auto other = Client::mount(server.url(), direct);
  CHECK(odafs::test::errno_of([&] {
          File g = other->open("g", O_RDWR | O_CREAT, 0644);
          g.pwrite(more.data(), more.size(), 0);
        }) == ENOSPC);
  CHECK_NOTHROW(fill.close());  // COMMIT of what was acknowledged

  // Nothing written before changed: through another client (not the writer's cache) and on
  // the export's disk; "fill" holds every acknowledged byte, and the server shows what the
  // disk holds (no bytes of a failed write kept in its cache as if written).
  auto reader = Client::mount(server.url());
  for (const auto& [name_key, bytes] : before) {
    const auto& name = name_key;  // clang 14 lambdas cannot capture a binding
    CAPTURE(name);
    CHECK(read_all(*reader, name, bytes.size() + 1) == bytes);
    CHECK(read_local(root + "/" + name) == bytes);
    CHECK(reader->stat(name).size == bytes.size());
  }
  const std::string on_disk = read_local(root + "/fill");
  REQUIRE(on_disk.size() >= acked.size());
  CHECK(on_disk.compare(0, acked.size(), acked) == 0);
  CHECK(read_all(*reader, "fill", on_disk.size() + 1) == on_disk);

  // The server keeps serving: its writer, a reader, and a client that mounts now.
  CHECK_NOTHROW(writer->ping());
  CHECK(writer->stat("a").size == before["a"].size());
  CHECK(read_all(*writer, "d/e", before["d/e"].size()) == before["d/e"]);
  auto late = Client::mount(server.url());
  std::set<std::string> names;
  for (const auto& e : late->readdir("/")) names.insert(e.name);
  CHECK(names.count("a") == 1);
  CHECK(names.count("fill") == 1);
  CHECK(read_all(*late, "b", before["b"].size()) == before["b"]);
  // FSSTAT says what the disk says: no more than a chunk, and what the writer's write
  // delegations held for bytes they did not keep (given back at their recalls), is free.
  const uint64_t free_when_full = late->statfs().avail_bytes;
  struct statvfs local;
  REQUIRE(statvfs(root.c_str(), &local) == 0);
  CHECK(free_when_full == static_cast<uint64_t>(local.f_bavail) * local.f_frsize);
  CHECK(free_when_full < kChunk * (1 + before.size() + 1));

  // Space freed makes writes work again, for the writer and the others, and what they
  // write reads back.
  writer->unlink("a");
  writer->unlink("fill");
  CHECK(late->statfs().avail_bytes >= free_when_full + acked.size());
  std::string after = pattern(2 * kChunk, 7);
  {
    File f = writer->open("after", O_RDWR | O_CREAT | O_EXCL, 0644);
    CHECK(f.pwrite(after.data(), after.size(), 0) == after.size());
    f.close();
    File g = other->open("g", O_RDWR | O_CREAT, 0644);
    CHECK(g.pwrite(more.data(), more.size(), 0) == more.size());
    g.close();
  }
  CHECK(read_all(*late, "after", after.size() + 1) == after);
  CHECK(read_local(root + "/after") == after);
  CHECK(read_all(*late, "g", more.size() + 1) == more);
  for (const char* kept : {"b", "c", "d/e"}) {
    CHECK(read_local(root + "/" + kept) == before[kept]);
  }
}

TEST_CASE(
    "a full export: a file whose writes and close succeeded through the library is whole on "
    "the disk, however full later files make it" *
    doctest::skip(*tmpfs_skip_reason() != '\0') * doctest::description(tmpfs_skip_reason())) {
  SmallExport exported("size=8m");
  const std::string& root = exported.root();
  std::vector<std::string> acked;  // names whose pwrites and close succeeded
  int failed = 0;
  {
    auto client = Client::mount(exported.server.url());
    // First a file far smaller than the space its write delegation holds.
    File small = client->open("small", O_RDWR | O_CREAT, 0644);
    CHECK(small.pwrite("tiny", 4, 0) == 4);
    small.close();
    // 8 MiB is under the default margin (64 MiB): the space is allocated (fallocate), not
    // promised by the server's accounting, which a writer outside odafsd could take.
    CHECK(server_stat(*client, "space.reserved") >= 1);
    CHECK(server_stat(*client, "space.promises") == 0);
    for (int i = 0; i < 12; ++i) {
      const std::string name = "f" + std::to_string(i);
      const std::string bytes = pattern(1 << 20, static_cast<uint64_t>(i));
      size_t written = 0;  // pwrite throws when it fails, and never writes short
      const auto [err, message_key] = error_of([&] {
        File f = client->open(name, O_RDWR | O_CREAT | O_TRUNC, 0644);
        for (size_t off = 0; off < bytes.size(); off += kChunk) {
          written += f.pwrite(bytes.data() + off, kChunk, off);
        }
        f.close();
      });
      const std::string& message = message_key;  // clang 14 lambdas cannot capture a binding
      if (err == 0) CHECK(written == bytes.size());
      if (err == 0) {
        acked.push_back(name);
      } else {
        ++failed;
        CHECK_MESSAGE(err == ENOSPC, message);
      }
    }
  }  // the client goes: what it kept is written back, and its delegations returned
  CHECK(failed >= 1);
  // The space reserved for the delegations and not written is free again: no file holds
  // blocks past its end.
  CHECK(read_local(root + "/small") == "tiny");
  for (int i = -1; i < 12; ++i) {
    struct stat st;
    const std::string path = root + (i < 0 ? "/small" : "/f" + std::to_string(i));
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CAPTURE(path);
    CHECK(static_cast<uint64_t>(st.st_blocks) * 512 <=
          (static_cast<uint64_t>(st.st_size) + 4095) / 4096 * 4096);
  }
  for (const std::string& name : acked) {
    check_whole_mib(root + "/" + name, static_cast<uint64_t>(std::stoi(name.substr(1))));
  }
}

TEST_CASE(
    "a full export through odafs-mount: every file whose writes and close succeeded is whole "
    "on the disk (write delegations keep bytes only in space the server holds)" *
    doctest::skip(*full_mount_skip() != '\0') * doctest::description(full_mount_skip())) {
  SmallExport exported("size=20m");
  TempDir mnt;
  odafs::test::MountProcess m(exported.server.url(), mnt.path());  // default options

  // 25 files of 1 MiB into 20 MiB: the last ones cannot fit.
  constexpr int kFiles = 25;
  std::vector<bool> acked(kFiles + 1, false);
  int failed = 0;
  for (int i = 1; i <= kFiles; ++i) {
    int err = 0;
    acked[i] = write_like_head(m / ("f" + std::to_string(i)),
                               pattern(1 << 20, static_cast<uint64_t>(i)), &err);
    if (!acked[i]) {
      ++failed;
      CHECK_MESSAGE((err == ENOSPC || err == EDQUOT), "f", i, ": ", strerror(err));
    }
  }
  CHECK(failed >= 1);  // the disk did fill
  // The unmount writes back whatever the mount still keeps; then the disk holds the truth.
  m.unmount();
  INFO("odafs-mount said: ", m.stderr_text());
  CHECK(m.stderr_text().find("ERROR") == std::string::npos);  // no write-back failed
  for (int i = 1; i <= kFiles; ++i) {
    if (acked[i]) {
      check_whole_mib(exported.root() + "/f" + std::to_string(i), static_cast<uint64_t>(i));
    }
  }
}

TEST_CASE(
    "a nearly full export: the server's accounting holds a write delegation's space without "
    "allocating it, and refuses another client's writes that would eat into it (ENOSPC)" *
    doctest::skip(*tmpfs_skip_reason() != '\0') * doctest::description(tmpfs_skip_reason())) {
  // A margin of 1 MiB: the 8 MiB export has room enough for promises by accounting at first.
  SmallExport exported("size=8m", {"--space-margin-mb", "1"});
  const std::string& root = exported.root();
  const std::string kept = pattern(60000, 5);
  auto holder = Client::mount(exported.server.url());
  {
    File held = holder->open("held", O_RDWR | O_CREAT, 0644);
    // Promised, and nothing allocated for it: no fallocate per grant.
    CHECK(server_stat(*holder, "space.promised_bytes") == 64u << 10);
    struct stat st;
    REQUIRE(::stat((root + "/held").c_str(), &st) == 0);
    CHECK(st.st_blocks == 0);
    CHECK(held.pwrite(kept.data(), kept.size(), 0) == kept.size());
    held.close();  // may keep its bytes, within the space promised
  }
  // FSSTAT tells others what they may still use: the disk's free space less the promise.
  auto other = Client::mount(exported.server.url());
  CHECK(other->statfs().avail_bytes + (64u << 10) <= disk_avail(root));

  // Another client fills the export, each chunk synced: the server refuses it while the
  // promised space is still free on the disk.
  uint64_t filled = 0;
  {
    File fill = other->open("fill", O_RDWR | O_CREAT, 0644);
    const auto failure = fill_up(fill, &filled, [] { return false; });
    REQUIRE_MESSAGE(failure.first == ENOSPC, failure.second);
    CHECK(filled >= (4u << 20));        // it filled up by the writes, not before them
    CHECK(disk_avail(root) >= kChunk);  // refused by the server, not by a full disk
    CHECK(server_stat(*other, "space.refused") >= 1);
    (void)error_of([&] { fill.close(); });
  }

  // The holder's bytes reach the disk whole (its unmount writes back what it kept), and
  // its promise is given back.
  holder.reset();
  CHECK(read_local(root + "/held") == kept);
  CHECK(odafs::test::eventually([&] {
    return server_stat(*other, "space.promised_bytes") <= 64u << 10;  // "fill"'s, if any
  }));
}

TEST_CASE(
    "a nearly full export: a holder whose space was allocated (under the margin) writes back "
    "into it while the accounting refuses others" *
    doctest::skip(*tmpfs_skip_reason() != '\0') * doctest::description(tmpfs_skip_reason())) {
  SmallExport exported("size=8m", {"--space-margin-mb", "1"});
  const std::string& root = exported.root();
  auto keep = [&](Client& c, const char* name, const std::string& bytes) {
    File f = c.open(name, O_RDWR | O_CREAT, 0644);
    CHECK(f.pwrite(bytes.data(), bytes.size(), 0) == bytes.size());
    f.close();  // may keep its bytes, within the space promised
  };
  const std::string held_bytes = pattern(60000, 8);
  const std::string late_bytes = pattern(60000, 9);
  auto holder = Client::mount(exported.server.url());
  keep(*holder, "held", held_bytes);  // promised by accounting: the disk has room
  auto other = Client::mount(exported.server.url());
  File fill = other->open("fill", O_RDWR | O_CREAT, 0644);
  uint64_t filled = 0;
  // To under the margin beyond the promises, short of the refusal.
  auto under_margin = fill_up(fill, &filled, [&] { return disk_avail(root) < (1u << 20); });
  REQUIRE_MESSAGE(under_margin.first == 0, under_margin.second);
  auto late = Client::mount(exported.server.url());
  const uint64_t reserved_before = server_stat(*late, "space.reserved");
  keep(*late, "late", late_bytes);  // under the margin: its space is allocated
  CHECK(server_stat(*late, "space.reserved") == reserved_before + 1);
  // On to the refusal: now the disk has less free than the accounting promised.
  auto refused = fill_up(fill, &filled, [] { return false; });
  REQUIRE_MESSAGE(refused.first == ENOSPC, refused.second);
  (void)error_of([&] { fill.close(); });
  // The write-back into the allocated space is not the accounting's to refuse; nor is the
  // one into the promised space.
  late.reset();
  CHECK(read_local(root + "/late") == late_bytes);
  holder.reset();
  CHECK(read_local(root + "/held") == held_bytes);
}

TEST_CASE(
    "a file with a hole hidden by blocks reserved past its end is promised no space: a full "
    "disk fails the close of a write into the hole, not a later write-back" *
    doctest::skip(*tmpfs_skip_reason() != '\0') * doctest::description(tmpfs_skip_reason())) {
  SmallExport exported("size=4m");
  const std::string& root = exported.root();
  {  // a hole [0, 1 MiB), then blocks allocated past the end: st_blocks hides the hole
    const int fd = ::open((root + "/holey").c_str(), O_RDWR | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    const std::string tail = pattern(8192, 13);
    REQUIRE(::pwrite(fd, tail.data(), tail.size(), 1 << 20) == 8192);
    REQUIRE(::fallocate(fd, FALLOC_FL_KEEP_SIZE, (1 << 20) + 8192, 1 << 20) == 0);
    ::close(fd);
  }
  auto client = Client::mount(exported.server.url());
  File f = client->open("holey", O_RDWR);  // a write delegation, but no room promised
  fill_disk(root + "/filler");
  const std::string bytes = pattern(4000, 14);
  CHECK(f.pwrite(bytes.data(), bytes.size(), 100 * 1024) == bytes.size());  // in the hole
  const std::pair<int, std::string> closed = error_of([&] { f.close(); });
  const int err = closed.first;  // not a binding: doctest's macros are lambdas (clang 14)
  const std::string& message = closed.second;
  client.reset();  // whatever it kept goes back now
  const std::string on_disk = read_local(root + "/holey");
  if (err == 0) {
    // The close said the bytes are the server's to keep: they must be there.
    CHECK(on_disk.substr(100 * 1024, bytes.size()) == bytes);
  } else {
    CHECK_MESSAGE(err == ENOSPC, message);
  }
  CHECK(err == ENOSPC);  // the disk is full: the close that sent them hears it
}

TEST_CASE(
    "a failed write sent behind is reported to the writer's close through odafs-mount, even "
    "after a child that inherited the descriptor exec'd (its close-on-exec is a flush too)" *
    doctest::skip(*full_mount_skip() != '\0') * doctest::description(full_mount_skip())) {
  SmallExport exported("size=2m");
  const std::string& root = exported.root();
  odafs::test::write_local(root + "/victim", pattern(256 * 1024, 11));
  fill_disk(root + "/filler");  // growing the file fails from here on
  TempDir mnt;
  odafs::test::MountProcess m(exported.server.url(), mnt.path());
  const int fd = ::open((m / "victim").c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  // Gathered behind (under write_behind), past the end: the disk has no room for it.
  const std::string grow = pattern(40000, 12);
  REQUIRE(::pwrite(fd, grow.data(), grow.size(), 256 * 1024) == static_cast<ssize_t>(grow.size()));
  // A read of a page the kernel does not hold sends the run first; it fails, and the
  // failure is kept for this descriptor's next write, fsync or close.
  std::string got(4096, '\0');
  REQUIRE(::pread(fd, got.data(), got.size(), 64 * 1024) == 4096);
  CHECK(got == pattern(256 * 1024, 11).substr(64 * 1024, 4096));
  // A child that inherited the descriptor execs: the kernel flushes it as the child.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::execl("/bin/true", "true", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  errno = 0;
  const int closed = ::close(fd);
  const int err = errno;
  CHECK(closed == -1);
  CHECK_MESSAGE(err == ENOSPC, strerror(err));
  INFO("odafs-mount said: ", m.stderr_text());
  CHECK(read_local(root + "/victim").size() == 256 * 1024);  // nothing of it landed
}

namespace {

// Sets or clears a file's immutable attribute (chattr +i): writes to it fail with EPERM,
// even through descriptors opened before. errno 0, or why it could not.
int set_immutable(const std::string& path, bool on) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  int flags = 0;
  int err = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 ? 0 : errno;
  if (err == 0) {
    flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
    if (::ioctl(fd, FS_IOC_SETFLAGS, &flags) != 0) err = errno;
  }
  ::close(fd);
  return err;
}

}  // namespace

TEST_CASE(
    "a write-back that fails after the close that kept its bytes is logged naming the file "
    "and the server" *
    doctest::skip(!odafs::test::fuse_available()) *
    doctest::description(odafs::test::fuse_available() ? ""
                                                       : odafs::test::fuse_skip_description())) {
  TempDir exported;
  TempDir mnt;
  ServerProcess server(exported.path());
  odafs::test::MountProcess m(server.url(), mnt.path());
  int err = 0;
  REQUIRE(write_like_head(m / "precious", "kept by the mount\n", &err));  // kept past the close
  const std::string local = exported / "precious";
  if (int why = set_immutable(local, true); why != 0) {
    MESSAGE("not checked: chattr +i on the export failed: ", strerror(why));
    return;
  }
  struct Clear {  // the temporary directories must be removable, whatever fails below
    std::string path;
    ~Clear() { (void)set_immutable(path, false); }
  } clear{local};
  // The mount writes it back within delegated_write_back_ms (5 s); the server's write fails.
  const std::string port = ":" + std::to_string(server.port());
  CHECK(odafs::test::eventually(
      [&] {
        const std::string said = m.stderr_text();
        return said.find("precious") != std::string::npos && said.find(port) != std::string::npos;
      },
      20));
  INFO("odafs-mount said: ", m.stderr_text());
  CHECK(m.stderr_text().find("ERROR") != std::string::npos);
}
