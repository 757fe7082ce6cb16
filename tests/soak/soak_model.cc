#include "tests/soak/soak_model.h"

#include <algorithm>
#include <cstring>

namespace odafs::soak {
namespace {

constexpr uint64_t kMagic = 0x6f646166732d736bULL;  // "odafs-sk"
constexpr size_t kHeaderWords = 6;                  // magic, file, index, writer, seq, check

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t header_check(const BlockId& id) {
  return mix(mix(mix(mix(kMagic ^ id.file_id) ^ id.index) ^ id.writer) ^ id.seq);
}

// The payload word at position i (after the header) of a block whose check word is c.
uint64_t payload_word(uint64_t c, size_t i) { return mix(c + i); }

uint64_t load(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

void fill_block(std::span<unsigned char> block, const BlockId& id) {
  const uint64_t check = header_check(id);
  const uint64_t header[kHeaderWords] = {kMagic, id.file_id, id.index, id.writer, id.seq, check};
  std::memcpy(block.data(), header, sizeof header);
  size_t words = block.size() / 8;
  for (size_t i = kHeaderWords; i < words; ++i) {
    uint64_t w = payload_word(check, i);
    std::memcpy(block.data() + i * 8, &w, 8);
  }
  // A tail shorter than a word (block sizes are powers of two, so none in practice).
  for (size_t i = words * 8; i < block.size(); ++i) block[i] = static_cast<unsigned char>(check);
}

BlockCheck check_block(std::span<const unsigned char> block, BlockId* id) {
  if (std::all_of(block.begin(), block.end(), [](unsigned char c) { return c == 0; })) {
    return BlockCheck::kZero;
  }
  if (block.size() < kHeaderWords * 8) return BlockCheck::kBadHeader;
  const unsigned char* p = block.data();
  BlockId got{load(p + 8), load(p + 16), load(p + 24), load(p + 32)};
  uint64_t check = load(p + 40);
  if (load(p) != kMagic || check != header_check(got)) return BlockCheck::kBadHeader;
  size_t words = block.size() / 8;
  for (size_t i = kHeaderWords; i < words; ++i) {
    if (load(p + i * 8) != payload_word(check, i)) return BlockCheck::kBadPayload;
  }
  for (size_t i = words * 8; i < block.size(); ++i) {
    if (block[i] != static_cast<unsigned char>(check)) return BlockCheck::kBadPayload;
  }
  if (id != nullptr) *id = got;
  return BlockCheck::kValid;
}

std::string check_file(std::span<const unsigned char> bytes, size_t block_size,
                       uint64_t expect_file_id) {
  if (bytes.size() % block_size != 0) {
    return "read " + std::to_string(bytes.size()) + " bytes, not a multiple of the block size";
  }
  uint64_t file_id = expect_file_id;
  for (size_t b = 0; b * block_size < bytes.size(); ++b) {
    BlockId id;
    switch (check_block(bytes.subspan(b * block_size, block_size), &id)) {
      case BlockCheck::kZero:
        continue;
      case BlockCheck::kBadHeader:
        return "block " + std::to_string(b) + ": damaged header";
      case BlockCheck::kBadPayload:
        return "block " + std::to_string(b) + ": payload does not match its header (torn)";
      case BlockCheck::kValid:
        break;
    }
    if (id.index != b) {
      return "block " + std::to_string(b) + " holds block " + std::to_string(id.index);
    }
    if (file_id == 0) file_id = id.file_id;
    if (id.file_id != file_id) {
      return "block " + std::to_string(b) + " belongs to file " + std::to_string(id.file_id) +
             ", not " + std::to_string(file_id);
    }
  }
  return "";
}

}  // namespace odafs::soak
