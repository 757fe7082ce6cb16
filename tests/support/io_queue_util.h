// Test support: waiting out an IoQueue (doctest REQUIREs inside).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "client/io_queue.h"

namespace odafs::test {

// Waits for every outstanding request of q (30 s at most for each completion); returns
// the completions by user tag, REQUIRing each tag at most once.
inline std::map<uint64_t, Completion> drain(IoQueue& q) {
  std::map<uint64_t, Completion> out;
  std::vector<Completion> got(q.depth());
  while (q.outstanding() > 0) {
    const size_t n = q.wait(got, 1, 30000);
    REQUIRE(n > 0);
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(out.count(got[i].user_tag) == 0);
      out[got[i].user_tag] = got[i];
    }
  }
  return out;
}

}  // namespace odafs::test
