// SIGTERM stops odafsd promptly whatever its clients are doing: an operator's service
// manager and every test's teardown count on it. Each case puts the server in a state that
// could hold its stop (a call waiting on a client that never answers, a recall in flight to a
// stopped holder, a grace period, a slow disk) and asserts it exits cleanly within 2 s
// (sanitizer builds included: the stop is bounded by design, not by a timeout).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "proto/odafs_prot.h"
#include "rpc/xdr_util.h"
#include "tests/support/client_util.h"
#include "tests/support/delegation_holder.h"
#include "tests/support/hostile.h"
#include "tests/support/mount_process.h"
#include "tests/support/raw_mount.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::File;
using odafs::rpc::to_xdrproc;
using odafs::test::eventually;
using odafs::test::HostileMount;
using odafs::test::MountProcess;
using odafs::test::RawMount;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

constexpr double kStopBound = 2.0;  // seconds from SIGTERM to a clean exit

// Stops server with SIGTERM; checks it exited 0 within kStopBound.
void check_prompt_stop(ServerProcess& server) {
  auto start = std::chrono::steady_clock::now();
  int status = server.stop();
  double took = odafs::test::seconds_since(start);
  CAPTURE(took);
  CHECK(took < kStopBound);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// A child process holding a write delegation on "f" with bytes kept unsent, stopped
// (SIGSTOP) so that it answers no recall and reclaims nothing.
pid_t stopped_write_holder(const ServerProcess& server) {
  pid_t holder = odafs::test::holder_process(server.url(), "f", [](Client& c) {
    File f = c.open("f", O_RDWR);
    f.pwrite("held", 4, 0);
    f.close();
  });
  REQUIRE(odafs::test::stop_child(holder));
  return holder;
}

void kill_and_reap(pid_t child) {
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

// Runs calls on a thread of its own; the server going away under them is expected.
std::thread calling(std::function<void()> calls) {
  return std::thread([calls = std::move(calls)] {
    try {
      calls();
    } catch (const odafs::Error&) {
    }
  });
}

// A client that gives up quickly once its server is gone: the test's own threads end soon
// after the stop.
odafs::MountOptions impatient() {
  odafs::MountOptions o;
  o.timeout_ms = 3000;
  o.reconnect_window_ms = 0;
  return o;
}

}  // namespace

namespace {

// Sends WRITE_DIRECTs of h's file with these tags, each on a connection of its own (the
// fds returned), all naming a buffer of h's session whose data never comes.
std::vector<int> send_direct_writes(const ServerProcess& server, const HostileMount& h,
                                    const std::vector<uint32_t>& tags) {
  std::vector<int> calls;
  for (uint32_t i = 0; i < tags.size(); ++i) {
    int fd = odafs::test::connect_from("127.0.0.1", server.port());
    REQUIRE(fd >= 0);
    write_direct_args wa{};
    std::memcpy(wa.fh, h.file.data(), h.file.size());
    wa.stable = ODAFS_FILE_SYNC;
    wa.count = 64 * 1024;
    wa.session = h.session.id;
    wa.buffer = 1;
    wa.tag = tags[i];
    std::string rec = odafs::test::rpc_call_record(i + 1, ODAFSPROC_WRITE_DIRECT,
                                                   to_xdrproc(xdr_write_direct_args), &wa);
    REQUIRE(send(fd, rec.data(), rec.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(rec.size()));
    calls.push_back(fd);
  }
  return calls;
}

}  // namespace

TEST_CASE("SIGTERM with direct writes waiting for data their client never sends") {
  TempDir dir;
  write_local(dir / "target", std::string(1 << 20, 'a'));
  ServerProcess server(dir.path(), {"--threads", "2", "--max-direct-writes", "2"});
  HostileMount h(server.port(), "target");
  int engine_fd = h.engine_connection(server.engine_port());  // takes the GETs, answers none
  std::vector<uint32_t> tags;
  SUBCASE("two tags") { tags = {100, 101}; }
  // A repeated tag once orphaned the first pull: nothing but its 10 s timeout ended it.
  SUBCASE("one tag twice") { tags = {100, 100}; }
  std::vector<int> calls = send_direct_writes(server, h, tags);
  auto probe = Client::mount(server.url(), impatient());
  // The pulls wait (each up to the server's 10 s pull timeout) once their GETs are out; a
  // second pull of one tag is refused at once.
  const uint64_t want = tags[0] == tags[1] ? 1 : 2;
  REQUIRE(eventually([&] { return server_stat(*probe, "direct_writes.waiting") == want; }));
  probe.reset();
  check_prompt_stop(server);
  for (int fd : calls) close(fd);
  close(engine_fd);
}

TEST_CASE("SIGTERM while a recall waits on a write-delegation holder that is stopped") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "30000"});
  pid_t holder = stopped_write_holder(server);
  auto b = Client::mount(server.url(), impatient());
  // b's open recalls the holder's delegation and waits (DELAY, retried) for a return that
  // never comes before the 30 s lease ends.
  std::thread opener = calling([&] { b->open("f", O_RDONLY); });
  REQUIRE(eventually([&] { return server_stat(*b, "delegations.recalled") >= 1; }));
  check_prompt_stop(server);
  opener.join();
  kill_and_reap(holder);
}

