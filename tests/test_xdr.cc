// Unit: XDR encoding of the odafs protocol (rpcgen output) and of the ONC RPC headers.
#include <doctest/doctest.h>
#include <rpc/rpc.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "proto/odafs_prot.h"
#include "proto/ref_xdr.h"
#include "proto/wire_layout.h"
#include "rpc/client_channel.h"
#include "rpc/xdr_util.h"

using odafs::rpc::to_xdrproc;

namespace {

// Encodes obj with fn into a fresh buffer; returns the encoded bytes (fails the test if the
// encoder refuses).
template <class T>
std::vector<char> encode(bool_t (*fn)(XDR*, T*), T* obj, size_t capacity = 1 << 16) {
  std::vector<char> buf(capacity);
  XDR x;
  xdrmem_create(&x, buf.data(), static_cast<u_int>(buf.size()), XDR_ENCODE);
  bool ok = fn(&x, obj);
  size_t len = xdr_getpos(&x);
  xdr_destroy(&x);
  REQUIRE(ok);
  buf.resize(len);
  return buf;
}

// Decodes buf[0, len) into *obj (zeroed first); returns whether the decoder accepted it and
// whether it consumed exactly len bytes.
template <class T>
bool decode(bool_t (*fn)(XDR*, T*), const char* data, size_t len, T* obj,
            size_t* consumed = nullptr) {
  std::memset(obj, 0, sizeof *obj);
  XDR x;
  xdrmem_create(&x, const_cast<char*>(data), static_cast<u_int>(len), XDR_DECODE);
  bool ok = fn(&x, obj);
  if (consumed != nullptr) *consumed = xdr_getpos(&x);
  xdr_destroy(&x);
  return ok;
}

template <class T>
bool encodes(bool_t (*fn)(XDR*, T*), T* obj) {
  std::vector<char> buf(1 << 16);
  XDR x;
  xdrmem_create(&x, buf.data(), static_cast<u_int>(buf.size()), XDR_ENCODE);
  bool ok = fn(&x, obj);
  xdr_destroy(&x);
  return ok;
}

// Hand-built XDR for inputs the encoders refuse to produce.
class Wire {
 public:
  void u32(uint32_t v) {
    uint32_t be = htonl(v);
    bytes(&be, 4);
  }
  void u64(uint64_t v) {
    u32(static_cast<uint32_t>(v >> 32));
    u32(static_cast<uint32_t>(v));
  }
  void bytes(const void* p, size_t len) {
    buf_.insert(buf_.end(), static_cast<const char*>(p), static_cast<const char*>(p) + len);
  }
  void string(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
    buf_.resize(buf_.size() + ((4 - s.size() % 4) % 4), '\0');
  }
  char* data() { return buf_.data(); }
  size_t size() const { return buf_.size(); }

 private:
  std::vector<char> buf_;
};

template <class T>
void free_xdr(bool_t (*fn)(XDR*, T*), T* obj) {
  xdr_free(to_xdrproc(fn), reinterpret_cast<char*>(obj));
}

uint32_t be32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return ntohl(v);
}

void fill_fh(char* fh, char seed) {
  for (int i = 0; i < ODAFS_FHSIZE; ++i) fh[i] = static_cast<char>(seed + i * 7);
}

odafs_fattr sample_attr() {
  odafs_fattr a{};
  a.type = ODAFS_REG;
  a.mode = 0640;
  a.nlink = 3;
  a.uid = 1000;
  a.gid = 4294967294u;
  a.size = 0x123456789abcull;
  a.used = 4096;
  a.fileid = 0xfedcba9876543210ull;
  a.atime = {-5, 999999999};
  a.mtime = {1700000000, 1};
  a.ctime = {0x7fffffffffffll, 0};
  return a;
}

void check_attr_equal(const odafs_fattr& a, const odafs_fattr& b) {
  CHECK(a.type == b.type);
  CHECK(a.mode == b.mode);
  CHECK(a.nlink == b.nlink);
  CHECK(a.uid == b.uid);
  CHECK(a.gid == b.gid);
  CHECK(a.size == b.size);
  CHECK(a.used == b.used);
  CHECK(a.fileid == b.fileid);
  CHECK(a.atime.seconds == b.atime.seconds);
  CHECK(a.atime.nseconds == b.atime.nseconds);
  CHECK(a.mtime.seconds == b.mtime.seconds);
  CHECK(a.mtime.nseconds == b.mtime.nseconds);
  CHECK(a.ctime.seconds == b.ctime.seconds);
  CHECK(a.ctime.nseconds == b.ctime.nseconds);
}

}  // namespace

