// Integration: resource limits under hostile or merely large loads. Descriptor exhaustion,
// idle and per-address connection limits, engine handshake limits, and the ONC RPC
// protocol deviations a server must answer rather than drop.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <rpc/rpc.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "proto/odafs_prot.h"
#include "rpc/record.h"
#include "rpc/xdr_util.h"
#include "tests/support/hostile.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::File;
using odafs::test::close_all;
using odafs::test::closed_by_peer;
using odafs::test::connect_from;
using odafs::test::count_closed;
using odafs::test::cpu_seconds;
using odafs::test::ensure_fd_limit;
using odafs::test::eventually;
using odafs::test::open_fds;
using odafs::test::pattern;
using odafs::test::rss_kib;
using odafs::test::ServerProcess;
using odafs::test::stat_of;
using odafs::test::TempDir;
using odafs::test::write_local;
using Clock = std::chrono::steady_clock;

namespace {

// Sends one RPC record built from big-endian words (one fragment) and returns the reply
// record, or an empty string if the connection closed or nothing came within 5 s.
std::string rpc_exchange(int fd, const std::vector<uint32_t>& words) {
  std::string msg(4, '\0');
  odafs::rpc::put_record_mark(msg.data(), static_cast<uint32_t>(words.size() * 4), /*last=*/true);
  for (uint32_t w : words) {
    uint32_t be = htonl(w);
    msg.append(reinterpret_cast<char*>(&be), 4);
  }
  if (send(fd, msg.data(), msg.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(msg.size())) {
    return {};
  }
  std::string reply;
  size_t want = 4;
  while (reply.size() < want) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 5000) <= 0) return {};
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return {};
    reply.append(buf, static_cast<size_t>(n));
    if (reply.size() >= 4) {
      want = 4 + odafs::rpc::read_record_mark(reply.data()).length;
    }
  }
  return reply.substr(4, want - 4);
}

// Decodes a reply record with libtirpc (the client's view of what the server said).
rpc_msg decode_reply(std::string& record) {
  rpc_msg msg{};
  msg.acpted_rply.ar_results.where = nullptr;
  msg.acpted_rply.ar_results.proc = odafs::rpc::to_xdrproc(odafs::rpc::xdr_nothing);
  XDR x;
  xdrmem_create(&x, record.data(), static_cast<u_int>(record.size()), XDR_DECODE);
  REQUIRE(xdr_replymsg(&x, &msg));
  return msg;
}

}  // namespace

TEST_CASE(
    "out of descriptors: new connections are shed at once, the server does not spin, "
    "existing clients keep working") {
  REQUIRE(ensure_fd_limit(4096));
  TempDir dir;
  std::string data = pattern(64 * 1024, 5);
  write_local(dir / "data", data);
  ServerProcess server(dir.path(), {"--no-ordma", "--threads", "2"});
  auto fs = Client::mount(server.url());
  File f = fs->open("data");
  std::string buf(4096, '\0');
  CHECK(f.pread(buf.data(), buf.size(), 0) == buf.size());

  // Leave the server a handful of descriptors beyond what it holds now.
  rlimit lim{};
  REQUIRE(prlimit(server.pid(), RLIMIT_NOFILE, nullptr, &lim) == 0);
  rlim_t soft = lim.rlim_cur;
  lim.rlim_cur = open_fds(server.pid()) + 6;
  REQUIRE(prlimit(server.pid(), RLIMIT_NOFILE, &lim, nullptr) == 0);

  std::vector<int> flood;
  for (int i = 0; i < 60; ++i) {
    int fd = connect_from("127.0.0.1", server.port());
    if (fd >= 0) flood.push_back(fd);
  }
  double cpu_before = cpu_seconds(server.pid());
  // Time passing is what is measured: the server's CPU over 2 s of standing flood.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  double cpu_used = cpu_seconds(server.pid()) - cpu_before;
  // The old accept loop retried EMFILE at once, forever: more than a core while flooded.
  CHECK(cpu_used < 0.5);
  // Connections past the limit were closed, not left hanging in the backlog.
  CHECK(count_closed(flood, 2000) >= 40);
  // The client that was already connected is served throughout.
  for (int i = 0; i < 20; ++i) {
    CHECK(f.pread(buf.data(), buf.size(), static_cast<uint64_t>(i) * 1000) == buf.size());
  }
  CHECK(buf == data.substr(19000, 4096));
  CHECK(stat_of(*fs, "rpc.shed") > 0);
  close_all(flood);

  // Descriptors back: new clients get in again.
  lim.rlim_cur = soft;
  REQUIRE(prlimit(server.pid(), RLIMIT_NOFILE, &lim, nullptr) == 0);
  auto again = Client::mount(server.url());
  CHECK(again->stat("data").size == data.size());
}

