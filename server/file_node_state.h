// What the FileService keeps per exported file. Each Node carries one (Node::data) so that
// the hot paths reach it without a lookup; only the FileService (its data, delegation and
// namespace operations) reads or writes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <shared_mutex>

namespace odafs::server {

struct FileNodeState {
  // Orders changes to a file's bytes against reads of them: a write or truncation holds it
  // exclusively while it changes the file and its cached blocks; a read that may fill cache
  // blocks from the file, or read the file directly, holds it shared. The kernel does not
  // make pread atomic against a pwrite of the same page, so without it a fill could cache
  // half of a write.
  std::shared_mutex lock;

  // Guarded by `lock` held exclusively: the space promised to the holder of the write
  // delegation on the file (FileService::space_limit), bytes [from, to) of it; `to` 0: none.
  // by_account: counted in the server's SpaceAccount (nothing allocated); else reserved in
  // the store (Store::reserve_space).
  struct SpacePromise {
    uint64_t from = 0;
    uint64_t to = 0;
    bool by_account = false;
  };
  SpacePromise space;

  // For a shared store (Store::shared): the change time (ns) of the file its cached blocks
  // were checked against; kNeverChecked before the first look.
  static constexpr int64_t kNeverChecked = INT64_MIN;
  std::atomic<int64_t> blocks_checked_at{kNeverChecked};
};

}  // namespace odafs::server
