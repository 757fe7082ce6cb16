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

inline void futex_wake(std::atomic<uint32_t>* word, int count = INT32_MAX,
                       FutexScope scope = FutexScope::kProcess) {
  int op = scope == FutexScope::kProcess ? FUTEX_WAKE_PRIVATE : FUTEX_WAKE;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, count, nullptr, nullptr, 0);
}

}  // namespace odafs
