// Fuzz target: the soft engine's TCP frames, as the engine parses them. A real engine runs
// in this process over a small export table; each input is one connection's bytes.
//
// Input layout: byte 0 picks the preamble. Bit 0 set: the harness does the handshake
// with a valid session first (so the rest reaches the frame parser); clear: the input's
// bytes are the handshake. Bit 1 set: READ frames in the rest get a capability sealed by
// the engine's authority (so reads get past the MAC and reach bounds, generation, rights
// and session checks), for the harness's session unless bit 2 is set (another session's
// reference); clear: the frames go as they are (forged capabilities).
// The engine must never crash and must keep serving: every 256 inputs the harness checks
// that an honest read still returns the right bytes.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "base/net.h"
#include "ordma/engine_impl/soft/handshake.h"
#include "ordma/engine_impl/soft/soft_engine.h"
#include "ordma/engine_impl/soft/wire.h"

namespace {

using namespace odafs::ordma;

constexpr size_t kSegBytes = 4096;
constexpr size_t kSegments = 8;

struct Stack {
  std::vector<std::byte> memory = std::vector<std::byte>(kSegBytes * kSegments);
  std::unique_ptr<SoftEngine> engine;
  ExportTable& table;
  const CapabilityAuthority& caps;
  Session session;
  odafs::net::Endpoint where;

  Stack() : engine(make(memory)), table(engine->table()), caps(engine->capabilities()) {
    session = engine->open_session();
    for (size_t s = 0; s < kSegments; ++s) {
      std::memset(memory.data() + s * kSegBytes, static_cast<int>('A' + s), kSegBytes);
      if (s % 4 != 3) table.export_segment(static_cast<uint32_t>(s));  // some never exported
    }
    table.revoke(2);
    table.export_segment(2);  // generation 2: references of generation 1 are stale
    table.lock(5);            // an RPC write in progress
    engine->start();
    where = odafs::net::parse_endpoint(engine->endpoint());
  }
  static std::unique_ptr<SoftEngine> make(std::vector<std::byte>& memory) {
    EngineOptions o;
    o.listen = {"127.0.0.1", 0};
    o.threads = 1;
    o.backend.emplace_back("local_rings", "0");
    o.handshake_timeout_ms = 1000;
    return make_soft_engine(o, ExportedMemory{memory.data(), kSegBytes, kSegments});
  }
};

Stack& stack() {
  static Stack* s = new Stack();  // lives for the process: the fuzzer never exits cleanly
  return *s;
}

// Reads what the engine sends until it closes or goes quiet for a moment.
void drain(int fd) {
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) return;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
  }
}

// An honest client's read of segment 0: must succeed with the segment's bytes.
void check_honest_read(Stack& st) {
  int fd = odafs::net::connect_tcp(st.where).value();
  answer_greeting(fd, st.session);
  unsigned char welcome[wire::kWelcomeBytes];
  if (!odafs::net::got_all(odafs::net::read_full(fd, welcome, sizeof welcome))) __builtin_trap();
  wire::ReadRequest r;
  r.tag = 42;
  r.ref.segment = 0;
  r.ref.generation = st.table.generation(0);
  r.ref.length = kSegBytes;
  r.ref.rights = kRightRead;
  r.ref.session = st.session.id;
  st.caps.seal(r.ref);
  r.length = kSegBytes;
  unsigned char frame[wire::kReadRequestBytes];
  wire::encode(r, frame);
  if (send(fd, frame, sizeof frame, MSG_NOSIGNAL) != sizeof frame) __builtin_trap();
  unsigned char head[wire::kResponseBytes];
  std::vector<char> body(kSegBytes);
  if (!odafs::net::got_all(odafs::net::read_full(fd, head, sizeof head))) __builtin_trap();
  wire::Response resp;
  wire::decode(head, &resp);
  if (resp.tag != 42 || resp.fault != Fault::kNone || resp.length != kSegBytes) __builtin_trap();
  if (!odafs::net::got_all(odafs::net::read_full(fd, body.data(), body.size()))) __builtin_trap();
  for (char c : body) {
    if (c != 'A') __builtin_trap();
  }
  close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Stack& st = stack();
  uint8_t mode = data[0];
  std::vector<unsigned char> rest(data + 1, data + size);
  int fd = odafs::net::connect_tcp(st.where).value();
  try {
    if (mode & 1) {
      answer_greeting(fd, st.session);
      unsigned char welcome[wire::kWelcomeBytes];
      if (!odafs::net::got_all(odafs::net::read_full(fd, welcome, sizeof welcome)))
        __builtin_trap();
      if (mode & 2) {
        // Seal every whole READ frame's reference, keeping the fuzzer's fields.
        for (size_t at = 0; at + wire::kReadRequestBytes <= rest.size();
             at += wire::kReadRequestBytes) {
          wire::ReadRequest r;
          if (!wire::decode(rest.data() + at, &r)) continue;
          if ((mode & 4) == 0) r.ref.session = st.session.id;
          st.caps.seal(r.ref);
          wire::encode(r, rest.data() + at);
        }
      }
    }
  } catch (const std::exception&) {
    __builtin_trap();  // the engine refused an honest handshake
  }
  send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  drain(fd);
  close(fd);
  static unsigned runs = 0;
  if (++runs % 256 == 0) check_honest_read(st);
  return 0;
}
