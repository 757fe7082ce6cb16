#include "tests/support/engine_stack.h"

#include <cstring>

namespace odafs::test {
namespace {

std::unique_ptr<ordma::SoftEngine> make_engine(std::vector<std::byte>& memory, int threads,
                                               size_t max_rings) {
  ordma::EngineOptions o;
  o.listen = {"127.0.0.1", 0};
  o.threads = threads;
  o.backend.emplace_back("max_rings", std::to_string(max_rings));
  return ordma::make_soft_engine(o, ordma::ExportedMemory{memory.data(), kSegBytes, kSegments});
}

}  // namespace

EngineStack::EngineStack(int threads, size_t max_rings)
    : engine(make_engine(memory, threads, max_rings)),
      table(engine->table()),
      caps(engine->capabilities()),
      sessions(engine->sessions()) {
  for (size_t s = 0; s < kSegments; ++s) {
    std::memset(memory.data() + s * kSegBytes, static_cast<int>('A' + s), kSegBytes);
    table.export_segment(static_cast<uint32_t>(s));
  }
  engine->start();
}

net::Endpoint EngineStack::where() const { return net::parse_endpoint(engine->endpoint()); }

ordma::Reference EngineStack::ref(uint32_t seg, const ordma::Session& s, uint32_t length) const {
  ordma::Reference r;
  r.segment = seg;
  r.generation = seg < kSegments ? table.generation(seg) : 1;
  r.offset = 0;
  r.length = length;
  r.rights = ordma::kRightRead;
  r.session = s.id;
  caps.seal(r);
  return r;
}

uint64_t EngineStack::faults(ordma::Fault f) const {
  return engine->stats().faults[static_cast<size_t>(f)].load();
}

}  // namespace odafs::test
