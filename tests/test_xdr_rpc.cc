// Unit: XDR of the ONC RPC headers odafs relies on (libtirpc's encoders): the accepted
// reply header's fixed length, which pre-posted reads assume, and a call header with an
// AUTH_SYS credential followed by arguments, as Channel::start builds it.
#include <doctest/doctest.h>
#include <rpc/rpc.h>

#include <cstring>
#include <string>
#include <vector>

#include "proto/odafs_prot.h"
#include "rpc/client_channel.h"
#include "rpc/xdr_util.h"
#include "tests/support/xdr_util.h"

using odafs::rpc::to_xdrproc;
using odafs::test::be32;
using odafs::test::encode;
using odafs::test::fill_fh;
using odafs::test::free_xdr;
using odafs::test::Wire;

TEST_CASE("an accepted reply header with AUTH_NONE is kAcceptedReplyHeaderBytes long") {
  rpc_msg reply{};
  reply.rm_xid = 0xdeadbeef;
  reply.rm_direction = REPLY;
  reply.rm_reply.rp_stat = MSG_ACCEPTED;
  reply.acpted_rply.ar_verf = _null_auth;
  reply.acpted_rply.ar_stat = SUCCESS;
  reply.acpted_rply.ar_results.where = nullptr;
  reply.acpted_rply.ar_results.proc = to_xdrproc(odafs::rpc::xdr_nothing);
  auto wire = encode(xdr_replymsg, &reply);
  CHECK(wire.size() == odafs::rpc::Channel::kAcceptedReplyHeaderBytes);
  CHECK(be32(wire.data()) == 0xdeadbeef);
}

