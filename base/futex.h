// Waiting on one 32-bit word: the cheapest way to hand one specific thread a result.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace odafs {

// Who may wait on or wake a word: threads of this process only (the cheaper default), or
// any process mapping the word's page (MAP_SHARED memory; the kernel then keys the wait by
// the backing page). Waiter and waker must agree.
enum class FutexScope { kProcess, kShared };

// Sleeps while *word == expected (returns at once otherwise), at most until deadline
// (CLOCK_MONOTONIC) when one is given. Spurious returns happen: re-check the word.
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected,
                       const timespec* deadline = nullptr,
                       FutexScope scope = FutexScope::kProcess) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  int op = scope == FutexScope::kProcess ? FUTEX_WAIT_BITSET_PRIVATE : FUTEX_WAIT_BITSET;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, expected, deadline, nullptr,
          FUTEX_BITSET_MATCH_ANY);
}

// CLOCK_MONOTONIC deadlines for futex_wait.
// CLOCK_MONOTONIC now, in nanoseconds.
inline int64_t monotonic_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

inline timespec deadline_after_ms(int ms) {
  timespec d;
  clock_gettime(CLOCK_MONOTONIC, &d);
  d.tv_sec += ms / 1000;
  d.tv_nsec += (ms % 1000) * 1000000L;
  if (d.tv_nsec >= 1000000000L) {
    d.tv_sec += 1;
    d.tv_nsec -= 1000000000L;
  }
  return d;
}

inline bool deadline_passed(const timespec& d) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > d.tv_sec || (now.tv_sec == d.tv_sec && now.tv_nsec >= d.tv_nsec);
}

// Whole milliseconds left until d, rounded up (a poll() for that long does not wake just
// before d); 0 once d has passed.
// Milliseconds on the steady clock, for timers kept as plain integers.
inline int64_t now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000 + t.tv_nsec / 1000000;
}

// Wall-clock ms since the epoch: for times other hosts compare (CLOCK_REALTIME).
inline int64_t wall_ms() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return int64_t{t.tv_sec} * 1000 + t.tv_nsec / 1000000;
}

inline int ms_until(const timespec& d) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  long long ns =
      (static_cast<long long>(d.tv_sec) - now.tv_sec) * 1000000000LL + (d.tv_nsec - now.tv_nsec);
  if (ns <= 0) return 0;
  long long ms = (ns + 999999) / 1000000;
  return ms > INT32_MAX ? INT32_MAX : static_cast<int>(ms);
}

// The earlier of two CLOCK_MONOTONIC times.
inline const timespec& earliest(const timespec& a, const timespec& b) {
  return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec) ? a : b;
}

// An optional deadline made from a timeout: none when timeout_ms <= 0 (wait as long as it
// takes). Fixed at construction; not copyable, since get() points into it.
class Deadline {
 public:
  explicit Deadline(int timeout_ms)
      : set_(timeout_ms > 0), at_(set_ ? deadline_after_ms(timeout_ms) : timespec{}) {}
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
  // For futex_wait and the net::*_until calls: nullptr when there is no deadline.
  const timespec* get() const { return set_ ? &at_ : nullptr; }
  bool passed() const { return set_ && deadline_passed(at_); }

 private:
  bool set_;
  timespec at_;
};

inline void futex_wake(std::atomic<uint32_t>* word, int count = INT32_MAX,
                       FutexScope scope = FutexScope::kProcess) {
  int op = scope == FutexScope::kProcess ? FUTEX_WAKE_PRIVATE : FUTEX_WAKE;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, count, nullptr, nullptr, 0);
}

}  // namespace odafs