TEST_CASE(
    "one address cannot take every connection; idle connections and slow senders are "
    "closed; clients whose idle connection closed reconnect") {
  REQUIRE(ensure_fd_limit(4096));
  TempDir dir;
  std::string data = pattern(20000, 6);
  write_local(dir / "data", data);
  ServerProcess server(dir.path(), {"--max-connections", "40", "--max-connections-per-address",
                                    "10", "--idle-timeout", "1"});
  // A host (127.0.0.2) opens more connections than the server takes in all.
  std::vector<int> hog;
  for (int i = 0; i < 60; ++i) {
    int fd = connect_from("127.0.0.2", server.port());
    if (fd >= 0) hog.push_back(fd);
  }
  REQUIRE(hog.size() == 60);
  // Everyone else is still served.
  auto fs = Client::mount(server.url());
  File f = fs->open("data");
  std::string buf(data.size(), '\0');
  CHECK(f.pread(buf.data(), buf.size(), 0) == data.size());
  CHECK(buf == data);
  CHECK(stat_of(*fs, "rpc.refused") >= 50);

  // A slow sender dribbles a record that never completes: not activity.
  int slow = connect_from("127.0.0.3", server.port());
  REQUIRE(slow >= 0);
  const char dribble[] = "\x80\x00\x01\x00xxxxxxxxxxxxxxxxxxxxxxx";
  auto start = Clock::now();
  bool slow_closed = false;
  for (size_t i = 0; i < sizeof dribble - 1 && !slow_closed; ++i) {
    send(slow, dribble + i, 1, MSG_NOSIGNAL);
    slow_closed = closed_by_peer(slow, 250);
  }
  if (!slow_closed) slow_closed = closed_by_peer(slow, 3000);
  CHECK(slow_closed);
  CHECK(Clock::now() - start < std::chrono::seconds(5));
  close(slow);

  // The idle ones are closed after about the timeout.
  CHECK(count_closed(hog, 4000) == hog.size());
  close_all(hog);
  // Lets the 1 s idle timeout under test run out on this client's own connection.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // This client's connection went idle and was closed too: its next calls reconnect.
  CHECK(f.pread(buf.data(), 100, 0) == 100);
  File w = fs->open("new", O_RDWR | O_CREAT);
  // Lets the idle timeout close the connection under an open file: its write reconnects.
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  CHECK(w.pwrite("hello", 5, 0) == 5);
  CHECK(fs->stat("new").size == 5);
  CHECK(stat_of(*fs, "rpc.idle_closed") >= 12);
}

