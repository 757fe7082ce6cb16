// The soft one-sided engine in process against clients that break the protocol: wrong
// session proofs, random and truncated TCP frames, rings mapped by hand and scribbled over,
// rings past the cap and clients that die with requests in flight. The engine must keep
// serving honest clients and never hand out a byte a request was not entitled to. Honest
// clients are in test_engine.cc.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ordma/engine_impl/soft/handshake.h"
#include "ordma/engine_impl/soft/local_ring.h"
#include "ordma/engine_impl/soft/ring_server.h"
#include "ordma/engine_impl/soft/soft_engine.h"
#include "ordma/engine_impl/soft/wire.h"
#include "tests/support/engine_stack.h"
#include "tests/support/server_process.h"

using namespace odafs::ordma;
using odafs::test::EngineStack;
using odafs::test::kSegBytes;

namespace {

int raw_connect(const odafs::net::Endpoint& e) { return odafs::net::connect_tcp(e).value(); }

// The ring token the engine offers `s` in its TCP WELCOME (it must offer one).
ring::Token offered_token(const EngineStack& st, const Session& s) {
  int fd = raw_connect(st.where());
  answer_greeting(fd, s);
  unsigned char welcome[wire::kWelcomeBytes];
  REQUIRE(odafs::net::got_all(odafs::net::read_full(fd, welcome, sizeof welcome)));
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
  RawRing(const EngineStack& st, const Session& s) : setup(ring::set_up(offered_token(st, s), s)) {
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
    return odafs::test::eventually([&] { return slot(i).state.load() == ring::kDone; }, 5,
                                   std::chrono::microseconds(100));
  }
};

}  // namespace

TEST_CASE("a wrong session proof closes the connection; others keep working") {
  EngineStack st;
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
  EngineStack st;
  Session s = st.sessions.issue();
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    int fd = raw_connect(st.where());
    std::vector<unsigned char> junk(1 + rng() % 300);
    for (auto& b : junk) b = static_cast<unsigned char>(rng());
    if (round % 2 == 1) {  // junk straight after the greeting
      unsigned char greeting[wire::kGreetingBytes];
      REQUIRE(odafs::net::got_all(odafs::net::read_full(fd, greeting, sizeof greeting)));
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
        REQUIRE(odafs::net::got_all(odafs::net::read_full(fd, welcome, sizeof welcome)));
        for (int k = 0; k < 5; ++k) {
          unsigned char head[wire::kResponseBytes];
          REQUIRE(odafs::net::got_all(odafs::net::read_full(fd, head, sizeof head)));
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

// ---------------------------------------------------------------- local rings

TEST_CASE("create_ring: a sealed memfd of the ring's size, its header set, a doorbell") {
  odafs::Result<NewRing> made = create_ring(kSegBytes);
  REQUIRE_MESSAGE(made.ok(), made.status().to_string());
  REQUIRE(made->ring != nullptr);
  const Ring& r = *made->ring;
  CHECK(r.bytes == ring::ring_bytes(kSegBytes));
  struct stat sb {};
  REQUIRE(fstat(made->memfd, &sb) == 0);
  CHECK(static_cast<size_t>(sb.st_size) == r.bytes);
  // A client holding the memfd can neither shrink nor grow it, nor lift the seals.
  CHECK(fcntl(made->memfd, F_GET_SEALS) == (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
  CHECK(odafs::test::failed_with(ftruncate(made->memfd, 0) == -1) == EPERM);
  const ring::Header* h = ring::header(r.base);
  CHECK(h->magic == ring::kMagic);
  CHECK(h->version == ring::kVersion);
  CHECK(h->slots == ring::kSlots);
  CHECK(h->slot_bytes == kSegBytes);
  uint64_t one = 1;
  CHECK(write(r.doorbell, &one, sizeof one) == sizeof one);
}

TEST_CASE("create_ring out of descriptors fails with EMFILE and leaves nothing open") {
  // The lowest free descriptor number: with the limit at it, the memfd cannot be made; one
  // above it, the memfd takes it and the doorbell cannot be made.
  auto lowest_free = [] {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) close(fd);
    return fd;
  };
  const int lowest = lowest_free();
  REQUIRE(lowest >= 0);
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  struct Restore {
    const rlimit& limit;
    ~Restore() { setrlimit(RLIMIT_NOFILE, &limit); }
  } restore{saved};
  for (rlim_t limit : {rlim_t(lowest), rlim_t(lowest) + 1}) {
    CAPTURE(limit);
    rlimit low = saved;
    low.rlim_cur = limit;
    REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
    odafs::Result<NewRing> made = create_ring(kSegBytes);
    REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
    CHECK(made.errno_value() == EMFILE);
    CHECK(made.status().message() ==
          (limit == rlim_t(lowest) ? "local ring: memfd_create" : "local ring: eventfd"));
    CHECK(lowest_free() == lowest);  // the memfd was closed again: its number is free
  }
}

TEST_CASE("a ring's setup socket wants the same session proof as TCP") {
  EngineStack st;
  Session s = st.sessions.issue();
  ring::Token token = offered_token(st, s);
  Session forged = s;
  forged.secret[3] ^= 0x40;
  CHECK_THROWS(ring::set_up(token, forged));
  CHECK(st.engine->stats().bad_handshakes.load() == 1);
  ring::Token wrong = token;
  wrong[0] ^= 1;
  CHECK_THROWS(ring::set_up(wrong, s));  // nobody listens there
  CHECK(odafs::test::backend_counter(*st.engine, "rings") == 0);
  ring::Setup ok = ring::set_up(token, s);
  CHECK(ok.memfd >= 0);
  CHECK(ok.doorbell >= 0);
  CHECK(odafs::test::backend_counter(*st.engine, "rings") == 1);
}

TEST_CASE("a client that scribbles over its ring harms only its own reads") {
  EngineStack st(1);  // one engine thread: the hostile ring and the honest client share it
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
  EngineStack st(2, /*max_rings=*/1);
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
  CHECK(odafs::test::eventually(
      [&] {
        third = connect_soft_engine(st.where(), s);
        return std::string(third->transport()) == "ring";
      },
      10));
  CHECK(third->read(st.ref(3, s), 0, kSegBytes, buf.data(), &got) == Fault::kNone);
  CHECK(buf[0] == 'D');
}
