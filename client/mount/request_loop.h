// RequestLoop: odafs-mount's FUSE request loop. One thread at a time reads /dev/fuse, and
// it serves what it reads itself; it hands the reading to another thread only when the
// request it serves is about to wait for the server (rpc::set_before_blocking_hook).
//
// Why not libfuse's multi-threaded loop: there every worker waits in read(2) on /dev/fuse
// and the kernel wakes them in turn (first come, first served), so a program's requests,
// one after another, each wake a different, cold thread. Measured with the Debian
// postmark over odafs-mount (1,000 files, 10,000 transactions): 2.2 s with one thread,
// 2.7..3.1 s with libfuse's pool of 2, 4 or 10 (docs/mount.md, "Threads"). Here a program's
// requests that need no call (most of them: the client cache, delegations, write-behind)
// stay on one hot thread, and one that waits for the server still lets the others go on.
//
// Up to max_threads threads serve requests at once; more are started when a reader hands
// over and none is idle, and stay until the end. The thread that calls run() serves none:
// it keeps the signals libfuse's handlers catch (the others block them) and, once the
// session exits, stops the rest (a reader asleep in read(2) is cancelled there, as
// libfuse's own loop does; nowhere else may a serving thread be cancelled).
//
// Thread-safety: run() once, from one thread.
#pragma once

#include <fuse_lowlevel.h>
#include <pthread.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace odafs::mount {

// Whether a read of /dev/fuse failing with errno `err` means the connection is over rather
// than broken: ENODEV after an unmount; ECONNABORTED when the unmount's abort of the
// connection (or an abort through /sys/fs/fuse/connections) overtakes a request being
// read, as a lazy unmount's last close can. Either way the mount is gone; nothing is lost.
bool connection_ended(int err);

class RequestLoop {
 public:
  // REQUIRES: se mounted; max_threads >= 1.
  RequestLoop(fuse_session* se, unsigned max_threads);
  RequestLoop(const RequestLoop&) = delete;
  RequestLoop& operator=(const RequestLoop&) = delete;

  // Serves requests until the session exits (unmount, or a signal libfuse's handlers
  // caught). Returns 0, or the signal's number as fuse_session_loop does.
  int run();

 private:
  void serve();                       // one serving thread's loop
  static void hand_over(void* self);  // the rpc hook: give up reading before a wait
  // This thread gives up reading; another (idle, or started now) takes it.
  // REQUIRES: mu_ held; this thread reads.
  void release_reading_locked();
  void start_helper_locked();  // REQUIRES: mu_ held

  fuse_session* const se_;
  const unsigned max_threads_;
  std::mutex mu_;
  std::condition_variable turn_;      // the reading is free, or the loop stops
  std::condition_variable stopped_;   // the loop stops (run()'s thread waits on it)
  bool reading_taken_ = false;        // some thread reads or will read next; guarded by mu_
  pthread_t reader_{};                // that thread, while reading_taken_; guarded by mu_
  bool in_read_ = false;              // the reader sleeps in read(2) (cancellable); guarded by mu_
  unsigned idle_ = 0;                 // threads waiting for their turn; guarded by mu_
  bool stopping_ = false;             // the session exited; guarded by mu_
  int error_ = 0;                     // a read error other than the unmount's; guarded by mu_
  std::vector<std::thread> helpers_;  // guarded by mu_
};

}  // namespace odafs::mount