TEST_CASE("RPC call header with an AUTH_SYS credential round trip") {
  std::string machine = "client.example";
  gid_t gids[3] = {10, 20, 4000000000u};
  authunix_parms parms{};
  parms.aup_time = 1234567;
  parms.aup_machname = machine.data();
  parms.aup_uid = 1001;
  parms.aup_gid = 1002;
  parms.aup_len = 3;
  parms.aup_gids = gids;
  std::vector<char> cred = encode(xdr_authunix_parms, &parms, MAX_AUTH_BYTES);
  // time, machine name (4 + 14 + 2 pad), uid, gid, gid count, 3 gids.
  CHECK(cred.size() == 4 + 4 + 16 + 4 + 4 + 4 + 3 * 4);

  rpc_msg call{};
  call.rm_xid = 0x01020304;
  call.rm_direction = CALL;
  call.rm_call.cb_rpcvers = RPC_MSG_VERSION;
  call.rm_call.cb_prog = ODAFS_PROGRAM;
  call.rm_call.cb_vers = ODAFS_V3;
  call.rm_call.cb_proc = ODAFSPROC_READ;
  call.rm_call.cb_cred.oa_flavor = AUTH_SYS;
  call.rm_call.cb_cred.oa_base = cred.data();
  call.rm_call.cb_cred.oa_length = static_cast<u_int>(cred.size());
  call.rm_call.cb_verf = _null_auth;

  // Append READ arguments after the header, as Channel::start does.
  read_args args{};
  fill_fh(args.fh, 5);
  args.offset = 4096;
  args.count = 512;
  std::vector<char> buf(4096);
  XDR x;
  xdrmem_create(&x, buf.data(), static_cast<u_int>(buf.size()), XDR_ENCODE);
  REQUIRE(xdr_callmsg(&x, &call));
  size_t header_len = xdr_getpos(&x);
  REQUIRE(xdr_read_args(&x, &args));
  size_t total = xdr_getpos(&x);
  xdr_destroy(&x);
  // xid, CALL, rpcvers, prog, vers, proc, cred (flavor, length, body), verf (flavor, 0).
  CHECK(header_len == 6 * 4 + 8 + cred.size() + 8);
  CHECK(be32(buf.data() + 4) == CALL);
  CHECK(be32(buf.data() + 12) == 0x2000da5f);

  char cred_area[2 * MAX_AUTH_BYTES];
  rpc_msg got{};
  got.rm_call.cb_cred.oa_base = cred_area;
  got.rm_call.cb_verf.oa_base = cred_area + MAX_AUTH_BYTES;
  xdrmem_create(&x, buf.data(), static_cast<u_int>(total), XDR_DECODE);
  REQUIRE(xdr_callmsg(&x, &got));
  read_args got_args{};
  REQUIRE(xdr_read_args(&x, &got_args));
  CHECK(xdr_getpos(&x) == total);
  xdr_destroy(&x);

  CHECK(got.rm_xid == 0x01020304u);
  CHECK(got.rm_direction == CALL);
  CHECK(got.rm_call.cb_rpcvers == RPC_MSG_VERSION);
  CHECK(got.rm_call.cb_prog == ODAFS_PROGRAM);
  CHECK(got.rm_call.cb_vers == ODAFS_V3);
  CHECK(got.rm_call.cb_proc == ODAFSPROC_READ);
  CHECK(got.rm_call.cb_verf.oa_flavor == AUTH_NONE);
  CHECK(got.rm_call.cb_verf.oa_length == 0);
  REQUIRE(got.rm_call.cb_cred.oa_flavor == AUTH_SYS);
  REQUIRE(got.rm_call.cb_cred.oa_length == cred.size());
  CHECK(std::memcmp(got.rm_call.cb_cred.oa_base, cred.data(), cred.size()) == 0);
  CHECK(std::memcmp(got_args.fh, args.fh, ODAFS_FHSIZE) == 0);
  CHECK(got_args.offset == 4096);
  CHECK(got_args.count == 512);

  authunix_parms back{};
  xdrmem_create(&x, got.rm_call.cb_cred.oa_base, got.rm_call.cb_cred.oa_length, XDR_DECODE);
  REQUIRE(xdr_authunix_parms(&x, &back));
  xdr_destroy(&x);
  CHECK(back.aup_time == 1234567);
  REQUIRE(back.aup_machname != nullptr);
  CHECK(std::string(back.aup_machname) == machine);
  CHECK(back.aup_uid == 1001);
  CHECK(back.aup_gid == 1002);
  REQUIRE(back.aup_len == 3);
  CHECK(back.aup_gids[0] == 10);
  CHECK(back.aup_gids[1] == 20);
  CHECK(back.aup_gids[2] == 4000000000u);
  free_xdr(xdr_authunix_parms, &back);

  SUBCASE("a truncated call header does not decode") {
    for (size_t cut : {size_t{3}, size_t{20}, header_len - 9, header_len - 1}) {
      CAPTURE(cut);
      rpc_msg part{};
      part.rm_call.cb_cred.oa_base = cred_area;
      part.rm_call.cb_verf.oa_base = cred_area + MAX_AUTH_BYTES;
      xdrmem_create(&x, buf.data(), static_cast<u_int>(cut), XDR_DECODE);
      CHECK_FALSE(xdr_callmsg(&x, &part));
      xdr_destroy(&x);
    }
  }
  SUBCASE("a credential body longer than MAX_AUTH_BYTES does not decode") {
    std::vector<char> big(buf.begin(), buf.begin() + 6 * 4);
    Wire w;
    w.bytes(big.data(), big.size());
    w.u32(AUTH_SYS);
    w.u32(MAX_AUTH_BYTES + 4);
    std::string body(MAX_AUTH_BYTES + 4, 'c');
    w.bytes(body.data(), body.size());
    w.u32(AUTH_NONE);
    w.u32(0);
    rpc_msg part{};
    part.rm_call.cb_cred.oa_base = cred_area;
    part.rm_call.cb_verf.oa_base = cred_area + MAX_AUTH_BYTES;
    xdrmem_create(&x, w.data(), static_cast<u_int>(w.size()), XDR_DECODE);
    CHECK_FALSE(xdr_callmsg(&x, &part));
    xdr_destroy(&x);
  }
}
