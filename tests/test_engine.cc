// The soft one-sided engine, in process: real TCP on 127.0.0.1, real engine threads,
// exported memory of our own.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "ordma/engine_impl/soft/handshake.h"
#include "ordma/engine_impl/soft/local_ring.h"
#include "ordma/engine_impl/soft/soft_engine.h"
#include "ordma/engine_impl/soft/wire.h"
#include "tests/support/server_process.h"

using namespace odafs::ordma;

namespace {

constexpr size_t kSegBytes = 4096;
constexpr size_t kSegments = 16;

// One server side: memory, export table, authorities and a running soft engine.
struct Stack {
  std::vector<std::byte> memory = std::vector<std::byte>(kSegBytes * kSegments);
  std::unique_ptr<SoftEngine> engine;
  // The engine's own state, which these tests age, lock and forge against.
  ExportTable& table;
  const CapabilityAuthority& caps;
  const SessionAuthority& sessions;

  explicit Stack(int threads = 2, size_t max_rings = 256)
      : engine(make(memory, threads, max_rings)),
        table(engine->table()),
        caps(engine->capabilities()),
        sessions(engine->sessions()) {
    for (size_t s = 0; s < kSegments; ++s) {
      std::memset(memory.data() + s * kSegBytes, static_cast<int>('A' + s), kSegBytes);
      table.export_segment(static_cast<uint32_t>(s));
    }
    engine->start();
  }
  static std::unique_ptr<SoftEngine> make(std::vector<std::byte>& memory, int threads,
                                          size_t max_rings) {
    EngineOptions o;
    o.listen = {"127.0.0.1", 0};
    o.threads = threads;
    o.max_rings = max_rings;
    return make_soft_engine(o, ExportedMemory{memory.data(), kSegBytes, kSegments});
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

// Most cases run twice: reads over the engine's local ring, and over TCP. Each SUBCASE
// reruns its TEST_CASE from the top, so every run builds its own Stack.
EngineClientOptions transports() {
  EngineClientOptions o;
  SUBCASE("over the local ring") { o.local_rings = true; }
  SUBCASE("over TCP") { o.local_rings = false; }
  return o;
}
const char* expected_transport(const EngineClientOptions& o) {
  return o.local_rings ? "ring" : "tcp";
}

// The ring token the engine offers `s` in its TCP WELCOME (it must offer one).
ring::Token offered_token(const Stack& st, const Session& s) {
  int fd = raw_connect(st.where());
  answer_greeting(fd, s);
  unsigned char welcome[wire::kWelcomeBytes];
  REQUIRE(odafs::net::read_full(fd, welcome, sizeof welcome));
  close(fd);
  ring::Token token{};
  REQUIRE(wire::welcome_offers_rings(welcome, token.data()));
  return token;
}

// A ring mapped by hand, as a client that ignores the protocol would.
struct RawRing {
  ring::Setup setup;
  void* base = nullptr;
  size_t bytes = 0;
  RawRing(const Stack& st, const Session& s) : setup(ring::set_up(offered_token(st, s), s)) {
    struct stat sb;
    REQUIRE(fstat(setup.memfd, &sb) == 0);
    bytes = static_cast<size_t>(sb.st_size);
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, setup.memfd, 0);
    REQUIRE(base != MAP_FAILED);
  }
  ~RawRing() { munmap(base, bytes); }
  ring::Slot& slot(uint32_t i) const { return *ring::slot(base, i); }
  std::byte* data(uint32_t i) const { return ring::slot_data(base, kSegBytes, i); }
  void post(uint32_t i, const wire::ReadRequest& r) const {
    wire::encode(r, slot(i).request);
    slot(i).state.store(ring::kPosted);
    ring::header(base)->posted.fetch_or(uint64_t{1} << i);
    doorbell();
  }
  void doorbell() const {
    uint64_t one = 1;
    REQUIRE(write(setup.doorbell, &one, sizeof one) == sizeof one);
  }
  // Waits (up to 5 s) for slot i to be answered.
  bool done(uint32_t i) const {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (slot(i).state.load() != ring::kDone) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::yield();
    }
    return true;
  }
};

}  // namespace

