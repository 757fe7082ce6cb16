#include "rpc/message_header.h"

#include <arpa/inet.h>
#include <rpc/rpc.h>

#include <algorithm>
#include <cstring>

#include "rpc/record.h"
#include "rpc/xdr_util.h"

namespace odafs::rpc {
namespace {

// A cursor over big-endian XDR words that refuses to run past the end.
class WordReader {
 public:
  WordReader(const char* data, size_t length) : data_(data), length_(length) {}
  bool word(uint32_t* out) {
    if (length_ - pos_ < 4) return false;
    uint32_t v;
    std::memcpy(&v, data_ + pos_, 4);
    *out = ntohl(v);
    pos_ += 4;
    return true;
  }
  // Skips an opaque body of n bytes plus its XDR padding; returns its start.
  const char* opaque(uint32_t n) {
    size_t padded = (static_cast<size_t>(n) + 3) & ~size_t{3};
    if (length_ - pos_ < padded) return nullptr;
    const char* at = data_ + pos_;
    pos_ += padded;
    return at;
  }
  size_t pos() const { return pos_; }

 private:
  const char* data_;
  size_t length_;
  size_t pos_ = 0;
};

// Reads an opaque_auth, the one layout of a call's credential and verifier and a reply's
// verifier: kOk, kTruncated, or too_long (which of the two the call's was) when its body
// is over the limit.
CallHeaderStatus read_auth(WordReader& r, OpaqueAuth* auth, CallHeaderStatus too_long) {
  if (!r.word(&auth->flavor) || !r.word(&auth->length)) return CallHeaderStatus::kTruncated;
  if (auth->length > kMaxAuthBytes) return too_long;
  auth->body = r.opaque(auth->length);
  return auth->body != nullptr ? CallHeaderStatus::kOk : CallHeaderStatus::kTruncated;
}

constexpr uint32_t kCall = 0;
constexpr uint32_t kReply = 1;
constexpr uint32_t kRpcVersion = 2;

}  // namespace

CallHeaderStatus decode_call_header(const char* record, size_t length, CallHeader* h,
                                    size_t* args_offset) {
  WordReader r(record, length);
  uint32_t direction = 0;
  if (!r.word(&h->xid) || !r.word(&direction) || direction != kCall) {
    return CallHeaderStatus::kGarbage;
  }
  if (!r.word(&h->rpcvers)) return CallHeaderStatus::kTruncated;
  if (h->rpcvers != kRpcVersion) return CallHeaderStatus::kRpcMismatch;
  if (!r.word(&h->prog) || !r.word(&h->vers) || !r.word(&h->proc)) {
    return CallHeaderStatus::kTruncated;
  }
  CallHeaderStatus st = read_auth(r, &h->cred, CallHeaderStatus::kBadCredential);
  if (st == CallHeaderStatus::kOk) st = read_auth(r, &h->verf, CallHeaderStatus::kBadVerifier);
  if (st != CallHeaderStatus::kOk) return st;
  *args_offset = r.pos();
  return CallHeaderStatus::kOk;
}

bool decode_reply_header(const char* record, size_t length, ReplyHeader* h,
                         size_t* results_offset) {
  WordReader r(record, length);
  uint32_t direction = 0;
  if (!r.word(&h->xid) || !r.word(&direction) || direction != kReply) return false;
  if (!r.word(&h->reply_stat)) return false;
  if (h->reply_stat == MSG_ACCEPTED) {
    if (read_auth(r, &h->verf, CallHeaderStatus::kBadVerifier) != CallHeaderStatus::kOk ||
        !r.word(&h->accept_stat)) {
      return false;
    }
    if (h->accept_stat == PROG_MISMATCH &&
        (!r.word(&h->mismatch_low) || !r.word(&h->mismatch_high))) {
      return false;
    }
  } else if (h->reply_stat == MSG_DENIED) {
    if (!r.word(&h->reject_stat)) return false;
    if (h->reject_stat == RPC_MISMATCH) {
      if (!r.word(&h->mismatch_low) || !r.word(&h->mismatch_high)) return false;
    } else if (!r.word(&h->auth_stat)) {
      return false;
    }
  } else {
    return false;
  }
  *results_offset = r.pos();
  return true;
}

bool decode_credential(const CallHeader& h, CallerCred* cred) {
  *cred = CallerCred{};
  if (h.cred.flavor == AUTH_NONE) return true;
  if (h.cred.flavor != AUTH_SYS) return false;
  char machine[256];
  gid_t gids[16];
  authunix_parms parms{};
  parms.aup_machname = machine;
  parms.aup_gids = gids;
  XDR x;
  xdrmem_create(&x, const_cast<char*>(h.cred.body), h.cred.length, XDR_DECODE);
  if (!xdr_authunix_parms(&x, &parms)) return false;
  cred->auth_sys = true;
  cred->uid = parms.aup_uid;
  cred->gid = parms.aup_gid;
  cred->ngids = std::min<u_int>(parms.aup_len, 16);
  for (uint32_t i = 0; i < cred->ngids; ++i) cred->gids[i] = gids[i];
  return true;
}

bool encode_accepted_reply_header(XDR* out, uint32_t xid, accept_stat stat,
                                  std::string_view verifier_body) {
  rpc_msg msg{};
  msg.rm_xid = xid;
  msg.rm_direction = REPLY;
  msg.rm_reply.rp_stat = MSG_ACCEPTED;
  msg.acpted_rply.ar_verf = _null_auth;
  msg.acpted_rply.ar_verf.oa_base = const_cast<char*>(verifier_body.data());
  msg.acpted_rply.ar_verf.oa_length = static_cast<u_int>(verifier_body.size());
  msg.acpted_rply.ar_stat = stat;
  msg.acpted_rply.ar_results.where = nullptr;
  msg.acpted_rply.ar_results.proc = to_xdrproc(xdr_nothing);
  return xdr_replymsg(out, &msg);
}

Result<size_t> encode_call_record(const CallSpec& spec, xdrproc_t xargs, const void* args,
                                  size_t max_record, std::vector<char>* out) {
  rpc_msg msg{};
  msg.rm_xid = spec.xid;
  msg.rm_direction = CALL;
  msg.rm_call.cb_rpcvers = RPC_MSG_VERSION;
  msg.rm_call.cb_prog = spec.prog;
  msg.rm_call.cb_vers = spec.vers;
  msg.rm_call.cb_proc = spec.proc;
  if (spec.tls_probe) {
    msg.rm_call.cb_cred = _null_auth;
    msg.rm_call.cb_cred.oa_flavor = kAuthTls;
  } else if (spec.auth_sys_body.empty()) {
    msg.rm_call.cb_cred = _null_auth;
  } else {
    msg.rm_call.cb_cred.oa_flavor = AUTH_SYS;
    msg.rm_call.cb_cred.oa_base = const_cast<char*>(spec.auth_sys_body.data());
    msg.rm_call.cb_cred.oa_length = static_cast<u_int>(spec.auth_sys_body.size());
  }
  msg.rm_call.cb_verf = _null_auth;

  // Size the buffer once: header (with the largest credential) + arguments.
  unsigned long arg_bytes = xdr_sizeof(xargs, const_cast<void*>(args));
  if (arg_bytes == 0 && xargs != to_xdrproc(xdr_nothing)) {
    return Status(EINVAL, "rpc call arguments do not encode");
  }
  size_t need = 4 + 40 + 2 * MAX_AUTH_BYTES + arg_bytes;
  if (need > max_record + 4) return Status(EMSGSIZE, "rpc call arguments too large");
  if (out->size() < need) out->resize(need);
  XDR x;
  xdrmem_create(&x, out->data() + 4, static_cast<u_int>(out->size() - 4), XDR_ENCODE);
  bool ok = xdr_callmsg(&x, &msg) && xargs(&x, const_cast<void*>(args), 0);
  size_t body = xdr_getpos(&x);
  xdr_destroy(&x);
  if (!ok) return Status(EINVAL, "rpc call arguments do not encode");
  put_record_mark(out->data(), static_cast<uint32_t>(body), true);
  return body + 4;
}

}  // namespace odafs::rpc