TEST_CASE("odafs_fattr is exactly sizeof(wire::Fattr) bytes on the wire") {
  odafs_fattr a = sample_attr();
  CHECK(xdr_sizeof(to_xdrproc(xdr_odafs_fattr), &a) == sizeof(odafs::wire::Fattr));
  auto wire = encode(xdr_odafs_fattr, &a);
  CHECK(wire.size() == sizeof(odafs::wire::Fattr));
  // Also for a zeroed one: no part of it is optional.
  odafs_fattr zero{};
  zero.type = ODAFS_DIR;
  CHECK(encode(xdr_odafs_fattr, &zero).size() == 80);

  odafs_fattr back;
  size_t used = 0;
  REQUIRE(decode(xdr_odafs_fattr, wire.data(), wire.size(), &back, &used));
  CHECK(used == 80);
  check_attr_equal(a, back);
}

TEST_CASE("read_args round trip") {
  read_args in{};
  fill_fh(in.fh, 3);
  in.offset = 0x1122334455667788ull;
  in.count = 65536;
  in.session = 0xa1b2c3d4e5f60718ull;
  auto wire = encode(xdr_read_args, &in);
  CHECK(wire.size() == ODAFS_FHSIZE + 8 + 4 + 8);
  read_args out;
  size_t used = 0;
  REQUIRE(decode(xdr_read_args, wire.data(), wire.size(), &out, &used));
  CHECK(used == wire.size());
  CHECK(std::memcmp(in.fh, out.fh, ODAFS_FHSIZE) == 0);
  CHECK(out.offset == in.offset);
  CHECK(out.count == in.count);
  CHECK(out.session == in.session);
  free_xdr(xdr_read_args, &out);

  // Every shorter prefix is refused.
  for (size_t cut = 0; cut < wire.size(); ++cut) {
    CAPTURE(cut);
    CHECK_FALSE(decode(xdr_read_args, wire.data(), cut, &out));
    free_xdr(xdr_read_args, &out);
  }
}

TEST_CASE("write_args round trip with data, and truncated data is refused") {
  std::string data(1001, '\0');  // odd length: exercises the padding
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 + 1);
  write_args in{};
  fill_fh(in.fh, 9);
  in.offset = 8192;
  in.stable = ODAFS_FILE_SYNC;
  in.data.data_len = static_cast<u_int>(data.size());
  in.data.data_val = data.data();
  auto wire = encode(xdr_write_args, &in);
  // fh, offset, stable, length word, data padded to 4.
  CHECK(wire.size() == ODAFS_FHSIZE + 8 + 4 + 4 + 1004);

  write_args out;
  REQUIRE(decode(xdr_write_args, wire.data(), wire.size(), &out));
  CHECK(std::memcmp(in.fh, out.fh, ODAFS_FHSIZE) == 0);
  CHECK(out.offset == 8192);
  CHECK(out.stable == ODAFS_FILE_SYNC);
  REQUIRE(out.data.data_len == data.size());
  REQUIRE(out.data.data_val != nullptr);
  CHECK(std::string(out.data.data_val, out.data.data_len) == data);
  free_xdr(xdr_write_args, &out);
  CHECK(out.data.data_val == nullptr);

  SUBCASE("cut in the middle of the data") {
    size_t cut = ODAFS_FHSIZE + 8 + 4 + 4 + 500;
    CHECK_FALSE(decode(xdr_write_args, wire.data(), cut, &out));
    free_xdr(xdr_write_args, &out);
  }
  SUBCASE("cut inside the padding") {
    CHECK_FALSE(decode(xdr_write_args, wire.data(), wire.size() - 1, &out));
    free_xdr(xdr_write_args, &out);
  }
  SUBCASE("cut inside the length word") {
    CHECK_FALSE(decode(xdr_write_args, wire.data(), ODAFS_FHSIZE + 8 + 4 + 2, &out));
    free_xdr(xdr_write_args, &out);
  }
}

