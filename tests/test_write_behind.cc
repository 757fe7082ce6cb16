// Write-behind (MountOptions::write_behind_bytes, client/shared_file.h): small positioned
// writes that follow one another are gathered and sent as one WRITE when the run breaks or
// fills, or at fsync, close, truncate, stat or a read; the server sees nothing before, the
// writer's own reads see everything, an error sending comes back from the next write, fsync
// or close, and fsync/close make it durable. Real odafsd processes on 127.0.0.1.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "client/client.h"
#include "client/io_queue.h"
#include "tests/support/client_util.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::Completion;
using odafs::File;
using odafs::IoQueue;
using odafs::test::errno_of;
using odafs::test::pattern;
using odafs::test::read_all;
using odafs::test::read_local;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;

namespace {

// Writes `bytes` through f in `piece`-sized pwrites from `at`.
void write_in_pieces(File& f, const std::string& bytes, size_t piece, uint64_t at = 0) {
  for (size_t done = 0; done < bytes.size(); done += piece) {
    size_t n = std::min(piece, bytes.size() - done);
    REQUIRE(f.pwrite(bytes.data() + done, n, at + done) == n);
  }
}

}  // namespace

TEST_CASE("small writes in a row go out as few WRITEs, only at fsync or when a run fills") {
  TempDir dir;
  // Write-behind alone: under the write delegation a CREATE grants, another client's
  // access would recall the bytes (test_write_delegations.cc).
  ServerProcess server(dir.path(), {"--no-delegations"});
  auto fs = Client::mount(server.url());
  auto other = Client::mount(server.url());
  const std::string data = pattern(200 * 1024, 1);
  File f = fs->open("f", O_RDWR | O_CREAT);
  const uint64_t writes_before = server_stat(*fs, "calls.WRITE");
  write_in_pieces(f, data.substr(0, 8 * 1024), 512);  // 16 writes inside one run
  // Nothing has reached the server yet: not its disk, not another client.
  CHECK(server_stat(*fs, "calls.WRITE") == writes_before);
  CHECK(read_local(dir / "f").empty());
  CHECK(read_all(*other, "f", data.size()).empty());
  write_in_pieces(f, data.substr(8 * 1024), 512, 8 * 1024);
  f.fsync();
  // 400 writes of 512 bytes: runs of 64 KiB, four WRITEs (the last one short).
  const uint64_t writes = server_stat(*fs, "calls.WRITE") - writes_before;
  CHECK(writes >= 4);
  CHECK(writes <= 5);
  CHECK(read_local(dir / "f") == data);
  CHECK(read_all(*other, "f", data.size() + 1) == data);
}

TEST_CASE("a break in the run sends what came before; the bytes land where they were written") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--no-delegations"});  // the close sends the last run
  auto fs = Client::mount(server.url());
  std::string want(64 * 1024, '\0');
  {
    File f = fs->open("f", O_RDWR | O_CREAT);
    // Backwards, and overlapping: every write breaks the run.
    for (int i = 15; i >= 0; --i) {
      std::string piece = pattern(6000, i);
      f.pwrite(piece.data(), piece.size(), i * 4000);
      want.replace(i * 4000, piece.size(), piece);
    }
  }  // close: the last run goes out and is committed
  want.resize(15 * 4000 + 6000);
  CHECK(read_local(dir / "f") == want);
}

TEST_CASE("the writer reads its own writes: through the same open, another open, IoQueue, stat") {
  TempDir dir;
  ServerProcess server(dir.path());
  for (const char* mode : {"ordma", "rpc"}) {
    CAPTURE(mode);
    odafs::MountOptions o;
    if (std::string(mode) == "rpc") o.read_mode = odafs::ReadMode::kInline;
    auto fs = Client::mount(server.url(), o);
    const std::string base = pattern(32 * 1024, 7), change = pattern(1000, 8);
    {
      File f = fs->open("r", O_RDWR | O_CREAT | O_TRUNC);
      f.pwrite(base.data(), base.size(), 0);
    }
    File reader = fs->open("r", O_RDONLY);
    CHECK(read_all(reader, base.size()) == base);  // cached, with references
    File f = fs->open("r", O_RDWR);
    f.pwrite(change.data(), change.size(), 30000);  // gathered behind, past the old end
    std::string want = base;
    want.replace(30000, change.size(), change);
    CHECK(fs->stat("r").size == want.size());  // by path: the size grows with the run
    CHECK(read_all(reader, want.size() + 10) == want);
    f.pwrite(change.data(), change.size(), 100);
    want.replace(100, change.size(), change);
    IoQueue q(*fs, 4);
    std::string got(want.size(), '?');
    q.submit_read(reader, got.data(), got.size(), 0, 1);
    std::vector<Completion> done(1);
    REQUIRE(q.wait(done, 1, 30000) == 1);
    CHECK(done[0].error == 0);
    CHECK(got == want);
    f.pwrite(change.data(), change.size(), 5000);
    want.replace(5000, change.size(), change);
    CHECK(f.stat().size == want.size());
    CHECK(read_all(f, want.size()) == want);
  }
}

