// Fuzz target: the soft engine's local ring (local_ring.h), as the engine parses its request
// slots. A real engine runs in this process over a small export table, with local rings on;
// the harness sets up one ring the way a client does (TCP handshake, ring token, setup
// socket, memfd and doorbell) and then maps it by hand, as a hostile client would, and
// writes each input's bytes into it.
//
// Input layout: byte 0 is the mode, then records of 65 bytes (a short tail is ignored):
//   control byte: bits 0-5 the slot (63, the harness's fence, is taken as 0), bits 6-7 the
//                 state written to it (kFree, kPosted, kPostedWaiting, kDone; only the
//                 posted ones are the engine's to serve)
//   64 bytes:     the slot's request, a READ frame (wire.h)
// Mode bits, applied to each frame that decodes:
//   0  seal the reference with the engine's authority (clear: the fuzzer's capability, a
//      forgery unless it guessed a MAC)
//   1  keep the frame's session (clear: the ring's own); sealed with bit 0, another
//      session's valid reference
//   2  the segment's current generation (clear: the frame's, stale unless it matches)
//   3  replay: after sealing, revoke and re-export every exported segment a frame names,
//      so the references are stale by the time they are posted
//   4  the 8 bytes after the mode are XORed into the posted bits (stray and missing bits)
//   5  the 16 bytes after those overwrite the header's geometry (magic, version, slots,
//      slot_bytes), which the engine must not trust; restored after the input
// The slots are written while the engine holds no posted bit (so it looks at none), then
// the bits of the slots written are set at once and the doorbell rung; every slot both
// posted and flagged must be answered within 10 s.
//
// Oracle, per answered slot: the read succeeds exactly when the request is entitled to it
// (decodes; the ring's session; a MAC the authority accepts; read rights; an exported,
// unlocked segment at its current generation; bounds inside the reference and the
// segment), and then the slot holds exactly the segment's bytes and nothing past them; a
// fault carries length 0 and leaves the slot's data untouched. A slot not both posted and
// flagged is left alone. After every input an honest request through this same ring, and
// every 256 inputs an honest client of another session over its own ring, must read the
// right bytes: a client that scribbles over its ring harms only its own reads.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/net.h"
#include "ordma/engine_impl/soft/handshake.h"
#include "ordma/engine_impl/soft/local_ring.h"
#include "ordma/engine_impl/soft/soft_engine.h"
#include "ordma/engine_impl/soft/wire.h"

namespace {

using namespace odafs::ordma;

constexpr uint32_t kSegBytes = 4096;  // also each slot's data capacity
constexpr uint32_t kSegments = 8;
constexpr size_t kRecordBytes = 1 + wire::kReadRequestBytes;
constexpr unsigned char kUntouched = '?';
// The last slot is the harness's own: an honest read after each input (the fence below).
constexpr uint32_t kFenceSlot = ring::kSlots - 1;
constexpr uint64_t kFenceBit = uint64_t{1} << kFenceSlot;

[[noreturn]] void fail(const char* why) {
  std::fprintf(stderr, "fuzz_engine_ring: %s\n", why);
  __builtin_trap();
}

struct Stack {
  std::vector<std::byte> memory = std::vector<std::byte>(size_t{kSegBytes} * kSegments);
  std::unique_ptr<SoftEngine> engine;
  ExportTable& table;
  const CapabilityAuthority& caps;
  Session session;  // the hostile ring's
  Session other;    // the honest client's
  odafs::net::Endpoint where;
  std::optional<ring::Setup> setup;  // set once the engine runs
  void* base = MAP_FAILED;
  size_t bytes = 0;
  std::unique_ptr<EngineClient> honest;

