// Every built engine backend through the backend-neutral interfaces alone (ordma/engine.h):
// the file server's calls (open_session, export_segment, revoke, begin_write/end_write,
// push) on one side, a client from connect_engine() on the other. Each behaviour is a test
// case per backend; a backend this machine cannot run (verbs without an RDMA device)
// reports a doctest skip naming the reason.
//
// Backends differ in how precisely they name a fault: the soft engine checks each
// reference itself and says why; on verbs the NIC refuses a dead or forged key with one
// remote access error (kRevoked), a reused key is caught by the generation word
// (kStaleGeneration), and only what the client checks before posting (session, bounds) has
// its own reason. The cases accept exactly the faults each backend documents.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "ordma/engine.h"
#include "tests/support/server_process.h"

using namespace odafs::ordma;

namespace {

constexpr size_t kSeg = 4096;
constexpr size_t kSegs = 16;

// The address an engine of `kind` listens on: loopback for soft; for verbs the IPv4 address
// of an RDMA device's network interface (ODAFS_RDMA_ADDR overrides), or "" with *why.
std::string listen_address(const std::string& kind, std::string* why) {
  if (kind == "soft") return "127.0.0.1";
  if (const char* a = std::getenv("ODAFS_RDMA_ADDR")) return a;
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& dev : fs::directory_iterator("/sys/class/infiniband", ec)) {
    std::ifstream ndev(dev.path() / "ports/1/gid_attrs/ndevs/0");
    std::string netdev;
    if (!(ndev >> netdev)) continue;
    ifaddrs* all = nullptr;
    if (getifaddrs(&all) != 0) continue;
    std::string found;
    for (ifaddrs* i = all; i != nullptr && found.empty(); i = i->ifa_next) {
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && netdev == i->ifa_name) {
        char text[INET_ADDRSTRLEN];
        auto* in = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
        found = inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
      }
    }
    freeifaddrs(all);
    if (!found.empty()) return found;
  }
  *why = "no IPv4 address on an RDMA device's interface (set ODAFS_RDMA_ADDR)";
  return "";
}

// Why `kind` cannot run here ("" when it can). Computed once per kind.
const char* skip_reason(const char* kind) {
  static std::string soft_why, verbs_why;
  static bool done = false;
  if (!done) {
    done = true;
    for (auto [k, why] : {std::pair{"soft", &soft_why}, std::pair{"verbs", &verbs_why}}) {
      std::string reason;
      if (!backend_usable(k, &reason) || listen_address(k, &reason).empty()) {
        *why = std::string("needs ") + k + ": " + reason;
      }
    }
  }
  return std::string(kind) == "soft" ? soft_why.c_str() : verbs_why.c_str();
}

// One server side over kSegs segments (segment s filled with 'A' + s) and its engine.
struct Stack {
  std::string kind;
  std::vector<std::byte> memory = std::vector<std::byte>(kSeg * kSegs);
  std::unique_ptr<Engine> engine;

  explicit Stack(const std::string& k) : kind(k) {
    for (size_t s = 0; s < kSegs; ++s) {
      std::memset(memory.data() + s * kSeg, static_cast<int>('A' + s), kSeg);
    }
    EngineOptions o;
    o.kind = kind;
    std::string why;
    o.listen = {listen_address(kind, &why), 0};
    engine = make_engine(o, ExportedMemory{memory.data(), kSeg, kSegs});
    engine->start();
  }
  std::unique_ptr<EngineClient> connect(const Session& s) {
    EngineClientOptions o;
    o.timeout_ms = 5000;
    return connect_engine(kind, odafs::net::parse_endpoint(engine->endpoint()), s, o);
  }
  // A reference to segment seg for s. The verbs engine binds windows only for a session
  // that has connected, so clients connect before they are given references.
  Reference ref(uint32_t seg, const Session& s, uint32_t length = kSeg) {
    Reference r;
    REQUIRE(engine->export_segment(seg, length, s.id, &r));
    return r;
  }
  bool soft() const { return kind == "soft"; }
};

