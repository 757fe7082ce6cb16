// The loop of a store's read and write (server/store.h) over a call that moves part of the
// bytes asked for: the one place their contract is written.
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <string>

#include "base/status.h"

namespace odafs::server {

// Calls step(done) until len bytes have moved; step moves some of [done, len) and answers
// how many, 0 at the end, or -errno (-EINTR: called again). Reading (writing false) stops
// at the end of the file: fewer bytes; a failure is the answer. Writing, a failure after
// some bytes moved answers those bytes (the rest fails on its own when sent again), and a
// step that moves nothing is EIO.
template <class Step>
Result<size_t> move_bytes(size_t len, bool writing, const char* what, Step&& step) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = step(done);
    if (n == -EINTR) continue;
    if (n < 0 && writing && done > 0) break;
    if (n < 0) return Status(static_cast<int>(-n), what);
    if (n == 0 && writing) return Status(EIO, std::string(what) + ": no progress");
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace odafs::server
