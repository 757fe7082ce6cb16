// What the LeaseKeeper keeps per exported file, for a store with leases (Store::leases).
// Each Node carries one (Node::lease) so that a cache fill checks the lease without a
// lookup; only the LeaseKeeper writes it.
#pragma once

#include <atomic>
#include <cstdint>

namespace odafs::server {

struct LeaseNodeState {
  // Whether the server holds the store's lease on the file (cleared before the file's
  // blocks are dropped; a cache fill checks it once it read the store).
  std::atomic<bool> held{false};
  // The lease held is a write lease (set before held, cleared after it).
  std::atomic<bool> write{false};
  // The server's writes of the file in the store now (FileService::write_through): while
  // a write lease is recalled they wait in the store for its give-back, so the keeper
  // waits for no return that needs them (LeaseKeeper::finish_returned).
  std::atomic<int> writes_in_store{0};
  // When the store last refused one (ms, steady clock).
  std::atomic<int64_t> refused_ms{INT64_MIN / 2};
  // When the server last wrote the file through the store (ms, steady clock), and whether
  // the keeper watches it to close it once the writes stop.
  std::atomic<int64_t> last_write_ms{0};
  std::atomic<bool> writer_watched{false};
};

}  // namespace odafs::server
