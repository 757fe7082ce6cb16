// Test support: a soft one-sided engine in process over memory of the test's own, with a
// handle on the engine's state (export table, capability and session authorities) that
// tests age, lock and forge against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "base/net.h"
#include "ordma/engine_impl/soft/soft_engine.h"

namespace odafs::test {

inline constexpr size_t kSegBytes = 4096;
inline constexpr size_t kSegments = 16;

// One server side: kSegments segments of kSegBytes, segment s filled with 'A' + s and
// exported, and a running soft engine listening on 127.0.0.1 (with local rings).
struct EngineStack {
  std::vector<std::byte> memory = std::vector<std::byte>(kSegBytes * kSegments);
  std::unique_ptr<ordma::SoftEngine> engine;
  // The engine's own state.
  ordma::ExportTable& table;
  const ordma::CapabilityAuthority& caps;
  const ordma::SessionAuthority& sessions;

  explicit EngineStack(int threads = 2, size_t max_rings = 256);

  // The engine's TCP endpoint.
  net::Endpoint where() const;
  // A sealed read reference to segment seg (at its current generation) for session s.
  ordma::Reference ref(uint32_t seg, const ordma::Session& s, uint32_t length = kSegBytes) const;
  // How many times the engine answered with fault f.
  uint64_t faults(ordma::Fault f) const;
};

// The engine's backend counter `name` (Engine::backend_counters); 0 if it keeps none so.
inline uint64_t backend_counter(const ordma::Engine& engine, const char* name) {
  uint64_t found = 0;
  engine.backend_counters([&](const char* n, uint64_t value) {
    if (std::string_view(n) == name) found = value;
  });
  return found;
}

}  // namespace odafs::test