TEST_CASE("readdir_res round trip with several entries") {
  std::vector<std::string> names = {"a", "hello.txt", "dir with spaces", std::string(255, 'z'),
                                    "\xc3\xa9t\xc3\xa9"};
  std::vector<odafs_dirent> entries(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    entries[i].fileid = 1000 + i;
    entries[i].type = i % 2 ? ODAFS_DIR : ODAFS_REG;
    entries[i].name = names[i].data();
    entries[i].cookie = (i + 1) * 0x100000001ull;
  }
  readdir_res in{};
  in.status = ODAFS_OK;
  in.readdir_res_u.ok.entries.entries_len = static_cast<u_int>(entries.size());
  in.readdir_res_u.ok.entries.entries_val = entries.data();
  in.readdir_res_u.ok.eof = TRUE;
  auto wire = encode(xdr_readdir_res, &in);

  readdir_res out;
  size_t used = 0;
  REQUIRE(decode(xdr_readdir_res, wire.data(), wire.size(), &out, &used));
  CHECK(used == wire.size());
  REQUIRE(out.status == ODAFS_OK);
  const readdir_ok& ok = out.readdir_res_u.ok;
  CHECK(ok.eof == TRUE);
  REQUIRE(ok.entries.entries_len == names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    CAPTURE(i);
    const odafs_dirent& e = ok.entries.entries_val[i];
    CHECK(e.fileid == 1000 + i);
    CHECK(e.type == entries[i].type);
    REQUIRE(e.name != nullptr);
    CHECK(std::string(e.name) == names[i]);
    CHECK(e.cookie == entries[i].cookie);
  }
  free_xdr(xdr_readdir_res, &out);

  SUBCASE("truncated in the last entry's name") {
    // From the end: eof, the last cookie, the last name (5 bytes padded to 8), its length.
    size_t name_start = wire.size() - 4 - 8 - 8;
    CHECK_FALSE(decode(xdr_readdir_res, wire.data(), name_start + 2, &out));
    free_xdr(xdr_readdir_res, &out);
  }
  SUBCASE("an error status carries no body") {
    readdir_res err{};
    err.status = ODAFS_ERR_BADCOOKIE;
    auto w = encode(xdr_readdir_res, &err);
    CHECK(w.size() == 4);
    REQUIRE(decode(xdr_readdir_res, w.data(), w.size(), &out));
    CHECK(out.status == ODAFS_ERR_BADCOOKIE);
    free_xdr(xdr_readdir_res, &out);
  }
}

TEST_CASE("mount_res round trip") {
  mount_res in{};
  in.status = ODAFS_OK;
  mount_ok& ok = in.mount_res_u.ok;
  fill_fh(ok.root, 42);
  ok.block_size = 8192;
  ok.max_read = 1 << 20;
  ok.max_write = 1 << 19;
  ok.max_record = (1 << 20) + 4096;
  std::memcpy(ok.write_verf, "\x01\x02\x03\x04\xf5\xf6\xf7\xf8", ODAFS_VERFSIZE);
  std::string engine = "127.0.0.1:4000";  // 14 bytes, padded to 16
  ok.engine = engine.data();
  std::string kind = "soft";  // 4 bytes, no padding
  ok.engine_kind = kind.data();
  ok.session = 0x0102030405060708ull;
  for (int i = 0; i < ODAFS_SECRETSIZE; ++i) ok.session_secret[i] = static_cast<char>(i * 7);
  auto wire = encode(xdr_mount_res, &in);
  CHECK(wire.size() ==
        4 + ODAFS_FHSIZE + 4 * 4 + ODAFS_VERFSIZE + 4 + 16 + 4 + 4 + 8 + ODAFS_SECRETSIZE);

  mount_res out;
  REQUIRE(decode(xdr_mount_res, wire.data(), wire.size(), &out));
  CHECK(out.status == ODAFS_OK);
  const mount_ok& o = out.mount_res_u.ok;
  CHECK(std::memcmp(o.root, ok.root, ODAFS_FHSIZE) == 0);
  CHECK(o.block_size == ok.block_size);
  CHECK(o.max_read == ok.max_read);
  CHECK(o.max_write == ok.max_write);
  CHECK(o.max_record == ok.max_record);
  CHECK(std::memcmp(o.write_verf, ok.write_verf, ODAFS_VERFSIZE) == 0);
  CHECK(std::string(o.engine) == engine);
  CHECK(std::string(o.engine_kind) == kind);
  CHECK(o.session == ok.session);
  CHECK(std::memcmp(o.session_secret, ok.session_secret, ODAFS_SECRETSIZE) == 0);
  free_xdr(xdr_mount_res, &out);

  mount_res err{};
  err.status = ODAFS_ERR_NOENT;
  auto w = encode(xdr_mount_res, &err);
  CHECK(w.size() == 4);
  CHECK(be32(w.data()) == 2);  // NFSv3's number

  REQUIRE(decode(xdr_mount_res, w.data(), w.size(), &out));
  CHECK(out.status == ODAFS_ERR_NOENT);
  free_xdr(xdr_mount_res, &out);
}