// Reads through `c` until a read of a fresh reference works again (verbs: a remote access
// error cost the client its queue pair, which it replaces in the background).
void settle(Stack& st, EngineClient& c, const Session& s) {
  std::vector<char> buf(kSeg);
  const bool recovered = odafs::test::eventually([&] {
    uint32_t got = 0;
    return c.read(st.ref(0, s), 0, kSeg, buf.data(), &got) == Fault::kNone;
  });
  if (!recovered) FAIL("the client did not recover after a fault");
}

void reads_return_bytes(const char* kind) {
  Stack st(kind);
  Session s = st.engine->open_session();
  auto c = st.connect(s);
  CHECK(std::string(st.engine->kind()) == kind);
  std::vector<char> buf(kSeg);
  uint32_t got = 0;
  CHECK(c->read(st.ref(3, s), 0, kSeg, buf.data(), &got) == Fault::kNone);
  CHECK(got == kSeg);
  CHECK(std::all_of(buf.begin(), buf.end(), [](char b) { return b == 'D'; }));
  CHECK(c->read(st.ref(5, s), 100, 50, buf.data(), &got) == Fault::kNone);
  CHECK(got == 50);
  CHECK(buf[0] == 'F');
  // A batch: every op answered, each with its own segment's bytes.
  std::vector<std::vector<char>> dst(kSegs, std::vector<char>(kSeg));
  std::vector<ReadOp> ops(kSegs);
  for (uint32_t i = 0; i < kSegs; ++i) ops[i] = ReadOp{st.ref(i, s), 0, kSeg, dst[i].data()};
  c->read_many(ops);
  for (uint32_t i = 0; i < kSegs; ++i) {
    CHECK(ops[i].fault == Fault::kNone);
    CHECK(dst[i][kSeg - 1] == static_cast<char>('A' + i));
  }
  CHECK_FALSE(st.engine->export_segment(kSegs, kSeg, s.id, &ops[0].ref));  // no such segment
}

void faults_return_nothing(const char* kind) {
  Stack st(kind);
  Session s = st.engine->open_session();
  Session other = st.engine->open_session();
  auto c = st.connect(s);
  auto c2 = st.connect(other);
  std::vector<char> buf(kSeg, '?');
  auto attempt = [&](const Reference& r, uint32_t off = 0, uint32_t len = kSeg) {
    std::fill(buf.begin(), buf.end(), '?');
    uint32_t got = 0;
    Fault f = c->read(r, off, len, buf.data(), &got);
    if (f != Fault::kNone) {
      CHECK(std::all_of(buf.begin(), buf.end(), [](char b) { return b == '?'; }));
      if (!st.soft()) settle(st, *c, s);
    }
    return f;
  };
  const Fault dead_key = st.soft() ? Fault::kBadCapability : Fault::kRevoked;
  Reference good = st.ref(2, s);
  Reference forged = good;
  forged.capability[7] ^= 0x10;
  forged.token[1] ^= 0x10;  // the verbs key's second byte
  CHECK(attempt(forged) == dead_key);
  // Another session's reference: named as such, or readdressed, refused either way.
  Reference theirs = st.ref(2, other);
  CHECK(attempt(theirs) == Fault::kWrongSession);
  theirs.session = s.id;
  CHECK(attempt(theirs) == dead_key);
  CHECK(attempt(good, 4000, 200) == Fault::kOutOfBounds);
  CHECK(attempt(st.ref(2, s, 1000), 0, 1001) == Fault::kOutOfBounds);
  CHECK(attempt(good) == Fault::kNone);
  CHECK(buf[0] == 'C');
}

void revocation(const char* kind) {
  Stack st(kind);
  Session s = st.engine->open_session();
  auto c = st.connect(s);
  std::vector<char> buf(kSeg);
  uint32_t got = 0;
  Reference old = st.ref(4, s);
  st.engine->revoke(4);
  Fault f = c->read(old, 0, kSeg, buf.data(), &got);
  CHECK(f == (st.soft() ? Fault::kStaleGeneration : Fault::kRevoked));
  if (!st.soft()) settle(st, *c, s);
  std::memset(st.memory.data() + 4 * kSeg, 'z', kSeg);  // the segment holds another block
  Reference fresh = st.ref(4, s);
  CHECK(c->read(fresh, 0, kSeg, buf.data(), &got) == Fault::kNone);
  CHECK(buf[0] == 'z');
  f = c->read(old, 0, kSeg, buf.data(), &got);  // replayed after re-export
  CHECK(f != Fault::kNone);
  CHECK(buf[0] == 'z');
}

