// Unit: the client's conversion of RPC failures into API errors (client/call_util.h) and
// its retry policy (client/retry_policy.h).
#include <doctest/doctest.h>

#include <cerrno>
#include <chrono>
#include <string>

#include "client/call_util.h"

using odafs::Error;
using odafs::Status;
using odafs::rpc::RpcError;

TEST_CASE("an RpcError becomes a Status with its errno and text, and an Error as before") {
  RpcError timed_out(RpcError::Kind::kTransport, ETIMEDOUT, "rpc call timed out");
  Status s = odafs::rpc_status([&] { throw timed_out; });
  CHECK(s.errno_value() == ETIMEDOUT);
  // Said once: an Error's what() is the message and the errno's text, not the errno's
  // text twice.
  try {
    odafs::or_throw(s);
    FAIL("not thrown");
  } catch (const Error& e) {
    CHECK(e.errno_value() == ETIMEDOUT);
    CHECK(std::string(e.what()) == std::string(timed_out.what()));
  }

  RpcError denied(RpcError::Kind::kDenied, EACCES, "rpc: AUTH_ERROR");
  RpcError::Kind kind = RpcError::Kind::kTransport;
  Status m =
      odafs::in_context(odafs::rpc_status([&] { throw denied; }, &kind), "mount odafs://h:1/");
  CHECK(kind == RpcError::Kind::kDenied);
  CHECK(m.errno_value() == EACCES);
  CHECK(m.to_string() == std::string("mount odafs://h:1/: ") + denied.what());
  CHECK(odafs::rpc_status([] {}).ok());
}

TEST_CASE("the retry helpers decide on the Status or Result fn returns") {
  int runs = 0;
  odafs::Result<int> r = odafs::retry_delayed(1000, [&]() -> odafs::Result<int> {
    if (++runs < 3) return Status(EAGAIN, "delay");
    return 7;
  });
  CHECK(runs == 3);
  CHECK(*r == 7);
  runs = 0;
  Status other = odafs::retry_delayed(1000, [&] {
    ++runs;
    return Status(ENOENT, "lookup");
  });
  CHECK(runs == 1);  // only DELAY goes again
  CHECK(other.errno_value() == ENOENT);
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
