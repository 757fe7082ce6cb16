// Unit: the client's conversion of RPC failures into API errors (client/call_util.h).
#include <doctest/doctest.h>

#include <cerrno>
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
