// How a component reports its counters (STATS, /metrics): its report_counters(add) calls
// add(name, value) once per counter, under the component's own names; whoever asks puts
// its prefix before them ("rpc.", "cache."). The component keeps its counters; a report
// only reads them, and allocates nothing of its own.
#pragma once

#include <cstdint>
#include <functional>

namespace odafs {

using CounterSink = std::function<void(const char* name, uint64_t value)>;

}  // namespace odafs