// A client's calls sent together are read as one batch and run in order. Each GETATTR here
// waits for a write delegation whose holder answers no recall (up to the server's wait_ms,
// 1 s, then DELAY): a stop that ran the rest of the batch waited a second per call, so a
// peer chose how long the stop took (here 12 s, past the harness's bound).
TEST_CASE("SIGTERM with a batch of calls each waiting on a holder that answers no recall") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "30000"});
  REQUIRE(chmod(dir.path().c_str(), 0777) == 0);  // raw calls run as the anonymous user
  RawMount holder(server.port());
  char held[ODAFS_FHSIZE];
  holder.create_write_held(0x40, "held", held);
  std::string calls;
  getattr_args ga{};
  std::memcpy(ga.fh, held, sizeof ga.fh);
  for (uint32_t xid = 1; xid <= 12; ++xid) {
    calls +=
        odafs::test::rpc_call_record(xid, ODAFSPROC_GETATTR, to_xdrproc(xdr_getattr_args), &ga);
  }
  const int fd = odafs::test::connect_from("127.0.0.1", server.port());
  REQUIRE(fd >= 0);
  // One send, so one batch: the first GETATTR recalls and waits, the others queue behind it.
  REQUIRE(send(fd, calls.data(), calls.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(calls.size()));
  auto probe = Client::mount(server.url(), impatient());
  REQUIRE(eventually([&] { return server_stat(*probe, "delegations.recalled") >= 1; }));
  probe.reset();
  check_prompt_stop(server);
  close(fd);
}

TEST_CASE("SIGTERM in the grace period, with a client that kept bytes not yet back") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--grace-ms", "60000"});
  // The stopped holder keeps bytes under a write delegation: after the restart the server
  // waits for its reclaim for the whole grace period.
  pid_t holder = stopped_write_holder(server);
  server.restart();
  auto b = Client::mount(server.url(), impatient());
  std::thread writer = calling([&] {
    File f = b->open("f", O_RDWR);  // waits for the grace period: the holder may reclaim
    f.pwrite("b", 1, 0);
  });
  REQUIRE(eventually([&] { return server_stat(*b, "recovery.in_grace") == 1; }));
  check_prompt_stop(server);
  writer.join();
  kill_and_reap(holder);
}

