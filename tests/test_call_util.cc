// Unit: the client's conversion of RPC failures into API errors (client/call_util.h) and
// its retry policy (client/retry_policy.h).
#include <doctest/doctest.h>

#include <cerrno>
#include <chrono>
#include <string>

#include "client/call_util.h"

using odafs::Error;
using odafs::error_from;
using odafs::rpc::RpcError;

TEST_CASE("error_from keeps the RpcError's errno and text") {
  RpcError timed_out(RpcError::Kind::kTransport, ETIMEDOUT, "rpc call timed out");
  Error e = error_from(timed_out);
  CHECK(e.errno_value() == ETIMEDOUT);
  // Said once: what() is the message and the errno's text, not the errno's text twice.
  CHECK(std::string(e.what()) == std::string(timed_out.what()));

  RpcError denied(RpcError::Kind::kDenied, EACCES, "rpc: AUTH_ERROR");
  Error m = error_from(denied, "mount odafs://h:1/");
  CHECK(m.errno_value() == EACCES);
  CHECK(std::string(m.what()) == std::string("mount odafs://h:1/: ") + denied.what());
}

TEST_CASE(
    "RetryPolicy: DELAY pauses doubling up to the timeout; a lost connection and ESTALE "
    "once") {
  odafs::RetryPolicy none(0);
  CHECK(!none.again_after_delay());  // no time: DELAY is the answer

  // 1 + 2 + 4 + 8 = 15 ms, then the last 5 of 20: five pauses, then no more.
  odafs::RetryPolicy twenty(20);
  int pauses = 0;
  const auto start = std::chrono::steady_clock::now();
  while (twenty.again_after_delay()) ++pauses;
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(pauses == 5);
  CHECK(took >= std::chrono::milliseconds(20));  // it did pause (sleep_for sleeps at least)

  odafs::RetryPolicy p(1000);
  CHECK(!p.again_after_lost_connection(false));  // may have been done: not again
  CHECK(p.again_after_lost_connection(true));
  CHECK(!p.again_after_lost_connection(true));  // once
  CHECK(p.again_after_stale());
  CHECK(!p.again_after_stale());
}
