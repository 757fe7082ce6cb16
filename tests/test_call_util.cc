// Unit: how an RPC failure reaches the API (a Status from rpc::Channel, an Error from
// or_throw) and the client's retry policy (client/retry_policy.h).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>

#include "base/net.h"
#include "client/call_util.h"
#include "rpc/client_channel.h"

using odafs::Error;
using odafs::Status;
using odafs::rpc::CallFailure;

TEST_CASE("a channel's failure is a Status from the socket up, and an Error says it once") {
  // A port nothing listens on: bound, then closed.
  odafs::net::Endpoint free_port;
  const int fd = odafs::net::listen_tcp({"127.0.0.1", 0}, &free_port).value();
  close(fd);
  odafs::rpc::Channel::Options o;
  o.program = 400100;
  o.version = 3;
  CallFailure layer = CallFailure::kDenied;
  odafs::Result<std::unique_ptr<odafs::rpc::Channel>> ch =
      odafs::rpc::Channel::connect(free_port, o, &layer);
  REQUIRE_FALSE(ch.ok());
  CHECK(ch.errno_value() == ECONNREFUSED);
  CHECK(layer == CallFailure::kTransport);
  CHECK(ch.status().message() == "connect to " + free_port.to_string());
  // Said once: an Error's what() is the message and the errno's text, not the errno's
  // text twice.
  try {
    odafs::or_throw(ch.status());
    FAIL("not thrown");
  } catch (const Error& e) {
    CHECK(e.errno_value() == ECONNREFUSED);
    CHECK(std::string(e.what()) == ch.status().to_string());
  }
  Status m = odafs::in_context(ch.status(), "mount odafs://h:1/");
  CHECK(m.errno_value() == ECONNREFUSED);
  CHECK(m.to_string() == "mount odafs://h:1/: " + ch.status().to_string());
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