// An RPC write between begin_write and end_write: a reference issued before faults
// meanwhile (soft: kLocked; verbs: the window is invalidated, kRevoked), no export is
// minted while it lasts on verbs, and afterwards a fresh reference reads the new bytes.
void writes_lock_out_readers(const char* kind) {
  Stack st(kind);
  Session s = st.engine->open_session();
  auto c = st.connect(s);
  std::vector<char> buf(kSeg, '?');
  uint32_t got = 0;
  Reference before = st.ref(7, s);
  st.engine->begin_write(7);
  Fault f = c->read(before, 0, kSeg, buf.data(), &got);
  CHECK(f == (st.soft() ? Fault::kLocked : Fault::kRevoked));
  CHECK(buf[0] == '?');
  std::memset(st.memory.data() + 7 * kSeg, 'w', kSeg);
  st.engine->end_write(7);
  if (!st.soft()) settle(st, *c, s);
  CHECK(c->read(st.ref(7, s), 0, kSeg, buf.data(), &got) == Fault::kNone);
  CHECK(buf[kSeg - 1] == 'w');
}

// A verbs window's key changes only in its low 8 bits; after 256 re-binds an old key is
// valid again. The generation word must still tell the old reference from the new block.
void keys_that_come_round(const char* kind) {
  Stack st(kind);
  Session s = st.engine->open_session();
  auto c = st.connect(s);
  Reference first = st.ref(6, s);
  for (int i = 0; i < 300; ++i) {
    st.engine->revoke(6);
    Reference r = st.ref(6, s);
    if (i == 255) {
      // The 256th re-bind: on verbs this key equals first's.
      if (!st.soft()) CHECK(std::memcmp(r.token.data(), first.token.data(), 4) == 0);
      std::vector<char> buf(kSeg, '?');
      uint32_t got = 0;
      Fault f = c->read(first, 0, kSeg, buf.data(), &got);
      CHECK(f == Fault::kStaleGeneration);
      CHECK(buf[0] == '?');
    }
  }
  std::vector<char> buf(kSeg);
  uint32_t got = 0;
  CHECK(c->read(st.ref(6, s), 0, kSeg, buf.data(), &got) == Fault::kNone);
  CHECK(c->read(first, 0, kSeg, buf.data(), &got) != Fault::kNone);
}

// Readers with fresh references while a writer rewrites the segment between begin_write
// and end_write: every read that succeeds returns one version whole.
void no_torn_blocks(const char* kind) {
  Stack st(kind);
  Session s = st.engine->open_session();
  auto c = st.connect(s);
  std::atomic<bool> stop{false};
  std::atomic<long> whole{0}, torn{0};
  std::thread reader([&] {
    std::vector<unsigned char> buf(kSeg);
    while (!stop) {
      Reference r;
      if (!st.engine->export_segment(9, kSeg, s.id, &r)) continue;  // locked right now
      uint32_t got = 0;
      if (c->read(r, 0, kSeg, buf.data(), &got) != Fault::kNone) continue;
      bool uniform =
          std::all_of(buf.begin(), buf.end(), [&](unsigned char b) { return b == buf[0]; });
      ++(uniform ? whole : torn);
    }
  });
  auto* seg = reinterpret_cast<volatile unsigned char*>(st.memory.data() + 9 * kSeg);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int v = 0; (v < 2000 || whole < 50) && std::chrono::steady_clock::now() < until; ++v) {
    st.engine->begin_write(9);
    for (size_t k = 0; k < kSeg; ++k) seg[k] = static_cast<unsigned char>(v);
    st.engine->end_write(9);
    if (v % 16 == 0) std::this_thread::yield();
  }
  stop = true;
  reader.join();
  CHECK(torn == 0);
  CHECK(whole > 0);
}

