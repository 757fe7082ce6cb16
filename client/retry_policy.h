// What the client tries again after a failed call, how often and for how long: the one
// place that says so. Every path that calls the server asks a RetryPolicy after a failure
// (Client::with_mount and retry_delayed, Client::again_after_restart, File::retry_stale,
// Client::read_file, IoQueue's requests), one policy per operation, each about the failures
// it handles. They decide by the failure's errno (a Status or a Result<T>, base/status.h)
// and by whether the call's channel is now broken():
//
//   DELAY (EAGAIN: the server did nothing yet; another client's delegation is still out,
//     or a grace period): again after a pause, 1 ms doubling to 100 ms, for up to the
//     mount's timeout in all, whether or not the call is idempotent (nothing was done);
//     a wait past a second is logged (once per operation, at most once a second).
//   A lost connection (the call failed on a channel now broken): an idempotent call once
//     more, on the connection the client re-mounts; any other call fails (it may have been
//     done).
//   ESTALE after the client re-mounted a restarted server: once more, with the handle found
//     again by path (File::refresh_stale decides whether it is still the same file).
//   Anything else: not again.
//
// Thread-safety: none; one per operation, used on one thread at a time.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "base/log.h"

namespace odafs {

// The errno a DELAY answer reads as (proto/status.h).
inline constexpr int kDelayErrno = EAGAIN;

class RetryPolicy {
 public:
  explicit RetryPolicy(int timeout_ms) : delay_left_ms_(timeout_ms) {}

  // After a DELAY answer: pauses and returns true, or returns false once the time is used.
  bool again_after_delay() {
    if (delay_left_ms_ <= 0) return false;
    if (waited_ms_ >= kSayAfterMs && !said_) {
      // A wait people notice: say why (a restarted server's grace period lasts seconds).
      said_ = true;
      ODAFS_LOG_WARN_THROTTLED(
          "odafs: the server asks this client to wait (DELAY or GRACE: a grace period after "
          "its restart, or a delegation being recalled); waiting up to %d ms more",
          delay_left_ms_);
    }
    const int ms = std::min(pause_ms_, delay_left_ms_);
    waited_ms_ += ms;
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    delay_left_ms_ -= ms;
    pause_ms_ = std::min(pause_ms_ * 2, kMaxPauseMs);
    return true;
  }
  // After the connection was lost under the call: true, once, for an idempotent call.
  bool again_after_lost_connection(bool idempotent) {
    if (!idempotent || reconnected_) return false;
    reconnected_ = true;
    return true;
  }
  // After ESTALE: true, once (the caller finds the handle again before it goes).
  bool again_after_stale() {
    if (refreshed_) return false;
    refreshed_ = true;
    return true;
  }

 private:
  static constexpr int kMaxPauseMs = 100;
  static constexpr int kSayAfterMs = 1000;
  int delay_left_ms_;
  int waited_ms_ = 0;
  bool said_ = false;
  int pause_ms_ = 1;
  bool reconnected_ = false;
  bool refreshed_ = false;
};

}  // namespace odafs
