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
  rpc_msg reply{};
  reply.rm_xid = call.xid;
  reply.rm_direction = REPLY;
  // Answers the call with the reply encode() writes into out, and nothing else.
  auto reject = [&](auto encode) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    xdr_setpos(&out, 0);
    encode();
    send_reply(conn, w, xdr_getpos(&out));
  };
  // An accepted reply with no results (the layout Reply::results starts too).
  auto accept_error = [&](accept_stat stat) {
    return [&out, xid = call.xid, stat] { encode_accepted_reply_header(&out, xid, stat); };
  };
  // The other layouts (denied replies, PROG_MISMATCH): reply as fill() leaves it.
  auto message = [&](auto fill) {
    return [&, fill] {
      fill();
      xdr_replymsg(&out, &reply);
    };
  };
  auto auth_error = [&](auth_stat why) {
    return message([&reply, why] {
      reply.rm_reply.rp_stat = MSG_DENIED;
      reply.rjcted_rply.rj_stat = AUTH_ERROR;
      reply.rjcted_rply.rj_why = why;
    });
  };

  if (conn.refused) {
    // The program admits the peer to nothing (Admission::refused): whatever it asked, NULL
    // and AUTH_TLS included, it hears why, and nothing runs (run_records then closes it).
    reject(auth_error(AUTH_TOOWEAK));
    return;
  }
  switch (header) {
    case CallHeaderStatus::kOk:
      break;
    case CallHeaderStatus::kGarbage:
    case CallHeaderStatus::kTruncated:
      counters_.garbage_records.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: header truncated (%zu-byte record)",
                               conn.peer.c_str(), record.size());
      reject(accept_error(GARBAGE_ARGS));
      return;
    case CallHeaderStatus::kRpcMismatch:
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: RPC version %u, not 2", conn.peer.c_str(),
                               call.rpcvers);
      reject(message([&] {
        reply.rm_reply.rp_stat = MSG_DENIED;
        reply.rjcted_rply.rj_stat = RPC_MISMATCH;
        reply.rjcted_rply.rj_vers.low = RPC_MSG_VERSION;
        reply.rjcted_rply.rj_vers.high = RPC_MSG_VERSION;
      }));
      return;
    case CallHeaderStatus::kBadCredential:
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: %u-byte credential (limit %u)", conn.peer.c_str(),
                               call.cred_length, kMaxAuthBytes);
      reject(auth_error(AUTH_BADCRED));
      return;
    case CallHeaderStatus::kBadVerifier:
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: %u-byte verifier (limit %u)", conn.peer.c_str(),
                               call.verf_length, kMaxAuthBytes);
      reject(auth_error(AUTH_BADVERF));
      return;
  }

  if (call.cred_flavor == kAuthTls) {
    // RFC 9289: the NULL procedure with AUTH_TLS asks to start TLS on this connection.
    // Refused (AUTH_BADCRED, as a server without TLS answers) for another procedure,
    // another program, a connection already under TLS, or a server without a certificate.
    if (call.proc != 0 || call.prog != options_.program ||
        conn.tls.load(std::memory_order_acquire) != nullptr || !start_tls(conn, call.xid, w)) {
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: AUTH_TLS probe refused (%s)", conn.peer.c_str(),
                               call.proc != 0 || call.prog != options_.program
                                   ? "not the NULL procedure"
                               : conn.tls.load() != nullptr ? "TLS already running"
                                                            : "this server offers no TLS");
      reject(auth_error(AUTH_BADCRED));
    }
    return;
  }
  CallerCred& cred = w.cred;
  bool cred_ok = decode_credential(call, &cred);
  if (!cred_ok) {
    reject(auth_error(AUTH_BADCRED));
    return;
  }
  if (call.prog != options_.program) {
    reject(accept_error(PROG_UNAVAIL));
    return;
  }
  if (call.vers != options_.version) {
    reject(message([&] {
      reply.rm_reply.rp_stat = MSG_ACCEPTED;
      reply.acpted_rply.ar_verf = _null_auth;
      reply.acpted_rply.ar_stat = PROG_MISMATCH;
      reply.acpted_rply.ar_vers.low = options_.version;
      reply.acpted_rply.ar_vers.high = options_.version;
    }));
    return;
  }
  uint32_t proc = call.proc;
  if (proc >= procs_.size() || !procs_[proc].fn) {
    reject(accept_error(PROC_UNAVAIL));
    return;
  }
  CallContext ctx;
  ctx.xid = call.xid;
  ctx.proc = proc;
  ctx.cred = &cred;
  ctx.peer = &conn.peer;
  ctx.connection = conn.id;
  ctx.admission = &conn.admission;
  ctx.connection_tag = &conn.tag;
  if (options_.authorize) {
    if (auth_stat why = options_.authorize(ctx, &cred); why != AUTH_OK) {
      reject(auth_error(why));
      return;
    }
  }
  procs_[proc].calls->fetch_add(1, std::memory_order_relaxed);
  XDR in;
  xdrmem_create(&in, record.data() + args_offset, static_cast<u_int>(record.size() - args_offset),
                XDR_DECODE);
  Reply r(&out, call.xid, w.out.data() + w.out_used + 4);
  bool decoded = false;
  try {
    decoded = procs_[proc].fn(ctx, &in, r);
  } catch (const CallRefused& e) {
    ODAFS_LOG_WARN_THROTTLED("%s from %s refused: cannot act as uid %u gid %u (%u groups)",
                             procs_[proc].name, conn.peer.c_str(), cred.uid, cred.gid, cred.ngids);
    reject(auth_error(e.why()));
    return;
  } catch (const std::exception& e) {
    ODAFS_LOG_ERROR("%s from %s failed: %s", procs_[proc].name, conn.peer.c_str(), e.what());
    reject(accept_error(SYSTEM_ERR));
    return;
  }
  if (!decoded) {
    counters_.garbage_args.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("%s from %s: undecodable arguments", procs_[proc].name,
                             conn.peer.c_str());
    reject(accept_error(GARBAGE_ARGS));
    return;
  }
  if (r.failed()) {
    ODAFS_LOG_ERROR("%s from %s: results do not fit the %zu-byte reply buffer", procs_[proc].name,
                    conn.peer.c_str(), options_.max_reply);
    reject(accept_error(SYSTEM_ERR));
    return;
  }
  if (!r.started()) {
    ODAFS_LOG_ERROR("%s from %s: handler produced no reply", procs_[proc].name, conn.peer.c_str());
    reject(accept_error(SYSTEM_ERR));
    return;
  }
  send_reply(conn, w, xdr_getpos(&out));
}

}  // namespace odafs::rpc
