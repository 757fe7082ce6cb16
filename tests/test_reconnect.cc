// A connection cut while the server stays up (a relay or middlebox resetting TCP
// connections) is no restart and loses nothing: the delegations a named client holds, and
// the bytes it keeps under them, are its owner's (CLIENT_ID), not its connection's. The
// client reconnects, writes back what it kept, and nobody else reads or writes those files
// meanwhile; an owner that does not come back within the lease of a conflicting access
// loses its delegation, and its late write-back is refused and reported. A client owner is
// bound to the principal that first named it.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
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
#include "tests/support/tcp_relay.h"

using odafs::Client;
using odafs::File;
using odafs::test::eventually;
using odafs::test::MountProcess;
using odafs::test::pattern;
using odafs::test::RawMount;
using odafs::test::read_all;
using odafs::test::read_local;
using odafs::test::seconds_since;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TcpRelay;
using odafs::test::TempDir;

namespace {

// Each file fits the space a write delegation reserves past the size at its grant (64 KiB,
// docs/protocol.md "Space limit"), so its close keeps its bytes: a kept run ends within it.
constexpr int kFiles = 20;
constexpr size_t kFileBytes = 60 * 1024;

std::string relay_url(const TcpRelay& relay) {
  return "odafs://127.0.0.1:" + std::to_string(relay.port()) + "/";
}

std::string name_of(int i) { return "f" + std::to_string(i); }

// How many of the kFiles files written from pattern(kFileBytes, i) are whole in the export.
int whole_files(const TempDir& dir) {
  int whole = 0;
  for (int i = 0; i < kFiles; ++i) {
    whole += read_local(dir / name_of(i)) == pattern(kFileBytes, i) ? 1 : 0;
  }
  return whole;
}

// The lines of text that report lost bytes.
std::vector<std::string> loss_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (line.find("lost") != std::string::npos ||
        line.find("could not be written back") != std::string::npos) {
      lines.push_back(line);
    }
    at = end + 1;
  }
  return lines;
}

// Writes `text` to a new file at `path` on the local file system (a mount) in 16 KiB
// writes, as a copying program does, and closes it: the close may keep the last run.
void write_chunked(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  for (size_t at = 0; at < text.size(); at += 16384) {
    const size_t n = std::min<size_t>(16384, text.size() - at);
    REQUIRE(write(fd, text.data() + at, n) == static_cast<ssize_t>(n));
  }
  REQUIRE(close(fd) == 0);
}

// The same through the library.
void write_chunked(Client& fs, const std::string& path, const std::string& text) {
  File f = fs.open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  for (size_t at = 0; at < text.size(); at += 16384) {
    const size_t n = std::min<size_t>(16384, text.size() - at);
    REQUIRE(f.pwrite(text.data() + at, n, at) == n);
  }
  f.close();
}

// The message of the odafs::Error fn throws ("" if none).
std::string error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const odafs::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

ODAFS_MOUNT_TEST("a mount through a relay that resets its connections loses no closed file") {
  TempDir dir, mnt;
  ServerProcess server(dir.path(), {"--lease-ms", "2000"});
  TcpRelay relay(server.port());
  MountProcess m(relay_url(relay), mnt.path());
  for (int i = 0; i < kFiles; ++i) write_chunked(m / name_of(i), pattern(kFileBytes, i));
  // The scenario: the closes kept the last bytes of files under write delegations.
  REQUIRE(whole_files(dir) < kFiles);
  REQUIRE(relay.reset_all() >= 1);
  CHECK(eventually([&] { return relay.accepted() >= 2; }, 10));  // the mount reconnected
  CHECK(eventually([&] { return whole_files(dir) == kFiles; }, 20));
  const std::vector<std::string> losses = loss_lines(m.stderr_text());
  CHECK(losses.empty());
  for (const std::string& line : losses) MESSAGE(line);
}