TEST_CASE("a run that cannot be sent fails the next write, fsync or close; never silently") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  auto other = Client::mount(server.url());
  { File a = fs->open("a", O_RDWR | O_CREAT); }
  File held = fs->open("a", O_RDWR);
  other->unlink("a");
  const std::string bytes = pattern(1000, 3);
  CHECK_NOTHROW(held.pwrite(bytes.data(), bytes.size(), 1000));  // gathered
  std::string got(100, '\0');
  // A read of what the run holds is served from it; a read of anything else sends the run
  // first, whose failure is kept for a write, fsync or close.
  CHECK(held.pread(got.data(), got.size(), 1000) == got.size());
  CHECK(got == bytes.substr(0, got.size()));
  CHECK(errno_of([&] { held.pread(got.data(), got.size(), 0); }) == ESTALE);
  CHECK(errno_of([&] { held.pwrite(bytes.data(), bytes.size(), 5000); }) == ESTALE);
  CHECK(errno_of([&] { held.fsync(); }) == 0);  // reported once, by the write above
  held.pwrite(bytes.data(), bytes.size(), 0);
  CHECK(errno_of([&] { held.close(); }) == ESTALE);
  CHECK_FALSE(held.is_open());
}

TEST_CASE(
    "a run the server cannot be reached for stays: the call that tried fails, and the next "
    "sends it once the server is back") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--no-delegations"});
  auto fs = Client::mount(server.url());  // reconnect window 0: a call fails at once
  File f = fs->open("u", O_RDWR | O_CREAT);
  const std::string bytes = pattern(3000, 7);
  f.pwrite(bytes.data(), bytes.size(), 0);  // gathered
  server.kill_hard();
  // The fsync cannot reach the server: it fails, and the run is not dropped.
  const int refused = errno_of([&] { f.fsync(); });
  CHECK((refused == ECONNREFUSED || refused == ECONNRESET || refused == EPIPE));
  server.start_again();
  CHECK(errno_of([&] { f.fsync(); }) == 0);
  CHECK(read_local(dir / "u") == bytes);
  CHECK(errno_of([&] { f.close(); }) == 0);
}

TEST_CASE("times set after writes are kept (the writes go before the SETATTR)") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  File f = fs->open("t", O_RDWR | O_CREAT);
  const std::string bytes = pattern(3000, 4);
  f.pwrite(bytes.data(), bytes.size(), 0);
  const timespec times[2] = {{1000000000, 0}, {1000000000, 500}};
  fs->utimens("t", times);  // as cp -a does before closing
  f.close();
  auto a = fs->stat("t");
  CHECK(a.mtime.tv_sec == 1000000000);
  CHECK(a.mtime.tv_nsec == 500);
  CHECK(read_local(dir / "t") == bytes);
}

TEST_CASE("fsync and close make gathered writes durable: a crash after them loses nothing") {
  TempDir dir;
  // Without delegations: under a write delegation a close keeps its bytes in the client
  // (test_write_delegations.cc), and only fsync makes them durable.
  ServerProcess server(dir.path(), {"--simulate-crashes", "--no-delegations"});
  auto fs = Client::mount(server.url());
  const std::string one = pattern(10000, 5), two = pattern(10000, 6);
  File f = fs->open("d", O_RDWR | O_CREAT);
  write_in_pieces(f, one, 100);
  f.fsync();
  {
    File g = fs->open("e", O_RDWR | O_CREAT);
    write_in_pieces(g, two, 100);
  }
  int status = server.signal_and_reap(SIGUSR1);  // power loss: unsynced changes dropped
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 86);
  server.start_again();
  CHECK(read_local(dir / "d") == one);
  CHECK(read_local(dir / "e") == two);
}
