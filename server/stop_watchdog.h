// Bounds odafsd's stop. An operator's SIGTERM (a service manager's stop) must end the
// process within a bound whatever its clients do; every wait inside a call is bounded, but
// a stop that still overruns (a bug, a disk that hangs) must not hang the host's shutdown.
//
// The stop sequence names each stage as it enters it; if the whole sequence has not
// finished within the bound, the watchdog logs the stage it is stuck in and ends the process
// with kForcedExitStatus. A stop that ends within the bound but slowly (over kReportMs) is
// logged with its slowest stage, so a slow stop in a test log says where the time went. Nothing
// acknowledged is lost by that: the block cache is write-through, and a call cut short was never
// answered (its client sends it again).
//
// Thread-safety: stage() and finish() are called by the stopping thread only; the watchdog
// thread reads the stage under the mutex.
#pragma once

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "base/log.h"

namespace odafs::server {

class StopWatchdog {
 public:
  static constexpr int kForcedExitStatus = 3;

  // Starts timing the stop now. REQUIRES: bound_ms > 0.
  explicit StopWatchdog(int bound_ms)
      : start_(std::chrono::steady_clock::now()), thread_([this, bound_ms] { watch(bound_ms); }) {}
  ~StopWatchdog() {
    finish();
    thread_.join();
  }
  StopWatchdog(const StopWatchdog&) = delete;
  StopWatchdog& operator=(const StopWatchdog&) = delete;

  // The stop now does `what` (a static string: "stopping the engine").
  void stage(const char* what) {
    std::lock_guard lock(mu_);
    end_stage_locked();
    stage_ = what;
  }
  // The stop is done; logs how long it took when that was long enough to notice.
  void finish() {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    end_stage_locked();
    const auto ms = elapsed_ms();
    if (ms >= kReportMs) {
      ODAFS_LOG_WARN("stop took %lld ms, %lld of them %s", static_cast<long long>(ms), slowest_ms_,
                     slowest_stage_);
    }
    cv_.notify_all();
  }

 private:
  static constexpr long long kReportMs = 500;

  // The stage ending now may be the slowest so far. REQUIRES: mu_ held.
  void end_stage_locked() {
    const long long now = elapsed_ms();
    if (now - stage_start_ms_ >= slowest_ms_) {
      slowest_ms_ = now - stage_start_ms_;
      slowest_stage_ = stage_;
    }
    stage_start_ms_ = now;
  }

  long long elapsed_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start_)
        .count();
  }
  void watch(int bound_ms) {
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, std::chrono::milliseconds(bound_ms), [this] { return done_; })) return;
    ODAFS_LOG_ERROR("stop: still %s after %lld ms; exiting now (status %d)", stage_, elapsed_ms(),
                    kForcedExitStatus);
    std::fflush(stderr);
    _exit(kForcedExitStatus);
  }

  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  const char* stage_ = "starting to stop";  // guarded by mu_
  long long stage_start_ms_ = 0;            // guarded by mu_: when stage_ began
  const char* slowest_stage_ = stage_;      // guarded by mu_: the longest stage ended
  long long slowest_ms_ = 0;                // guarded by mu_
  bool done_ = false;                       // guarded by mu_
  std::thread thread_;                      // last: starts once the rest is built
};

}  // namespace odafs::server
