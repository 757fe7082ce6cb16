// Test support: a bound on a wait that a regression could make endless.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace odafs::test {

// Runs `release` after `after` unless finished first; finish() (and the destructor) runs
// it then instead, so whatever the test stopped (a SIGSTOPped server, a listener) is
// released on every way out of the scope. A test that waits on something it stopped
// arms one past its own bound: a wait without a deadline then fails the test's check on
// the elapsed time instead of hanging until ctest kills the suite.
class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds after, std::function<void()> release)
      : release_(std::move(release)) {
    thread_ = std::thread([this, after] {
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, after, [this] { return done_; })) {
        fired_ = true;
        release_();
      }
    });
  }
  ~Watchdog() { finish(); }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Stops the watchdog and releases (once); true if the watchdog had to fire.
  bool finish() {
    if (thread_.joinable()) {
      {
        std::lock_guard lock(mu_);
        done_ = true;
      }
      cv_.notify_all();
      thread_.join();
      if (!fired_) release_();
    }
    return fired_;
  }

 private:
  std::function<void()> release_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;   // guarded by mu_
  bool fired_ = false;  // written by the thread before it ends; read after join
  std::thread thread_;
};

}  // namespace odafs::test
