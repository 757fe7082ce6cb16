// Unit tests: capabilities and the export table (ordma/).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "ordma/engine_impl/soft/capability.h"
#include "ordma/engine_impl/soft/export_table.h"

using odafs::ordma::CapabilityAuthority;
using odafs::ordma::ExportTable;
using odafs::ordma::Fault;
using odafs::ordma::Reference;

namespace {

Reference sample(uint64_t session = 77) {
  Reference r;
  r.segment = 12;
  r.generation = 3;
  r.offset = 0;
  r.length = 4096;
  r.rights = odafs::ordma::kRightRead;
  r.session = session;
  return r;
}

}  // namespace

TEST_CASE("a sealed reference checks; any altered field or byte fails") {
  CapabilityAuthority auth;
  Reference r = sample();
  auth.seal(r);
  CHECK(auth.check(r, 77) == Fault::kNone);
  auto altered = [&](auto change) {
    Reference x = r;
    change(x);
    return auth.check(x, x.session);
  };
  CHECK(altered([](Reference& x) { x.segment++; }) == Fault::kBadCapability);
  CHECK(altered([](Reference& x) { x.generation++; }) == Fault::kBadCapability);
  CHECK(altered([](Reference& x) { x.offset += 8; }) == Fault::kBadCapability);
  CHECK(altered([](Reference& x) { x.length *= 2; }) == Fault::kBadCapability);
  CHECK(altered([](Reference& x) { x.rights |= odafs::ordma::kRightWrite; }) ==
        Fault::kBadCapability);
  CHECK(altered([](Reference& x) { x.session = 78; }) == Fault::kBadCapability);
  for (size_t i = 0; i < r.capability.size(); ++i) {
    for (unsigned char bit : {0x01, 0x80}) {
      Reference x = r;
      x.capability[i] ^= bit;
      CHECK(auth.check(x, 77) == Fault::kBadCapability);
    }
  }
  Reference zero = r;
  zero.capability.fill(0);  // a "truncated" capability, zero-padded
  CHECK(auth.check(zero, 77) == Fault::kBadCapability);
}

TEST_CASE("a reference of session A faults when session B presents it") {
  CapabilityAuthority auth;
  Reference r = sample(1001);
  auth.seal(r);
  CHECK(auth.check(r, 1001) == Fault::kNone);
  CHECK(auth.check(r, 1002) == Fault::kWrongSession);
}

TEST_CASE("a new authority (server restart) refuses every old reference") {
  Reference r = sample();
  {
    CapabilityAuthority before;
    before.seal(r);
    CHECK(before.check(r, 77) == Fault::kNone);
  }
  CapabilityAuthority after;
  CHECK(after.check(r, 77) == Fault::kBadCapability);
}

TEST_CASE("export table: export, pin, revoke, re-export, lock") {
  ExportTable t(4);
  CHECK(t.pin(0, t.generation(0)) == Fault::kRevoked);  // nothing exported yet
  uint32_t g = t.export_segment(0);
  CHECK(t.state(0) == ExportTable::State::kExported);
  CHECK(t.pin(0, g) == Fault::kNone);
  t.unpin(0);
  CHECK(t.pin(0, g + 1) == Fault::kStaleGeneration);
  CHECK(t.pin(9, g) == Fault::kUnknownSegment);

  t.revoke(0);
  CHECK(t.generation(0) == g + 1);
  CHECK(t.pin(0, g) == Fault::kStaleGeneration);  // old reference
  CHECK(t.pin(0, g + 1) == Fault::kRevoked);      // not exported again yet
  uint32_t g2 = t.export_segment(0);
  CHECK(g2 == g + 1);
  CHECK(t.pin(0, g) == Fault::kStaleGeneration);  // reuse for another block
  CHECK(t.pin(0, g2) == Fault::kNone);
  t.unpin(0);

  t.lock(0);
  CHECK(t.pin(0, g2) == Fault::kLocked);
  t.unlock(0);
  CHECK(t.pin(0, g2) == Fault::kNone);  // same generation after a write
  t.unpin(0);
  // Other segments are independent.
  CHECK(t.pin(1, t.generation(1)) == Fault::kRevoked);
}

TEST_CASE("export table: lock waits for in-flight reads; readers see whole blocks") {
  // A writer rewrites a block with a per-version pattern under lock(); readers copy it
  // under pin(). Every successful copy must be uniform (one version), never torn.
  constexpr size_t kBytes = 4096;
  ExportTable t(1);
  uint32_t gen = t.export_segment(0);
  std::vector<unsigned char> block(kBytes, 0);
  std::atomic<bool> stop{false};
  std::atomic<long> ok{0}, faults{0}, torn{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&] {
      std::vector<unsigned char> copy(kBytes);
      while (!stop.load()) {
        Fault f = t.pin(0, gen);
        if (f != Fault::kNone) {
          CHECK(f == Fault::kLocked);
          ++faults;
          continue;
        }
        // Byte-wise volatile copy: a torn read would show mixed versions.
        for (size_t k = 0; k < kBytes; ++k) {
          copy[k] = reinterpret_cast<volatile unsigned char*>(block.data())[k];
        }
        t.unpin(0);
        bool uniform = true;
        for (unsigned char c : copy) uniform &= c == copy[0];
        if (uniform)
          ++ok;
        else
          ++torn;
      }
    });
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int v = 1; (v <= 2000 || ok < 100) && std::chrono::steady_clock::now() < until; ++v) {
    if (v % 64 == 0) std::this_thread::yield();
    t.lock(0);
    for (size_t k = 0; k < kBytes; ++k) {
      reinterpret_cast<volatile unsigned char*>(block.data())[k] = static_cast<unsigned char>(v);
    }
    t.unlock(0);
  }
  stop = true;
  for (auto& r : readers) r.join();
  CHECK(torn == 0);
  CHECK(ok > 0);
}

TEST_CASE("export table: revoke returns only after in-flight reads let go") {
  ExportTable t(1);
  uint32_t gen = t.export_segment(0);
  REQUIRE(t.pin(0, gen) == Fault::kNone);
  std::atomic<bool> revoked{false};
  std::thread revoker([&] {
    t.revoke(0);
    revoked = true;
  });
  // The revoke must NOT finish while the segment is pinned. No event says it waits: the
  // revoker gets 1000 turns of the CPU in which it would finish, had it not.
  for (int i = 0; i < 1000; ++i) std::this_thread::yield();
  CHECK_FALSE(revoked.load());  // still pinned
  t.unpin(0);
  revoker.join();
  CHECK(revoked.load());
  CHECK(t.pin(0, gen) == Fault::kStaleGeneration);
}
