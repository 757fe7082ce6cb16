// The server's accounting of the space it promised to write delegations' holders
// (space_limit, docs/protocol.md "Open delegations"), so that a promise usually costs no
// system call: no fallocate per grant, no statvfs per grant.
//
// The file system's free space F is sampled (statvfs) now and then; every byte the server
// writes is counted against the sample until the next one, so the estimate never exceeds
// what is really free as far as odafsd's own writes go. `promised` is the sum of what
// holders were promised by this account. Two rules keep every promise:
//   - a promise is made by the account only while the estimate leaves the margin over all
//     promises and it (F >= promised + bytes + margin); otherwise the caller falls back to
//     allocating the space in the store (fallocate), or promises nothing;
//   - any write the server makes that no promise covers is refused (ENOSPC) when it would
//     leave less than `promised` free, so the promised space stays for its holders.
//
// What it cannot hold: writes that do not go through this odafsd (a local process writing
// the export's file system directly, another server on it) take space it cannot refuse.
// The margin (by default the larger of 64 MiB and 1 % of the file system) is what such a
// writer must eat through first; on a file system with less free than that, every promise
// is a fallocate again, which holds against anyone. It counts file bytes only: a name the
// server creates may take a directory block or an inode's (a few KiB on ext4, none on
// tmpfs) beyond them, and so may the recovery record on the same file system. Nor does it
// see per-user quotas (fallocate as the caller does): give a margin larger than the file
// system to always fallocate. And it lives in memory: after a restart only the grace
// period (in which only reclaiming clients write) keeps promises made by the previous
// instance.
//
// The estimate is conservative: overwrites, and a holder's write-back into space already
// counted as promised, count as new space taken; space freed (removals, truncations) is
// seen at the next sample. A sample is taken when a promise is asked and the last one is
// older than refresh_ms, and whenever the estimate would refuse something, so that the
// conservatism never refuses a write the disk has room for.
//
// Thread-safety: every member function is thread-safe and lock-free; begin_write and
// end_write allocate nothing and make no system call unless the estimate is short.
#pragma once

#include <sys/statvfs.h>

#include <atomic>
#include <cstdint>
#include <functional>

#include "base/counter_sink.h"

namespace odafs::server {

class SpaceAccount {
 public:
  struct Options {
    // Below promised + margin of free space a promise is not made by the account: -1
    // picks the larger of 64 MiB and 1 % of the file system.
    int64_t margin_bytes = -1;
    int refresh_ms = 100;  // the oldest sample a promise is decided on
  };
  // Samples the export's file system; false when it cannot (then nothing is promised).
  using StatFn = std::function<bool(struct statvfs* out)>;

  SpaceAccount(Options options, StatFn stat);

  // Promises `bytes` if the account may (the first rule above): true and counted in
  // promised(), or false (the caller holds the space otherwise, or promises none).
  bool promise(uint64_t bytes);
  // A promise of `bytes` this account made ended (its delegation ended).
  void unpromise(uint64_t bytes);

  // Before the server writes `len` bytes of which `uncovered` are in no promise made by
  // this account: false (answer ENOSPC, write nothing) when the uncovered bytes would eat
  // into promised space. After true, end_write must follow with the bytes written.
  bool begin_write(uint64_t len, uint64_t uncovered);
  // The write begun with begin_write(len, ...) is over; `written` of its bytes landed.
  void end_write(uint64_t len, uint64_t written);
  // The server took `bytes` of the file system otherwise than by a write (a reservation in
  // the store): counted as written, so that the estimate stays at or under the truth.
  void allocated(uint64_t bytes) { written_.fetch_add(static_cast<int64_t>(bytes)); }

  // The free space writers without a promise may still use, as of the last sample (what
  // FSSTAT answers): the file system's own, less what is promised.
  uint64_t available(uint64_t fs_avail) const {
    const uint64_t p = promised_.load();
    return fs_avail > p ? fs_avail - p : 0;
  }
  uint64_t promised() const { return promised_.load(); }

  struct Stats {
    std::atomic<uint64_t> promises{0};  // promises made by the account
    std::atomic<uint64_t> declined{0};  // promises asked for and declined (too tight)
    std::atomic<uint64_t> refused{0};   // writes refused to keep promises
    std::atomic<uint64_t> samples{0};   // statvfs calls
  };
  const Stats& stats() const { return stats_; }
  // Its counters under their own names (base/counter_sink.h). Thread-safe.
  void report_counters(const CounterSink& add) const;

 private:
  // Free space now, as far as the account knows: the sample, less what was written since
  // and what is being written. Never above the truth but for writers outside odafsd.
  int64_t estimate() const;
  // Takes a new sample (statvfs). False when the file system cannot be asked.
  bool sample();
  int64_t margin() const;

  const Options options_;
  const StatFn stat_;
  // The counters pair up as Dekker's do (seq_cst): a promise adds to promised_ then reads
  // the estimate; a write adds to pending_ then reads promised_; so of a promise and a
  // write that race, at least one sees the other.
  std::atomic<uint64_t> promised_{0};
  std::atomic<int64_t> pending_{0};  // bytes of writes begun and not ended
  std::atomic<int64_t> written_{0};  // bytes written since the start (only grows)
  std::atomic<int64_t> base_{0};     // the last sample's free bytes + written_ before it
  std::atomic<int64_t> total_{0};    // the file system's size at the last sample
  std::atomic<int64_t> sampled_ms_{INT64_MIN / 2};
  std::atomic<bool> sampled_ok_{false};
  Stats stats_;
};

}  // namespace odafs::server
