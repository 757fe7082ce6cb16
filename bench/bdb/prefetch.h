// Prefetcher: read-ahead of the pages an application has pre-computed it will need, with
// libodafs's asynchronous I/O (IoQueue), keeping a window of reads in flight: the
// "Db pre-computes the list of required pages and performs read-ahead" of the ODAFS
// paper's Berkeley DB experiment.
//
//   Prefetcher p(*client, "/db/records.db", /*window=*/16, /*io_size=*/65536);
//   Hooks::attach_prefetcher("/db/records.db", &p);
//   p.plan({pgno1 * 65536, pgno2 * 65536, ...});   // then DB->get each record in that order
//
// BDB's read of a planned page (through Hooks) waits for that read, copies it into BDB's
// page buffer and starts the next planned read. Each read goes down libodafs's read
// pipeline (client cache, one-sided read, RPC fallback), as File::pread.
//
// Memory: window buffers of io_size, allocated once; plan() reuses them.
// Thread-safety: one thread at a time (BDB's reads come on the application's thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/io_queue.h"

namespace odafs::bdb {

class Prefetcher {
 public:
  // Opens path read-only. Throws Error (the open's, or EINVAL for window 0 or io_size 0).
  Prefetcher(Client& client, const std::string& path, size_t window, size_t io_size);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The offsets of the io_size reads to come, in the order they will be asked for; drops
  // what an earlier plan still had in flight and starts the first window.
  void plan(std::vector<uint64_t> offsets);

  // When [offset, offset + len) lies in a planned read that is in flight: waits for it,
  // copies into buf and returns true (planned reads before it are dropped: the
  // application skipped them). False when it is not planned (the caller reads itself),
  // or the read failed. REQUIRES: buf holds len bytes.
  bool serve(void* buf, size_t len, uint64_t offset);

  uint64_t served() const { return served_; }
  uint64_t failed() const { return failed_; }

 private:
  struct Slot {
    std::unique_ptr<char[]> buf;
    uint64_t offset = 0;
    size_t bytes = 0;
    int error = 0;
    bool done = false;
  };
  // Submits planned reads until the window is full or the plan runs out.
  void fill();
  // Waits for the slot at the head of the window to complete.
  void wait_head();
  // Retires the head slot (its buffer free again).
  void pop();

  File file_;
  IoQueue queue_;
  const size_t io_size_;
  std::vector<Slot> slots_;  // a ring: head_ is the oldest planned read in flight
  size_t head_ = 0;
  size_t in_window_ = 0;  // slots from head_ holding planned reads
  std::vector<uint64_t> plan_;
  size_t next_ = 0;               // plan_[next_] is the next to submit
  std::vector<Completion> done_;  // wait()'s output, sized once
  uint64_t served_ = 0;
  uint64_t failed_ = 0;
};

}  // namespace odafs::bdb