TEST_CASE("stats_res round trip") {
  std::vector<std::string> names = {"rpc.calls", "cache.hits", std::string(64, 'n')};
  std::vector<odafs_counter> counters(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    counters[i].name = names[i].data();
    counters[i].value = 0xffffffffffull * (i + 1);
  }
  stats_res in{};
  in.counters.counters_len = static_cast<u_int>(counters.size());
  in.counters.counters_val = counters.data();
  auto wire = encode(xdr_stats_res, &in);

  stats_res out;
  REQUIRE(decode(xdr_stats_res, wire.data(), wire.size(), &out));
  REQUIRE(out.counters.counters_len == names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    CAPTURE(i);
    REQUIRE(out.counters.counters_val[i].name != nullptr);
    CHECK(std::string(out.counters.counters_val[i].name) == names[i]);
    CHECK(out.counters.counters_val[i].value == counters[i].value);
  }
  free_xdr(xdr_stats_res, &out);

  SUBCASE("a counter name over 64 bytes neither encodes nor decodes") {
    std::string long_name(65, 'x');
    odafs_counter c{long_name.data(), 1};
    stats_res bad{};
    bad.counters.counters_len = 1;
    bad.counters.counters_val = &c;
    CHECK_FALSE(encodes(xdr_stats_res, &bad));

    Wire w;
    w.u32(1);
    w.string(long_name);
    w.u64(1);
    CHECK_FALSE(decode(xdr_stats_res, w.data(), w.size(), &out));
    free_xdr(xdr_stats_res, &out);
  }
  SUBCASE("more counters than the bound do not decode") {
    Wire w;
    w.u32(ODAFS_MAXCOUNTERS + 1);
    for (int i = 0; i <= ODAFS_MAXCOUNTERS; ++i) {
      w.string("c");
      w.u64(i);
    }
    CHECK_FALSE(decode(xdr_stats_res, w.data(), w.size(), &out));
    free_xdr(xdr_stats_res, &out);
  }
}

TEST_CASE("odafs_name is string<255>: longer names are refused") {
  char fh[ODAFS_FHSIZE];
  fill_fh(fh, 1);
  auto diropargs_wire = [&](const std::string& name) {
    Wire w;
    w.bytes(fh, ODAFS_FHSIZE);
    w.string(name);
    return w;
  };
  diropargs out;

  Wire ok = diropargs_wire(std::string(255, 'a'));
  REQUIRE(decode(xdr_diropargs, ok.data(), ok.size(), &out));
  REQUIRE(out.name != nullptr);
  CHECK(std::strlen(out.name) == 255);
  free_xdr(xdr_diropargs, &out);

  Wire too_long = diropargs_wire(std::string(256, 'a'));
  CHECK_FALSE(decode(xdr_diropargs, too_long.data(), too_long.size(), &out));
  free_xdr(xdr_diropargs, &out);

  // A length word far beyond the bound (and beyond the buffer) is refused as well.
  Wire huge;
  huge.bytes(fh, ODAFS_FHSIZE);
  huge.u32(0xfffffff0u);
  huge.u32(0);
  CHECK_FALSE(decode(xdr_diropargs, huge.data(), huge.size(), &out));
  free_xdr(xdr_diropargs, &out);

  // The encoder enforces the bound too.
  std::string long_name(256, 'b');
  diropargs in{};
  fill_fh(in.dir, 2);
  in.name = long_name.data();
  CHECK_FALSE(encodes(xdr_diropargs, &in));

  // And a path (string<4096>) takes a 256-byte component without complaint.
  odafs_path path = long_name.data();
  odafs_path back = nullptr;
  auto wire = encode(xdr_odafs_path, &path);
  XDR x;
  xdrmem_create(&x, wire.data(), static_cast<u_int>(wire.size()), XDR_DECODE);
  CHECK(xdr_odafs_path(&x, &back));
  xdr_destroy(&x);
  REQUIRE(back != nullptr);
  CHECK(std::string(back) == long_name);
  free_xdr(xdr_odafs_path, &back);
}

