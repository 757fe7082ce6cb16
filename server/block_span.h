// The one walk over the cache blocks of a byte range of a file: READ, READ_DIRECT,
// GETREFS and the cache update after a WRITE all cut their range into per-block pieces
// with it, so the offset → (block index, offset in block, length) arithmetic lives here
// and nowhere else.
//
//   for (const BlockPiece& p : BlockSpan(offset, len, block_size)) {
//     // bytes [p.pos, p.pos + p.length) of the file are bytes
//     // [p.in_block, p.in_block + p.length) of block p.index, and
//     // bytes [p.done, p.done + p.length) of the caller's buffer.
//   }
//
// A value type; iterating allocates nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace odafs::server {

// One block's share of a byte range.
struct BlockPiece {
  uint64_t index = 0;     // block number within the file
  uint64_t pos = 0;       // file offset of the piece's first byte
  uint32_t in_block = 0;  // offset of that byte within the block
  uint32_t length = 0;    // bytes of the range in this block: never 0
  size_t done = 0;        // bytes of the range before this piece (where it goes in a buffer)
};

class BlockSpan {
 public:
  // The bytes [offset, offset + len) of a file cut at multiples of block_size.
  // REQUIRES: block_size > 0; offset + len does not overflow.
  BlockSpan(uint64_t offset, uint64_t len, uint32_t block_size)
      : offset_(offset), len_(len), block_size_(block_size) {}

  // The blocks from the one holding byte `offset` to the last that starts before `end`,
  // each piece starting at its block's start (for handing out whole blocks). Empty when
  // the block holding offset starts at or past end.
  static BlockSpan whole_blocks(uint64_t offset, uint64_t end, uint32_t block_size) {
    uint64_t start = offset - offset % block_size;
    return BlockSpan(start, start < end ? end - start : 0, block_size);
  }

  // Bytes of block `index` that a file of file_size bytes has: what a cache fill must
  // bring for the block to hold all of them. REQUIRES: the block starts before file_size.
  uint32_t file_bytes(uint64_t index, uint64_t file_size) const {
    return static_cast<uint32_t>(std::min<uint64_t>(block_size_, file_size - index * block_size_));
  }

  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = BlockPiece;
    using difference_type = std::ptrdiff_t;
    using pointer = const BlockPiece*;
    using reference = const BlockPiece&;

    const BlockPiece& operator*() const { return piece_; }
    const BlockPiece* operator->() const { return &piece_; }
    iterator& operator++() {
      piece_.done += piece_.length;
      piece_.pos += piece_.length;
      cut();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return at_end(); }

   private:
    friend class BlockSpan;
    iterator(uint64_t offset, uint64_t len, uint32_t block_size)
        : len_(len), block_size_(block_size) {
      piece_.pos = offset;
      cut();
    }
    bool at_end() const { return piece_.done >= len_; }
    void cut() {
      if (at_end()) return;
      piece_.index = piece_.pos / block_size_;
      piece_.in_block = static_cast<uint32_t>(piece_.pos % block_size_);
      piece_.length = static_cast<uint32_t>(
          std::min<uint64_t>(block_size_ - piece_.in_block, len_ - piece_.done));
    }

    BlockPiece piece_;
    uint64_t len_;
    uint32_t block_size_;
  };

  iterator begin() const { return iterator(offset_, len_, block_size_); }
  std::default_sentinel_t end() const { return std::default_sentinel; }

 private:
  uint64_t offset_;
  uint64_t len_;
  uint32_t block_size_;
};

}  // namespace odafs::server
