// Restart and reclaim end to end: a real odafsd killed or stopped while a client keeps a
// closed file's bytes under a write delegation, restarted on the same port, export and
// state directory; the client writes them back in the grace period before anyone else
// is served, or reports them lost (log, EIO), never silently.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "proto/odafs_prot.h"
#include "rpc/client_channel.h"
#include "rpc/xdr_util.h"
#include "tests/support/client_util.h"
#include "tests/support/delegation_holder.h"
#include "tests/support/hostile.h"
#include "tests/support/mount_process.h"
#include "tests/support/raw_mount.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::File;
using odafs::test::errno_of;
using odafs::test::eventually;
using odafs::test::pattern;
using odafs::test::RawMount;
using odafs::test::read_all;
using odafs::test::read_local;
using odafs::test::seconds_since;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;
using odafs::test::write_path;

namespace {

// How the server goes down in a case.
enum class Down { kKill, kTerm };

void bring_down(ServerProcess& server, Down how) {
  if (how == Down::kKill) {
    server.kill_hard();
  } else {
    server.stop();
  }
}

}  // namespace

TEST_CASE("a closed file kept under a write delegation survives a server crash or stop") {
  for (Down how : {Down::kKill, Down::kTerm}) {
    CAPTURE(how == Down::kKill ? "SIGKILL" : "SIGTERM");
    TempDir dir;
    ServerProcess server(dir.path());
    const std::string text = pattern(20000, 7);
    auto writer = Client::mount(server.url());
    write_path(*writer, "/f", text);
    // The scenario: the close kept the bytes, so the server has none of them yet.
    REQUIRE(read_local(dir / "f").empty());
    bring_down(server, how);
    server.start_again();
    // Nobody calls on the writer: its own thread notices the broken connection, re-mounts
    // and writes the bytes back in the grace period, before the reader is served.
    auto reader = Client::mount(server.url());
    CHECK(read_all(*reader, "/f", text.size() + 10) == text);
    CHECK(read_local(dir / "f") == text);
    CHECK(writer->stats().reclaimed_files.load() == 1);
    CHECK(writer->stats().lost_files.load() == 0);
    CHECK(server_stat(*reader, "recovery.reclaimed") == 1);
    // The writer's mount goes on as before.
    CHECK(read_all(*writer, "/f", text.size() + 10) == text);
  }
}

TEST_CASE("a file opened through a symbolic link keeps its bytes across a server crash") {
  // The file is found again as its open found it, following the links on its path (issue
  // #38). Before, the path was looked up without following them, and the bytes were
  // reported lost ("no longer at its path"). A link as the last component gets no
  // delegation (OPEN answers the link; the library then resolves the path without one),
  // so it is the directory links that matter.
  TempDir dir;
  ServerProcess server(dir.path());
  std::filesystem::create_directories(dir / "real/sub");
  std::filesystem::create_symlink("real", dir / "ln");
  std::filesystem::create_symlink("/ln/sub", dir / "abs");
  const std::string text = pattern(20000, 5);
  auto writer = Client::mount(server.url());
  write_path(*writer, "/ln/f", text);
  write_path(*writer, "/abs/g", text);
  REQUIRE(read_local(dir / "real/f").empty());  // kept by the close
  REQUIRE(read_local(dir / "real/sub/g").empty());
  server.kill_hard();
  server.start_again();
  REQUIRE(eventually([&] { return writer->stats().reclaimed_files.load() == 2; }, 10));
  CHECK(writer->stats().lost_files.load() == 0);
  CHECK(read_local(dir / "real/f") == text);
  CHECK(read_local(dir / "real/sub/g") == text);
}

TEST_CASE("kept bytes whose file went while the server was down are reported, not dropped") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto writer = Client::mount(server.url());
  write_path(*writer, "/gone", "kept bytes");
  REQUIRE(read_local(dir / "gone").empty());
  server.kill_hard();
  std::filesystem::remove(dir / "gone");
  server.start_again();
  REQUIRE(eventually([&] { return writer->stats().lost_files.load() == 1; }, 10));
  CHECK(writer->stats().reclaimed_files.load() == 0);
  // A file created under the name since is another file: no old bytes, no error.
  File again = writer->open("/gone", O_RDWR | O_CREAT, 0644);
  CHECK(again.pwrite("y", 1, 0) == 1);
  again.fsync();
  again.close();
  CHECK(read_local(dir / "gone") == "y");
}

