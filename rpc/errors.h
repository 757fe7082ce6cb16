// How a call fails below its procedure: the one error vocabulary of rpc/.
//
// A failed call is a Status (base/status.h): the errno a caller should see and a few
// words of why. CallFailure adds the layer that failed, for the few callers that act on
// it (a server that lacks a procedure is told from a broken connection). Nothing in rpc/
// throws: the channel and the server return these values from the socket up.
#pragma once

namespace odafs::rpc {

// The layer a failed call failed in (RFC 5531's accept_stat / reject_stat, or below).
enum class CallFailure {
  kTransport,     // connection lost, timeout, malformed reply, TLS refused
  kProgUnavail,   // PROG_UNAVAIL: EPROTONOSUPPORT
  kProgMismatch,  // PROG_MISMATCH: EPROTONOSUPPORT
  kProcUnavail,   // PROC_UNAVAIL: EOPNOTSUPP
  kGarbageArgs,   // GARBAGE_ARGS: EINVAL
  kSystemErr,     // SYSTEM_ERR: EIO
  kDenied,        // MSG_DENIED (RPC_MISMATCH or AUTH_ERROR): EACCES
};

}  // namespace odafs::rpc
