// Integration: a stopped server costs a client its timeout, never a hang. One-sided reads
// (over the local ring and over TCP) and the engine handshake honour the client's
// timeout_ms, as RPC calls do: a read of a SIGSTOPped odafsd fails with ETIMEDOUT.
//
// Each stopped-server case runs a watchdog that resumes the server after kWatchdog, so a
// regression (a wait without a deadline) shows up as a failed CHECK on the elapsed time,
// not as a test that hangs until ctest kills it.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "base/net.h"
#include "client/client.h"
#include "ordma/engine.h"
#include "ordma/engine_impl/soft/soft_engine.h"
#include "rpc/client_channel.h"
#include "rpc/record.h"
#include "rpc/xdr_util.h"
#include "tests/support/rpc_calls.h"
#include "tests/support/server_process.h"
#include "tests/support/watchdog.h"

using odafs::Client;
using odafs::File;
using odafs::test::errno_of;
using odafs::test::pattern;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::Watchdog;
using odafs::test::write_local;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kTimeoutMs = 2000;
constexpr double kBoundSeconds = 10;                          // what the tests allow
constexpr auto kWatchdog = std::chrono::milliseconds(12000);  // past the bound: a failure

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

uint64_t transport_faults(const Client& c) {
  return c.stats().faults[static_cast<size_t>(odafs::ordma::Fault::kTransport)].load();
}

}  // namespace

TEST_CASE("a one-sided read of a stopped server fails with ETIMEDOUT within the bound") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  REQUIRE(server.engine_port() != 0);
  std::string data = pattern(64 * 1024, 16);
  write_local(dir / "f", data);
  odafs::MountOptions mo;
  mo.cache_blocks = 0;  // every read reaches the server, one-sided or by RPC
  mo.timeout_ms = kTimeoutMs;
  std::string transport;
  SUBCASE("over the local ring") {
    mo.same_host_shortcut = true;
    transport = "ring";
  }
  SUBCASE("over TCP") {
    mo.same_host_shortcut = false;
    transport = "tcp";
  }
  auto fs = Client::mount(server.url(), mo);
  File f = fs->open("f");
  std::string back(data.size(), '\0');
  REQUIRE(f.pread(back.data(), back.size(), 0) == data.size());  // brings references
  REQUIRE(f.pread(back.data(), back.size(), 0) == data.size());
  REQUIRE(back == data);
  REQUIRE(fs->stats().ordma_reads.load() > 0);  // the client holds references and uses them
  REQUIRE(fs->engine_transport() == transport);
  uint64_t faults_before = transport_faults(*fs);

  REQUIRE(odafs::test::stop_child(server.pid()));
  pid_t pid = server.pid();
  Watchdog watchdog(kWatchdog, [pid] { kill(pid, SIGCONT); });
  auto t0 = Clock::now();
  int err = errno_of([&] { f.pread(back.data(), back.size(), 0); });
  double elapsed = seconds_since(t0);
  bool fired = watchdog.finish();  // the server runs again from here
  CHECK(err == ETIMEDOUT);
  CHECK(elapsed < kBoundSeconds);
  CHECK_FALSE(fired);
  // The one-sided read gave up on its own (a transport fault), then the RPC fallback timed
  // out: the read did not just skip the engine.
  CHECK(transport_faults(*fs) > faults_before);
  CHECK(elapsed >= kTimeoutMs / 1000.0);

  // The engine's late answer to the abandoned read cannot land in a later one: the client
  // reads right bytes again, one-sided once it has fresh references.
  std::string again(data.size(), '\0');
  uint64_t ordma = fs->stats().ordma_reads.load();
  for (int pass = 0; pass < 2; ++pass) {
    std::fill(again.begin(), again.end(), '\0');
    REQUIRE(f.pread(again.data(), again.size(), 0) == data.size());
    CHECK(again == data);
  }
  CHECK(fs->stats().ordma_reads.load() > ordma);
}

