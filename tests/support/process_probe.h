// Test support: what a test can learn about another process (a server it started) from
// /proc, and whether this build runs under AddressSanitizer. No doctest: the soak links it.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace odafs::test {

// True in a build with AddressSanitizer: the server then runs several times slower and its
// RSS holds the sanitizer's shadow and quarantine, so tests scale counts down and do not
// judge RSS.
constexpr bool kSanitized =
#if defined(__SANITIZE_ADDRESS__)
    true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    true;
#else
    false;
#endif
#else
    false;
#endif

// CPU seconds (user + system) process pid has used so far.
double cpu_seconds(pid_t pid);
// VmRSS of process pid in KiB (0 if it cannot be read).
size_t rss_kib(pid_t pid);
// Threads of process pid (0 if it cannot be read).
size_t thread_count(pid_t pid);
// Descriptors process pid has open; *sockets (if not null) gets how many of them are
// sockets or memfds (connections and rings, as opposed to files).
size_t open_fds(pid_t pid, size_t* sockets = nullptr);

}  // namespace odafs::test