TEST_CASE("a library client whose connection is reset writes back what it kept") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "2000"});
  TcpRelay relay(server.port());
  auto writer = Client::mount(relay_url(relay));
  for (int i = 0; i < kFiles; ++i) write_chunked(*writer, "/" + name_of(i), pattern(kFileBytes, i));
  REQUIRE(whole_files(dir) < kFiles);
  REQUIRE(relay.reset_all() >= 1);
  CHECK(eventually([&] { return whole_files(dir) == kFiles; }, 20));
  CHECK(writer->stats().lost_files.load() == 0);
  CHECK(writer->stats().reclaimed_files.load() >= 1);
  // The writer's mount goes on.
  CHECK(read_all(*writer, "/f0", kFileBytes + 10) == pattern(kFileBytes, 0));
}

TEST_CASE("another client's access waits for an away owner's write-back, or for the lease") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "3000"});
  TcpRelay relay(server.port());
  auto owner = Client::mount(relay_url(relay));
  const std::string text = pattern(kFileBytes, 3);
  write_chunked(*owner, "/f", text);
  const std::string before = read_local(dir / "f");
  REQUIRE(before.size() < text.size());
  // The owner's path goes down: its connection is cut and it cannot come back for now.
  relay.set_refusing(true);
  REQUIRE(relay.reset_all() >= 1);
  auto reader = Client::mount(server.url());
  auto watcher = Client::mount(server.url());

  SUBCASE("the owner comes back within the lease: the reader sees its bytes") {
    std::string seen;
    std::thread read([&] { seen = read_all(*reader, "/f", text.size() + 10); });
    // The reader waits (DELAY, retried) on the owner's write delegation...
    const bool waited =
        eventually([&] { return server_stat(*watcher, "delegations.delayed") >= 1; }, 10);
    relay.set_refusing(false);  // ...until the owner is back and has written back
    read.join();
    CHECK(waited);
    CHECK(seen == text);
    CHECK(read_local(dir / "f") == text);
    CHECK(owner->stats().lost_files.load() == 0);
    CHECK(server_stat(*watcher, "delegations.expired") == 0);
  }

  SUBCASE("the owner stays away past the lease: the reader goes on, the late bytes are refused") {
    const auto start = std::chrono::steady_clock::now();
    CHECK(read_all(*reader, "/f", text.size() + 10) == before);
    CHECK(seconds_since(start) > 2.0);  // it waited out the lease
    relay.set_refusing(false);
    REQUIRE(eventually([&] { return owner->stats().lost_files.load() == 1; }, 15));
    CHECK(read_local(dir / "f") == before);
    CHECK(server_stat(*watcher, "delegations.refused_revoked") >= 1);
    // The owner hears of it at its next write to the file, by the file's name.
    File f = owner->open("/f", O_RDWR);
    const std::string why = error_message([&] { f.pwrite("x", 1, 0); });
    CHECK(why.find("/f") != std::string::npos);
    CHECK(why.find("could not be written back") != std::string::npos);
  }

  SUBCASE("the file is removed while the owner is away: its kept bytes went with it, no loss") {
    // Another client's REMOVE waits out the lease, then runs; the owner, back, finds its
    // handle stale on the server that stayed up: the file is gone, and nothing a reader
    // could see is lost (as for a local file unlinked after its last write).
    const auto start = std::chrono::steady_clock::now();
    reader->unlink("/f");
    CHECK(seconds_since(start) > 2.0);
    relay.set_refusing(false);
    // The owner re-mounts (and reclaims) before its first call on the new mount answers.
    CHECK(eventually(
        [&] {
          try {
            owner->open("/g", O_RDWR | O_CREAT).close();
            return true;
          } catch (const odafs::Error&) {
            return false;
          }
        },
        15));
    CHECK(owner->stats().lost_files.load() == 0);
    CHECK(owner->stats().reclaimed_files.load() == 0);
    CHECK_FALSE(std::filesystem::exists(dir / "f"));
    // A new file under the name gets none of the old one's bytes.
    write_chunked(*owner, "/f", "new");
    CHECK(read_all(*owner, "/f", 100) == "new");
  }
}

