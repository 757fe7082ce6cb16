// Test support: rpc::Channel in tests, where a failure below the procedure fails the test
// with its reason. Uses doctest's REQUIRE: test binaries only.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <utility>

#include "base/net.h"
#include "base/status.h"
#include "rpc/client_channel.h"

// REQUIREs that a Status (or a Result) is ok, its text in the failure.
#define REQUIRE_OK(expr)                                                  \
  do {                                                                    \
    const ::odafs::Status odafs_status_ = ::odafs::test::status_of(expr); \
    REQUIRE_MESSAGE(odafs_status_.ok(), odafs_status_.to_string());       \
  } while (0)

namespace odafs::test {

inline Status status_of(const Status& s) { return s; }
template <class T>
Status status_of(const Result<T>& r) {
  return r.status();
}

// A connected channel, or the test fails naming why.
inline std::unique_ptr<rpc::Channel> open_channel(const net::Endpoint& server,
                                                  rpc::Channel::Options options) {
  Result<std::unique_ptr<rpc::Channel>> ch = rpc::Channel::connect(server, std::move(options));
  REQUIRE_MESSAGE(ch.ok(), ch.status().to_string());
  return std::move(ch).value();
}

}  // namespace odafs::test
