// Test support: a tmpfs of a fixed size, for exports that fill up (ENOSPC). Mounting one
// needs root and a kernel that lets this process mount; tmpfs_skip_reason() says why not.
// No doctest.
#pragma once

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "tests/support/server_process.h"

namespace odafs::test {

// A tmpfs mounted on `dir` (made if need be) for the guard's life, with mount options
// `options` ("size=1m"); detached on the way out, so that a failed check cannot leave it
// behind.
struct Tmpfs {
  std::string dir;
  bool mounted = false;
  int error = 0;  // mount(2)'s errno when it failed
  explicit Tmpfs(std::string d, const char* options = "size=1m") : dir(std::move(d)) {
    mkdir(dir.c_str(), 0755);
    mounted = ::mount("odafs-test", dir.c_str(), "tmpfs", 0, options) == 0;
    if (!mounted) error = errno;
  }
  ~Tmpfs() {
    if (mounted) umount2(dir.c_str(), MNT_DETACH);
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;
};

// Why this process cannot mount a tmpfs ("" when it can: root, and not in a container that
// forbids it). Decided once, the first time it is asked (call it where a test case is
// declared, so that the case is reported as skipped, naming the reason; it is also said on
// stderr: doctest's summary shows only the count).
inline const char* tmpfs_skip_reason() {
  static const std::string why = [] {
    std::string r;
    if (geteuid() != 0) {
      r = "needs root to mount a tmpfs (euid " + std::to_string(geteuid()) + ")";
    } else {
      TempDir probe;
      Tmpfs t(probe / "m");
      if (!t.mounted) r = std::string("mounting a tmpfs failed: ") + strerror(t.error);
    }
    if (!r.empty()) std::fprintf(stderr, "tmpfs tests skipped: %s\n", r.c_str());
    return r;
  }();
  return why.c_str();
}

}  // namespace odafs::test
