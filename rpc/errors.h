// Errors of the RPC layer itself (as opposed to a procedure's own status codes).
#pragma once

#include <stdexcept>
#include <string>
#include <system_error>

namespace odafs::rpc {

// Why a call failed below the procedure: the transport broke, or the server refused the
// call (RFC 5531 accept_stat / reject_stat). code() carries the errno a caller should see.
class RpcError : public std::system_error {
 public:
  enum class Kind {
    kTransport,     // connection lost, timeout, malformed reply
    kProgUnavail,   // PROG_UNAVAIL
    kProgMismatch,  // PROG_MISMATCH
    kProcUnavail,   // PROC_UNAVAIL
    kGarbageArgs,   // GARBAGE_ARGS
    kSystemErr,     // SYSTEM_ERR
    kDenied,        // MSG_DENIED (RPC_MISMATCH or AUTH_ERROR)
  };
  RpcError(Kind kind, int err, const std::string& what)
      : std::system_error(err, std::generic_category(), what), kind_(kind), message_(what) {}
  Kind kind() const { return kind_; }
  // The message without what() adds (": " and the errno's text), for errors that wrap it.
  const std::string& message() const { return message_; }

 private:
  Kind kind_;
  std::string message_;
};

}  // namespace odafs::rpc
