// Integration: clients that flood the one-sided engine, or hold direct writes open, do not
// starve the others. Hostile clients: engine TCP connections that keep thousands of
// READ frames in flight, threads hammering a local ring, and WRITE_DIRECTs whose data never
// comes. Meanwhile an honest client reads one-sided (over its ring, and over TCP) or by
// RPC, checks every byte, and its worst read latency is measured against a bound.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/net.h"
#include "client/client.h"
#include "ordma/engine.h"
#include "ordma/engine_impl/soft/handshake.h"
#include "ordma/engine_impl/soft/wire.h"
#include "proto/odafs_prot.h"
#include "proto/ref_xdr.h"
#include "rpc/client_channel.h"
#include "rpc/record.h"
#include "rpc/xdr_util.h"
#include "tests/support/hostile.h"
#include "tests/support/server_process.h"
#include "tests/support/xdr_util.h"

using odafs::Client;
using odafs::File;
using odafs::ordma::Reference;
using odafs::ordma::Session;
using odafs::rpc::to_xdrproc;
using odafs::test::eventually;
using odafs::test::HostileMount;
using odafs::test::kSanitized;
using odafs::test::pattern;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;
using Clock = std::chrono::steady_clock;
namespace wire = odafs::ordma::wire;

namespace {

constexpr size_t kFileBytes = 8 << 20;
constexpr uint32_t kBlock = 8192;  // odafsd's default --block-size

// Keeps `depth` READ frames in flight on each of several engine TCP connections and reads
// the responses as fast as they come, until stopped: the most these connections can ask of
// the engine. One thread drives them all, so that the flood costs the test's side little CPU.
class TcpFlood {
 public:
  TcpFlood(std::vector<int> fds, const std::vector<Reference>& refs, size_t depth)
      : refs_(refs), depth_(depth) {
    for (int fd : fds) conns_.push_back(State{fd});
    thread_ = std::thread([this] { run(); });
  }
  ~TcpFlood() { stop(); }
  void stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
    for (State& s : conns_) {
      if (s.fd >= 0) close(s.fd);
      s.fd = -1;
    }
  }
  uint64_t responses() const { return responses_.load(); }

 private:
  struct State {
    int fd = -1;
    size_t have = 0, sent_in_batch = 0;
    uint64_t asked = 0, answered = 0;
  };
  void run() {
    // One batch of frames, cycling through the references.
    std::vector<unsigned char> batch(1024 * wire::kReadRequestBytes);
    for (size_t i = 0; i < 1024; ++i) {
      wire::ReadRequest r;
      r.tag = static_cast<uint32_t>(i);
      r.ref = refs_[i % refs_.size()];
      r.offset = r.ref.offset;
      r.length = r.ref.length;
      wire::encode(r, batch.data() + i * wire::kReadRequestBytes);
    }
    std::vector<pollfd> p(conns_.size());
    while (!done_) {
      for (size_t i = 0; i < conns_.size(); ++i) {
        State& s = conns_[i];
        bool room = s.asked - s.answered + 1024 <= depth_ || s.sent_in_batch > 0;
        p[i] = {s.fd, static_cast<short>(POLLIN | (room ? POLLOUT : 0)), 0};
      }
      if (poll(p.data(), p.size(), 50) <= 0) continue;
      for (size_t i = 0; i < conns_.size(); ++i) {
        State& s = conns_[i];
        if (p[i].revents & (POLLERR | POLLHUP)) return;
        if (p[i].revents & POLLOUT) {
          ssize_t n = send(s.fd, batch.data() + s.sent_in_batch, batch.size() - s.sent_in_batch,
                           MSG_DONTWAIT | MSG_NOSIGNAL);
          if (n > 0) {
            s.sent_in_batch += static_cast<size_t>(n);
            if (s.sent_in_batch == batch.size()) {
              s.sent_in_batch = 0;
              s.asked += 1024;
            }
          }
        }
        if (p[i].revents & POLLIN) {
          // Dropped by the kernel unread (MSG_TRUNC): the flood costs this side no copy,
          // so its CPU does not compete with the engine's. Every response is the same size
          // (no faults: the server's engine.fault.* counters are checked afterwards).
          ssize_t n = recv(s.fd, nullptr, 1 << 22, MSG_DONTWAIT | MSG_TRUNC);
          if (n == 0) return;
          if (n < 0) continue;
          s.have += static_cast<size_t>(n);
          uint64_t done = s.have / (wire::kResponseBytes + kBlock);
          s.have -= done * (wire::kResponseBytes + kBlock);
          s.answered += done;
          responses_ += done;
        }
      }
    }
  }
  const std::vector<Reference>& refs_;
  size_t depth_;
  std::vector<State> conns_;
  std::atomic<bool> done_{false};
  std::atomic<uint64_t> responses_{0};
  std::thread thread_;
};

