// The soft one-sided engine in process, as honest clients use it: real TCP on 127.0.0.1
// and local rings, real engine threads, exported memory of our own. Reads and every fault
// reason (forged, stale and other-session references), torn-free reads under concurrent
// rewrites, shared connections, engine stop. Server-initiated transfers, and the cases every
// backend shares, are in test_engine_backends.cc. Clients that break
// the protocol are in test_engine_hostile.cc.
#include <doctest/doctest.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "ordma/engine_impl/soft/local_ring.h"
#include "ordma/engine_impl/soft/soft_engine.h"
#include "tests/support/engine_stack.h"

using namespace odafs::ordma;
using odafs::test::EngineStack;
using odafs::test::kSegBytes;
using odafs::test::kSegments;

namespace {

// Most cases run twice: reads over the engine's local ring, and over TCP. Each SUBCASE
// reruns its TEST_CASE from the top, so every run builds its own Stack.
EngineClientOptions transports() {
  EngineClientOptions o;
  SUBCASE("over the local ring") { o.same_host_shortcut = true; }
  SUBCASE("over TCP") { o.same_host_shortcut = false; }
  return o;
}
const char* expected_transport(const EngineClientOptions& o) {
  return o.same_host_shortcut ? "ring" : "tcp";
}

}  // namespace

TEST_CASE("an authenticated read returns the segment's bytes") {
  EngineStack st;
  Session s = st.sessions.issue();
  EngineClientOptions via = transports();
  auto client = connect_soft_engine(st.where(), s, via);
  CHECK(std::string(client->transport()) == expected_transport(via));
  std::vector<char> buf(kSegBytes);
  uint32_t got = 0;
  CHECK(client->read(st.ref(3, s), 0, kSegBytes, buf.data(), &got) == Fault::kNone);
  CHECK(got == kSegBytes);
  CHECK(std::all_of(buf.begin(), buf.end(), [](char c) { return c == 'D'; }));
  CHECK(client->read(st.ref(5, s), 100, 50, buf.data(), &got) == Fault::kNone);
  CHECK(got == 50);
  CHECK(buf[0] == 'F');
  CHECK(st.engine->stats().reads.load() == 2);
  CHECK(odafs::test::backend_counter(*st.engine, "rings") == (via.same_host_shortcut ? 1 : 0));
}

TEST_CASE("every fault reason, and a fault never returns data") {
  EngineStack st;
  Session s = st.sessions.issue();
  Session other = st.sessions.issue();
  EngineClientOptions via = transports();
  auto client = connect_soft_engine(st.where(), s, via);
  std::vector<char> buf(kSegBytes, '?');
  uint32_t got = 0;
  auto attempt = [&](const Reference& r, uint32_t off = 0, uint32_t len = kSegBytes) {
    std::fill(buf.begin(), buf.end(), '?');
    Fault f = client->read(r, off, len, buf.data(), &got);
    if (f != Fault::kNone) {
      CHECK(std::all_of(buf.begin(), buf.end(), [](char c) { return c == '?'; }));
    }
    return f;
  };
  Reference good = st.ref(2, s);
  Reference forged = good;
  forged.capability[7] ^= 0x10;
  CHECK(attempt(forged) == Fault::kBadCapability);
  Reference altered = good;
  altered.segment = 4;  // point a valid capability elsewhere
  CHECK(attempt(altered) == Fault::kBadCapability);
  Reference widened = good;
  widened.length = 2 * kSegBytes;
  CHECK(attempt(widened, 0, kSegBytes) == Fault::kBadCapability);
  Reference truncated = good;
  std::fill(truncated.capability.begin() + 8, truncated.capability.end(), 0);
  CHECK(attempt(truncated) == Fault::kBadCapability);
  CHECK(attempt(st.ref(2, other)) == Fault::kWrongSession);
  CHECK(attempt(good, 4000, 200) == Fault::kOutOfBounds);
  CHECK(attempt(st.ref(2, s, 1000), 0, 1001) == Fault::kOutOfBounds);
  CHECK(attempt(st.ref(99, s)) == Fault::kUnknownSegment);
  st.table.lock(2);
  CHECK(attempt(good) == Fault::kLocked);
  st.table.unlock(2);
  CHECK(attempt(good) == Fault::kNone);
  st.table.revoke(2);
  CHECK(attempt(good) == Fault::kStaleGeneration);  // replayed after revocation
  CHECK(attempt(st.ref(2, s)) == Fault::kRevoked);  // current generation, not exported
  st.table.export_segment(2);                       // reused for another block
  CHECK(attempt(good) == Fault::kStaleGeneration);
  CHECK(attempt(st.ref(2, s)) == Fault::kNone);
  CHECK(st.faults(Fault::kBadCapability) == 4);
  CHECK(st.faults(Fault::kStaleGeneration) == 2);
  CHECK_FALSE(client->broken());
  CHECK(std::string(client->transport()) == expected_transport(via));  // faults break nothing
}

