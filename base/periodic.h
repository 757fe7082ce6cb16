// A thread that runs a task every interval until destroyed (or stopped), for housekeeping
// that must not wait for a call to come along (odafsd's sweep of deleted files).
//
// Thread-safety: the task runs on this object's thread only; stop() and the destructor may
// be called from any other thread, and return once the task is not running.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace odafs {

class Periodic {
 public:
  Periodic(std::chrono::milliseconds interval, std::function<void()> task)
      : interval_(interval), task_(std::move(task)), thread_([this] { run(); }) {}
  ~Periodic() { stop(); }
  Periodic(const Periodic&) = delete;
  Periodic& operator=(const Periodic&) = delete;

  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
      lock.unlock();
      task_();
      lock.lock();
    }
  }

  const std::chrono::milliseconds interval_;
  const std::function<void()> task_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;     // last: starts once the rest is built
};

}  // namespace odafs