namespace {

// Removes `path` and puts at its name a new file holding `text` that has the removed one's
// inode number, as a file system that reuses inode numbers may (ext4 at once). Returns
// false if no new file in the directory got the number in 32 tries.
bool replace_reusing_inode(const std::string& path, const std::string& text) {
  struct stat old;
  if (stat(path.c_str(), &old) != 0) return false;
  std::filesystem::remove(path);
  const std::string dir = std::filesystem::path(path).parent_path();
  bool reused = false;
  std::vector<std::string> others;
  for (int i = 0; i < 32 && !reused; ++i) {
    const std::string name = dir + "/reuse-" + std::to_string(i);
    write_local(name, text);
    struct stat st;
    reused = stat(name.c_str(), &st) == 0 && st.st_ino == old.st_ino;
    if (reused) {
      std::filesystem::rename(name, path);
    } else {
      others.push_back(name);
    }
  }
  for (const std::string& o : others) std::filesystem::remove(o);
  return reused;
}

// Other processes making files on the same file system (the suites run in parallel) can
// take a freed inode number before the test's new file does: the tests that need the number
// reused start over, this many times at most.
constexpr int kReuseAttempts = 5;

// Whether the file system under $TMPDIR (the tests' exports) reuses a removed file's inode
// number for the next file made in its directory.
bool inode_numbers_reused() {
  static const bool reused = [] {
    TempDir probe;
    write_local(probe / "a", "a");
    return replace_reusing_inode(probe / "a", "b");
  }();
  return reused;
}

}  // namespace

// A doctest TEST_CASE that reports a skip naming the reason where inode numbers are not
// reused at once (tmpfs numbers every new file afresh).
#define INODE_REUSE_TEST(name)                                                        \
  TEST_CASE(name* doctest::skip(!inode_numbers_reused()) *                            \
            doctest::description(inode_numbers_reused() ? ""                          \
                                                        : "needs a file system that " \
                                                          "reuses inode numbers (ext4)"))

INODE_REUSE_TEST(
    "kept bytes of a file removed while the server was down go with it, never into a "
    "new file with its inode number") {
  // After a restart the client's handles name no file (a handle names one server instance):
  // the file is found again by its path, and the inode number decides. A file made since,
  // with the removed one's number, must not take its bytes (a soak found one holding another
  // file's blocks). The file generation tells them apart; the bytes went with the file.
  for (int attempt = 1; attempt <= kReuseAttempts; ++attempt) {
    TempDir dir;
    ServerProcess server(dir.path());
    auto writer = Client::mount(server.url());
    write_path(*writer, "/f", "kept bytes of the removed file");
    REQUIRE(read_local(dir / "f").empty());
    server.kill_hard();
    if (!replace_reusing_inode(dir / "f", "a new file")) continue;  // taken meanwhile
    server.start_again();
    // The reader is served once the writer's reclaim is over (the grace period).
    auto reader = Client::mount(server.url());
    CHECK(read_all(*reader, "/f", 100) == "a new file");
    CHECK(read_local(dir / "f") == "a new file");
    CHECK(writer->stats().reclaimed_files.load() == 0);
    CHECK(writer->stats().lost_files.load() == 0);
    CHECK(server_stat(*reader, "recovery.reclaimed") == 1);
    return;
  }
  FAIL("the removed file's inode number went to other processes' files ", kReuseAttempts,
       " times in a row");
}

