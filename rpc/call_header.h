// Decoding an ONC RPC call header (RFC 5531, section 9) where the server can answer.
//
// libtirpc's xdr_callmsg fails on an RPC version other than 2 and on credentials over
// MAX_AUTH_BYTES without saying which, so a server built on it can only drop such calls.
// This decoder reads the header straight from the record and says what was wrong, so the
// server replies RPC_MISMATCH or AUTH_ERROR as the RFC asks (the XID is known by then).
#pragma once

#include <cstddef>
#include <cstdint>

namespace odafs::rpc {

inline constexpr uint32_t kMaxAuthBytes = 400;  // RFC 5531: opaque_auth body<400>

struct CallHeader {
  uint32_t xid = 0;
  uint32_t rpcvers = 0;
  uint32_t prog = 0;
  uint32_t vers = 0;
  uint32_t proc = 0;
  uint32_t cred_flavor = 0;
  const char* cred_body = nullptr;  // points into the record; cred_length bytes
  uint32_t cred_length = 0;
  uint32_t verf_flavor = 0;
  uint32_t verf_length = 0;
};

// Who is calling, as the credential says.
struct CallerCred {
  bool auth_sys = false;  // false: AUTH_NONE
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t ngids = 0;  // at most 16 are kept
  uint32_t gids[16] = {};
};

enum class CallHeaderStatus {
  kOk,
  kGarbage,        // shorter than an XID and a direction, or not a CALL: drop it
  kTruncated,      // a CALL whose header ends early: answer GARBAGE_ARGS
  kRpcMismatch,    // rpcvers != 2: answer MSG_DENIED / RPC_MISMATCH
  kBadCredential,  // credential body over 400 bytes: answer AUTH_ERROR / AUTH_BADCRED
  kBadVerifier,    // verifier body over 400 bytes: answer AUTH_ERROR / AUTH_BADVERF
};

// Decodes the call header at the start of record[0, length). On kOk, *args_offset is where
// the procedure's arguments begin. Fields decoded before a failure (at least the XID for
// every status but kGarbage) are valid. Never reads outside the record.
CallHeaderStatus decode_call_header(const char* record, size_t length, CallHeader* header,
                                    size_t* args_offset);

// Decodes the credential of a header that decoded kOk: AUTH_NONE, or AUTH_SYS whose body
// parses (RFC 5531 appendix A; a machine name up to 255 bytes, up to 16 groups). Returns
// false for any other flavor or a body that does not parse: answer AUTH_BADCRED.
bool decode_credential(const CallHeader& header, CallerCred* cred);

}  // namespace odafs::rpc