TEST_CASE("concurrent one-sided readers of a stopped server all time out") {
  // Over TCP one reader reads the socket for all (leader / follower): the followers' own
  // deadlines must end their waits too, and none may be left waiting on another's.
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  std::string data = pattern(64 * 4096, 18);
  write_local(dir / "f", data);
  odafs::MountOptions mo;
  mo.cache_blocks = 0;
  mo.same_host_shortcut = false;
  mo.timeout_ms = 1000;
  auto fs = Client::mount(server.url(), mo);
  File f = fs->open("f");
  std::string back(data.size(), '\0');
  REQUIRE(f.pread(back.data(), back.size(), 0) == data.size());  // references for all
  REQUIRE(f.pread(back.data(), back.size(), 0) == data.size());
  REQUIRE(fs->stats().ordma_reads.load() >= 64);

  REQUIRE(odafs::test::stop_child(server.pid()));
  pid_t pid = server.pid();
  Watchdog watchdog(kWatchdog, [pid] { kill(pid, SIGCONT); });
  constexpr int kReaders = 6;
  std::vector<int> errs(kReaders, -1);
  std::vector<double> took(kReaders, 0);
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&, i] {
      std::string buf(4096, '\0');
      auto t0 = Clock::now();
      errs[i] = errno_of([&] { f.pread(buf.data(), buf.size(), uint64_t{4096} * i * 8); });
      took[i] = seconds_since(t0);
    });
  }
  for (auto& t : readers) t.join();
  CHECK_FALSE(watchdog.finish());
  for (int i = 0; i < kReaders; ++i) {
    CAPTURE(i);
    CHECK(errs[i] == ETIMEDOUT);
    CHECK(took[i] < kBoundSeconds);
  }
  std::string again(data.size(), '\0');
  REQUIRE(f.pread(again.data(), again.size(), 0) == data.size());
  CHECK(again == data);
}

TEST_CASE("the first read after the server stopped times out in the engine handshake") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  write_local(dir / "f", pattern(8192, 17));
  odafs::MountOptions mo;
  mo.cache_blocks = 0;
  mo.timeout_ms = kTimeoutMs;
  auto fs = Client::mount(server.url(), mo);
  File f = fs->open("f");
  REQUIRE_FALSE(fs->engine_connected());  // the engine connects at the first read

  REQUIRE(odafs::test::stop_child(server.pid()));
  pid_t pid = server.pid();
  Watchdog watchdog(kWatchdog, [pid] { kill(pid, SIGCONT); });
  auto t0 = Clock::now();
  std::string back(8192, '\0');
  int err = errno_of([&] { f.pread(back.data(), back.size(), 0); });
  double elapsed = seconds_since(t0);
  bool fired = watchdog.finish();
  CHECK(err == ETIMEDOUT);
  CHECK(elapsed < kBoundSeconds);
  CHECK_FALSE(fired);
  CHECK_FALSE(fs->engine_connected());
}

TEST_CASE("connect_engine gives up on an engine that never greets") {
  // A listener that accepts (the kernel does) and never says a word: the handshake's
  // wait for GREETING is bounded by timeout_ms.
  odafs::net::Endpoint bound;
  int listener = odafs::net::listen_tcp({"127.0.0.1", 0}, &bound).value();
  Watchdog watchdog(kWatchdog, [listener] { shutdown(listener, SHUT_RDWR); });
  odafs::ordma::Session session;
  session.id = 1;
  odafs::ordma::EngineClientOptions eo;
  eo.timeout_ms = 300;
  auto t0 = Clock::now();
  int err = 0;
  try {
    odafs::ordma::connect_engine("soft", bound, session, eo);
  } catch (const std::system_error& e) {
    err = e.code().value();
  }
  double elapsed = seconds_since(t0);
  CHECK_FALSE(watchdog.finish());
  close(listener);
  CHECK(err == ETIMEDOUT);
  CHECK(elapsed >= 0.3);
  CHECK(elapsed < 3);
}

namespace {

// A peer that answers one call with the first 16 bytes of a 200-byte reply record, then
// closes (a relay reset, a NAT dropping the flow) or, with `stall`, says nothing more until
// the client closes (a server stopped mid-reply). The receiver has taken the call out of
// the pending list to read its reply, so the call's end is up to the receiver. Returns the
// errno the call failed with (0: it did not fail). A regression (the call left waiting on
// the receiver for good) is caught by a watchdog that cannot release such a wait: it ends
// the process with a message instead of letting ctest's timeout say less.
int call_answered_in_part(bool posted, bool stall, int timeout_ms, double* elapsed) {
  odafs::net::Endpoint bound;
  int listener = odafs::net::listen_tcp({"127.0.0.1", 0}, &bound).value();
  REQUIRE_OK(odafs::net::set_nonblocking(listener, false));  // the peer's accept waits
  std::thread peer([listener, stall] {
    int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    char mark[4];
    if (odafs::net::got_all(odafs::net::read_full(fd, mark, sizeof mark))) {
      std::vector<char> call(odafs::rpc::read_record_mark(mark).length);
      if (odafs::net::got_all(odafs::net::read_full(fd, call.data(), call.size()))) {
        char reply[4 + 16] = {};
        odafs::rpc::put_record_mark(reply, 200, true);  // 200 bytes promised, 16 sent
        std::memcpy(reply + 4, call.data(), 4);         // the call's XID
        reply[11] = 1;                                  // REPLY
        iovec iov{reply, sizeof reply};
        (void)odafs::net::write_all(fd, &iov, 1);  // the client tells what came
        char sink;
        while (stall && recv(fd, &sink, 1, 0) > 0) {
        }
      }
    }
    close(fd);
  });
  std::atomic<bool> returned{false};
  Watchdog watchdog(kWatchdog, [&returned] {
    if (returned.load()) return;
    std::fprintf(stderr,
                 "a call answered in part (cut off or stalled mid-record) still waits: hung\n");
    std::_Exit(3);
  });
  odafs::rpc::Channel::Options o;
  o.program = 400100;
  o.version = 1;
  o.timeout_ms = timeout_ms;
  auto t0 = Clock::now();
  int err = 0;
  {
    std::unique_ptr<odafs::rpc::Channel> ch = odafs::test::open_channel(bound, o);
    odafs::rpc::Call call;
    char payload[64];
    if (posted) call.post(payload, sizeof payload, 28);
    REQUIRE_OK(ch->start(call, 0, odafs::rpc::to_xdrproc(odafs::rpc::xdr_nothing), nullptr));
    XDR x;
    err = ch->wait(call, &x).errno_value();
  }
  *elapsed = seconds_since(t0);
  returned.store(true);
  CHECK_FALSE(watchdog.finish());
  peer.join();
  close(listener);
  return err;
}

}  // namespace

