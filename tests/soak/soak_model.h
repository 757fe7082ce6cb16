// The soak's model of file contents: self-describing blocks.
//
// Every block the soak writes says which file it belongs to, where in that file it sits,
// who wrote it and which of that writer's writes it was; the rest of the block is derived
// from those words. A reader can therefore check any block it gets without knowing what
// other processes did: the block is either all zeros (a hole, or never written), or a whole
// block of the right file at the right index. A block mixing two writes (torn), another
// file's block, a block from another position, or damaged bytes all fail the check. This
// is exactly the block-atomic read guarantee of docs/RELIABILITY.md, no more: a reader may
// see an older version of a block than the newest (caches), never a mixture.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace odafs::soak {

struct BlockId {
  uint64_t file_id = 0;  // chosen by the file's creator; never 0
  uint64_t index = 0;    // block number within the file
  uint64_t writer = 0;   // the writing client's number
  uint64_t seq = 0;      // that writer's write counter
};

// Fills `block` (the whole block, >= 64 bytes) with the contents for id.
void fill_block(std::span<unsigned char> block, const BlockId& id);

enum class BlockCheck {
  kZero,        // all zeros
  kValid,       // a whole block written by fill_block; *id says whose
  kBadHeader,   // not zeros, not a header: damaged, or not a soak block
  kBadPayload,  // a header whose payload does not match it: torn or damaged
};
BlockCheck check_block(std::span<const unsigned char> block, BlockId* id);

// Checks a whole read of a file of block size `block_size` starting at block 0: its
// length is a multiple of the block size, every block is zero or valid, every valid block
// sits at its own index and all valid blocks belong to one file (expect_file_id, or the
// first valid block's file when it is 0). Returns "" or a description of the first fault.
std::string check_file(std::span<const unsigned char> bytes, size_t block_size,
                       uint64_t expect_file_id);

}  // namespace odafs::soak