// Threads reading one-sided through one engine client (its local ring) back to back.
class RingFlood {
 public:
  RingFlood(const ServerProcess& server, const HostileMount& h, int threads) {
    odafs::ordma::EngineClientOptions o;
    o.same_host_shortcut = true;
    o.timeout_ms = 30000;
    client_ =
        odafs::ordma::connect_engine("soft", {"127.0.0.1", server.engine_port()}, h.session, o);
    REQUIRE(std::string(client_->transport()) == "ring");
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, &h, t] {
        std::vector<char> buf(kBlock);
        for (size_t i = static_cast<size_t>(t); !done_; ++i) {
          const Reference& r = h.refs[i % h.refs.size()];
          uint32_t got = 0;
          if (client_->read(r, r.offset, r.length, buf.data(), &got) ==
              odafs::ordma::Fault::kNone) {
            ++reads_;
          }
        }
      });
    }
  }
  ~RingFlood() { stop(); }
  void stop() {
    done_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  uint64_t reads() const { return reads_.load(); }

 private:
  std::unique_ptr<odafs::ordma::EngineClient> client_;
  std::vector<std::thread> threads_;
  std::atomic<bool> done_{false};
  std::atomic<uint64_t> reads_{0};
};

// An honest client reading random blocks one-sided (no client cache) for `ms`; every byte
// checked. Returns the latencies in microseconds, sorted.
struct HonestFigures {
  std::vector<double> us;
  uint64_t wrong = 0;
  uint64_t one_sided = 0;
  double quantile(double q) const {
    return us.empty() ? 1e9 : us[std::min(us.size() - 1, static_cast<size_t>(q * us.size()))];
  }
  double worst() const { return us.empty() ? 1e9 : us.back(); }
};

HonestFigures honest_reads(Client& fs, const std::string& data, int ms) {
  HonestFigures fig;
  File f = fs.open("data");
  std::string buf(kBlock, '\0');
  // Once through the file: the reads that fill the client's directory with references.
  for (uint64_t off = 0; off < data.size(); off += 1 << 20) {
    std::string chunk(1 << 20, '\0');
    REQUIRE(f.pread(chunk.data(), chunk.size(), off) == chunk.size());
  }
  uint64_t before = fs.stats().ordma_reads.load();
  std::mt19937 rng(7);
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < end) {
    uint64_t off = uint64_t{rng() % (data.size() / kBlock)} * kBlock;
    auto t0 = Clock::now();
    size_t n = f.pread(buf.data(), buf.size(), off);
    fig.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (n != buf.size() || std::memcmp(buf.data(), data.data() + off, n) != 0) ++fig.wrong;
  }
  fig.one_sided = fs.stats().ordma_reads.load() - before;
  std::sort(fig.us.begin(), fig.us.end());
  return fig;
}

std::unique_ptr<Client> honest_client(const ServerProcess& server, bool rings) {
  odafs::MountOptions o;
  o.cache_blocks = 0;  // every read goes to the server: one-sided with a reference
  o.same_host_shortcut = rings;
  o.timeout_ms = 30000;
  return Client::mount(server.url(), o);
}

// The bounds an honest one-sided read must meet while the engine is flooded. With a fair
// share a read waits about one turn of the busy connections (128 KiB of copying each):
// measured p99 0.4-11 ms on a loaded two-core machine, where CPU contention with the flood's
// own threads is most of it. Without one, it waited for whole floods: p99 17-43 ms, worst
// up to 470 ms (docs/RELIABILITY.md).
const double kP99BoundMs = kSanitized ? 200 : 25;
const double kWorstBoundMs = kSanitized ? 2000 : 500;

void report(const char* what, const HonestFigures& alone, const HonestFigures& flooded,
            uint64_t flood_reads) {
  MESSAGE(std::string(what) << ": honest one-sided read alone p50 " << alone.quantile(0.5)
                            << " us, p99 " << alone.quantile(0.99) << " us; under the flood "
                            << flooded.us.size() << " reads, p50 " << flooded.quantile(0.5)
                            << " us, p99 " << flooded.quantile(0.99) << " us, worst "
                            << flooded.worst() / 1000 << " ms; flood " << flood_reads << " reads");
}

}  // namespace