TEST_CASE("references from before a server restart fault") {
  Reference old;
  {
    EngineStack before;
    Session s = before.sessions.issue();
    old = before.ref(1, s);
  }
  EngineStack after;
  Session s = after.sessions.issue();
  auto client = connect_soft_engine(after.where(), s);
  old.session = s.id;  // even re-addressed to a valid session
  std::vector<char> buf(kSegBytes);
  uint32_t got;
  CHECK(client->read(old, 0, kSegBytes, buf.data(), &got) == Fault::kBadCapability);
}

TEST_CASE("a block rewritten under lock is read whole or faults, never torn") {
  EngineStack st(2);
  Session s = st.sessions.issue();
  EngineClientOptions via = transports();
  auto shared = connect_soft_engine(st.where(), s, via);
  std::atomic<bool> stop{false};
  std::atomic<long> whole{0}, locked{0}, torn{0};
  Reference r = st.ref(9, s);
  auto reader = [&](EngineClient* c) {
    std::vector<unsigned char> buf(kSegBytes);
    uint32_t got;
    while (!stop) {
      Fault f = c->read(r, 0, kSegBytes, buf.data(), &got);
      if (f == Fault::kLocked) {
        ++locked;
        continue;
      }
      REQUIRE(f == Fault::kNone);
      bool uniform =
          std::all_of(buf.begin(), buf.end(), [&](unsigned char b) { return b == buf[0]; });
      if (uniform)
        ++whole;
      else
        ++torn;
    }
  };
  auto own = connect_soft_engine(st.where(), s, via);
  std::thread t1(reader, shared.get()), t2(reader, shared.get()), t3(reader, own.get());
  std::byte* seg = st.memory.data() + 9 * kSegBytes;
  // Keep rewriting until the readers have also seen unlocked stretches (bounded in time).
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int v = 0; (v < 3000 || whole < 100) && std::chrono::steady_clock::now() < until; ++v) {
    if (v % 64 == 0) std::this_thread::yield();
    st.table.lock(9);
    for (size_t k = 0; k < kSegBytes; ++k) {
      reinterpret_cast<volatile unsigned char*>(seg)[k] = static_cast<unsigned char>(v);
    }
    st.table.unlock(9);
  }
  stop = true;
  t1.join();
  t2.join();
  t3.join();
  CHECK(torn == 0);
  CHECK(whole > 0);
}