TEST_CASE(
    "peers no rule admits take no connection slot: one refusal, then closed; admitted clients "
    "get in while they flood") {
  REQUIRE(ensure_fd_limit(4096));
  TempDir dir;
  write_local(dir / "data", "for 127.0.0.1");
  ServerProcess server(dir.path(), {"--no-ordma", "--clients", "127.0.0.1(rw,no_root_squash)",
                                    "--max-connections", "8"});
  const std::vector<uint32_t> null_call = {0x4e55, 0, 2, ODAFS_PROGRAM, ODAFS_V3, 0, 0, 0, 0, 0};
  // The attacker, an unprivileged user (uid 1002 when the suite runs as root), holds many
  // connections from addresses no rule admits, some calling NULL, until told to stop (the
  // pipe closes).
  int ready[2], done[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(done) == 0);
  const pid_t attacker = fork();
  REQUIRE(attacker >= 0);
  if (attacker == 0) {
    close(ready[0]);
    close(done[1]);
    if (geteuid() == 0 && (setgid(1002) != 0 || setuid(1002) != 0)) _exit(2);
    std::vector<int> flood;
    for (int i = 0; i < 200; ++i) {
      const std::string from = "127.0.0." + std::to_string(2 + i % 6);
      int fd = connect_from(from.c_str(), server.port());
      if (fd >= 0) flood.push_back(fd);
    }
    for (size_t i = 0; i < 8 && i < flood.size(); ++i) rpc_exchange(flood[i], null_call);
    const char held = flood.size() >= 150 ? 'y' : 'n';
    (void)!write(ready[1], &held, 1);
    char c;
    (void)!read(done[0], &c, 1);  // returns at the close
    _exit(0);
  }
  close(ready[1]);
  close(done[0]);
  char held = 0;
  REQUIRE(read(ready[0], &held, 1) == 1);
  CHECK(held == 'y');
  // The admitted client is served meanwhile.
  auto fs = Client::mount(server.url());
  CHECK(fs->stat("data").size == 13);
  // An unadmitted connection's first call, NULL included, gets the refusal, then the close.
  int fd = connect_from("127.0.0.9", server.port());
  REQUIRE(fd >= 0);
  std::string reply = rpc_exchange(fd, null_call);
  REQUIRE_FALSE(reply.empty());
  rpc_msg msg = decode_reply(reply);
  CHECK(msg.rm_reply.rp_stat == MSG_DENIED);
  CHECK(msg.rjcted_rply.rj_stat == AUTH_ERROR);
  CHECK(msg.rjcted_rply.rj_why == AUTH_TOOWEAK);
  CHECK(closed_by_peer(fd, 2000));
  close(fd);
  close(done[1]);
  close(ready[0]);
  int status = 0;
  REQUIRE(waitpid(attacker, &status, 0) == attacker);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE(
    "engine: connections that never authenticate cost little and are closed; the cap "
    "refuses the rest; honest clients still read one-sided") {
  REQUIRE(ensure_fd_limit(8192));
  TempDir dir;
  std::string data = pattern(256 * 1024, 7);
  write_local(dir / "data", data);
  ServerProcess server(dir.path(), {"--engine-max-connections", "100", "--engine-handshake-timeout",
                                    "500", "--threads", "2"});
  REQUIRE(server.engine_port() != 0);
  size_t rss_before = rss_kib(server.pid());
  std::vector<int> silent;
  for (int i = 0; i < 2000; ++i) {
    int fd = connect_from("127.0.0.1", server.engine_port());
    if (fd >= 0) silent.push_back(fd);
  }
  CHECK(silent.size() > 1500);
  {
    // RSS is sampled once the engine has taken every connection (kept or refused). An RPC
    // mount only: its engine connection would be lazy anyway.
    auto probe = Client::mount(server.url());
    CHECK(eventually([&] {
      return stat_of(*probe, "engine.connections") + stat_of(*probe, "engine.refused") >=
             silent.size();
    }));
  }
  size_t rss_during = rss_kib(server.pid());
  // 2000 connections with a 64 KiB buffer each would be 125 MiB.
  CHECK(rss_during < rss_before + 16 * 1024);
  // Every silent connection is closed: refused at once, or at the handshake timeout.
  CHECK(count_closed(silent, 3000) == silent.size());
  close_all(silent);

  odafs::MountOptions no_data_cache;
  no_data_cache.cache_blocks = 0;  // the second pass must read through the engine
  auto fs = Client::mount(server.url(), no_data_cache);
  File f = fs->open("data");
  std::string buf(data.size(), '\0');
  CHECK(f.pread(buf.data(), buf.size(), 0) == data.size());
  CHECK(f.pread(buf.data(), buf.size(), 0) == data.size());
  CHECK(buf == data);
  CHECK(fs->stats().ordma_reads.load() > 0);
  CHECK(stat_of(*fs, "engine.refused") > 0);
  CHECK(stat_of(*fs, "engine.handshake_timeouts") > 0);
}

TEST_CASE(
    "RPC version 3 gets RPC_MISMATCH, an oversized credential AUTH_BADCRED, and empty "
    "fragments close the connection") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--no-ordma"});
  int fd = connect_from("127.0.0.1", server.port());
  REQUIRE(fd >= 0);

  // xid, CALL, rpcvers 3, prog, vers, proc NULL, AUTH_NONE cred and verifier.
  std::string reply = rpc_exchange(fd, {0x1234, 0, 3, ODAFS_PROGRAM, ODAFS_V3, 0, 0, 0, 0, 0});
  REQUIRE_FALSE(reply.empty());
  rpc_msg msg = decode_reply(reply);
  CHECK(msg.rm_xid == 0x1234);
  CHECK(msg.rm_reply.rp_stat == MSG_DENIED);
  CHECK(msg.rjcted_rply.rj_stat == RPC_MISMATCH);
  CHECK(msg.rjcted_rply.rj_vers.low == 2);
  CHECK(msg.rjcted_rply.rj_vers.high == 2);

  // A 500-byte AUTH_SYS credential (the limit is 400).
  std::vector<uint32_t> call = {0x5678, 0, 2, ODAFS_PROGRAM, ODAFS_V3, 0, AUTH_SYS, 500};
  call.resize(call.size() + 125, 0);
  call.push_back(0);  // verifier
  call.push_back(0);
  reply = rpc_exchange(fd, call);
  REQUIRE_FALSE(reply.empty());
  msg = decode_reply(reply);
  CHECK(msg.rm_xid == 0x5678);
  CHECK(msg.rm_reply.rp_stat == MSG_DENIED);
  CHECK(msg.rjcted_rply.rj_stat == AUTH_ERROR);
  CHECK(msg.rjcted_rply.rj_why == AUTH_BADCRED);

  // The connection still serves a good call.
  reply = rpc_exchange(fd, {0x9abc, 0, 2, ODAFS_PROGRAM, ODAFS_V3, 0, 0, 0, 0, 0});
  REQUIRE_FALSE(reply.empty());
  msg = decode_reply(reply);
  CHECK(msg.rm_xid == 0x9abc);
  CHECK(msg.rm_reply.rp_stat == MSG_ACCEPTED);
  CHECK(msg.acpted_rply.ar_stat == SUCCESS);

  // Empty fragments that are not the last: closed, not kept open forever.
  std::string zeros(4 * 1000, '\0');
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    if (send(fd, zeros.data(), zeros.size(), MSG_NOSIGNAL) < 0) closed = true;
    if (!closed) closed = closed_by_peer(fd, 10);
  }
  CHECK((closed || closed_by_peer(fd, 2000)));
  close(fd);
}
