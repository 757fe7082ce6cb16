// How long each procedure's calls take on one export, as a histogram per procedure: what
// --metrics serves as odafs_call_seconds (server/metrics.h). The time is the handler's:
// from its arguments decoded to its reply encoded, waits on clients, leases and the disk
// included; not the time the call waited to be read or the reply to be sent.
//
// Thread-safety: record and the readers run concurrently from any thread; a reader may see
// one call's bucket before its sum (the counts are exact once calls stop).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace odafs::server {

class CallTimes {
 public:
  // Upper bounds of the buckets, in microseconds; a last bucket takes the rest (+Inf).
  static constexpr std::array<uint64_t, 12> kBoundsUs = {
      25, 50, 100, 250, 500, 1000, 2500, 10000, 50000, 250000, 1000000, 5000000};
  static constexpr uint32_t kMaxProcedures = 64;  // procedure numbers beyond are not timed

  void record(uint32_t proc, uint64_t ns) {
    if (proc >= kMaxProcedures) return;
    Histogram& h = by_proc_[proc];
    size_t b = 0;
    while (b < kBoundsUs.size() && ns > kBoundsUs[b] * 1000) ++b;
    h.buckets[b].fetch_add(1, std::memory_order_relaxed);
    h.sum_ns.fetch_add(ns, std::memory_order_relaxed);
  }

  // Calls of proc in bucket b (b == kBoundsUs.size(): over the last bound).
  uint64_t in_bucket(uint32_t proc, size_t b) const {
    return by_proc_[proc].buckets[b].load(std::memory_order_relaxed);
  }
  uint64_t sum_ns(uint32_t proc) const {
    return by_proc_[proc].sum_ns.load(std::memory_order_relaxed);
  }

 private:
  struct Histogram {
    std::array<std::atomic<uint64_t>, kBoundsUs.size() + 1> buckets{};
    std::atomic<uint64_t> sum_ns{0};
  };
  std::array<Histogram, kMaxProcedures> by_proc_{};
};

}  // namespace odafs::server