TEST_CASE("a client owner is bound to the principal that named it") {
  if (geteuid() != 0) {
    MESSAGE("skipped: needs root to play another user (uid 1002)");
    return;
  }
  TempDir dir;
  ServerProcess server(dir.path(), {"--clients", "127.0.0.1(rw,no_root_squash)"});
  REQUIRE(chmod(dir.path().c_str(), 0777) == 0);  // raw calls run as the anonymous user
  constexpr unsigned char kVictim = 0xab;
  // An attacker, another local user (uid 1002), names the victim's owner on a connection of
  // its own: the status the server answers (the child's exit status; 255: no answer).
  auto attack = [&] {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      if (setgid(1002) != 0 || setuid(1002) != 0) _exit(254);
      try {
        odafs::rpc::Channel::Options o;
        o.program = ODAFS_PROGRAM;
        o.version = ODAFS_V3;
        o.timeout_ms = 10000;
        auto ch = odafs::rpc::Channel::connect({"127.0.0.1", server.port()}, o);
        if (!ch.ok()) _exit(255);
        client_id_args a{};
        std::memset(a.owner, kVictim, sizeof a.owner);
        client_id_res res{};
        if (!(*ch)
                 ->call(ODAFSPROC_CLIENT_ID, odafs::rpc::to_xdrproc(xdr_client_id_args), &a,
                        odafs::rpc::to_xdrproc(xdr_client_id_res), &res)
                 .ok()) {
          _exit(255);
        }
        _exit(res.status < 250 ? res.status : 253);
      } catch (...) {
        _exit(255);
      }
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  // The victim names its owner and creates a file, with a write delegation on it.
  auto victim = std::make_unique<RawMount>(server.port());
  REQUIRE(victim->client_id(kVictim) == ODAFS_OK);
  char fh[ODAFS_FHSIZE];
  int kind = -1;
  REQUIRE(victim->create("v", fh, &kind) == ODAFS_OK);
  REQUIRE(kind == ODAFS_DELEG_WRITE);
  CHECK(attack() == ODAFS_ERR_PERM);  // while the victim is connected
  victim.reset();                     // and while it is away, its delegation kept
  CHECK(attack() == ODAFS_ERR_PERM);
  // The victim comes back: the owner is still its own, with what it held.
  RawMount back(server.port());
  bool reclaim = false, kept = false;
  CHECK(back.client_id(kVictim, &reclaim, &kept) == ODAFS_OK);
  CHECK(reclaim);
  CHECK(kept);
  CHECK(back.write(fh, 0, "the victim's bytes") == ODAFS_OK);
  CHECK(read_local(dir / "v") == "the victim's bytes");
}

TEST_CASE("what the server keeps for away clients is bounded: in time and in number") {
  TempDir dir;
  // A 100 ms lease: an away client is given up after 12 leases (1.2 s).
  ServerProcess server(dir.path(), {"--no-ordma", "--lease-ms", "100", "--max-connections", "6",
                                    "--clients", "127.0.0.1(rw,no_root_squash)"});
  REQUIRE(chmod(dir.path().c_str(), 0777) == 0);  // raw calls run as the anonymous user
  auto watcher = Client::mount(server.url());     // a named client too: one owner known
  // A client names owner `fill`, takes a write delegation on a file of its own and goes.
  auto leave_holding = [&](unsigned char fill) {
    RawMount raw(server.port());
    REQUIRE(raw.client_id(fill) == ODAFS_OK);
    char fh[ODAFS_FHSIZE];
    int kind = -1;
    const std::string name = "o" + std::to_string(fill);
    REQUIRE(raw.create(name.c_str(), fh, &kind) == ODAFS_OK);
    REQUIRE(kind == ODAFS_DELEG_WRITE);
  };

  SUBCASE("in number: past --max-connections owners known, the longest away is given up") {
    for (unsigned char fill = 0x10; fill < 0x17; ++fill) {
      leave_holding(fill);
      // The close is seen before the next client names itself (the order matters here).
      const uint64_t away = std::min<uint64_t>(fill - 0x10 + 1, 5);
      REQUIRE(eventually([&] { return server_stat(*watcher, "owners.away") == away; }));
    }
    CHECK(server_stat(*watcher, "owners.known") == 6);
    bool reclaim = false;
    CHECK(RawMount(server.port()).client_id(0x16, &reclaim) == ODAFS_OK);
    CHECK(reclaim);  // the newest away is still known
    CHECK(RawMount(server.port()).client_id(0x10, &reclaim) == ODAFS_OK);
    CHECK_FALSE(reclaim);  // the oldest was given up
  }

  SUBCASE("in time: an owner away past 12 leases is given up") {
    leave_holding(0x20);
    REQUIRE(eventually([&] { return server_stat(*watcher, "owners.away") == 1; }));
    // Another client naming itself, as any does now and then, is when the server looks.
    unsigned char probe = 0x30;
    CHECK(eventually(
        [&] {
          RawMount(server.port()).client_id(probe++);
          return server_stat(*watcher, "owners.away") == 0;
        },
        10, std::chrono::milliseconds(200)));
    bool reclaim = true;
    CHECK(RawMount(server.port()).client_id(0x20, &reclaim) == ODAFS_OK);
    CHECK_FALSE(reclaim);
    CHECK(server_stat(*watcher, "delegations.held") == 0);
  }
}

TEST_CASE("a connection the server closes for idleness is a cut connection too: nothing lost") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--idle-timeout", "1"});
  auto writer = Client::mount(server.url());
  const std::string text = pattern(kFileBytes, 5);
  write_chunked(*writer, "/f", text);
  REQUIRE(read_local(dir / "f").size() < text.size());  // kept by the close
  auto watcher = Client::mount(server.url());
  CHECK(eventually([&] { return server_stat(*watcher, "rpc.idle_closed") >= 1; }, 10));
  // Written back by its reconnection, not by its timer (counted once the bytes are in).
  CHECK(eventually([&] { return writer->stats().reclaimed_files.load() == 1; }, 10));
  CHECK(read_local(dir / "f") == text);
  CHECK(writer->stats().lost_files.load() == 0);
}

