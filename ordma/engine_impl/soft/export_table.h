// The export table: the server's TPT. One entry per exported segment (a server cache
// block), holding its generation, its state and how many one-sided reads are copying it
// right now.
//
// Revocation is O(1) whatever the number of clients holding references: bump the
// generation (every outstanding reference now faults) and wait for in-flight reads of the
// segment, which take microseconds, to let go. Nothing tracks who holds references.
//
// Thread-safety: every member may be called from any thread. pin()/unpin() are lock-free
// (the engine's path); revoke()/lock() spin only while a read of that segment is copying.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "ordma/fault.h"

namespace odafs::ordma {

class ExportTable {
 public:
  enum class State : uint32_t { kRevoked = 0, kExported = 1, kLocked = 2 };

  // All segments start revoked at generation 1.
  explicit ExportTable(size_t segments);

  size_t size() const { return count_; }

  // Makes seg readable again under its current generation; returns the generation. A
  // locked seg stays locked (readable once unlocked).
  // REQUIRES: seg < size().
  uint32_t export_segment(uint32_t seg);
  // Bumps seg's generation and marks it revoked; returns once no read of it is in flight,
  // so the caller may reuse the memory. Idempotent.
  void revoke(uint32_t seg);
  // Marks seg locked (reads fault) and returns once no read of it is in flight, so the
  // caller may change the memory. unlock() restores exported state, same generation: the
  // segment still holds the same file block, only its bytes changed.
  void lock(uint32_t seg);
  void unlock(uint32_t seg);

  uint32_t generation(uint32_t seg) const;
  State state(uint32_t seg) const;

  // Engine side: admits a read of seg under generation gen, or says why not. On kNone
  // the caller must unpin(seg) once it has copied the bytes.
  Fault pin(uint32_t seg, uint32_t gen);
  void unpin(uint32_t seg);

 private:
  // word = generation << 2 | state. One atomic word, so a reader sees a generation and a
  // state that belong together.
  struct alignas(64) Entry {
    std::atomic<uint64_t> word{(uint64_t{1} << 2) | uint64_t(State::kRevoked)};
    std::atomic<uint32_t> pins{0};
  };
  void wait_unpinned(Entry& e);

  size_t count_;
  std::unique_ptr<Entry[]> entries_;
};

}  // namespace odafs::ordma