  Stack() : engine(make(memory)), table(engine->table()), caps(engine->capabilities()) {
    for (uint32_t s = 0; s < kSegments; ++s) {
      std::memset(memory.data() + size_t{s} * kSegBytes, 'A' + static_cast<int>(s), kSegBytes);
      if (s % 4 != 3) table.export_segment(s);  // 3 and 7 never exported
    }
    table.revoke(2);
    table.export_segment(2);  // generation 2: references of generation 1 are stale
    table.lock(5);            // an RPC write in progress
    engine->start();
    where = odafs::net::parse_endpoint(engine->endpoint());
    session = engine->open_session();
    other = engine->open_session();
    setup.emplace(ring::set_up(offered_token(), session));
    struct stat sb;
    if (fstat(setup->memfd, &sb) != 0) fail("fstat of the ring's memfd");
    bytes = static_cast<size_t>(sb.st_size);
    if (bytes < ring::ring_bytes(kSegBytes)) fail("ring smaller than its layout");
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, setup->memfd, 0);
    if (base == MAP_FAILED) fail("mmap of the ring");
    honest = connect_soft_engine(where, other);
    if (std::string(honest->transport()) != "ring") fail("the honest client got no ring");
  }

  static std::unique_ptr<SoftEngine> make(std::vector<std::byte>& memory) {
    EngineOptions o;
    o.listen = {"127.0.0.1", 0};
    o.threads = 1;  // the hostile ring and the honest client share the one engine thread
    o.backend.emplace_back("local_rings", "1");
    o.handshake_timeout_ms = 1000;
    return make_soft_engine(o, ExportedMemory{memory.data(), kSegBytes, kSegments});
  }

  // The ring token the engine offers our session in its TCP WELCOME.
  ring::Token offered_token() const {
    int fd = odafs::net::connect_tcp(where).value();
    answer_greeting(fd, session);
    unsigned char welcome[wire::kWelcomeBytes];
    if (!odafs::net::got_all(odafs::net::read_full(fd, welcome, sizeof welcome)))
      fail("no WELCOME");
    close(fd);
    ring::Token token{};
    if (!wire::welcome_offers_rings(welcome, token.data())) fail("no ring offered");
    return token;
  }

  ring::Header& header() const { return *ring::header(base); }
  ring::Slot& slot(uint32_t i) const { return *ring::slot(base, i); }
  unsigned char* data(uint32_t i) const {
    return reinterpret_cast<unsigned char*>(ring::slot_data(base, kSegBytes, i));
  }
  void doorbell() const {
    uint64_t one = 1;
    if (write(setup->doorbell, &one, sizeof one) != sizeof one) fail("doorbell");
  }
  // Waits for slot i to be answered; the engine must not take 10 s.
  void await(uint32_t i) const {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (slot(i).state.load(std::memory_order_acquire) != ring::kDone) {
      if (std::chrono::steady_clock::now() > until) fail("a posted slot was never answered");
      std::this_thread::yield();
    }
  }

  // Whether r is entitled to its bytes, on our ring, as the table stands now.
  bool entitled(const wire::ReadRequest& r) const {
    if (r.ref.session != session.id) return false;
    if (caps.check(r.ref, session.id) != Fault::kNone) return false;
    if ((r.ref.rights & kRightRead) == 0 || r.ref.segment >= kSegments) return false;
    if (table.state(r.ref.segment) != ExportTable::State::kExported) return false;
    if (table.generation(r.ref.segment) != r.ref.generation) return false;
    uint64_t ref_end = uint64_t{r.ref.offset} + r.ref.length;
    uint64_t end = uint64_t{r.offset} + r.length;
    return ref_end <= kSegBytes && r.offset >= r.ref.offset && end <= ref_end;
  }

  wire::ReadRequest honest_request(uint32_t seg) const {
    wire::ReadRequest r;
    r.ref.segment = seg;
    r.ref.generation = table.generation(seg);
    r.ref.length = kSegBytes;
    r.ref.rights = kRightRead;
    r.ref.session = session.id;
    caps.seal(r.ref);
    r.length = kSegBytes;
    return r;
  }
};

