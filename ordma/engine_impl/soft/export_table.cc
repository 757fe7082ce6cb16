#include "ordma/engine_impl/soft/export_table.h"

#include <sched.h>

namespace odafs::ordma {
namespace {

constexpr uint64_t kStateMask = 3;

uint64_t make_word(uint32_t gen, ExportTable::State s) {
  return (uint64_t{gen} << 2) | static_cast<uint64_t>(s);
}
uint32_t gen_of(uint64_t word) { return static_cast<uint32_t>(word >> 2); }
ExportTable::State state_of(uint64_t word) {
  return static_cast<ExportTable::State>(word & kStateMask);
}

}  // namespace

ExportTable::ExportTable(size_t segments)
    : count_(segments), entries_(std::make_unique<Entry[]>(segments)) {}

uint32_t ExportTable::export_segment(uint32_t seg) {
  Entry& e = entries_[seg];
  uint64_t w = e.word.load(std::memory_order_acquire);
  // A locked segment stays locked: exporting it mid-write would let readers see the write
  // half done. Its references work once unlock() exports it.
  while (state_of(w) != State::kLocked &&
         !e.word.compare_exchange_weak(w, make_word(gen_of(w), State::kExported),
                                       std::memory_order_seq_cst)) {
  }
  return gen_of(w);
}

void ExportTable::wait_unpinned(Entry& e) {
  // Readers that pinned before the new word was visible re-check it and back off, or
  // finish a memcpy of one block: either way this spins for microseconds.
  for (int spins = 0; e.pins.load(std::memory_order_seq_cst) != 0; ++spins) {
    if (spins > 64) sched_yield();
  }
}

void ExportTable::revoke(uint32_t seg) {
  Entry& e = entries_[seg];
  uint64_t w = e.word.load(std::memory_order_acquire);
  uint32_t next = gen_of(w) + 1;
  if (next == 0) next = 1;  // generation 0 never names a live export
  e.word.store(make_word(next, State::kRevoked), std::memory_order_seq_cst);
  wait_unpinned(e);
}

void ExportTable::lock(uint32_t seg) {
  Entry& e = entries_[seg];
  uint64_t w = e.word.load(std::memory_order_acquire);
  e.word.store(make_word(gen_of(w), State::kLocked), std::memory_order_seq_cst);
  wait_unpinned(e);
}

void ExportTable::unlock(uint32_t seg) {
  Entry& e = entries_[seg];
  uint64_t w = e.word.load(std::memory_order_acquire);
  if (state_of(w) == State::kLocked) {
    e.word.store(make_word(gen_of(w), State::kExported), std::memory_order_seq_cst);
  }
}

uint32_t ExportTable::generation(uint32_t seg) const {
  return gen_of(entries_[seg].word.load(std::memory_order_acquire));
}

ExportTable::State ExportTable::state(uint32_t seg) const {
  return state_of(entries_[seg].word.load(std::memory_order_acquire));
}

Fault ExportTable::pin(uint32_t seg, uint32_t gen) {
  if (seg >= count_) return Fault::kUnknownSegment;
  Entry& e = entries_[seg];
  auto judge = [gen](uint64_t w) {
    if (gen_of(w) != gen) return Fault::kStaleGeneration;
    if (state_of(w) == State::kLocked) return Fault::kLocked;
    if (state_of(w) != State::kExported) return Fault::kRevoked;
    return Fault::kNone;
  };
  uint64_t before = e.word.load(std::memory_order_seq_cst);
  if (Fault f = judge(before); f != Fault::kNone) return f;
  e.pins.fetch_add(1, std::memory_order_seq_cst);
  // Dekker-style handshake with revoke()/lock(): they publish the word, then wait for
  // pins; we publish the pin, then re-read the word. One of us sees the other.
  uint64_t after = e.word.load(std::memory_order_seq_cst);
  if (after != before) {
    e.pins.fetch_sub(1, std::memory_order_seq_cst);
    Fault f = judge(after);
    return f == Fault::kNone ? Fault::kRevoked : f;
  }
  return Fault::kNone;
}

void ExportTable::unpin(uint32_t seg) {
  entries_[seg].pins.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace odafs::ordma
