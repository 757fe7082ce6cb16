// Integration: what each write stability and COMMIT promise survives a crash. The server
// runs with --simulate-crashes: SIGUSR1 undoes every change not yet synced to disk, as a
// power loss would drop it from the page cache, and exits. (A SIGKILL keeps the page
// cache, so it cannot tell a missing fsync.)
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <string>

#include "client/client.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::File;
using odafs::MountOptions;
using odafs::Stability;
using odafs::test::pattern;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

std::unique_ptr<Client> mount_with(const ServerProcess& s, Stability how) {
  MountOptions mo;
  mo.stability = how;
  return Client::mount(s.url(), mo);
}

void crash(ServerProcess& s) {
  int status = s.signal_and_reap(SIGUSR1);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 86);
}

}  // namespace

TEST_CASE(
    "after a crash: FILE_SYNC, DATA_SYNC and committed writes and SETATTR sizes are "
    "there byte for byte; uncommitted UNSTABLE writes are not") {
  TempDir dir;
  std::string old_bytes = pattern(30000, 1);
  for (const char* name : {"unstable", "committed", "file_sync", "data_sync", "truncated"}) {
    write_local(dir / name, old_bytes);
  }
  ServerProcess server(dir.path(), {"--simulate-crashes"});
  std::string fresh = pattern(20000, 2);
  {
    auto fs = mount_with(server, Stability::kUnstable);
    File u = fs->open("unstable", O_RDWR);
    u.pwrite(fresh.data(), fresh.size(), 5000);
    File c = fs->open("committed", O_RDWR);
    c.pwrite(fresh.data(), fresh.size(), 5000);
    c.pwrite(fresh.data(), 100, 40000);  // extends the file
    c.fsync();                           // COMMIT
    File t = fs->open("truncated", O_RDWR);
    t.truncate(1234);
    auto sync_fs = mount_with(server, Stability::kFileSync);
    sync_fs->open("file_sync", O_RDWR).pwrite(fresh.data(), fresh.size(), 5000);
    auto data_fs = mount_with(server, Stability::kDataSync);
    data_fs->open("data_sync", O_RDWR).pwrite(fresh.data(), fresh.size(), 5000);
    // The client reads its own writes before the crash, whatever their stability.
    std::string back(fresh.size(), '\0');
    CHECK(u.pread(back.data(), back.size(), 5000) == fresh.size());
    CHECK(back == fresh);
    crash(server);
  }
  std::string with_fresh = old_bytes;
  with_fresh.replace(5000, fresh.size(), fresh);
  CHECK(read_local(dir / "unstable") == old_bytes);
  CHECK(read_local(dir / "file_sync") == with_fresh);
  CHECK(read_local(dir / "data_sync") == with_fresh);
  std::string committed = with_fresh;
  committed.resize(40000, '\0');
  committed += fresh.substr(0, 100);
  CHECK(read_local(dir / "committed") == committed);
  CHECK(read_local(dir / "truncated") == old_bytes.substr(0, 1234));

  // A new instance serves what survived, under a new write verifier.
  server.start_again();
  auto fs = Client::mount(server.url());
  CHECK(fs->stat("unstable").size == old_bytes.size());
  std::string back(with_fresh.size(), '\0');
  CHECK(fs->open("file_sync").pread(back.data(), back.size(), 0) == back.size());
  CHECK(back == with_fresh);
}

TEST_CASE(
    "a client that wrote UNSTABLE learns of the crash at COMMIT (the verifier changed) "
    "and sends its writes again") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--simulate-crashes"});
  auto fs = Client::mount(server.url());
  File f = fs->open("f", O_RDWR | O_CREAT);
  std::string first = pattern(8192, 3), second = pattern(3000, 4);
  f.pwrite(first.data(), first.size(), 0);
  f.pwrite(second.data(), second.size(), 4096);  // overlaps: the order must be kept
  crash(server);
  server.start_again();
  CHECK(fs->stat("f").size == 0);  // the create was synced by the file system, the data not
  CHECK_NOTHROW(f.fsync());
  std::string want = first;
  want.replace(4096, second.size(), second);
  CHECK(odafs::test::read_local(dir / "f") == want);
  // ... and what was sent again is stable: a second crash keeps it.
  crash(server);
  server.start_again();
  CHECK(odafs::test::read_local(dir / "f") == want);
}

TEST_CASE("a File commits before its uncommitted copies outgrow max_uncommitted_bytes") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--simulate-crashes"});
  odafs::MountOptions o;
  o.max_uncommitted_bytes = 64 * 1024;
  o.write_behind_bytes = 0;  // each write is sent when made: the bound is what is tested
  auto fs = Client::mount(server.url(), o);
  File f = fs->open("f", O_RDWR | O_CREAT);
  std::string data = pattern(40 * 1024, 5);
  f.pwrite(data.data(), data.size(), 0);
  f.pwrite(data.data(), data.size(), data.size());  // would pass the bound: commits first
  crash(server);
  server.start_again();
  // The first write was committed before the second was sent: it survived by itself.
  CHECK(odafs::test::read_local(dir / "f").substr(0, data.size()) == data);
  CHECK_NOTHROW(f.fsync());  // the second is sent again
  CHECK(odafs::test::read_local(dir / "f") == data + data);
}
