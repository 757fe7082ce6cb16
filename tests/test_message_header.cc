// Unit: decoding ONC RPC call and reply headers from a record (rpc/message_header.h).
#include <arpa/inet.h>
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "rpc/message_header.h"

using odafs::rpc::CallHeader;
using odafs::rpc::CallHeaderStatus;
using odafs::rpc::decode_call_header;

namespace {

std::string words(const std::vector<uint32_t>& ws) {
  std::string out;
  for (uint32_t w : ws) {
    uint32_t be = htonl(w);
    out.append(reinterpret_cast<char*>(&be), 4);
  }
  return out;
}

CallHeaderStatus decode(const std::string& record, CallHeader* h, size_t* args = nullptr) {
  size_t offset = 0;
  // A heap copy of exactly the record's size, so ASan catches any read past it. It lives
  // until the next decode: h->cred.body points into it.
  static std::vector<char> exact;
  exact.assign(record.begin(), record.end());
  exact.shrink_to_fit();
  CallHeaderStatus s = decode_call_header(exact.data(), exact.size(), h, &offset);
  if (args) *args = offset;
  return s;
}

}  // namespace

TEST_CASE("a well-formed call: fields, credential body and where the arguments start") {
  // AUTH_SYS credential of 8 bytes, AUTH_NONE verifier, then 4 bytes of arguments.
  std::string rec =
      words({7, 0, 2, 100, 1, 5, 1, 8, 0xaaaaaaaa, 0xbbbbbbbb, 0, 0}) + words({0x1234});
  CallHeader h;
  size_t args = 0;
  REQUIRE(decode(rec, &h, &args) == CallHeaderStatus::kOk);
  CHECK(h.xid == 7);
  CHECK(h.prog == 100);
  CHECK(h.vers == 1);
  CHECK(h.proc == 5);
  CHECK(h.cred.flavor == 1);
  CHECK(h.cred.length == 8);
  CHECK(std::memcmp(h.cred.body, "\xaa\xaa\xaa\xaa", 4) == 0);
  CHECK(args == rec.size() - 4);
}

TEST_CASE("every truncation is refused without reading past the record") {
  std::string rec = words({7, 0, 2, 100, 1, 5, 1, 6, 0x01020304, 0x05060000, 0, 0});
  for (size_t len = 0; len < rec.size(); ++len) {
    CallHeader h;
    CallHeaderStatus s = decode(rec.substr(0, len), &h);
    CAPTURE(len);
    CHECK(s == (len < 8 ? CallHeaderStatus::kGarbage : CallHeaderStatus::kTruncated));
  }
}

TEST_CASE("what the server answers rather than drops") {
  CallHeader h;
  CHECK(decode(words({9, 1, 2, 100, 1, 0, 0, 0, 0, 0}), &h) == CallHeaderStatus::kGarbage);
  CHECK(decode(words({9, 0, 3, 100, 1, 0, 0, 0, 0, 0}), &h) == CallHeaderStatus::kRpcMismatch);
  CHECK(h.xid == 9);
  CHECK(h.rpcvers == 3);
  CHECK(decode(words({9, 0, 2, 100, 1, 0, 1, 401}), &h) == CallHeaderStatus::kBadCredential);
  CHECK(decode(words({9, 0, 2, 100, 1, 0, 0, 0, 0, 0xffffffff}), &h) ==
        CallHeaderStatus::kBadVerifier);
  // A length near 2^32 must not wrap the padding arithmetic.
  CHECK(decode(words({9, 0, 2, 100, 1, 0, 0, 0xfffffffd}), &h) == CallHeaderStatus::kBadCredential);
}

namespace {

bool decode_reply(const std::string& record, odafs::rpc::ReplyHeader* h, size_t* results) {
  std::vector<char> exact(record.begin(), record.end());  // exact size: ASan sees overreads
  return odafs::rpc::decode_reply_header(exact.data(), exact.size(), h, results);
}

}  // namespace

TEST_CASE("reply headers: accepted, mismatches, denied, and where the results start") {
  odafs::rpc::ReplyHeader h;
  size_t results = 0;
  // xid 9, REPLY, MSG_ACCEPTED, verifier AUTH_NONE of 4 bytes, SUCCESS, one result word.
  std::string ok = words({9, 1, 0, 0, 4, 0xdddddddd, 0, 0x55});
  REQUIRE(decode_reply(ok, &h, &results));
  CHECK(h.xid == 9);
  CHECK(h.accept_stat == 0);
  CHECK(results == ok.size() - 4);

  REQUIRE(decode_reply(words({9, 1, 0, 0, 0, 2, 3, 5}), &h, &results));
  CHECK(h.accept_stat == 2);  // PROG_MISMATCH
  CHECK(h.mismatch_low == 3);
  CHECK(h.mismatch_high == 5);

  REQUIRE(decode_reply(words({9, 1, 1, 1, 2}), &h, &results));
  CHECK(h.reply_stat == 1);
  CHECK(h.reject_stat == 1);  // AUTH_ERROR
  CHECK(h.auth_stat == 2);

  // A status word outside every enumerator is kept as the word it is, not refused: the
  // caller maps it (to SYSTEM_ERR) without ever holding it in an enum.
  REQUIRE(decode_reply(words({9, 1, 0, 0, 0, 54016}), &h, &results));
  CHECK(h.accept_stat == 54016);
}

TEST_CASE("malformed replies are refused without reading past the record") {
  odafs::rpc::ReplyHeader h;
  size_t results = 0;
  CHECK_FALSE(decode_reply(words({9, 0, 0, 0, 0, 0}), &h, &results));  // a CALL
  CHECK_FALSE(decode_reply(words({9, 1, 7}), &h, &results));           // reply_stat 7
  CHECK_FALSE(decode_reply(words({9, 1, 0, 0, 401}) + std::string(404, '\0') + words({0}), &h,
                           &results));  // verifier over 400 bytes
  std::string prog_mismatch = words({9, 1, 0, 0, 0, 2, 3, 5});
  for (size_t len = 0; len < prog_mismatch.size(); ++len) {
    CHECK_FALSE(decode_reply(prog_mismatch.substr(0, len), &h, &results));
  }
}
