// Unit: ONC RPC record marking (rpc/record.h).
#include <doctest/doctest.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "rpc/record.h"

using odafs::Status;
using odafs::rpc::kLastFragment;
using odafs::rpc::put_record_mark;
using odafs::rpc::RecordAssembler;

namespace {

// Appends one fragment (mark + payload) to out.
void add_fragment(std::string* out, const std::string& payload, bool last) {
  char mark[4];
  put_record_mark(mark, static_cast<uint32_t>(payload.size()), last);
  out->append(mark, 4);
  out->append(payload);
}

// Feeds `stream` in pieces of at most `chunk` bytes; returns the records delivered.
// Fails the test if the assembler refuses the stream.
std::vector<std::string> feed_in_chunks(RecordAssembler& a, const std::string& stream,
                                        size_t chunk) {
  std::vector<std::string> records;
  for (size_t off = 0; off < stream.size(); off += chunk) {
    size_t len = std::min(chunk, stream.size() - off);
    Status fed = a.feed(stream.data() + off, len,
                        [&](std::vector<char>& r) { records.emplace_back(r.begin(), r.end()); });
    REQUIRE_MESSAGE(fed.ok(), fed.to_string());
  }
  return records;
}

std::string bytes(size_t len, char first) {
  std::string s(len, '\0');
  for (size_t i = 0; i < len; ++i) s[i] = static_cast<char>(first + i % 23);
  return s;
}

}  // namespace

TEST_CASE("put_record_mark encodes the length big-endian and the last-fragment bit") {
  unsigned char m[4];
  put_record_mark(reinterpret_cast<char*>(m), 0x123456, true);
  CHECK(m[0] == 0x80);
  CHECK(m[1] == 0x12);
  CHECK(m[2] == 0x34);
  CHECK(m[3] == 0x56);

  put_record_mark(reinterpret_cast<char*>(m), 0x123456, false);
  CHECK(m[0] == 0x00);
  CHECK(m[1] == 0x12);
  CHECK(m[2] == 0x34);
  CHECK(m[3] == 0x56);

  put_record_mark(reinterpret_cast<char*>(m), 0, true);
  CHECK(m[0] == 0x80);
  CHECK(m[1] == 0);
  CHECK(m[2] == 0);
  CHECK(m[3] == 0);

  uint32_t raw;
  put_record_mark(reinterpret_cast<char*>(&raw), 7, true);
  CHECK(ntohl(raw) == (kLastFragment | 7u));
}

TEST_CASE("one record in one fragment") {
  RecordAssembler a(1024);
  CHECK(a.idle());
  std::string stream;
  std::string payload = bytes(100, 'a');
  add_fragment(&stream, payload, true);
  auto records = feed_in_chunks(a, stream, stream.size());
  REQUIRE(records.size() == 1);
  CHECK(records[0] == payload);
  CHECK(a.idle());
}

TEST_CASE("a record split across several fragments") {
  RecordAssembler a(1024);
  std::string p1 = bytes(10, 'a'), p2 = bytes(33, 'k'), p3 = bytes(5, 'A');
  std::string stream;
  add_fragment(&stream, p1, false);
  add_fragment(&stream, p2, false);
  add_fragment(&stream, p3, true);

  SUBCASE("fed at once") {
    auto records = feed_in_chunks(a, stream, stream.size());
    REQUIRE(records.size() == 1);
    CHECK(records[0] == p1 + p2 + p3);
  }
  SUBCASE("nothing is delivered before the last fragment") {
    size_t before_last = 4 + p1.size() + 4 + p2.size();
    std::vector<std::string> records;
    auto keep = [&](std::vector<char>& r) { records.emplace_back(r.begin(), r.end()); };
    REQUIRE(a.feed(stream.data(), before_last, keep).ok());
    CHECK(records.empty());
    CHECK_FALSE(a.idle());
    REQUIRE(a.feed(stream.data() + before_last, stream.size() - before_last, keep).ok());
    REQUIRE(records.size() == 1);
    CHECK(records[0] == p1 + p2 + p3);
  }
  CHECK(a.idle());
}

TEST_CASE("several records coalesced into one buffer") {
  RecordAssembler a(1024);
  std::vector<std::string> want = {bytes(1, 'a'), bytes(17, 'b'), bytes(200, 'c'), bytes(3, 'd')};
  std::string stream;
  add_fragment(&stream, want[0], true);
  add_fragment(&stream, want[1].substr(0, 9), false);
  add_fragment(&stream, want[1].substr(9), true);
  add_fragment(&stream, want[2], true);
  add_fragment(&stream, want[3], true);
  auto records = feed_in_chunks(a, stream, stream.size());
  CHECK(records == want);
  CHECK(a.idle());
}

TEST_CASE("feeding byte by byte and in odd-sized chunks gives the same records") {
  std::vector<std::string> want = {bytes(50, 'a'), bytes(7, 'x'), bytes(300, 'm')};
  std::string stream;
  add_fragment(&stream, want[0], true);
  add_fragment(&stream, want[1].substr(0, 3), false);
  add_fragment(&stream, want[1].substr(3), true);
  add_fragment(&stream, want[2].substr(0, 100), false);
  add_fragment(&stream, want[2].substr(100, 100), false);
  add_fragment(&stream, want[2].substr(200), true);
  for (size_t chunk : {1, 2, 3, 5, 7, 64}) {
    CAPTURE(chunk);
    RecordAssembler a(1024);
    CHECK(feed_in_chunks(a, stream, chunk) == want);
    CHECK(a.idle());
  }
}

TEST_CASE("a partial mark is not idle") {
  RecordAssembler a(1024);
  std::string stream;
  add_fragment(&stream, "abc", true);
  auto none = [](std::vector<char>&) { FAIL("no record expected yet"); };
  REQUIRE(a.feed(stream.data(), 2, none).ok());
  CHECK_FALSE(a.idle());
}

