// CallerErrorMarks: the places of the processes using one open file among its failed
// writes sent behind (File::ErrorMark), for odafs-mount, where one File serves every
// process that shares the open file description. The kernel sends a flush for each
// close(2) of a descriptor, from whichever process closes it: a child that inherited the
// descriptor across fork sends one when it exits or execs (close-on-exec too). With one
// mark per open, that child's flush took the report of a failed write its parent made, and
// the parent's own close returned 0 (issue #38, found by test_fsx). So each caller, as
// FUSE names it (the thread's id), has its own mark: a failure is reported to each
// caller's next fsync or close, once. A caller new to the open starts where its writes
// stand (File::kNewErrorMark): what they reported it does not hear again. Only the last
// kMax callers are remembered; one forgotten starts afresh.
//
// Thread-safety: thread-safe. A Held copies the mark out and puts it back, so that no
// caller holds a reference into the table while another is added.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <mutex>

#include "client/client.h"

namespace odafs {

class CallerErrorMarks {
 public:
  // The mark of `caller` while it is held; put back when it goes.
  class Held {
   public:
    Held(CallerErrorMarks& marks, pid_t caller)
        : marks_(marks), caller_(caller), mark_(marks.get(caller)) {}
    ~Held() { marks_.put(caller_, mark_); }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    File::ErrorMark* mark() { return &mark_; }

   private:
    CallerErrorMarks& marks_;
    const pid_t caller_;
    File::ErrorMark mark_;
  };

 private:
  struct Entry {
    pid_t caller = 0;  // 0: unused (no process has id 0)
    File::ErrorMark mark = 0;
  };
  static constexpr size_t kMax = 8;

  File::ErrorMark get(pid_t caller) {
    std::lock_guard lock(mu_);
    for (const Entry& e : entries_) {
      if (e.caller == caller) return e.mark;
    }
    return File::kNewErrorMark;
  }
  void put(pid_t caller, File::ErrorMark mark) {
    std::lock_guard lock(mu_);
    for (Entry& e : entries_) {
      if (e.caller == caller) {
        e.mark = mark;
        return;
      }
    }
    entries_[next_] = Entry{caller, mark};  // the oldest entry goes
    next_ = (next_ + 1) % kMax;
  }

  std::mutex mu_;
  std::array<Entry, kMax> entries_{};
  size_t next_ = 0;  // the entry replaced next
};

}  // namespace odafs