TEST_CASE("SIGTERM with stable writes queued behind a slow disk") {
  TempDir dir;
  // Each write to the export takes 200 ms: four writers keep the disk busy at the SIGTERM.
  ServerProcess server(dir.path(), {"--slow-writes", "200000", "--no-delegations"});
  auto c = Client::mount(server.url(), impatient());
  std::vector<std::thread> writers;
  std::atomic<int> started{0};
  for (int i = 0; i < 4; ++i) {
    writers.push_back(calling([&, i] {
      File f = c->open("w" + std::to_string(i), O_RDWR | O_CREAT, 0644);
      std::string block(64 * 1024, 'w');
      ++started;
      for (int k = 0; k < 50; ++k) {
        f.pwrite(block.data(), block.size(), k * block.size());
        f.fsync();
      }
    }));
  }
  REQUIRE(eventually([&] { return started.load() == 4; }));
  REQUIRE(eventually([&] { return server_stat(*c, "io.bytes_written") >= 64 * 1024; }));
  check_prompt_stop(server);
  for (auto& t : writers) t.join();
}

// The recovery record lies on a disk that hangs: a FUSE mount (odafs-mount of a second
// odafsd) whose daemon is stopped with SIGSTOP. The last client's unmount, just before the
// SIGTERM, takes its owner out of the record: that rewrite must not hold the stop (issue #40:
// done on the rpc thread that read the close, it held the stop, which joins that thread, until
// the stop watchdog ended the process with status 3).
ODAFS_MOUNT_TEST(
    "SIGTERM while the recovery record's rewrite for a closed client waits on a disk that hangs") {
  TempDir disk_export, disk_mountpoint, dir;
  ServerProcess disk_server(disk_export.path());
  MountProcess disk(disk_server.url(), disk_mountpoint.path());
  ServerProcess server(dir.path(), {"--state-dir", disk / "state"});
  auto watcher = Client::mount(server.url(), impatient());
  auto c = Client::mount(server.url(), impatient());
  {
    File f = c->open("f", O_RDWR | O_CREAT, 0644);
    f.pwrite("kept", 4, 0);
    f.close();
  }
  // c's first write delegation named it in the record, through the mount.
  REQUIRE(server_stat(*watcher, "recovery.record_writes") >= 1);
  REQUIRE(server_stat(*watcher, "owners.known") == 2);
  REQUIRE(odafs::test::stop_child(disk.pid()));
  // Whatever happens below, the disk's daemon runs again before its mount is taken down.
  struct Resume {
    pid_t pid;
    ~Resume() { kill(pid, SIGCONT); }
  } resume{disk.pid()};
  c.reset();  // writes back, returns its delegation, closes: its owner leaves the record
  REQUIRE(eventually([&] { return server_stat(*watcher, "owners.known") == 1; }));
  check_prompt_stop(server);
}

TEST_CASE("a stop that overruns --stop-timeout-ms ends anyway, with its own exit status") {
  TempDir dir;
  // Each write's halves land 1 s apart: a write under way at the SIGTERM holds its rpc
  // thread past the 300 ms bound.
  ServerProcess server(
      dir.path(), {"--slow-writes", "1000000", "--no-delegations", "--stop-timeout-ms", "300"});
  auto c = Client::mount(server.url(), impatient());
  std::atomic<bool> writing{false};
  std::thread writer = calling([&] {
    File f = c->open("w", O_RDWR | O_CREAT, 0644);
    std::string block(4096, 'w');
    writing = true;
    for (int k = 0; k < 10; ++k) f.pwrite(block.data(), block.size(), k * block.size());
  });
  REQUIRE(eventually([&] { return writing.load(); }));
  // The first write is under way once its file is no longer empty (its first half landed).
  REQUIRE(eventually([&] { return std::filesystem::file_size(dir / "w") > 0; }));
  auto start = std::chrono::steady_clock::now();
  int status = server.signal_and_reap(SIGTERM);  // not stop(): this exit is the one expected
  double took = odafs::test::seconds_since(start);
  CAPTURE(took);
  CHECK(took < kStopBound);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);  // StopWatchdog::kForcedExitStatus
  writer.join();
}