TEST_CASE("zero-length last fragment") {
  RecordAssembler a(1024);
  std::string p = bytes(20, 'q');

  SUBCASE("ends a record") {
    std::string stream;
    add_fragment(&stream, p, false);
    add_fragment(&stream, "", true);
    for (size_t chunk : {stream.size(), size_t{1}}) {
      RecordAssembler b(1024);
      auto records = feed_in_chunks(b, stream, chunk);
      REQUIRE(records.size() == 1);
      CHECK(records[0] == p);
      CHECK(b.idle());
    }
  }
  SUBCASE("an empty record is delivered as soon as its mark arrives") {
    std::string stream;
    add_fragment(&stream, "", true);
    auto records = feed_in_chunks(a, stream, stream.size());
    REQUIRE(records.size() == 1);
    CHECK(records[0].empty());
    CHECK(a.idle());
  }
  SUBCASE("between other records") {
    std::string stream;
    add_fragment(&stream, p, true);
    add_fragment(&stream, "", true);
    add_fragment(&stream, p, true);
    auto records = feed_in_chunks(a, stream, stream.size());
    CHECK(records == std::vector<std::string>{p, "", p});
  }
}

TEST_CASE("the callback may swap the record out; the next record starts empty") {
  RecordAssembler a(1024);
  std::string stream;
  add_fragment(&stream, "first", true);
  add_fragment(&stream, "second", true);
  std::vector<std::vector<char>> kept;
  auto swap_out = [&](std::vector<char>& r) {
    std::vector<char> junk = {'j', 'u', 'n', 'k'};
    r.swap(junk);
    kept.push_back(std::move(junk));
  };
  REQUIRE(a.feed(stream.data(), stream.size(), swap_out).ok());
  REQUIRE(kept.size() == 2);
  CHECK(std::string(kept[0].begin(), kept[0].end()) == "first");
  CHECK(std::string(kept[1].begin(), kept[1].end()) == "second");
}

TEST_CASE("records up to max_record are accepted") {
  RecordAssembler a(64);
  std::string stream;
  add_fragment(&stream, bytes(64, 'a'), true);
  add_fragment(&stream, bytes(32, 'b'), false);
  add_fragment(&stream, bytes(32, 'c'), true);
  auto records = feed_in_chunks(a, stream, 5);
  REQUIRE(records.size() == 2);
  CHECK(records[0].size() == 64);
  CHECK(records[1] == bytes(32, 'b') + bytes(32, 'c'));
}

TEST_CASE("a fragment larger than max_record is refused before it is buffered") {
  RecordAssembler a(64);
  std::string stream;
  add_fragment(&stream, bytes(65, 'a'), true);
  int delivered = 0;
  auto count = [&](std::vector<char>&) { ++delivered; };
  // Only the mark: the refusal must come from the length alone.
  Status fed = a.feed(stream.data(), 4, count);
  CHECK(fed.errno_value() == EMSGSIZE);
  CHECK(delivered == 0);
  CHECK_MESSAGE(fed.message().find("65") != std::string::npos, fed.message());

  SUBCASE("a huge length is refused too") {
    RecordAssembler b(1 << 20);
    char mark[4];
    put_record_mark(mark, 0x7fffffff, false);
    Status huge = b.feed(mark, 4, count);
    CHECK(huge.errno_value() == EMSGSIZE);
    CHECK_FALSE(huge.message().empty());
    CHECK(delivered == 0);
  }
}

TEST_CASE("a record whose fragments sum over max_record is refused") {
  RecordAssembler a(64);
  std::string stream;
  add_fragment(&stream, bytes(40, 'a'), false);
  add_fragment(&stream, bytes(25, 'b'), true);  // 65 in all
  int delivered = 0;
  auto count = [&](std::vector<char>&) { ++delivered; };
  Status fed = a.feed(stream.data(), stream.size(), count);
  CHECK(fed.errno_value() == EMSGSIZE);
  CHECK(delivered == 0);
  // The message names the record's size so far, not the last fragment's.
  CHECK_MESSAGE(fed.message().find("at least 65 bytes") != std::string::npos, fed.message());
  CHECK_MESSAGE(fed.message().find("limit of 64") != std::string::npos, fed.message());

  SUBCASE("also when the fragments arrive in separate feeds") {
    RecordAssembler b(64);
    size_t first = 4 + 40;
    REQUIRE(b.feed(stream.data(), first, count).ok());
    Status second = b.feed(stream.data() + first, stream.size() - first, count);
    CHECK(second.errno_value() == EMSGSIZE);
    CHECK_FALSE(second.message().empty());
    CHECK(delivered == 0);
  }
}

TEST_CASE("the limit applies per record: many records each under the limit pass") {
  RecordAssembler a(16);
  std::string stream;
  for (int i = 0; i < 50; ++i)
    add_fragment(&stream, bytes(16, static_cast<char>('a' + i % 20)), true);
  auto records = feed_in_chunks(a, stream, 13);
  CHECK(records.size() == 50);
}

TEST_CASE(
    "empty fragments that are not the last are refused: they would hold a connection "
    "forever without a record") {
  RecordAssembler a(1024);
  std::string stream;
  for (int i = 0; i < 3; ++i) add_fragment(&stream, "", false);
  int delivered = 0;
  Status fed = a.feed(stream.data(), stream.size(), [&](std::vector<char>&) { ++delivered; });
  CHECK(fed.errno_value() == EPROTO);
  CHECK(delivered == 0);
  CHECK_MESSAGE(fed.message().find("empty fragment") != std::string::npos, fed.message());
}
