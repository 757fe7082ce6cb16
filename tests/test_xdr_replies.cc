// Unit: XDR of the odafs protocol's replies (rpcgen output): round trips, the fixed sizes
// the client's pre-posted reads and the server's reply buffers rely on, the bounds on
// variable-length parts, references. Call arguments are in test_xdr_args.cc.
#include <doctest/doctest.h>
#include <rpc/rpc.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "proto/odafs_prot.h"
#include "proto/ref_xdr.h"
#include "proto/wire_layout.h"
#include "rpc/xdr_util.h"
#include "tests/support/xdr_util.h"

using odafs::rpc::to_xdrproc;
using odafs::test::be32;
using odafs::test::decode;
using odafs::test::encode;
using odafs::test::encodes;
using odafs::test::fill_fh;
using odafs::test::free_xdr;
using odafs::test::Wire;

namespace {

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
  a.file_generation = 0x0123456789abcdefull;
  a.atime = {-5, 999999999};
  a.mtime = {1700000000, 1};
  a.ctime = {0x7fffffffffffll, 0};
  a.rdev = {259, 0xfffff};
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
  CHECK(a.file_generation == b.file_generation);
  CHECK(a.atime.seconds == b.atime.seconds);
  CHECK(a.atime.nseconds == b.atime.nseconds);
  CHECK(a.mtime.seconds == b.mtime.seconds);
  CHECK(a.mtime.nseconds == b.mtime.nseconds);
  CHECK(a.ctime.seconds == b.ctime.seconds);
  CHECK(a.ctime.nseconds == b.ctime.nseconds);
  CHECK(a.rdev.major == b.rdev.major);
  CHECK(a.rdev.minor == b.rdev.minor);
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
  CHECK(encode(xdr_odafs_fattr, &zero).size() == 96);

  odafs_fattr back;
  size_t used = 0;
  REQUIRE(decode(xdr_odafs_fattr, wire.data(), wire.size(), &back, &used));
  CHECK(used == 96);
  check_attr_equal(a, back);
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
  CHECK(be32(wire.data() + 4 + sizeof(odafs::wire::Fattr)) == TRUE);
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
