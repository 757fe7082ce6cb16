// The engine's one non-virtual piece: its counters for STATS and /metrics.
#include "ordma/engine.h"

#include <string>

namespace odafs::ordma {

void Engine::report_counters(const CounterSink& add) const {
  const EngineStats& es = stats();
  add((std::string("backend.") + kind()).c_str(), 1);
  add("connections", es.connections.load());
  add("reads", es.reads.load());
  add("bytes", es.bytes.load());
  add("pushes", es.pushes.load());
  add("push_bytes", es.push_bytes.load());
  add("pulls", es.pulls.load());
  add("pull_bytes", es.pull_bytes.load());
  add("bad_handshakes", es.bad_handshakes.load());
  add("bad_frames", es.bad_frames.load());
  add("refused", es.refused.load());
  add("handshake_timeouts", es.handshake_timeouts.load());
  add("shed", es.shed.load());
  backend_counters(add);
  for (int f = 1; f < kFaultKinds; ++f) {
    add((std::string("fault.") + fault_name(static_cast<Fault>(f))).c_str(),
        es.faults[static_cast<size_t>(f)].load());
  }
}

}  // namespace odafs::ordma