// Issue #38 (cut soak, ESTALE on a client's private file): a call the server had read from
// a connection, but not run yet when the connection was reset, still ran later, after the
// client reconnected and went on. The client was told its REMOVE failed with the
// connection (a non-idempotent call is not sent again); the soak then removed the file
// itself and created it anew, and the old REMOVE, queued in its batch behind a call that
// waited, removed the new file: its writes met ESTALE and its name ENOENT. Here the old
// connection's REMOVE waits behind a GETATTR of a file another holder keeps under a write
// delegation it does not return (that wait ends with DELAY after the server's wait_ms).
TEST_CASE(
    "a call read from a connection reset before it ran does not run after the client's "
    "next calls") {
  TempDir dir;
  ServerProcess server(dir.path());
  REQUIRE(chmod(dir.path().c_str(), 0777) == 0);  // raw calls run as the anonymous user
  RawMount holder(server.port());
  char held[ODAFS_FHSIZE];
  holder.create_write_held(0x38, "held", held);
  odafs::test::make_file(server.url(), "victim", "old");
  auto fs = Client::mount(server.url());
  const uint64_t getattrs = server_stat(*fs, "calls.GETATTR");
  const uint64_t removes = server_stat(*fs, "calls.REMOVE");

  // One send, so one batch: GETATTR waits for the recall; REMOVE is queued behind it.
  std::string calls;
  getattr_args ga{};
  std::memcpy(ga.fh, held, sizeof ga.fh);
  calls += odafs::test::rpc_call_record(1, ODAFSPROC_GETATTR,
                                        odafs::rpc::to_xdrproc(xdr_getattr_args), &ga);
  diropargs ra{};
  std::memcpy(ra.dir, holder.root, sizeof ra.dir);
  ra.name = const_cast<char*>("victim");
  calls +=
      odafs::test::rpc_call_record(2, ODAFSPROC_REMOVE, odafs::rpc::to_xdrproc(xdr_diropargs), &ra);
  const int fd = odafs::test::connect_from("127.0.0.1", server.port());
  REQUIRE(fd >= 0);
  REQUIRE(send(fd, calls.data(), calls.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(calls.size()));
  // Reset (RST), as the relay does, once the server has read both calls and waits in the
  // first.
  REQUIRE(eventually([&] { return server_stat(*fs, "calls.GETATTR") > getattrs; }));
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);

  // The client goes on: the file it was removing is removed and made anew.
  fs->unlink("victim");
  odafs::test::write_path(*fs, "victim", "new");
  // Once the old GETATTR's wait is over, the old REMOVE was either run or dropped.
  REQUIRE(eventually([&] {
    return server_stat(*fs, "rpc.dropped_after_reset") >= 1 ||
           server_stat(*fs, "calls.REMOVE") > removes + 1;
  }));
  CHECK(std::filesystem::exists(dir / "victim"));
  CHECK(server_stat(*fs, "calls.REMOVE") == removes + 1);  // this client's own only
}