TEST_CASE("starvation: engine TCP connections flooding READ frames") {
  TempDir dir;
  std::string data = pattern(kFileBytes, 41);
  write_local(dir / "data", data);
  ServerProcess server(dir.path(), {"--cache-mb", "64"});
  REQUIRE(server.engine_port() != 0);
  for (bool rings : {true, false}) {
    CAPTURE(rings);
    auto fs = honest_client(server, rings);
    HonestFigures alone = honest_reads(*fs, data, 300);
    HostileMount h(server.port(), "data");
    h.get_refs(kFileBytes);
    std::vector<int> fds;
    for (int i = 0; i < 4; ++i) fds.push_back(h.engine_connection(server.engine_port()));
    TcpFlood flood(fds, h.refs, 4096);
    // Under way: a connection's whole depth answered.
    REQUIRE(eventually([&] { return flood.responses() >= 4096; }, 10));
    HonestFigures flooded = honest_reads(*fs, data, kSanitized ? 3000 : 1500);
    flood.stop();
    uint64_t flood_reads = flood.responses();
    uint64_t faults = 0;
    for (auto& [k, v] : fs->server_stats()) {
      if (k.rfind("engine.fault.", 0) == 0) faults += v;
    }
    CHECK(faults == 0);  // every flood response was a whole block
    report(rings ? "TCP flood, honest ring" : "TCP flood, honest TCP", alone, flooded, flood_reads);
    CHECK(flooded.wrong == 0);
    CHECK(flooded.us.size() > 20);
    CHECK(flooded.one_sided >= flooded.us.size() / 2);  // the engine served them
    CHECK(flood_reads > 10000);                         // while it was flooded
    CHECK(flooded.quantile(0.99) / 1000 < kP99BoundMs);
    CHECK(flooded.worst() / 1000 < kWorstBoundMs);
  }
}

TEST_CASE("starvation: threads hammering a local ring") {
  TempDir dir;
  std::string data = pattern(kFileBytes, 42);
  write_local(dir / "data", data);
  ServerProcess server(dir.path(), {"--cache-mb", "64"});
  for (bool rings : {true, false}) {
    CAPTURE(rings);
    auto fs = honest_client(server, rings);
    HonestFigures alone = honest_reads(*fs, data, 300);
    HostileMount h(server.port(), "data");
    h.get_refs(kFileBytes);
    RingFlood flood(server, h, 8);
    REQUIRE(eventually([&] { return flood.reads() >= 100; }, 10));  // under way
    HonestFigures flooded = honest_reads(*fs, data, kSanitized ? 3000 : 1500);
    flood.stop();
    report(rings ? "ring flood, honest ring" : "ring flood, honest TCP", alone, flooded,
           flood.reads());
    CHECK(flooded.wrong == 0);
    CHECK(flooded.us.size() > 20);
    CHECK(flooded.one_sided >= flooded.us.size() / 2);
    CHECK(flood.reads() > 1000);
    CHECK(flooded.quantile(0.99) / 1000 < kP99BoundMs);
    CHECK(flooded.worst() / 1000 < kWorstBoundMs);
  }
}

namespace {

// A raw RPC call's connection, and the bytes of its reply as they come.
struct RawCall {
  int fd = -1;
  std::string in;

  // The status of the first reply's results (the word after the accepted reply header)
  // once it has come whole, else -1. Takes what has arrived; never waits.
  int status() {
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
      in.append(buf, static_cast<size_t>(n));
    if (in.size() < 4) return -1;
    const odafs::rpc::RecordMark mark = odafs::rpc::read_record_mark(in.data());
    if (in.size() < 4 + mark.length || mark.length < 28) return -1;
    return static_cast<int>(odafs::test::be32(in.data() + 4 + 24));
  }
};

}  // namespace

