// Big-endian integers as they sit in a wire frame. Each is a byte array, so a struct made
// of them has no padding and alignment 1: the struct *is* the frame's layout, and a
// static_assert on its size checks the layout against the protocol's description.
//
// Frames are copied in and out of byte buffers with std::memcpy (never by casting a buffer
// pointer to a frame pointer), so there are no alignment or aliasing questions.
#pragma once

#include <cstdint>

namespace odafs {

struct Be16 {
  unsigned char b[2];
  uint16_t get() const { return static_cast<uint16_t>((b[0] << 8) | b[1]); }
  void set(uint16_t v) {
    b[0] = static_cast<unsigned char>(v >> 8);
    b[1] = static_cast<unsigned char>(v);
  }
};

struct Be32 {
  unsigned char b[4];
  uint32_t get() const {
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  }
  void set(uint32_t v) {
    for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(v >> (24 - 8 * i));
  }
};

struct Be64 {
  Be32 hi, lo;
  uint64_t get() const { return (uint64_t{hi.get()} << 32) | lo.get(); }
  void set(uint64_t v) {
    hi.set(static_cast<uint32_t>(v >> 32));
    lo.set(static_cast<uint32_t>(v));
  }
};

static_assert(sizeof(Be16) == 2 && sizeof(Be32) == 4 && sizeof(Be64) == 8);
static_assert(alignof(Be64) == 1);

}  // namespace odafs
