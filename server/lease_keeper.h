// LeaseKeeper: the server's leases on the files of a shared store (Store::leases; CephFS
// read and write delegations), and the order in which what rests on them is undone.
//
// Over a store others change (CephFS under several gateways), the server caches a file's
// blocks, hands out references to them and grants delegations on it only while it holds
// the store's lease on it: a read lease on a file it has open for reading, a write lease
// (no one else may even look at the file) on one it has open to write, which alone lets
// it grant write delegations. When the store recalls the lease (another client opens,
// looks up or writes the file), the keeper, on its own thread:
//   1. recalls the file's delegations from this server's clients, and grants none until
//      the lease is back;
//   2. waits for them to come back, at most the delegations' lease: a write delegation's
//      holder first commits what it wrote under it (its closes sent their bytes: the
//      store's recall stops the server's own writes of the file until the give-back, so
//      bytes sent after it could only land after the other client's access). It stops
//      waiting early once a write of the file waits in the store (a holder sending bytes
//      of a file it still has open, which no close acknowledged);
//   3. drops the file's cached blocks, which revokes every reference to them (their
//      readers fault and read again by RPC), and keeps fills in progress from caching;
//   4. only then gives the lease back, which lets the other client's access proceed.
// Recalls are waited for side by side (each from its own start), so a file's give-back
// comes at most a delegation lease after its recall, well inside the store's own timeout.
// So a one-sided read through this server never returns bytes older than a write another
// gateway acknowledged, and what a close acknowledged under a write delegation is in the
// store before anyone else sees the file. The same undoing runs, without the waiting
// (the caller's own change waits for its holders), when the server gives a lease back of
// its own accord: before it writes a file it holds a read lease on (the store refuses a
// read lease to a writer, and the server's own open to write would recall it), when the
// file is removed, and when it holds more than Options::max_leases (the oldest goes).
//
// A leased file's object stays open (the keeper holds a pin on it): closing it would drop
// the lease with the blocks still cached. A file the server wrote without a write lease
// stays open to write, which makes the store refuse everyone a read lease on it (CephFS
// does while any client has it open to write); once the writes stop
// (Options::writer_idle_ms), no call has it pinned and no lease is held, the keeper closes
// it, and the next call opens it to read again.
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
#include <list>
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
    std::atomic<uint64_t> taken_write{0};  // of them, write leases
    std::atomic<uint64_t> refused{0};      // the store said no: the file is read uncached
    std::atomic<uint64_t> recalled{0};     // recalls from the store
    std::atomic<uint64_t> given_back{0};   // after a recall, before a write, or over the bound
    // Given back after a recall with delegations still out (the lease ran out, or a write
    // waited in the store).
    std::atomic<uint64_t> unreturned{0};
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
  // leases; otherwise when the server holds the file's lease, taking one if it can (a
  // write lease if node is open to write, else a read lease). Costs one atomic load when
  // the lease is held. A fill of the cache checks Node::lease.held again once it read the
  // store (a recall may have begun meanwhile). REQUIRES: node is a regular file.
  bool may_cache(const OpenNode& node);
  // Whether write delegations on node may be granted now: always without leases;
  // otherwise when the server holds a write lease on it, taking one if it can.
  bool may_delegate_writes(const OpenNode& node) {
    return !active_ || (node.writable() && may_cache(node) &&
                        node->lease.write.load(std::memory_order_acquire));
  }
  // Whether the server holds node's lease (or needs none). The caller rechecks it after
  // granting a delegation: a recall begun before the grant cleared it.
  bool holds(const Node& node) const {
    return !active_ || node.lease.held.load(std::memory_order_acquire);
  }

  // Gives the lease on file `key` back now, in this thread, undoing what rests on it first
  // without waiting for returns (see the header comment). For a call about to open the
  // file to write or write it through the store (the store recalls a read lease from its
  // own writer too), and for a file removed. No-op without a lease on the file.
  void give_back(const ObjectId& key);

  // Around the server's write of node's bytes through the store (see the header comment,
  // step 2). Costs an atomic add each.
  void write_starts(const OpenNode& node) {
    if (active_) node->lease.writes_in_store.fetch_add(1, std::memory_order_acq_rel);
  }
  void write_ends(const OpenNode& node) {
    if (active_) node->lease.writes_in_store.fetch_sub(1, std::memory_order_acq_rel);
  }

  // After the server wrote node's bytes through the store. Costs an atomic store and an
  // atomic load once the file is watched.
  void note_written(const OpenNode& node);

  size_t held() const;
  const Stats& stats() const { return stats_; }
  // Its counters under their own names (base/counter_sink.h). Thread-safe.
  void report_counters(const CounterSink& add) const;

 private:
  // A recalled lease whose delegations are called back: given back once they are, or at
  // `deadline_ms` (step 2 of the header comment).
  struct Returning {
    OpenNode node;
    Delegations::Change change;
    int64_t deadline_ms;
  };
  static constexpr int kReturnPollMs = 5;
  // A pin on the leased file `key`; empty if no lease on it is held.
  OpenNode held_pin(const ObjectId& key);
  void run();
  // Steps 1-2 for the lease on `key`, if held: into returning_, or given back at once
  // when nothing is out on the file.
  void start_give_back(const ObjectId& key);
  // Gives back the leases of returning_ whose wait is over.
  void finish_returned();
  // Steps 3-4. REQUIRES: a Change on node lives (no delegation is granted meanwhile).
  void drop_and_give_back(const OpenNode& node);
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
  std::list<Returning> returning_;     // the keeper's thread only
  std::thread worker_;
};

}  // namespace odafs::server
