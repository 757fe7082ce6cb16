// rpc::Server's calls, one at a time: decoding the call header and credential, the
// AUTH_TLS probe, the program's authorization, running the procedure and encoding its
// reply (server_internal.h says which file holds what).
#include <arpa/inet.h>
#include <rpc/rpc.h>

#include <cstring>

#include "base/log.h"
#include "rpc/message_header.h"
#include "rpc/server_internal.h"
#include "rpc/xdr_util.h"

namespace odafs::rpc {

// Why a call is answered without its procedure's results: the reply's layout (RFC 5531)
// and the stat it carries. Empty (kNone): the call runs, or ran, as asked.
struct Server::Refusal {
  enum class Layout : uint8_t {
    kNone,
    kAccepted,      // MSG_ACCEPTED with an accept_stat and no results
    kAuth,          // MSG_DENIED, AUTH_ERROR with an auth_stat
    kRpcMismatch,   // MSG_DENIED, RPC_MISMATCH (version 2 only)
    kProgMismatch,  // MSG_ACCEPTED, PROG_MISMATCH with the server's version range
  };
  Layout layout = Layout::kNone;
  uint32_t stat = 0;

  explicit operator bool() const { return layout != Layout::kNone; }
  static Refusal accepted(accept_stat s) { return {Layout::kAccepted, s}; }
  static Refusal auth(auth_stat s) { return {Layout::kAuth, s}; }
};

XDR* Reply::results() {
  xdr_setpos(out_, 0);
  encode_accepted_reply_header(out_, xid_, SUCCESS);
  results_at_ = xdr_getpos(out_);
  started_ = true;
  return out_;
}

bool Reply::first_result_word(uint32_t* word) const {
  if (!started_ || failed_ || xdr_getpos(out_) < results_at_ + 4) return false;
  uint32_t net;
  std::memcpy(&net, buffer_ + results_at_, 4);
  *word = ntohl(net);
  return true;
}

bool Reply::send(xdrproc_t xres, const void* res) {
  if (!xres(results(), const_cast<void*>(res), 0)) failed_ = true;
  return !failed_;
}

void Server::dispatch(Connection& conn, std::vector<char>& record, Worker& w) {
  CallHeader call;
  size_t args_offset = 0;
  CallHeaderStatus header = decode_call_header(record.data(), record.size(), &call, &args_offset);
  if (header == CallHeaderStatus::kGarbage) {
    counters_.garbage_records.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("dropping a %zu-byte rpc record from %s: not a call", record.size(),
                             conn.peer.c_str());
    return;
  }
  XDR out;  // encoded in place, after the replies the worker holds (send_reply)
  xdrmem_create(&out, w.out.data() + w.out_used + 4, static_cast<u_int>(options_.max_reply),
                XDR_ENCODE);
  Refusal why = check_header(conn, header, call, record.size());
  if (!why && call.cred.flavor == kAuthTls) {
    // RFC 9289: the NULL procedure with AUTH_TLS asks to start TLS on this connection.
    // Refused (AUTH_BADCRED, as a server without TLS answers) for another procedure,
    // another program, a connection already under TLS, or a server without a certificate.
    const char* refused = call.proc != 0 || call.prog != options_.program ? "not the NULL procedure"
                          : conn.tls.load(std::memory_order_acquire) != nullptr
                              ? "TLS already running"
                          : !start_tls(conn, call.xid, w) ? "this server offers no TLS"
                                                          : nullptr;
    if (refused == nullptr) return;
    ODAFS_LOG_WARN_THROTTLED("rpc call from %s: AUTH_TLS probe refused (%s)", conn.peer.c_str(),
                             refused);
    why = Refusal::auth(AUTH_BADCRED);
  }
  CallerCred& cred = w.cred;
  if (!why) why = check_call(call, &cred);
  Reply reply(&out, call.xid, w.out.data() + w.out_used + 4);
  if (!why) {
    why = run_procedure(conn, call, cred, record.data() + args_offset, record.size() - args_offset,
                        reply);
  }
  if (why) {
    send_refusal(conn, w, &out, call.xid, why);
    return;
  }
  send_reply(conn, w, xdr_getpos(&out));
}

Server::Refusal Server::check_header(const Connection& conn, CallHeaderStatus header,
                                     const CallHeader& call, size_t record_size) {
  // A peer the program admits to nothing (Admission::refused) hears why, whatever it
  // asked, NULL and AUTH_TLS included, and nothing runs (run_records then closes it).
  if (conn.refused) return Refusal::auth(AUTH_TOOWEAK);
  switch (header) {
    case CallHeaderStatus::kOk:
      return {};
    case CallHeaderStatus::kGarbage:
    case CallHeaderStatus::kTruncated:
      counters_.garbage_records.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: header truncated (%zu-byte record)",
                               conn.peer.c_str(), record_size);
      return Refusal::accepted(GARBAGE_ARGS);
    case CallHeaderStatus::kRpcMismatch:
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: RPC version %u, not 2", conn.peer.c_str(),
                               call.rpcvers);
      return {Refusal::Layout::kRpcMismatch, 0};
    case CallHeaderStatus::kBadCredential:
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: %u-byte credential (limit %u)", conn.peer.c_str(),
                               call.cred.length, kMaxAuthBytes);
      return Refusal::auth(AUTH_BADCRED);
    case CallHeaderStatus::kBadVerifier:
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: %u-byte verifier (limit %u)", conn.peer.c_str(),
                               call.verf.length, kMaxAuthBytes);
      return Refusal::auth(AUTH_BADVERF);
  }
  return Refusal::accepted(GARBAGE_ARGS);
}

