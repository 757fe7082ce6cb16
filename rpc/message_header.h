// Decoding ONC RPC message headers (RFC 5531, section 9) straight from a record.
//
// Calls: libtirpc's xdr_callmsg fails on an RPC version other than 2 and on credentials
// over MAX_AUTH_BYTES without saying which, so a server built on it can only drop such
// calls. decode_call_header says what was wrong, so the server replies RPC_MISMATCH or
// AUTH_ERROR as the RFC asks (the XID is known by then).
//
// Replies: xdr_replymsg stores the peer's reply_stat/accept_stat words into C enums, and
// reading an enum that holds a value outside its enumerators is undefined behaviour in
// C++. decode_reply_header keeps every status as the plain word it arrived as.
#pragma once

#include <rpc/rpc.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace odafs::rpc {

inline constexpr uint32_t kMaxAuthBytes = 400;  // RFC 5531: opaque_auth body<400>
// RFC 9289: the credential flavor of the probe that starts TLS on a connection, and the
// verifier body of a server's yes.
inline constexpr uint32_t kAuthTls = 7;
inline constexpr char kStartTlsVerifier[] = "STARTTLS";

// RFC 5531 opaque_auth: a credential or a verifier.
struct OpaqueAuth {
  uint32_t flavor = 0;
  uint32_t length = 0;  // as sent, also when over kMaxAuthBytes (for the refusal's log)
  // Points into the record: length bytes. Null when the body was over the limit or cut.
  const char* body = nullptr;
  std::string_view bytes() const {
    return body ? std::string_view(body, length) : std::string_view();
  }
};

struct CallHeader {
  uint32_t xid = 0;
  uint32_t rpcvers = 0;
  uint32_t prog = 0;
  uint32_t vers = 0;
  uint32_t proc = 0;
  OpaqueAuth cred;
  OpaqueAuth verf;
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

// The parts of a reply header (RFC 5531 rpc_msg with mtype REPLY) a caller acts on.
struct ReplyHeader {
  uint32_t xid = 0;
  uint32_t reply_stat = 0;    // 0 MSG_ACCEPTED, 1 MSG_DENIED
  uint32_t accept_stat = 0;   // when accepted: SUCCESS, PROG_MISMATCH, ... (any word)
  uint32_t reject_stat = 0;   // when denied: 0 RPC_MISMATCH, 1 AUTH_ERROR (any word)
  uint32_t auth_stat = 0;     // when denied with AUTH_ERROR
  uint32_t mismatch_low = 0;  // PROG_MISMATCH or RPC_MISMATCH: the versions supported
  uint32_t mismatch_high = 0;
  OpaqueAuth verf;  // when accepted
};

// Decodes the reply header at the start of record[0, length). Returns false if the record
// is not a well-formed REPLY (short, wrong direction, unknown reply_stat, verifier over 400
// bytes). On true, *results_offset is where the results begin (meaningful for SUCCESS).
// Never reads outside the record.
bool decode_reply_header(const char* record, size_t length, ReplyHeader* header,
                         size_t* results_offset);

// Encodes an accepted reply's header (RFC 5531 rpc_msg, REPLY, MSG_ACCEPTED): xid, the
// verifier (AUTH_NONE; body `verifier_body`, empty but for RFC 9289's STARTTLS) and stat.
// For SUCCESS the results follow; for PROG_UNAVAIL, PROC_UNAVAIL, GARBAGE_ARGS and
// SYSTEM_ERR nothing does (PROG_MISMATCH carries versions: not this encoder's). The one
// encoder of this layout: the server's replies, its errors and its STARTTLS answer use it.
// False if out has no room.
bool encode_accepted_reply_header(XDR* out, uint32_t xid, accept_stat stat,
                                  std::string_view verifier_body = {});

// What a CALL record carries besides its arguments.
struct CallSpec {
  uint32_t xid = 0;
  uint32_t prog = 0;
  uint32_t vers = 0;
  uint32_t proc = 0;
  std::string_view auth_sys_body;  // an encoded AUTH_SYS credential; empty for AUTH_NONE
  bool tls_probe = false;          // AUTH_TLS instead (RFC 9289), with an empty body
};

// Encodes a whole CALL record, record mark included, into *out (grown as needed, never
// shrunk, so a reused buffer allocates nothing) and returns its length. Fails with
// EINVAL if the arguments do not encode, EMSGSIZE if the record would pass max_record.
// The one encoder of call records: the client's calls and the server's callbacks use it.
Result<size_t> encode_call_record(const CallSpec& spec, xdrproc_t xargs, const void* args,
                                  size_t max_record, std::vector<char>* out);

}  // namespace odafs::rpc