TEST_CASE("many threads share one engine connection; responses find their owners") {
  EngineStack st(1);
  Session s = st.sessions.issue();
  EngineClientOptions via = transports();
  auto client = connect_soft_engine(st.where(), s, via);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  // More threads than a ring has slots: the overflow goes over TCP, still correct.
  constexpr uint32_t kThreads = ring::kSlots + 16;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<char> buf(kSegBytes);
      Reference r = st.ref(t % kSegments, s);
      for (int i = 0; i < 100; ++i) {
        uint32_t got = 0;
        if (client->read(r, 0, kSegBytes, buf.data(), &got) != Fault::kNone ||
            buf[kSegBytes - 1] != static_cast<char>('A' + t % kSegments)) {
          ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
  CHECK(st.engine->stats().reads.load() == kThreads * 100);
}

TEST_CASE("threads sharing a TCP connection with batches in flight never sleep on a lost turn") {
  // Each thread has a batch of reads pending and sleeps on one of them while another thread
  // reads the socket for everyone. When that reader is done it hands the socket to a read
  // still pending. If the hand-over woke a read its thread was not sleeping on, no one read
  // the socket and every sleeper waited out its timeout (the mount's 1 MiB read-ahead,
  // 128 blocks in flight, stalled 60 s a time that way). A timeout here fails the
  // connection, so every read answered and the connection whole says no turn was lost.
  EngineStack st(1);
  Session s = st.sessions.issue();
  EngineClientOptions via;
  via.same_host_shortcut = false;
  via.timeout_ms = 20000;
  auto client = connect_soft_engine(st.where(), s, via);
  constexpr int kThreads = 4;
  constexpr int kBatches = 300;
  std::atomic<int> wrong{0};
  std::atomic<int64_t> slowest_ms{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::vector<char>> dst(kSegments, std::vector<char>(kSegBytes));
      std::vector<ReadOp> ops(kSegments);
      for (int b = 0; b < kBatches && wrong == 0; ++b) {
        for (uint32_t i = 0; i < kSegments; ++i) {
          ops[i] = ReadOp{st.ref((i + t) % kSegments, s), 0, kSegBytes, dst[i].data()};
        }
        auto t0 = std::chrono::steady_clock::now();
        client->read_many(ops);
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
        int64_t seen = slowest_ms.load();
        while (ms > seen && !slowest_ms.compare_exchange_weak(seen, ms)) {
        }
        for (uint32_t i = 0; i < kSegments; ++i) {
          if (ops[i].fault != Fault::kNone ||
              dst[i][kSegBytes - 1] != static_cast<char>('A' + (i + t) % kSegments)) {
            ++wrong;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  INFO("slowest batch: " << slowest_ms.load() << " ms");
  CHECK(wrong == 0);
  CHECK_FALSE(client->broken());
  CHECK(slowest_ms.load() < via.timeout_ms / 2);
}

TEST_CASE("server-initiated reads take bytes from registered buffers, and only from them") {
  EngineStack st;
  Session s = st.sessions.issue();
  auto client = connect_soft_engine(st.where(), s);
  std::string source = "0123456789abcdefghij";
  uint32_t id = client->register_buffer(source.data(), source.size());
  auto pull_during_direct = [&](uint32_t buffer, uint32_t offset, uint32_t len,
                                std::vector<char>* out) {
    Fault pulled = Fault::kTransport;
    std::thread server_side;
    uint32_t got = 0;
    Fault f = client
                  ->direct(
                      [&](uint32_t tag) {
                        server_side = std::thread([&, tag] {
                          pulled = st.engine->pull(s.id, buffer, offset, tag, len, 5000, out);
                        });
                        return odafs::Status();
                      },
                      &got)
                  .value();
    server_side.join();
    CHECK(f == pulled);
    return pulled;
  };
  std::vector<char> out;
  CHECK(pull_during_direct(id, 5, 10, &out) == Fault::kNone);
  CHECK(std::string(out.begin(), out.end()) == "56789abcde");
  CHECK(pull_during_direct(id, 15, 10, &out) == Fault::kOutOfBounds);    // past the end
  CHECK(pull_during_direct(id + 3, 0, 1, &out) == Fault::kOutOfBounds);  // no such buffer
  // Nobody waiting on the client side: the pull times out instead of hanging.
  CHECK(st.engine->pull(s.id, id, 0, 424242, 4, 200, &out) == Fault::kTransport);
  CHECK(st.engine->pull(s.id + 1, id, 0, 1, 4, 200, &out) == Fault::kWrongSession);
  std::vector<char> seg(kSegBytes);
  uint32_t got = 0;
  CHECK(client->read(st.ref(2, s), 0, kSegBytes, seg.data(), &got) == Fault::kNone);
}

TEST_CASE("when the engine stops, ring reads fail with kTransport instead of hanging") {
  EngineStack st;
  Session s = st.sessions.issue();
  auto client = connect_soft_engine(st.where(), s);
  REQUIRE(std::string(client->transport()) == "ring");
  std::vector<char> buf(kSegBytes);
  uint32_t got = 0;
  CHECK(client->read(st.ref(0, s), 0, kSegBytes, buf.data(), &got) == Fault::kNone);
  st.engine->stop();
  auto t0 = std::chrono::steady_clock::now();
  CHECK(client->read(st.ref(0, s), 0, kSegBytes, buf.data(), &got) == Fault::kTransport);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(client->broken());
  CHECK(client->read(st.ref(0, s), 0, kSegBytes, buf.data(), &got) == Fault::kTransport);
}

TEST_CASE("the soft engine's own settings: read by name, anything else refused naming it") {
  std::vector<std::byte> memory(kSegBytes * 2);
  const ExportedMemory exported{memory.data(), kSegBytes, 2};
  EngineOptions o;
  o.listen = {"127.0.0.1", 0};
  o.backend = {{"local_rings", "0"}, {"max_rings", "65536"}};
  SoftSettings s = soft_settings(o);
  CHECK(!s.local_rings);
  CHECK(s.max_rings == 65536);
  for (const auto& bad :
       std::vector<std::pair<std::string, std::string>>{{"max_rings", "0"},
                                                        {"max_rings", "65537"},
                                                        {"max_rings", "x"},
                                                        {"local_rings", "2"},
                                                        {"local_rings", ""},
                                                        {"rdma_device", "mlx5_0"}}) {
    CAPTURE(bad.first + "=" + bad.second);
    o.backend = {bad};
    CHECK_THROWS_WITH_AS(make_soft_engine(o, exported),
                         doctest::Contains((bad.first + "=" + bad.second).c_str()),
                         std::invalid_argument);
  }
  // Without rings offered, a client that would use one reads over TCP.
  o.backend = {{"local_rings", "0"}};
  auto engine = make_soft_engine(o, exported);
  engine->start();
  Session session = engine->sessions().issue();
  EngineClientOptions want_ring;
  want_ring.same_host_shortcut = true;
  auto client =
      connect_soft_engine(odafs::net::parse_endpoint(engine->endpoint()), session, want_ring);
  CHECK(std::string(client->transport()) == "tcp");
  CHECK(odafs::test::backend_counter(*engine, "rings") == 0);
  client.reset();
  engine->stop();
}