TEST_CASE("a reply the connection loses mid-record fails its call at once, never a hang") {
  // Found by the cut soak: a client waited for good on a read whose reply was cut off.
  bool posted = false;
  SUBCASE("a reply read whole") {}
  SUBCASE("a reply into a posted buffer") { posted = true; }
  double elapsed = 0;
  // A timeout far off: the failure must come from the cut.
  CHECK(call_answered_in_part(posted, /*stall=*/false, 60000, &elapsed) == ECONNRESET);
  CHECK(elapsed < kBoundSeconds);
}

TEST_CASE("a server that stops mid-reply costs the caller its timeout and a second, no more") {
  bool posted = false;
  SUBCASE("a reply read whole") {}
  SUBCASE("a reply into a posted buffer") { posted = true; }
  double elapsed = 0;
  CHECK(call_answered_in_part(posted, /*stall=*/true, 500, &elapsed) == ETIMEDOUT);
  CHECK(elapsed >= 0.5);
  CHECK(elapsed < 4);
}

TEST_CASE("a late transfer for a direct call that gave up lands in no buffer") {
  // A direct call whose RPC failed (a timeout, say) is abandoned; the server's engine may
  // still send its PUT afterwards. The buffer id it names can by then belong to a later
  // call: those bytes must be dropped, not placed.
  using namespace odafs::ordma;
  std::vector<std::byte> memory(2 * 4096);
  EngineOptions o;
  o.listen = {"127.0.0.1", 0};
  auto engine = make_soft_engine(o, ExportedMemory{memory.data(), 4096, 2});
  engine->start();
  Session s = engine->sessions().issue();
  EngineClientOptions eo;
  eo.same_host_shortcut = false;
  auto client = connect_soft_engine(odafs::net::parse_endpoint(engine->endpoint()), s, eo);
  std::vector<char> buf(64, '.');
  uint32_t id = client->register_buffer(buf.data(), buf.size());
  uint32_t abandoned = 0, got = 0;
  odafs::Result<Fault> refused = client->direct(
      [&](uint32_t tag) {
        abandoned = tag;
        return odafs::Status(ECONNRESET, "the RPC failed");
      },
      &got);
  CHECK(refused.errno_value() == ECONNRESET);  // the call's own failure, nothing waited for
  std::string stale = "stale", fresh = "fresh";
  iovec late{stale.data(), stale.size()};
  REQUIRE(engine->push(s.id, id, 0, abandoned, &late, 1) == Fault::kNone);
  // The next call on the same buffer id: the engine sent the late PUT first, so the
  // client's reader meets it before this call's own.
  iovec part{fresh.data(), fresh.size()};
  odafs::Result<Fault> f = client->direct(
      [&](uint32_t tag) {
        REQUIRE(engine->push(s.id, id, 10, tag, &part, 1) == Fault::kNone);
        return odafs::Status();
      },
      &got);
  REQUIRE(f.ok());
  CHECK(*f == Fault::kNone);
  CHECK(got == fresh.size());
  CHECK(std::string(buf.data() + 10, fresh.size()) == fresh);
  CHECK(std::string(buf.data(), stale.size()) == ".....");  // the late bytes went nowhere
  CHECK_FALSE(client->broken());
  engine->stop();
}
