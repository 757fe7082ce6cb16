// The soak's checker must catch what it is there to catch: torn blocks, another file's
// blocks, blocks at the wrong place, damaged bytes. If it passed those, a clean soak would
// prove nothing.
#include <doctest/doctest.h>

#include <vector>

#include "tests/soak/soak_client.h"
#include "tests/soak/soak_model.h"

using namespace odafs::soak;

namespace {
constexpr size_t kBlock = 8192;

std::vector<unsigned char> file_of(uint64_t file_id, size_t blocks, uint64_t writer = 1) {
  std::vector<unsigned char> bytes(blocks * kBlock);
  for (size_t b = 0; b < blocks; ++b) {
    fill_block({bytes.data() + b * kBlock, kBlock}, BlockId{file_id, b, writer, 100 + b});
  }
  return bytes;
}
}  // namespace

TEST_CASE("a block written by fill_block checks as valid and says whose it is") {
  std::vector<unsigned char> block(kBlock);
  fill_block(block, BlockId{7, 3, 9, 42});
  BlockId id;
  REQUIRE(check_block(block, &id) == BlockCheck::kValid);
  CHECK(id.file_id == 7);
  CHECK(id.index == 3);
  CHECK(id.writer == 9);
  CHECK(id.seq == 42);
  std::vector<unsigned char> zeros(kBlock);
  CHECK(check_block(zeros, nullptr) == BlockCheck::kZero);
}

TEST_CASE("a torn block (two versions of it) fails, wherever the tear is") {
  std::vector<unsigned char> old_block(kBlock), new_block(kBlock);
  fill_block(old_block, BlockId{7, 3, 1, 1});
  fill_block(new_block, BlockId{7, 3, 2, 1});
  // The two versions differ from the writer word (byte 24) on.
  for (size_t tear : {size_t{32}, size_t{48}, size_t{4096}, kBlock - 8}) {
    std::vector<unsigned char> torn(new_block.begin(), new_block.begin() + tear);
    torn.insert(torn.end(), old_block.begin() + tear, old_block.end());
    CAPTURE(tear);
    CHECK(check_block(torn, nullptr) != BlockCheck::kValid);
  }
  std::vector<unsigned char> half_zero(new_block);
  std::fill(half_zero.begin() + 4096, half_zero.end(), 0);
  CHECK(check_block(half_zero, nullptr) == BlockCheck::kBadPayload);
}

TEST_CASE("one flipped bit anywhere fails") {
  std::vector<unsigned char> block(kBlock);
  fill_block(block, BlockId{7, 3, 1, 1});
  for (size_t at : {size_t{0}, size_t{17}, size_t{40}, size_t{1000}, kBlock - 1}) {
    std::vector<unsigned char> bad(block);
    bad[at] ^= 0x10;
    CAPTURE(at);
    CHECK(check_block(bad, nullptr) != BlockCheck::kValid);
  }
}

TEST_CASE("check_file accepts holes and rejects other files' and misplaced blocks") {
  auto good = file_of(5, 4);
  CHECK(check_file(good, kBlock, 0).empty());
  CHECK(check_file(good, kBlock, 5).empty());
  CHECK_FALSE(check_file(good, kBlock, 6).empty());

  auto holes = good;
  std::fill(holes.begin() + kBlock, holes.begin() + 3 * kBlock, 0);
  CHECK(check_file(holes, kBlock, 0).empty());

  auto mixed = good;  // block 2 of another file
  auto other = file_of(6, 4);
  std::copy(other.begin() + 2 * kBlock, other.begin() + 3 * kBlock, mixed.begin() + 2 * kBlock);
  CHECK(check_file(mixed, kBlock, 0).find("belongs to file 6") != std::string::npos);

  auto moved = good;  // block 1's bytes at block 2
  std::copy(good.begin() + kBlock, good.begin() + 2 * kBlock, moved.begin() + 2 * kBlock);
  CHECK(check_file(moved, kBlock, 0).find("holds block 1") != std::string::npos);

  std::span<const unsigned char> ragged(good.data(), good.size() - 100);
  CHECK(check_file(ragged, kBlock, 0).find("not a multiple") != std::string::npos);
}

TEST_CASE("a client report survives its one-line form") {
  ClientReport r;
  r.id = 12;
  r.ops = 345;
  r.races = 6;
  r.errors = 1;
  r.checksum_errors = 2;
  r.bytes_checked = 1 << 20;
  r.ops_per_second = {3, 0, 9};
  r.first_problem = "shared read: x = y\nsecond line";
  ClientReport back;
  REQUIRE(ClientReport::parse(r.to_line(), &back));
  CHECK(back.id == 12);
  CHECK(back.ops == 345);
  CHECK(back.races == 6);
  CHECK(back.errors == 1);
  CHECK(back.checksum_errors == 2);
  CHECK(back.bytes_checked == (1u << 20));
  CHECK(back.ops_per_second == std::vector<uint32_t>{3, 0, 9});
  CHECK(back.first_problem == "shared read: x = y second line");
  CHECK_FALSE(ClientReport::parse("odafsd: something else", &back));
}