INODE_REUSE_TEST(
    "an open file's unsent writes after a restart never land in a new file with its "
    "inode number") {
  // The soak's shared file holding blocks of two other files: open Files whose file was
  // removed, and a new one made with its inode number, while the server was down, found
  // "their" file again by path after the restart and wrote on into the new one.
  for (int attempt = 1; attempt <= kReuseAttempts; ++attempt) {
    TempDir dir;
    ServerProcess server(dir.path(), {"--no-delegations"});
    auto writer = Client::mount(server.url());
    File f = writer->open("/f", O_RDWR | O_CREAT, 0644);
    const std::string text = pattern(128 * 1024, 5);  // past write-behind: sent UNSTABLE
    f.pwrite(text.data(), text.size(), 0);
    server.kill_hard();
    if (!replace_reusing_inode(dir / "f", "a new file")) continue;  // taken meanwhile
    server.start_again();
    // The file is gone: its writes went with it, as ESTALE says of any call on it.
    CHECK(errno_of([&] {
            f.pwrite("more", 4, 0);
            f.fsync();
          }) == ESTALE);
    CHECK(read_local(dir / "f") == "a new file");
    CHECK(writer->stats().lost_files.load() == 0);
    return;
  }
  FAIL("the removed file's inode number went to other processes' files ", kReuseAttempts,
       " times in a row");
}

TEST_CASE("kept bytes of a file renamed while the server was down: its next write fails EIO") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto writer = Client::mount(server.url());
  write_path(*writer, "/old", "kept bytes");
  REQUIRE(read_local(dir / "old").empty());
  server.kill_hard();
  std::filesystem::rename(dir / "old", dir / "new");
  server.start_again();
  REQUIRE(eventually([&] { return writer->stats().lost_files.load() == 1; }, 10));
  // The same file, by its new name: the loss is reported at its next write, once.
  File f = writer->open("/new", O_RDWR);
  CHECK(errno_of([&] { f.pwrite("x", 1, 0); }) == EIO);
  CHECK(f.pwrite("y", 1, 0) == 1);
  f.close();
}

TEST_CASE(
    "the grace period holds others back, ends when every recorded client is back, "
    "and lasts at most --grace-ms") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--grace-ms", "3000"});
  odafs::test::make_file(server.url(), "/other", "other");

  SUBCASE("no write delegation out: a restart opens no grace period") {
    {
      // make_file's client took a write delegation (the record's first version) and left
      // (its second, which the record's own thread writes a moment later: on a loaded
      // machine the kill came first once, and the restart waited for that client).
      auto reader = Client::mount(server.url());
      REQUIRE(eventually([&] { return server_stat(*reader, "recovery.record_writes") == 2; }));
    }
    server.kill_hard();
    server.start_again();
    const auto start = std::chrono::steady_clock::now();
    auto reader = Client::mount(server.url());
    CHECK(read_all(*reader, "/other", 10) == "other");
    CHECK(seconds_since(start) < 1.0);
    CHECK(server_stat(*reader, "recovery.held_back") == 0);
  }

  SUBCASE("a recorded client that never comes back: others wait out --grace-ms") {
    // A holder in a child process keeps bytes; the server goes down while it is connected
    // (so its record stays), and the holder is stopped before it can come back.
    pid_t holder = odafs::test::holder_process(
        server.url(), "/held", [](Client& fs) { write_path(fs, "/held", "never written back"); });
    REQUIRE(odafs::test::stop_child(holder));
    server.kill_hard();
    server.start_again();
    {
      // An attacker's raw connection in the grace period: an owner the record does not
      // name may not reclaim, its calls wait (GRACE), and it may not switch owners.
      RawMount raw(server.port());
      bool reclaim = true;
      CHECK(raw.client_id(0x41, &reclaim) == ODAFS_OK);
      CHECK_FALSE(reclaim);
      CHECK(raw.getattr_root() == ODAFS_ERR_GRACE);
      CHECK(raw.client_id(0x42) == ODAFS_ERR_INVAL);
    }
    const auto start = std::chrono::steady_clock::now();
    auto reader = Client::mount(server.url());
    CHECK(read_all(*reader, "/other", 10) == "other");
    const double waited = seconds_since(start);
    CHECK(waited > 2.0);
    CHECK(waited < 8.0);
    CHECK(server_stat(*reader, "recovery.reclaimers") == 1);
    CHECK(server_stat(*reader, "recovery.reclaimed") == 0);
    CHECK(server_stat(*reader, "recovery.in_grace") == 0);
    CHECK(server_stat(*reader, "recovery.held_back") >= 2);
    odafs::test::reap(holder);
    // The holder's bytes never reached the server: it was stopped, so it reports them
    // itself when it comes back (the previous case); the server keeps the old ones.
    CHECK(read_local(dir / "held") == "before");
  }
}