TEST_CASE("read_res: the payload starts right after a fixed-size header") {
  // The client pre-posts READ buffers assuming wire::ReadReplyPrefix (status, fattr, eof,
  // payload length) right after the accepted reply header, then the payload; the server
  // sizes its reply buffer with sizeof(wire::Ref) per reference.
  std::string payload = "0123456789abc";
  read_res in{};
  in.status = ODAFS_OK;
  in.read_res_u.ok.attr = sample_attr();
  in.read_res_u.ok.eof = TRUE;
  in.read_res_u.ok.data.data_len = static_cast<u_int>(payload.size());
  in.read_res_u.ok.data.data_val = payload.data();
  odafs_ref ref{};
  ref.segment = 5;
  ref.generation = 9;
  ref.length = 4096;
  ref.rights = 1;
  ref.session = 77;
  ref.block = 123;
  in.read_res_u.ok.refs.refs_len = 1;
  in.read_res_u.ok.refs.refs_val = &ref;
  auto wire = encode(xdr_read_res, &in);
  constexpr size_t kHeader = sizeof(odafs::wire::ReadReplyPrefix);
  constexpr size_t kRefBytes = sizeof(odafs::wire::Ref);
  REQUIRE(wire.size() == kHeader + 16 + 4 + kRefBytes);  // the trailer follows the payload
  CHECK(be32(wire.data() + kHeader + 16) == 1);
  CHECK(be32(wire.data()) == ODAFS_OK);
  CHECK(be32(wire.data() + 4 + 80) == TRUE);
  CHECK(be32(wire.data() + kHeader - 4) == payload.size());
  CHECK(std::string(wire.data() + kHeader, payload.size()) == payload);

  read_res out;
  REQUIRE(decode(xdr_read_res, wire.data(), wire.size(), &out));
  REQUIRE(out.status == ODAFS_OK);
  check_attr_equal(out.read_res_u.ok.attr, in.read_res_u.ok.attr);
  CHECK(out.read_res_u.ok.eof == TRUE);
  CHECK(std::string(out.read_res_u.ok.data.data_val, out.read_res_u.ok.data.data_len) == payload);
  REQUIRE(out.read_res_u.ok.refs.refs_len == 1);
  CHECK(out.read_res_u.ok.refs.refs_val[0].block == 123);
  CHECK(out.read_res_u.ok.refs.refs_val[0].session == 77);
  free_xdr(xdr_read_res, &out);
}

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
  call.rm_call.cb_vers = ODAFS_V1;
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
  CHECK(got.rm_call.cb_vers == ODAFS_V1);
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

TEST_CASE("a reference crosses the wire whole, the backend's token included") {
  odafs::ordma::Reference r;
  r.segment = 7;
  r.generation = 9;
  r.offset = 100;
  r.length = 4000;
  r.rights = odafs::ordma::kRightRead;
  r.session = 0x1122334455667788ull;
  for (size_t i = 0; i < r.capability.size(); ++i) r.capability[i] = static_cast<unsigned char>(i);
  for (size_t i = 0; i < r.token.size(); ++i) r.token[i] = static_cast<unsigned char>(0xa0 + i);
  odafs_ref w = odafs::ordma::reference_to_wire(r, 12345);
  auto bytes = encode(xdr_odafs_ref, &w);
  odafs_ref back_wire;
  REQUIRE(decode(xdr_odafs_ref, bytes.data(), bytes.size(), &back_wire));
  CHECK(back_wire.block == 12345);
  odafs::ordma::Reference back = odafs::ordma::reference_from_wire(back_wire);
  CHECK(back.segment == r.segment);
  CHECK(back.generation == r.generation);
  CHECK(back.offset == r.offset);
  CHECK(back.length == r.length);
  CHECK(back.rights == r.rights);
  CHECK(back.session == r.session);
  CHECK(back.capability == r.capability);
  CHECK(back.token == r.token);
}
