// The soft one-sided engine, in process: real TCP on 127.0.0.1, real engine threads,
// exported memory of our own.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "ordma/engine.h"
#include "ordma/wire.h"

using namespace odafs::ordma;

namespace {

constexpr size_t kSegBytes = 4096;
constexpr size_t kSegments = 16;

// One server side: memory, export table, authorities and a running soft engine.
struct Stack {
  std::vector<std::byte> memory = std::vector<std::byte>(kSegBytes * kSegments);
  ExportTable table{kSegments};
  CapabilityAuthority caps;
  SessionAuthority sessions;
  std::unique_ptr<Engine> engine;

  explicit Stack(int threads = 2) {
    for (size_t s = 0; s < kSegments; ++s) {
      std::memset(memory.data() + s * kSegBytes, static_cast<int>('A' + s), kSegBytes);
      table.export_segment(static_cast<uint32_t>(s));
    }
    SoftEngineOptions o;
    o.listen = {"127.0.0.1", 0};
    o.threads = threads;
    engine = make_soft_engine(o, &table, &caps, &sessions,
                              ExportedMemory{memory.data(), kSegBytes, kSegments});
    engine->start();
  }
  odafs::net::Endpoint where() const { return odafs::net::parse_endpoint(engine->endpoint()); }
  Reference ref(uint32_t seg, const Session& s, uint32_t length = kSegBytes) const {
    Reference r;
    r.segment = seg;
    r.generation = seg < kSegments ? table.generation(seg) : 1;
    r.offset = 0;
    r.length = length;
    r.rights = kRightRead;
    r.session = s.id;
    caps.seal(r);
    return r;
  }
  uint64_t faults(Fault f) const { return engine->stats().faults[static_cast<size_t>(f)].load(); }
};

int raw_connect(const odafs::net::Endpoint& e) { return odafs::net::connect_tcp(e); }

}  // namespace

TEST_CASE("an authenticated read returns the segment's bytes") {
  Stack st;
  Session s = st.sessions.issue();
  auto client = connect_soft_engine(st.where(), s);
  std::vector<char> buf(kSegBytes);
  uint32_t got = 0;
  CHECK(client->read(st.ref(3, s), 0, kSegBytes, buf.data(), &got) == Fault::kNone);
  CHECK(got == kSegBytes);
  CHECK(std::all_of(buf.begin(), buf.end(), [](char c) { return c == 'D'; }));
  CHECK(client->read(st.ref(5, s), 100, 50, buf.data(), &got) == Fault::kNone);
  CHECK(got == 50);
  CHECK(buf[0] == 'F');
  CHECK(st.engine->stats().reads.load() == 2);
}

TEST_CASE("every fault reason, and a fault never returns data") {
  Stack st;
  Session s = st.sessions.issue();
  Session other = st.sessions.issue();
  auto client = connect_soft_engine(st.where(), s);
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
}

TEST_CASE("references from before a server restart fault") {
  Reference old;
  {
    Stack before;
    Session s = before.sessions.issue();
    old = before.ref(1, s);
  }
  Stack after;
  Session s = after.sessions.issue();
  auto client = connect_soft_engine(after.where(), s);
  old.session = s.id;  // even re-addressed to a valid session
  std::vector<char> buf(kSegBytes);
  uint32_t got;
  CHECK(client->read(old, 0, kSegBytes, buf.data(), &got) == Fault::kBadCapability);
}

TEST_CASE("a wrong session proof closes the connection; others keep working") {
  Stack st;
  Session s = st.sessions.issue();
  Session forged = s;
  forged.secret[0] ^= 1;
  CHECK_THROWS(connect_soft_engine(st.where(), forged));
  Session stranger;  // id 0, zero secret
  CHECK_THROWS(connect_soft_engine(st.where(), stranger));
  CHECK(st.engine->stats().bad_handshakes.load() == 2);
  auto client = connect_soft_engine(st.where(), s);
  std::vector<char> buf(kSegBytes);
  uint32_t got;
  CHECK(client->read(st.ref(0, s), 0, kSegBytes, buf.data(), &got) == Fault::kNone);
}