TEST_CASE("an authenticated read returns the segment's bytes") {
  Stack st;
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
  CHECK(st.engine->stats().rings.load() == (via.local_rings ? 1 : 0));
}

TEST_CASE("every fault reason, and a fault never returns data") {
  Stack st;
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
    std::vector<unsigned char> junk(1 + rng() % 300);
    for (auto& b : junk) b = static_cast<unsigned char>(rng());
    if (round % 2 == 1) {  // junk straight after the greeting
      unsigned char greeting[wire::kGreetingBytes];
      REQUIRE(odafs::net::read_full(fd, greeting, sizeof greeting));
    } else {  // authenticate properly, then send frames
      answer_greeting(fd, s);
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
  Stack st(1);
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

// ---------------------------------------------------------------- local rings

TEST_CASE("a ring's setup socket wants the same session proof as TCP") {
  Stack st;
  Session s = st.sessions.issue();
  ring::Token token = offered_token(st, s);
  Session forged = s;
  forged.secret[3] ^= 0x40;
  CHECK_THROWS(ring::set_up(token, forged));
  CHECK(st.engine->stats().bad_handshakes.load() == 1);
  ring::Token wrong = token;
  wrong[0] ^= 1;
  CHECK_THROWS(ring::set_up(wrong, s));  // nobody listens there
  CHECK(st.engine->stats().rings.load() == 0);
  ring::Setup ok = ring::set_up(token, s);
  CHECK(ok.memfd >= 0);
  CHECK(ok.doorbell >= 0);
  CHECK(st.engine->stats().rings.load() == 1);
}

TEST_CASE("a client that scribbles over its ring harms only its own reads") {
  Stack st(1);  // one engine thread: the hostile ring and the honest client share it
  Session s = st.sessions.issue();
  Session other = st.sessions.issue();
  RawRing raw(st, s);
  auto honest = connect_soft_engine(st.where(), other);
  REQUIRE(std::string(honest->transport()) == "ring");
  auto honest_reads = [&] {
    std::vector<char> buf(kSegBytes);
    uint32_t got = 0;
    return honest->read(st.ref(6, other), 0, kSegBytes, buf.data(), &got) == Fault::kNone &&
           buf[0] == 'G' && buf[kSegBytes - 1] == 'G';
  };

  // The ring is sealed: the client can neither shrink it under the engine nor grow it.
  CHECK(odafs::test::failed_with(ftruncate(raw.setup.memfd, 0) == -1) == EPERM);
  CHECK(ftruncate(raw.setup.memfd, static_cast<off_t>(raw.bytes * 2)) == -1);

  // A proper request through the hand-made ring works (so what follows tests the engine's
  // checks, not a dead ring), and lands in its own slot only.
  std::memset(raw.data(0), '?', size_t{ring::kSlots} * kSegBytes);
  wire::ReadRequest good;
  good.ref = st.ref(4, s);
  good.length = kSegBytes;
  raw.post(5, good);
  REQUIRE(raw.done(5));
  CHECK(raw.slot(5).fault.load() == static_cast<uint32_t>(Fault::kNone));
  CHECK(raw.slot(5).length.load() == kSegBytes);
  CHECK(static_cast<char>(raw.data(5)[0]) == 'E');
  CHECK(static_cast<char>(raw.data(4)[kSegBytes - 1]) == '?');
  CHECK(static_cast<char>(raw.data(6)[0]) == '?');

  // Longer than a slot, even under a capability that allows it: refused, nothing copied.
  std::memset(raw.data(7), '?', kSegBytes);
  wire::ReadRequest too_long = good;
  too_long.ref = st.ref(4, s, 2 * kSegBytes);
  too_long.length = kSegBytes + 1;
  raw.post(7, too_long);
  REQUIRE(raw.done(7));
  CHECK(raw.slot(7).fault.load() == static_cast<uint32_t>(Fault::kOutOfBounds));
  CHECK(raw.slot(7).length.load() == 0);

  std::mt19937 rng(29);
  auto* bytes = static_cast<unsigned char*>(raw.base);
  for (int round = 0; round < 300; ++round) {
    std::memset(raw.data(0), '?', size_t{ring::kSlots} * kSegBytes);
    switch (round % 3) {
      case 0:  // garbage over the header and the slots, posted bits included
        for (size_t k = 0; k < ring::data_offset(); ++k) bytes[k] = static_cast<uint8_t>(rng());
        raw.doorbell();
        break;
      case 1: {  // well-formed READ frames with random fields in random slots
        for (uint32_t i = 0; i < ring::kSlots; ++i) raw.slot(i).state.store(ring::kFree);
        for (int k = 0; k < 8; ++k) {
          wire::ReadRequest r;
          r.ref.segment = rng() % 20;
          r.ref.generation = rng() % 3;
          r.ref.length = rng() % (3 * kSegBytes);
          r.ref.rights = kRightRead;
          r.ref.session = rng() % 2 ? s.id : other.id;
          for (auto& b : r.ref.capability) b = static_cast<unsigned char>(rng());
          r.offset = rng() % (2 * kSegBytes);
          r.length = rng() % 2 ? rng() : rng() % (2 * kSegBytes);
          raw.post(rng() % ring::kSlots, r);
        }
        break;
      }
      case 2:  // a real reference, posted in every slot at once (all answered)
        for (uint32_t i = 0; i < ring::kSlots; ++i) {
          raw.slot(i).state.store(ring::kFree);
          wire::encode(good, raw.slot(i).request);
          raw.slot(i).state.store(ring::kPosted);
        }
        ring::header(raw.base)->posted.store(~uint64_t{0});
        raw.doorbell();
        for (uint32_t i = 0; i < ring::kSlots; ++i) {
          REQUIRE(raw.done(i));
          CHECK(raw.slot(i).fault.load() == static_cast<uint32_t>(Fault::kNone));
          CHECK(static_cast<char>(raw.data(i)[kSegBytes - 1]) == 'E');
        }
        break;
    }
    if (round % 3 == 1) {  // random capabilities never validate: no byte leaves the engine
      for (uint32_t i = 0; i < ring::kSlots; ++i) {
        if (raw.slot(i).state.load() == ring::kPosted) REQUIRE(raw.done(i));
        if (raw.slot(i).state.load() == ring::kDone) {
          CHECK(raw.slot(i).fault.load() != static_cast<uint32_t>(Fault::kNone));
          CHECK(raw.slot(i).length.load() == 0);
        }
      }
      CHECK(std::all_of(raw.data(0), raw.data(0) + size_t{ring::kSlots} * kSegBytes,
                        [](std::byte b) { return static_cast<char>(b) == '?'; }));
    }
    if (round % 50 == 0) REQUIRE(honest_reads());
  }
  CHECK(honest_reads());
  CHECK(st.engine->stats().faults[static_cast<size_t>(Fault::kBadCapability)].load() > 0);
}

TEST_CASE(
    "rings are capped; past the cap clients read over TCP, and a dead client's ring is freed") {
  Stack st(2, /*max_rings=*/1);
  Session s = st.sessions.issue();
  std::vector<char> buf(kSegBytes);
  uint32_t got = 0;
  {
    RawRing first(st, s);
    wire::ReadRequest r;
    r.ref = st.ref(1, s);
    r.length = kSegBytes;
    first.post(0, r);  // and then dies with a request in flight
    REQUIRE(first.done(0));
    first.post(1, r);

    auto second = connect_soft_engine(st.where(), s);
    CHECK(std::string(second->transport()) == "tcp");
    CHECK(second->read(st.ref(2, s), 0, kSegBytes, buf.data(), &got) == Fault::kNone);
    CHECK(buf[0] == 'C');
  }
  // The engine notices the closed setup socket and frees the ring (asynchronously).
  std::unique_ptr<EngineClient> third;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    third = connect_soft_engine(st.where(), s);
  } while (std::string(third->transport()) != "ring" && std::chrono::steady_clock::now() < until);
  CHECK(std::string(third->transport()) == "ring");
  CHECK(third->read(st.ref(3, s), 0, kSegBytes, buf.data(), &got) == Fault::kNone);
  CHECK(buf[0] == 'D');
}

TEST_CASE("when the engine stops, ring reads fail with kTransport instead of hanging") {
  Stack st;
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
