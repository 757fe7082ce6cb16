// The client's per-block read pipeline, as steps a caller can run with its RPC in flight.
// Internal to client/: File::pread (through Client::read_file) runs the steps back to
// back; IoQueue starts the RPC step and finishes it when its reply has come.
//
// For each block a read touches, in order:
//   1. the data cache (when it holds data blocks): a hit never leaves the client;
//   2. a one-sided read through a reference from the directory (read mode kOrdma): the
//      server's engine serves it without the file server; a fault drops the reference and
//      falls through (stats.fallbacks);
//   3. an RPC READ over this block and the following ones steps 1-2 cannot serve, which
//      returns the bytes and references to the blocks it touched; those go into the
//      directory, so the next read of them goes one-sided.
// With a data cache the one-sided read and the RPC fetch whole blocks and keep them;
// without one they move only the bytes asked for, straight into the caller's buffer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "client/client.h"
#include "ordma/engine.h"

namespace odafs {

namespace ordma {
class EngineClient;
}

// What one read counted while it ran (a BlockReader's), added to the client's
// ClientStats once when it ends: an atomic add per counter per read, not per block.
struct ReadCounts {
  uint64_t cache_hits = 0;
  uint64_t ordma_reads = 0;
  uint64_t ordma_bytes = 0;
  uint64_t fallbacks = 0;
  std::array<uint64_t, 10> faults{};  // by ordma::Fault value
};

// One read of [offset, offset + len) of a file into out, on one mount. Not thread-safe:
// one thread drives it at a time. Steps 1-2 run synchronously (a one-sided read waits for
// its completion, microseconds on a local ring); step 3 is split around its READ.
//
//   while (!r.serve_without_rpc()) {       // File::pread; IoQueue does the same across
//     r.start_rpc(call, &scratch);         // reap() calls, one READ in flight per read
//     if (*r.finish_rpc(call)) break;      // (each checked: they return Status, Result)
//   }
//
// A failed step returns why; the caller decides about retrying (on a new mount, after a
// lost connection), resuming at *done.
class BlockReader {
 public:
  // fh and key: the file's handle and cache key. size_hint: the file's size as the caller
  // knows it (UINT64_MAX: unknown); the read stops there when the bytes before it came
  // without an RPC. *done: the bytes of out already read (0, or what an earlier reader got
  // before its mount was lost); it advances as bytes land.
  // REQUIRES: m, out and *done outlive the reader.
  BlockReader(ClientImpl* client, const MountState& m, const Handle& fh, uint64_t key,
              uint64_t size_hint, char* out, size_t len, uint64_t offset, size_t* done);
  // Hands what it counted to the client (ClientImpl::count_reads).
  ~BlockReader();
  BlockReader(const BlockReader&) = delete;
  BlockReader& operator=(const BlockReader&) = delete;

  // Steps 1-2 from *done on, until a block needs an RPC. Returns true when the read is
  // complete: len bytes, or the known end of file.
  bool serve_without_rpc();
  // Steps 1-2 as serve_without_rpc, but for many readers at once (IoQueue): one-sided
  // reads are not made here but appended to *batch (their bytes to land in out, or with
  // a data cache in *blocks, grown to fit once and left alone until apply_run). Returns
  // kNeedsEngine after appending some: the caller reads them (engine()->read_many, with
  // other readers' ops) and passes this reader's back to apply_run, then steps again.
  enum class Step { kComplete, kNeedsRpc, kNeedsEngine };
  Step step_batched(std::vector<ordma::ReadOp>* batch, std::vector<char>* blocks);
  // Places the outcome of the ops the last step_batched appended (in order; faults fall
  // back to the RPC at the next step) and advances *done. Returns the bytes placed.
  size_t apply_run(std::span<const ordma::ReadOp> ops);
  // The engine client the planned ops go to (null: none, or it broke).
  ordma::EngineClient* engine() const { return engine_.get(); }

  // Step 3, first half: starts on `call` one READ from the block at *done over the
  // following blocks steps 1-2 cannot serve (up to max_read). Its bytes land in out when
  // they fit there (no data cache; or whole blocks within len), else in *scratch, grown
  // to the span and kept for later reads. REQUIRES: serve_without_rpc() returned false;
  // *scratch and call are left alone until finish_rpc.
  Status start_rpc(rpc::Call& call, std::vector<char>* scratch);
  // Step 3, second half: waits for the READ (until call.deadline()), puts the references
  // it brought into the directory, keeps the whole blocks in the data cache and copies
  // the bytes asked for to out. Returns true when the file ended inside the span read
  // (the read is complete), false when serve_without_rpc() should go on.
  Result<bool> finish_rpc(rpc::Call& call);
  // All steps back to back, until the read is complete.
  Status run(rpc::Call& call, std::vector<char>* scratch);

 private:
  // Steps 1 and 2 for the block holding offset + *done: the bytes placed at out + *done,
  // 0 when the block needs an RPC.
  size_t without_rpc();
  // Step 2. Returns the bytes it placed at out (0: no usable reference, or a fault).
  size_t one_sided(uint64_t block, uint32_t in_block, uint32_t chunk, char* out);
  // Step 2 for a run of at least two blocks from the one holding offset + *done, none in
  // the data cache and each with a reference: all read one-sided at once (read-ahead
  // fills the request; EngineClient::read_many). Advances *done past the bytes placed,
  // up to the first fault, and returns them; 0 when there is no such run (the
  // block-by-block steps go on).
  size_t one_sided_run();
  // The run's one-sided reads, from the block at *done on (up to max_ops, stopping at a
  // block in the data cache or without a usable reference), appended to *ops; with a data
  // cache their whole blocks go to *blocks (grown to fit). Returns how many (0: none).
  size_t plan_run(std::vector<ordma::ReadOp>* ops, std::vector<char>* blocks, size_t max_ops);
  static constexpr size_t kMaxRun = 64;  // blocks in flight at once (the ring's slots)
  // The reply brought references: from now on they can be used, if the engine is there.
  void after_rpc();

  ClientImpl& client_;
  const MountState& m_;
  const Handle fh_;
  const uint64_t key_;
  const uint64_t size_hint_;
  const uint64_t bs_;
  const bool caching_;
  char* const out_;
  const size_t len_;
  const uint64_t offset_;
  size_t* const done_;
  std::shared_ptr<ordma::EngineClient> engine_;
  uint64_t run_ticket_ = 0;  // the data cache's ticket, taken when the run was planned
  ReadCounts counts_;        // this read's, for the client's stats at the end

  // The READ in flight between start_rpc and finish_rpc.
  struct Pending {
    char* dst = nullptr;    // where its payload lands: out + *done or scratch
    size_t span = 0;        // bytes asked for
    uint64_t block = 0;     // first block (whole-block reads)
    uint32_t in_block = 0;  // where *done falls in that block
    size_t want = 0;        // bytes of out still to fill
    uint64_t ticket = 0;    // the data cache's ticket, taken before the READ went out
    bool whole = false;     // whole blocks, kept in the data cache
  } pending_;
};

}  // namespace odafs