TEST_CASE("random and truncated frames never crash the engine nor leak data") {
  Stack st;
  Session s = st.sessions.issue();
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    int fd = raw_connect(st.where());
    unsigned char greeting[wire::kGreetingBytes];
    REQUIRE(odafs::net::read_full(fd, greeting, sizeof greeting));
    std::vector<unsigned char> junk(1 + rng() % 300);
    for (auto& b : junk) b = static_cast<unsigned char>(rng());
    if (round % 2 == 0) {  // authenticate properly, then send frames
      unsigned char hello[wire::kHelloBytes];
      wire::encode_hello(s.id, prove_session(s.secret, wire::greeting_nonce(greeting)), hello);
      REQUIRE(send(fd, hello, sizeof hello, MSG_NOSIGNAL) == sizeof hello);
      if (round % 4 == 0) {  // well-typed READ frames with random fields
        for (int k = 0; k < 5; ++k) {
          wire::ReadRequest r;
          r.tag = static_cast<uint32_t>(k);
          r.ref.segment = rng() % 20;
          r.ref.generation = rng() % 3;
          r.ref.length = rng() % 8192;
          r.ref.rights = 1;
          r.ref.session = s.id;
          for (auto& b : r.ref.capability) b = static_cast<unsigned char>(rng());
          r.length = rng() % 4096;
          unsigned char frame[wire::kReadRequestBytes];
          wire::encode(r, frame);
          REQUIRE(send(fd, frame, sizeof frame, MSG_NOSIGNAL) == sizeof frame);
        }
        unsigned char welcome[wire::kWelcomeBytes];
        REQUIRE(odafs::net::read_full(fd, welcome, sizeof welcome));
        for (int k = 0; k < 5; ++k) {
          unsigned char head[wire::kResponseBytes];
          REQUIRE(odafs::net::read_full(fd, head, sizeof head));
          wire::Response resp;
          wire::decode(head, &resp);
          CHECK(resp.fault != Fault::kNone);  // random capabilities never validate
          CHECK(resp.length == 0);
        }
      }
    }
    [[maybe_unused]] ssize_t n = send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    close(fd);
  }
  auto client = connect_soft_engine(st.where(), s);
  std::vector<char> buf(kSegBytes);
  uint32_t got;
  CHECK(client->read(st.ref(7, s), 0, kSegBytes, buf.data(), &got) == Fault::kNone);
  CHECK(buf[0] == 'H');
  CHECK(st.engine->stats().reads.load() == 1);
  CHECK(st.engine->stats().bad_handshakes.load() > 0);
}

TEST_CASE("a block rewritten under lock is read whole or faults, never torn") {
  Stack st(2);
  Session s = st.sessions.issue();
  auto shared = connect_soft_engine(st.where(), s);
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
  auto own = connect_soft_engine(st.where(), s);
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
  Stack st(1);
  Session s = st.sessions.issue();
  auto client = connect_soft_engine(st.where(), s);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<char> buf(kSegBytes);
      Reference r = st.ref(t, s);
      for (int i = 0; i < 300; ++i) {
        uint32_t got = 0;
        if (client->read(r, 0, kSegBytes, buf.data(), &got) != Fault::kNone ||
            buf[kSegBytes - 1] != static_cast<char>('A' + t)) {
          ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
  CHECK(st.engine->stats().reads.load() == 8 * 300);
}

TEST_CASE("server-initiated writes land in registered buffers, and only there") {
  Stack st;
  Session s = st.sessions.issue();
  auto client = connect_soft_engine(st.where(), s);
  std::vector<char> buf(100, '.');
  uint32_t id = client->register_buffer(buf.data(), buf.size());
  std::string payload = "direct!";
  iovec part{payload.data(), payload.size()};
  uint32_t got = 0;
  // Before any connection of another session exists, pushing to it is refused.
  CHECK(st.engine->push(s.id + 1, id, 0, 1, &part, 1) == Fault::kWrongSession);
  Fault f = client->direct(
      [&](uint32_t tag) { REQUIRE(st.engine->push(s.id, id, 10, tag, &part, 1) == Fault::kNone); },
      &got);
  CHECK(f == Fault::kNone);
  CHECK(got == payload.size());
  CHECK(std::string(buf.data() + 10, payload.size()) == payload);
  CHECK(buf[9] == '.');
  CHECK(buf[17] == '.');
  // Outside the buffer: refused, nothing written.
  f = client->direct(
      [&](uint32_t tag) { REQUIRE(st.engine->push(s.id, id, 98, tag, &part, 1) == Fault::kNone); },
      &got);
  CHECK(f == Fault::kOutOfBounds);
  CHECK(buf[98] == '.');
  f = client->direct(
      [&](uint32_t tag) {
        REQUIRE(st.engine->push(s.id, id + 7, 0, tag, &part, 1) == Fault::kNone);
      },
      &got);
  CHECK(f == Fault::kOutOfBounds);
  // An unregistered buffer takes nothing either.
  client->unregister_buffer(id);
  f = client->direct(
      [&](uint32_t tag) { REQUIRE(st.engine->push(s.id, id, 0, tag, &part, 1) == Fault::kNone); },
      &got);
  CHECK(f == Fault::kOutOfBounds);
  // The connection still serves one-sided reads.
  std::vector<char> seg(kSegBytes);
  CHECK(client->read(st.ref(1, s), 0, kSegBytes, seg.data(), &got) == Fault::kNone);
  CHECK(seg[0] == 'B');
}

TEST_CASE("server-initiated reads take bytes from registered buffers, and only from them") {
  Stack st;
  Session s = st.sessions.issue();
  auto client = connect_soft_engine(st.where(), s);
  std::string source = "0123456789abcdefghij";
  uint32_t id = client->register_buffer(source.data(), source.size());
  auto pull_during_direct = [&](uint32_t buffer, uint32_t offset, uint32_t len,
                                std::vector<char>* out) {
    Fault pulled = Fault::kTransport;
    std::thread server_side;
    uint32_t got = 0;
    Fault f = client->direct(
        [&](uint32_t tag) {
          server_side = std::thread(
              [&, tag] { pulled = st.engine->pull(s.id, buffer, offset, tag, len, 5000, out); });
        },
        &got);
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