Stack& stack() {
  static Stack* s = new Stack();  // lives for the process: the fuzzer never exits cleanly
  return *s;
}

// Checks slot i's answer to request `frame` (as it was when posted) against the oracle.
void check_answer(Stack& st, uint32_t i, const unsigned char* frame) {
  ring::Slot& s = st.slot(i);
  uint32_t fault = s.fault.load(std::memory_order_relaxed);
  uint32_t length = s.length.load(std::memory_order_relaxed);
  const unsigned char* d = st.data(i);
  wire::ReadRequest r;
  bool ok = wire::decode(frame, &r) && st.entitled(r);
  if (!ok) {
    if (fault == static_cast<uint32_t>(Fault::kNone)) fail("a read not entitled succeeded");
    if (length != 0) fail("a fault with a length");
    for (uint32_t k = 0; k < kSegBytes; ++k) {
      if (d[k] != kUntouched) fail("a fault wrote into its slot");
    }
    return;
  }
  if (fault != static_cast<uint32_t>(Fault::kNone)) fail("an entitled read faulted");
  if (length != r.length) fail("a read answered with the wrong length");
  const auto want = static_cast<unsigned char>('A' + r.ref.segment);
  for (uint32_t k = 0; k < kSegBytes; ++k) {
    if (d[k] != (k < length ? want : kUntouched)) fail("a read's slot holds the wrong bytes");
  }
}

// An honest request through the hostile ring itself, in the fence slot.
void check_own_ring(Stack& st) {
  wire::ReadRequest r = st.honest_request(0);
  unsigned char frame[wire::kReadRequestBytes];
  wire::encode(r, frame);
  ring::Slot& s = st.slot(kFenceSlot);
  std::memcpy(s.request, frame, sizeof frame);
  std::memset(st.data(kFenceSlot), kUntouched, kSegBytes);
  s.fault.store(0, std::memory_order_relaxed);
  s.length.store(0, std::memory_order_relaxed);
  s.state.store(ring::kPosted, std::memory_order_release);
  st.header().posted.fetch_or(kFenceBit, std::memory_order_acq_rel);
  st.doorbell();
  st.await(kFenceSlot);
  if (s.fault.load() != static_cast<uint32_t>(Fault::kNone)) fail("an honest read on the ring");
  check_answer(st, kFenceSlot, frame);
  s.state.store(ring::kFree, std::memory_order_release);
}