TEST_CASE("a client's unmount leaves the record: the next restart opens no grace period") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--grace-ms", "5000"});
  {
    auto writer = Client::mount(server.url());
    write_path(*writer, "/f", "written back at unmount");
  }
  CHECK(read_local(dir / "f") == "written back at unmount");
  {
    // The server forgets the owner once it has seen the connection close: the record is
    // written at the first write delegation and again then.
    auto watcher = Client::mount(server.url());
    CHECK(eventually([&] { return server_stat(*watcher, "recovery.record_writes") == 2; }));
  }
  server.kill_hard();
  server.start_again();
  const auto start = std::chrono::steady_clock::now();
  auto reader = Client::mount(server.url());
  CHECK(read_all(*reader, "/f", 100) == "written back at unmount");
  CHECK(seconds_since(start) < 1.0);
}

ODAFS_MOUNT_TEST("through a mount: cp, a server crash and restart, and cat reads the bytes") {
  TempDir dir;
  TempDir mnt;
  ServerProcess server(dir.path());
  odafs::test::MountProcess mount(server.url(), mnt.path());
  const std::string text = pattern(20000, 11);
  odafs::test::write_local(mnt / "f", text);  // open, write, close: kept by the mount
  REQUIRE(read_local(dir / "f").empty());
  server.kill_hard();
  server.start_again();
  CHECK(read_local(mnt / "f") == text);
  REQUIRE(eventually([&] { return read_local(dir / "f") == text; }, 10));
  auto other = Client::mount(server.url());
  CHECK(read_all(*other, "/f", text.size() + 10) == text);
}

TEST_CASE("unstable writes re-sent after a restart to a file removed meanwhile: ESTALE, not EIO") {
  // The soak's "commit re-sent to a replaced shared file -> EIO": after a restart, fsync's
  // COMMIT (on the handle found again by path) answers a new verifier, so the unstable
  // writes go again; another client removed the file between that COMMIT and the writes.
  // Their bytes went with the file: ESTALE, the file gone, as any call on it says; EIO
  // would claim bytes lost from a file that still exists. A raw client's read delegation,
  // never given back, holds the re-sent WRITE (DELAY) while the file is removed.
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "2000"});
  auto writer = Client::mount(server.url());
  File f = writer->open("/f", O_RDWR | O_CREAT, 0644);
  const std::string text = pattern(128 * 1024, 3);  // past write-behind: sent UNSTABLE
  f.pwrite(text.data(), text.size(), 0);
  server.kill_hard();
  server.start_again();
  f.stat();  // re-mounts, reclaims (nothing), finds the file again: the grace period ends
  odafs::test::HostileMount holder(server.port(), "f");
  REQUIRE(odafs::test::open_file(*holder.ch, holder.root, "f", ODAFS_OPEN_READ) != 0);
  auto synced = std::async(std::launch::async, [&] { return errno_of([&] { f.fsync(); }); });
  REQUIRE(eventually([&] { return server_stat(*writer, "delegations.recalled") >= 1; }));
  std::filesystem::remove(dir / "f");  // another client's REMOVE, as far as f can tell
  CHECK(synced.get() == ESTALE);
}

TEST_CASE("kept bytes of a file this client renamed while it had it open go home by its new name") {
  // The soak's "24,576 kept bytes no longer at its path": what a client's opens of a file
  // share (SharedFile) was named by its first open only. Alive across a rename (here another
  // open holds it; in the soak, the delegation worker's write-back by age), it was shared by
  // an open of the new name, whose close kept bytes under a new write delegation; after a
  // restart the reclaim looked for them at the old name, found nothing, and reported them
  // lost.
  TempDir dir;
  ServerProcess server(dir.path());
  auto writer = Client::mount(server.url());
  write_path(*writer, "/a", "first");
  File reader = writer->open("/a", O_RDONLY);
  writer->rename("/a", "/b");  // gives the delegation back: "first" is on the server
  write_path(*writer, "/b", "later");
  REQUIRE(read_local(dir / "b") == "first");  // the close kept "later"
  reader.close();
  server.kill_hard();
  server.start_again();
  REQUIRE(eventually([&] { return writer->stats().reclaimed_files.load() == 1; }, 10));
  CHECK(writer->stats().lost_files.load() == 0);
  CHECK(read_local(dir / "b") == "later");
}