// The same hazard one step earlier (the cut soak on 41655fa: "c4/p0: removed, but stat gave
// errno 0"): a CREATE sat unread in the server's socket while every thread was busy, the
// relay reset the connection, the client reconnected, found no file to remove, and only
// then did the server read the CREATE (the kernel hands out what arrived before a reset)
// and make the file. Here the one event loop (--threads 1) is held by a write whose halves
// land 1 s apart; the CREATE arrives meanwhile and the connection is reset behind it.
TEST_CASE("a call still unread when its connection was reset is not run") {
  TempDir dir;
  ServerProcess server(dir.path(),
                       {"--threads", "1", "--slow-writes", "1000000", "--no-delegations"});
  REQUIRE(chmod(dir.path().c_str(), 0777) == 0);  // raw calls run as the anonymous user
  RawMount raw(server.port());
  auto fs = Client::mount(server.url());
  const uint64_t creates = server_stat(*fs, "calls.CREATE");

  // Connected and served before the loop is held: the CREATE below waits only for a thread.
  const int fd = odafs::test::connect_from("127.0.0.1", server.port());
  REQUIRE(fd >= 0);
  const std::string null_call = odafs::test::rpc_call_record(
      1, ODAFSPROC_NULL, odafs::rpc::to_xdrproc(odafs::rpc::xdr_nothing), nullptr);
  REQUIRE(send(fd, null_call.data(), null_call.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(null_call.size()));
  char reply[64];
  REQUIRE(recv(fd, reply, sizeof reply, 0) > 0);

  std::thread writer([&fs] {
    File f = fs->open("slow", O_RDWR | O_CREAT, 0644);
    const std::string block(4096, 's');
    f.pwrite(block.data(), block.size(), 0);
    f.fsync();
  });
  // The write is under way (its first half landed): the loop is held for a second.
  REQUIRE(eventually([&] {
    std::error_code ec;
    return std::filesystem::file_size(dir / "slow", ec) > 0 && !ec;
  }));
  create_args ca{};
  std::memcpy(ca.dir, raw.root, sizeof ca.dir);
  ca.name = const_cast<char*>("victim");
  ca.mode = 0644;
  ca.how = ODAFS_CREATE_UNCHECKED;
  const std::string create = odafs::test::rpc_call_record(
      2, ODAFSPROC_CREATE, odafs::rpc::to_xdrproc(xdr_create_args), &ca);
  REQUIRE(send(fd, create.data(), create.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(create.size()));
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);  // a reset (RST), as the relay's cut
  writer.join();

  // Once the loop is free the reset connection's event is handled: the CREATE either ran
  // or was dropped.
  REQUIRE(eventually([&] {
    return server_stat(*fs, "rpc.dropped_after_reset") >= 1 ||
           server_stat(*fs, "calls.CREATE") > creates + 1;
  }));
  CHECK_FALSE(std::filesystem::exists(dir / "victim"));
  CHECK(server_stat(*fs, "calls.CREATE") == creates + 1);  // the writer's own only
}