// An honest client of another session, over its own ring.
void check_honest_client(Stack& st) {
  Reference ref;
  ref.segment = 1;
  ref.generation = st.table.generation(1);
  ref.length = kSegBytes;
  ref.rights = kRightRead;
  ref.session = st.other.id;
  st.caps.seal(ref);
  std::vector<char> buf(kSegBytes);
  uint32_t got = 0;
  if (st.honest->read(ref, 0, kSegBytes, buf.data(), &got) != Fault::kNone || got != kSegBytes) {
    fail("the honest client's read failed");
  }
  for (char c : buf) {
    if (c != 'B') fail("the honest client read the wrong bytes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Stack& st = stack();
  const uint8_t mode = data[0];
  size_t at = 1;
  uint64_t flip = 0;
  if (mode & 16) {
    if (size < at + 8) return 0;
    std::memcpy(&flip, data + at, 8);
    flip &= ~kFenceBit;
    at += 8;
  }
  const bool scribble_header = (mode & 32) != 0;
  uint32_t geometry[4];
  if (scribble_header) {
    if (size < at + sizeof geometry) return 0;
    std::memcpy(geometry, data + at, sizeof geometry);
    at += sizeof geometry;
  }

  // The last input's fence left the engine with no posted bit to look at: it touches no
  // slot until the bits below are set, so the slots are ours to fill.
  for (uint32_t i = 0; i < ring::kSlots; ++i) {
    st.slot(i).state.store(ring::kFree, std::memory_order_relaxed);
    st.slot(i).fault.store(0, std::memory_order_relaxed);
    st.slot(i).length.store(0, std::memory_order_relaxed);
  }
  st.header().posted.store(0, std::memory_order_release);
  ring::Header& h = st.header();
  const uint32_t saved[4] = {h.magic, h.version, h.slots, h.slot_bytes};
  if (scribble_header) {
    h.magic = geometry[0];
    h.version = geometry[1];
    h.slots = geometry[2];
    h.slot_bytes = geometry[3];
  }

  // Each slot's last record wins; its frame is kept for the oracle.
  unsigned char frames[ring::kSlots][wire::kReadRequestBytes];
  uint32_t states[ring::kSlots] = {};
  uint64_t written = 0;
  std::vector<uint32_t> replay;
  for (; at + kRecordBytes <= size; at += kRecordBytes) {
    const uint32_t i = (data[at] & 63) % kFenceSlot;
    const uint32_t state = data[at] >> 6;
    unsigned char* frame = frames[i];
    std::memcpy(frame, data + at + 1, wire::kReadRequestBytes);
    wire::ReadRequest r;
    if (wire::decode(frame, &r)) {
      if ((mode & 2) == 0) r.ref.session = st.session.id;
      if ((mode & 4) && r.ref.segment < kSegments) {
        r.ref.generation = st.table.generation(r.ref.segment);
      }
      if (mode & 1) st.caps.seal(r.ref);
      if ((mode & 8) && r.ref.segment < kSegments) replay.push_back(r.ref.segment);
      wire::encode(r, frame);
    }
    std::memcpy(st.slot(i).request, frame, wire::kReadRequestBytes);
    if ((written & (uint64_t{1} << i)) == 0) std::memset(st.data(i), kUntouched, kSegBytes);
    st.slot(i).state.store(state, std::memory_order_release);
    states[i] = state;
    written |= uint64_t{1} << i;
  }
  for (uint32_t seg : replay) {
    if (st.table.state(seg) != ExportTable::State::kExported) continue;  // keep 5 locked
    st.table.revoke(seg);
    st.table.export_segment(seg);
  }

  const uint64_t bits = written ^ flip;
  st.header().posted.fetch_or(bits, std::memory_order_acq_rel);
  st.doorbell();
  for (uint32_t i = 0; i < kFenceSlot; ++i) {
    if ((written & (uint64_t{1} << i)) == 0) continue;
    const bool posted = states[i] == ring::kPosted || states[i] == ring::kPostedWaiting;
    if (posted && (bits & (uint64_t{1} << i))) {
      st.await(i);
      check_answer(st, i, frames[i]);
      continue;
    }
    // Not both posted and flagged: the engine must leave the slot alone. (A flagged one it
    // may be looking at right now; it must not change it either.)
    if (st.slot(i).state.load(std::memory_order_acquire) != states[i] ||
        st.slot(i).length.load() != 0 || st.slot(i).fault.load() != 0) {
      fail("the engine answered a slot that was not posted");
    }
  }
  // The fence: an honest read through this same ring, flagged after every other bit, so
  // once it is answered the engine holds no bit of this input (it serves a batch of bits
  // lowest first, and the fence's is the highest).
  check_own_ring(st);
  for (uint32_t i = 0; i < kFenceSlot; ++i) {
    if ((written & (uint64_t{1} << i)) == 0) continue;
    const bool posted = states[i] == ring::kPosted || states[i] == ring::kPostedWaiting;
    if (posted && (bits & (uint64_t{1} << i))) continue;
    for (uint32_t k = 0; k < kSegBytes; ++k) {
      if (st.data(i)[k] != kUntouched) fail("the engine wrote into a slot that was not posted");
    }
  }
  if (scribble_header) {
    h.magic = saved[0];
    h.version = saved[1];
    h.slots = saved[2];
    h.slot_bytes = saved[3];
  }

  static unsigned runs = 0;
  if (++runs % 256 == 0) check_honest_client(st);
  return 0;
}