TEST_CASE(
    "a reclaimer still writing back holds the grace period open past --grace-ms, not past twice "
    "it") {
  // The soak's losses after a slow restart: 64 clients writing back stably (a sync each) on
  // a loaded machine took nearly the whole grace period; one that came back in time but was
  // still writing back when it ended found files others had renamed since, and reported its
  // bytes lost. A raw client stands in for it: back in time, never complete.
  TempDir dir;
  ServerProcess server(dir.path(), {"--grace-ms", "1500"});
  REQUIRE(chmod(dir.path().c_str(), 0777) == 0);  // raw calls run as the anonymous user
  {
    RawMount holder(server.port());
    REQUIRE(holder.client_id(0x51) == ODAFS_OK);
    // A write delegation writes the owner into the record.
    char fh[ODAFS_FHSIZE];
    int kind = -1;
    REQUIRE(holder.create("f", fh, &kind) == ODAFS_OK);
    REQUIRE(kind == ODAFS_DELEG_WRITE);
    server.kill_hard();  // while it is connected: the record keeps it
  }
  server.start_again();
  const auto started = std::chrono::steady_clock::now();
  RawMount back(server.port());
  bool reclaim = false;
  REQUIRE(back.client_id(0x51, &reclaim) == ODAFS_OK);
  REQUIRE(reclaim);
  RawMount other(server.port());
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // lets --grace-ms pass
  CHECK(other.getattr_root() == ODAFS_ERR_GRACE);                // the old server answered OK
  CHECK(eventually([&] { return other.getattr_root() == ODAFS_OK; }, 5));
  CHECK(seconds_since(started) < 4.5);  // at most another --grace-ms (and the restart's time)
}

TEST_CASE("in a grace period no one renames or removes a file, reclaimers included") {
  // The restart soak's "no longer at its path" (two losses on ed69442, 0.2 s after a SIGKILL
  // restart; one on 954c2a8): a client back to reclaim was served every call, so its REMOVE
  // or RENAME could take a file from the path another reclaimer's write-back looks it up by.
  // The record names owners, not their files, so the server cannot tell which files wait.
  TempDir dir;
  ServerProcess server(dir.path(), {"--grace-ms", "5000"});
  REQUIRE(chmod(dir.path().c_str(), 0777) == 0);  // raw calls run as the anonymous user
  {
    RawMount a(server.port());
    char fa[ODAFS_FHSIZE];
    a.create_write_held(0x71, "f", fa);  // a keeps bytes for f, as far as anyone knows
    RawMount b(server.port());
    char fb[ODAFS_FHSIZE];
    b.create_write_held(0x72, "g", fb);
    server.kill_hard();  // both connected: the record keeps both owners
  }
  server.start_again();
  RawMount b(server.port());
  bool reclaim = false;
  REQUIRE(b.client_id(0x72, &reclaim) == ODAFS_OK);
  REQUIRE(reclaim);
  // a is not back yet: its file keeps its name and its place.
  CHECK(b.remove("f") == ODAFS_ERR_GRACE);  // the old server removed it
  CHECK(b.rename("f", "h") == ODAFS_ERR_GRACE);
  CHECK(b.rename("g", "f") == ODAFS_ERR_GRACE);  // over it, the same
  CHECK(std::filesystem::exists(dir / "f"));
  CHECK(b.getattr_root() == ODAFS_OK);  // the rest of a reclaimer's calls are served
  // a comes back and completes, then b: the grace period is over at once, and so the wait.
  RawMount a(server.port());
  REQUIRE(a.client_id(0x71, &reclaim) == ODAFS_OK);
  REQUIRE(reclaim);
  REQUIRE(a.reclaim_complete() == ODAFS_OK);
  REQUIRE(b.reclaim_complete() == ODAFS_OK);
  CHECK(b.rename("f", "h") == ODAFS_OK);
  CHECK(b.remove("h") == ODAFS_OK);
}