Server::Refusal Server::check_call(const CallHeader& call, CallerCred* cred) {
  if (!decode_credential(call, cred)) return Refusal::auth(AUTH_BADCRED);
  if (call.prog != options_.program) return Refusal::accepted(PROG_UNAVAIL);
  if (call.vers != options_.version) return {Refusal::Layout::kProgMismatch, 0};
  if (call.proc >= procs_.size() || !procs_[call.proc].fn) return Refusal::accepted(PROC_UNAVAIL);
  return {};
}

Server::Refusal Server::run_procedure(Connection& conn, const CallHeader& call, CallerCred& cred,
                                      const char* args, size_t args_len, Reply& reply) {
  const Procedure& proc = procs_[call.proc];
  CallContext ctx;
  ctx.xid = call.xid;
  ctx.proc = call.proc;
  ctx.cred = &cred;
  ctx.peer = &conn.peer;
  ctx.connection = conn.id;
  ctx.admission = &conn.admission;
  ctx.connection_tag = &conn.tag;
  if (options_.authorize) {
    if (auth_stat why = options_.authorize(ctx, &cred); why != AUTH_OK) {
      return Refusal::auth(why);
    }
  }
  proc.calls->fetch_add(1, std::memory_order_relaxed);
  XDR in;
  xdrmem_create(&in, const_cast<char*>(args), static_cast<u_int>(args_len), XDR_DECODE);
  bool decoded = false;
  try {
    decoded = proc.fn(ctx, &in, reply);
  } catch (const std::exception& e) {  // memory, or a bug: the server serves on
    ODAFS_LOG_ERROR("%s from %s failed: %s", proc.name, conn.peer.c_str(), e.what());
    return Refusal::accepted(SYSTEM_ERR);
  }
  if (reply.refusal() != AUTH_OK) {
    ODAFS_LOG_WARN_THROTTLED("%s from %s refused: cannot act as uid %u gid %u (%u groups)",
                             proc.name, conn.peer.c_str(), cred.uid, cred.gid, cred.ngids);
    return Refusal::auth(reply.refusal());
  }
  if (!decoded) {
    counters_.garbage_args.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("%s from %s: undecodable arguments", proc.name, conn.peer.c_str());
    return Refusal::accepted(GARBAGE_ARGS);
  }
  if (reply.failed()) {
    ODAFS_LOG_ERROR("%s from %s: results do not fit the %zu-byte reply buffer", proc.name,
                    conn.peer.c_str(), options_.max_reply);
    return Refusal::accepted(SYSTEM_ERR);
  }
  if (!reply.started()) {
    ODAFS_LOG_ERROR("%s from %s: handler produced no reply", proc.name, conn.peer.c_str());
    return Refusal::accepted(SYSTEM_ERR);
  }
  return {};
}

void Server::send_refusal(Connection& conn, Worker& w, XDR* out, uint32_t xid, const Refusal& why) {
  counters_.rejected.fetch_add(1, std::memory_order_relaxed);
  xdr_setpos(out, 0);
  if (why.layout == Refusal::Layout::kAccepted) {
    // The layout Reply::results starts too, with no results after it.
    encode_accepted_reply_header(out, xid, static_cast<accept_stat>(why.stat));
  } else {
    rpc_msg reply{};
    reply.rm_xid = xid;
    reply.rm_direction = REPLY;
    if (why.layout == Refusal::Layout::kProgMismatch) {
      reply.rm_reply.rp_stat = MSG_ACCEPTED;
      reply.acpted_rply.ar_verf = _null_auth;
      reply.acpted_rply.ar_stat = PROG_MISMATCH;
      reply.acpted_rply.ar_vers.low = options_.version;
      reply.acpted_rply.ar_vers.high = options_.version;
    } else if (why.layout == Refusal::Layout::kRpcMismatch) {
      reply.rm_reply.rp_stat = MSG_DENIED;
      reply.rjcted_rply.rj_stat = RPC_MISMATCH;
      reply.rjcted_rply.rj_vers.low = RPC_MSG_VERSION;
      reply.rjcted_rply.rj_vers.high = RPC_MSG_VERSION;
    } else {
      reply.rm_reply.rp_stat = MSG_DENIED;
      reply.rjcted_rply.rj_stat = AUTH_ERROR;
      reply.rjcted_rply.rj_why = static_cast<auth_stat>(why.stat);
    }
    xdr_replymsg(out, &reply);
  }
  send_reply(conn, w, xdr_getpos(out));
}

}  // namespace odafs::rpc