void pushes_land_in_registered_buffers(const char* kind) {
  Stack st(kind);
  Session s = st.engine->open_session();
  auto c = st.connect(s);
  std::vector<char> buf(100, '.');
  uint32_t id = c->register_buffer(buf.data(), buf.size());
  std::string payload = "direct!";
  iovec part{payload.data(), payload.size()};
  uint32_t got = 0;
  // To a session without an engine connection: refused at once.
  CHECK(st.engine->push(s.id + 1, id, 0, 1, &part, 1) == Fault::kWrongSession);
  auto push = [&](uint32_t buffer, uint32_t offset) {
    return c
        ->direct(
            [&](uint32_t tag) {
              REQUIRE(st.engine->push(s.id, buffer, offset, tag, &part, 1) == Fault::kNone);
              return odafs::Status();
            },
            &got)
        .value();
  };
  CHECK(push(id, 10) == Fault::kNone);
  CHECK(got == payload.size());
  CHECK(std::string(buf.data() + 10, payload.size()) == payload);
  CHECK(buf[9] == '.');
  CHECK(buf[17] == '.');
  // Outside the buffer, or to a buffer never registered: refused to the client, nothing
  // written.
  CHECK(push(id, 98) == Fault::kOutOfBounds);
  CHECK(buf[98] == '.');
  CHECK(push(id + 7, 0) == Fault::kOutOfBounds);
  // An unregistered buffer takes nothing either.
  c->unregister_buffer(id);
  CHECK(push(id, 0) == Fault::kOutOfBounds);
  CHECK(buf[0] == '.');
  // The connection still serves one-sided reads.
  std::vector<char> seg(kSeg);
  CHECK(c->read(st.ref(1, s), 0, kSeg, seg.data(), &got) == Fault::kNone);
  CHECK(seg[0] == 'B');
}

}  // namespace

// The skip's reason in the log too (doctest counts skips but does not print why).
const bool kSaidWhy = [] {
  if (*skip_reason("verbs") != '\0')
    std::fprintf(stderr, "verbs cases skipped: %s\n", skip_reason("verbs"));
  return true;
}();

// Each behaviour once per backend; the verbs instance is skipped, with its reason, where it
// cannot run.
#define ENGINE_BACKEND_CASE(fn, what)                                      \
  TEST_CASE("soft: " what) { fn("soft"); }                                 \
  TEST_CASE("verbs: " what* doctest::skip(*skip_reason("verbs") != '\0') * \
            doctest::description(skip_reason("verbs"))) {                  \
    fn("verbs");                                                           \
  }

ENGINE_BACKEND_CASE(reads_return_bytes, "reads and batches return the segments' bytes")
ENGINE_BACKEND_CASE(faults_return_nothing, "forged, other-session and out-of-bounds reads fault")
ENGINE_BACKEND_CASE(revocation, "a revoked reference faults; a re-exported segment reads anew")
ENGINE_BACKEND_CASE(keys_that_come_round, "a key that comes round after 256 binds still faults")
ENGINE_BACKEND_CASE(writes_lock_out_readers, "a write locks readers out; then they read anew")
ENGINE_BACKEND_CASE(no_torn_blocks, "reads racing begin/end_write are whole or fault")
ENGINE_BACKEND_CASE(pushes_land_in_registered_buffers, "server-initiated writes land in place")

// Where a backend cannot run, asking for it fails with an error that says so, never a
// crash: the server refuses to start that engine, and a client told to use it reads by
// RPC (its connect_engine throws; EngineSlot then leaves the engine alone).
TEST_CASE("a backend this machine cannot run is refused with its reason" *
          doctest::skip(*skip_reason("verbs") == '\0') *
          doctest::description("runs where verbs cannot")) {
  std::vector<std::byte> memory(kSeg * kSegs);
  EngineOptions o;
  o.kind = "verbs";
  o.listen = {"127.0.0.1", 0};
  CHECK_THROWS_AS(make_engine(o, ExportedMemory{memory.data(), kSeg, kSegs}), std::exception);
  Stack soft("soft");
  Session s = soft.engine->open_session();
  EngineClientOptions co;
  co.timeout_ms = 2000;
  CHECK_THROWS_AS(
      connect_engine("verbs", odafs::net::parse_endpoint(soft.engine->endpoint()), s, co),
      std::system_error);
  o.kind = "no-such-backend";
  CHECK_THROWS_AS(make_engine(o, ExportedMemory{memory.data(), kSeg, kSegs}),
                  std::invalid_argument);
}
