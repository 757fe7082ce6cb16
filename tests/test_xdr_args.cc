// Unit: XDR of the odafs protocol's call arguments (rpcgen output): round trips, truncation,
// the bounds on names. Replies are in test_xdr_replies.cc, the ONC RPC headers in
// test_xdr_rpc.cc.
#include <doctest/doctest.h>
#include <rpc/rpc.h>

#include <cstring>
#include <string>

#include "proto/odafs_prot.h"
#include "tests/support/xdr_util.h"

using odafs::test::decode;
using odafs::test::encode;
using odafs::test::encodes;
using odafs::test::fill_fh;
using odafs::test::free_xdr;
using odafs::test::Wire;

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