TEST_CASE("starvation: direct writes whose data never comes hold neither the server nor others") {
  TempDir dir;
  std::string data = pattern(kFileBytes, 43);
  write_local(dir / "data", data);
  write_local(dir / "target", std::string(1 << 20, 'a'));
  // Three direct writes may wait on their clients; their loops go on without them.
  ServerProcess server(dir.path(), {"--threads", "4", "--max-direct-writes", "3"});
  HostileMount h(server.port(), "target");
  int engine_fd = h.engine_connection(server.engine_port());  // gets the GETs, never answers
  // Six WRITE_DIRECTs on six connections: three wait for their data (the cap), three are
  // refused at once (NOTSUPP: the client would write by RPC).
  std::vector<RawCall> calls;
  for (uint32_t i = 0; i < 6; ++i) {
    int fd = odafs::test::connect_from("127.0.0.1", server.port());
    REQUIRE(fd >= 0);
    write_direct_args wa{};
    std::memcpy(wa.fh, h.file.data(), h.file.size());
    wa.offset = 0;
    wa.stable = ODAFS_FILE_SYNC;
    wa.count = 64 * 1024;
    wa.session = h.session.id;
    wa.buffer = 1;
    wa.tag = 100 + i;
    std::string rec = odafs::test::rpc_call_record(i + 1, ODAFSPROC_WRITE_DIRECT,
                                                   to_xdrproc(xdr_write_direct_args), &wa);
    REQUIRE(send(fd, rec.data(), rec.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(rec.size()));
    calls.push_back({fd, {}});
  }
  // Three refusals: the server refuses only while the cap is taken, so by then the other
  // three hold it, their pulls waiting for data that never comes.
  auto refused = [&] {
    return std::count_if(calls.begin(), calls.end(),
                         [](RawCall& c) { return c.status() == ODAFS_ERR_NOTSUPP; });
  };
  CHECK(eventually([&] { return refused() == 3; }));
  std::vector<RawCall> waiting;
  for (RawCall& c : calls) {
    if (c.status() == ODAFS_ERR_NOTSUPP) {
      close(c.fd);
    } else {
      CHECK(c.status() == -1);  // no answer: its pull waits
      waiting.push_back(c);
    }
  }
  CHECK(waiting.size() == 3);

  // Meanwhile an honest client reads by RPC, and writes with direct writes (refused while
  // the cap is taken, so they go by RPC): none of it waits for the stuck pulls.
  odafs::MountOptions o;
  o.read_mode = odafs::ReadMode::kPrePosted;
  o.cache_blocks = 0;
  o.direct_writes = true;
  o.timeout_ms = 30000;
  auto fs = Client::mount(server.url(), o);
  File f = fs->open("data", O_RDWR);
  std::string buf(64 * 1024, '\0');
  double worst_ms = 0;
  auto end = Clock::now() + std::chrono::milliseconds(kSanitized ? 2000 : 1000);
  size_t reads = 0;
  while (Clock::now() < end) {
    uint64_t off = (reads * 37 * 4096) % (kFileBytes - buf.size());
    auto t0 = Clock::now();
    REQUIRE(f.pread(buf.data(), buf.size(), off) == buf.size());
    worst_ms =
        std::max(worst_ms, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    CHECK(std::memcmp(buf.data(), data.data() + off, buf.size()) == 0);
    ++reads;
  }
  std::string mine = pattern(256 * 1024, 44);
  auto t0 = Clock::now();
  for (size_t off = 0; off < mine.size(); off += 64 * 1024) {
    REQUIRE(f.pwrite(mine.data() + off, 64 * 1024, off) == 64 * 1024);
  }
  double write_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  f.fsync();
  MESSAGE("stuck direct writes: honest RPC reads "
          << reads << ", worst " << worst_ms << " ms; 256 KiB of direct writes in " << write_ms
          << " ms");
  CHECK(worst_ms < (kSanitized ? 2000 : 500));
  CHECK(write_ms < (kSanitized ? 5000 : 2000));
  CHECK(odafs::test::read_local(dir / "data").compare(0, mine.size(), mine) == 0);
  CHECK(odafs::test::stat_of(*fs, "direct_writes.refused_busy") >= 3);

  // The hostile client goes away: its pulls fail at once (NOTSUPP: nothing written), not at
  // their 10 s timeout, and the threads they held serve again.
  t0 = Clock::now();
  close(engine_fd);
  for (RawCall& c : waiting) {
    CHECK(eventually([&] { return c.status() != -1; }));
    CHECK(c.status() == ODAFS_ERR_NOTSUPP);
    close(c.fd);
  }
  double freed_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  MESSAGE("stuck direct writes: answered " << freed_ms
                                           << " ms after their client's engine "
                                              "connection closed");
  CHECK(freed_ms < 3000);
  CHECK(odafs::test::read_local(dir / "target") == std::string(1 << 20, 'a'));
}
