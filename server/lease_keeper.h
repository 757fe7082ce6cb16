// LeaseKeeper: the server's leases on the files of a shared store (Store::leases; CephFS
// read delegations), and the order in which what rests on them is undone.
//
// Over a store others change (CephFS under several gateways), the server caches a file's
// blocks, hands out references to them and grants delegations on the file only while it
// holds the store's lease on it. When the store recalls the lease (another gateway's
// client opens the file to write, or writes it), the keeper, on its own thread:
//   1. recalls the file's delegations from this server's clients (read ones only over a
//      shared store), and grants none until the lease is back; it does not wait for their
//      returns (a return may queue behind its holder's own read, which waits in the store
//      for this give-back);
//   2. drops the file's cached blocks, which revokes every reference to them (their
//      readers fault and read again by RPC), and keeps fills in progress from caching;
//   3. only then gives the lease back, which lets the other writer's bytes land.
// So a one-sided read through this server never returns bytes older than a write another
// gateway acknowledged. The same undoing runs when the server gives a lease back of its
// own accord: before it writes the file itself (the store refuses a read lease to a
// writer, and the server's own open to write would recall it), and when it holds more
// than Options::max_leases (the oldest goes).
//
// A leased file's object stays open (the keeper holds a pin on it): closing it would drop
// the lease with the blocks still cached. A file the server wrote stays open to write,
// which makes the store refuse everyone a read lease on it (CephFS does while any client
// has it open to write); once the writes stop (Options::writer_idle_ms) and no call has it
// pinned, the keeper closes it, and the next call opens it to read again.
//
// Over a store without leases (the local export) active() is false and may_cache() is
// always true: no one else changes those files.
//
// Thread-safety: thread-safe. Store recalls are queued and handled on the keeper's thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/counter_sink.h"
#include "cache/block_cache.h"
#include "server/delegations.h"
#include "server/node_table.h"
#include "server/store.h"

namespace odafs::server {

class LeaseKeeper {
 public:
  struct Options {
    size_t max_leases = 256;     // leases held at once; past it the oldest goes back
    int refused_retry_ms = 100;  // after the store refused a file's lease, not asked again
    int writer_idle_ms = 500;    // a file written this long ago is closed (see above)
  };
  struct Stats {
    std::atomic<uint64_t> taken{0};
    std::atomic<uint64_t> refused{0};     // the store said no: the file is read uncached
    std::atomic<uint64_t> recalled{0};    // recalls from the store
    std::atomic<uint64_t> given_back{0};  // after a recall, before a write, or over the bound
  };

  // Starts the keeper's thread if store.leases(). REQUIRES: store, delegations and cache
  // outlive the keeper.
  LeaseKeeper(Store& store, NodeTable& nodes, Delegations& delegations, cache::BlockCache& cache,
              Options options);
  // Stops the thread and gives every lease back.
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  bool active() const { return active_; }

  // Whether node's bytes may be cached, referenced and delegated now: always without
  // leases; otherwise when the server holds the file's lease, taking one if it can.
  // Costs one atomic load when the lease is held. A fill of the cache checks
  // Node::leased again once it read the store (a recall may have begun meanwhile).
  // REQUIRES: node is a regular file opened for reading.
  bool may_cache(const OpenNode& node);
  // Whether the server holds node's lease (or needs none). The caller rechecks it after
  // granting a delegation: a recall begun before the grant cleared it.
  bool holds(const Node& node) const {
    return !active_ || node.lease.held.load(std::memory_order_acquire);
  }

  // Gives the lease on file `key` back now, in this thread, undoing what rests on it first
  // (see the header comment). For a call about to open the file to write or write it
  // through the store (the store recalls a lease from its own writer too). No-op without
  // a lease on the file.
  void give_back(const ObjectId& key);

  // After the server wrote node's bytes through the store. Costs an atomic store and an
  // atomic load once the file is watched.
  void note_written(const OpenNode& node);

  size_t held() const;
  const Stats& stats() const { return stats_; }
  // Its counters under their own names (base/counter_sink.h). Thread-safe.
  void report_counters(const CounterSink& add) const;

 private:
  void run();
  void undo_and_give_back(const OpenNode& node);
  void watch_writer(const OpenNode& node);  // until close_idle_writers_locked closes it
  // Closes the watched files whose writes stopped. REQUIRES: mu_ held (released inside).
  void close_idle_writers_locked(std::unique_lock<std::mutex>& lock);

  Store& store_;
  NodeTable& nodes_;
  Delegations& delegations_;
  cache::BlockCache& cache_;
  const Options options_;
  const bool active_;
  Stats stats_;

  std::mutex taking_mu_;  // one lease taken at a time (the slow path of may_cache)
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;                                      // mu_
  std::unordered_map<ObjectId, OpenNode, ObjectIdHash> held_;  // mu_: the leased files, pinned
  std::deque<ObjectId> taken_order_;   // mu_: oldest first (may name files given back since)
  std::deque<ObjectId> to_give_back_;  // mu_: recalled, or over the bound
  std::vector<NodeRef> writers_;       // mu_: files written, watched until closed
  std::thread worker_;
};

}  // namespace odafs::server
