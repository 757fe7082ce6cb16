// Open delegations: which clients hold a read or write delegation on which file, and taking
// them back when another client changes the file.
//
// A delegation's holder is a client: a named client's owner (CLIENT_ID; ClientOwners gives
// each a holder id with kNamedHolder set), or, for a connection that named no owner, the
// connection (its id). Callers pass the connection of a call; the table asks holder_of for
// its holder only when it needs one (a grant, a return, a file with delegations on it), so a
// call on a file nobody holds a delegation on costs no look-up.
//
// A read delegation lets its holder open the file again, and trust its cached attributes
// and data, without asking the server (docs/protocol.md, "Open delegations"). Before an
// operation that changes a file or the name it is reached by runs for one client, every
// other holder's delegation on that file is recalled: a CB_RECALL goes out on a connection
// of the holder, and the operation waits for the DELEGRETURNs. A holder that has not
// returned its delegation lease_ms after the recall loses it (an expiry). A connection's
// own delegations go when it closes (drop_holder); a named client's outlive its connection:
// its write delegations (its kept bytes) stay until it comes back on a new connection and
// has written them back (drop_holder at RECLAIM_COMPLETE) or its owner is given up on,
// and a recall that cannot reach it leaves it recalled, expiring lease_ms later like one
// that does not answer (holder_away). The waiting costs an RPC thread, so at most
// max_waiters operations wait at a time (one thread always stays free to take the
// returns); others, and any that would wait past wait_ms, are answered DELAY, and the
// client sends them again.
//
// A read delegation conflicts with changes by others; a write delegation (granted to an
// opener for writing when no other holder has one) with any access by others: their
// reads (OPEN, READ, READ_DIRECT, GETATTR, LOOKUP) call await_writers, which recalls only
// write delegations and costs one relaxed load while none exists anywhere. A client's own
// accesses, on any of its connections, never conflict with its own delegation.
//
// A write delegation may hold space for its holder's kept bytes (the FileService's:
// docs/protocol.md, "Open delegations"): when one ends (returned, expired, dropped with its
// holder or with its file) the table tells write_ended, from whichever call of
// begin_change, await_writers, returned, drop_holder or holder_away comes next (often the
// one that ended it), so that the space it did not use is given back.
//
// Thread-safety: every member function is thread-safe. The recall sender and write_ended
// are called without the table's lock held; holder_of with it held (so it must not call
// back into the table).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/counter_sink.h"
#include "server/node_table.h"

namespace odafs::server {

class Delegations {
 public:
  struct Options {
    int lease_ms = 5000;  // a recalled holder's time to return it
    int wait_ms = 1000;   // the longest one operation waits before DELAY
    int max_waiters = 3;  // operations waiting at once (RPC threads - 1)
    // Delegations one holder may hold; past it none are granted to it (its opens then ask
    // the server, as without delegations). Bounds the table's memory.
    size_t max_per_connection = 4096;
    // After a recall of a delegation on a file, no delegation of either kind is granted
    // on it for a cool-down: after a write delegation's, to no one (a file clients take
    // turns writing is served without delegations rather than recalled back and forth:
    // every such recall costs its holder a write-back and a DELEGRETURN, and many of them
    // at once outlast the lease); after a read delegation's, to no one but the holder
    // whose call recalled it (a reader re-opening a file every few milliseconds cannot
    // make each of a writer's changes wait for a recall, and the writer may still take a
    // write delegation). The cool-down lasts cooldown_ms past the last of: the recall, a
    // recalled holder's expiry, and any change to the file while it cools (a writer
    // keeps the file cool while it writes, so a holder that answers no recall and grabs
    // again the moment it may costs the writer one lease, not one per lease). A file
    // recalled again within a cool-down of the last one's end cools twice as long, up to
    // kMaxCooldowns times cooldown_ms; one quiet for that long starts over. 0: off.
    // FileService sets it to the lease.
    int cooldown_ms = 5000;
  };
  // Holder ids with this bit set are named clients' (ClientOwners); the others connections'.
  static constexpr uint64_t kNamedHolder = uint64_t{1} << 63;
  // Sends CB_RECALL of delegation `id` on file `fh` to a connection of `holder`; false if it
  // has none.
  using RecallFn = std::function<bool(uint64_t holder, const WireHandle& fh, uint64_t id)>;
  // The holder a connection's calls hold under (ClientOwners::holder_of).
  using HolderFn = std::function<uint64_t(uint64_t connection)>;
  // A write delegation on `node` ended. Called with no lock of the table's held, on the
  // thread of a begin_change, await_writers, returned, drop_holder or holder_away (none of
  // them called with a file's Node::data.lock held), never of begin_change_without_waiting.
  using WriteEndedFn = std::function<void(const NodeRef& node)>;

  // holder_of unset: every connection holds under its own id.
  Delegations(Options options, RecallFn send_recall, WriteEndedFn write_ended = {},
              HolderFn holder_of = {});

  struct Grant {
    uint64_t id = 0;  // 0: none granted
    bool write = false;
    bool new_write = false;  // this grant made it a write delegation
  };
  // Grants `connection`'s holder a read (or, if `write`, a write) delegation on file `node`
  // (whose handle is fh), or renews the one it holds under a new id (a write one stays
  // write; a read one becomes write when asked and no other holder has one). None when one
  // is being recalled, a change is under way, another holder has a write one (or any, for
  // a write grant), the holder has max_per_connection already, or (a new one) the file is
  // cooling down after a recall (Options::cooldown_ms).
  //
  // The table keeps `node` while any delegation on it is out: a node shared elsewhere is
  // never evicted from the NodeTable, so a holder's handle stays good, its recall reaches
  // the right file, and its DELEGRETURN finds its entry, however many other objects
  // clients look up meanwhile (the node table grows past its bound for them instead).
  Grant grant(const NodeRef& node, uint64_t connection, const WireHandle& fh, bool write);

  // A change to a file in progress: while one lives, no delegation on the file is
  // granted, so none can be granted between the recall and the change itself.
  class Change {
   public:
    Change(Change&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)),
          node_(other.node_),
          waited_(other.waited_) {}
    Change(const Change&) = delete;
    Change& operator=(const Change&) = delete;
    ~Change();
    // The change may not go ahead yet: answer DELAY and let the client call again.
    bool delayed() const { return owner_ == nullptr; }
    // It went ahead after holders were recalled: what the caller knew of the file before
    // may be old (a holder wrote back, or the file was deleted: FileService::sweep_unlinked
    // drops its delegations), so it looks again.
    bool waited() const { return waited_; }

   private:
    friend class Delegations;
    Change(Delegations* owner, uint64_t node, bool waited = false)
        : owner_(owner), node_(node), waited_(waited) {}
    Delegations* owner_;
    uint64_t node_;
    bool waited_;
  };
  // Before `connection` changes file `node` (its bytes, attributes or name): recalls every
  // other holder's delegation on it and waits for them to come back or expire. Keep
  // the result alive until the change is done. Allocates nothing unless there are
  // delegations on the file.
  Change begin_change(uint64_t node, uint64_t connection);
  // The same for every holder's delegation, without waiting: each is recalled (and
  // comes back, or expires, as any recalled one), and none is granted while the change
  // lasts. Never delayed. For the LeaseKeeper, whose wait could be on a holder whose
  // return queues behind its own call, which waits for the change itself.
  Change begin_change_without_waiting(uint64_t node);

  // Before `connection` reads file `node` (its bytes or attributes): recalls other
  // holders' write delegations on it and waits like begin_change. False: answer DELAY.
  // One relaxed load when no write delegation exists anywhere (a read that races with a
  // grant is ordered before it: the holder has written nothing yet).
  bool await_writers(uint64_t node, uint64_t connection) {
    return !writers_out() || await_writers_slow(node, connection);
  }
  // Some holder has a write delegation (on some file).
  bool writers_out() const { return write_held_.load(std::memory_order_relaxed) != 0; }
  // How many write delegations are held (on all files).
  size_t writers() const { return write_held_.load(std::memory_order_relaxed); }
  // Whether some holder has a write delegation on `node` now.
  bool write_held_on(uint64_t node) const;
  // Whether some holder has a delegation of either kind on `node` now (a recalled one
  // not yet returned included, until it is swept as expired).
  bool held_on(uint64_t node) const;

  // Whether the write delegation of `connection`'s holder on `node` was taken back from it
  // (its lease ran out after a recall) and the holder has not given it back since. Its writes to
  // the file are then refused (BAD_STATEID, as NFSv4 refuses a revoked state id): they are
  // write-backs of bytes kept under the lost delegation, and others may have written the
  // file since. One relaxed load while nothing is revoked.
  bool revoked(uint64_t node, uint64_t connection) {
    return revoked_count_.load(std::memory_order_relaxed) != 0 && revoked_slow(node, connection);
  }

  // DELEGRETURN of delegation `id` on `node` by `connection`('s holder). Nothing is done for
  // an id it does not hold; false then if it holds none on `node` (expired, dropped, never
  // granted). Either way a revocation of the holder's delegation on `node` ends: the holder
  // has heard of it (the answer INVAL says so).
  bool returned(uint64_t node, uint64_t connection, uint64_t id);

  // Every delegation and revocation of `holder` is gone: an unnamed connection closed, a
  // named client came back and wrote back what it kept (RECLAIM_COMPLETE), or its owner was
  // given up on.
  void drop_holder(uint64_t holder);
  // Named client `holder` has no connection left. Its read delegations go (a client that
  // comes back starts with empty caches: they serve nobody); its write delegations stay,
  // and a recall that cannot reach it expires like an unanswered one. Whether anything of
  // its stays (a write delegation or a revocation it has not heard of).
  bool holder_away(uint64_t holder);
  // The server is stopping: from now on no delegation is granted, and the delegations of
  // closing connections stay in force (a change or read waiting on any holder answers DELAY
  // at once: the stop waits on no client), so nothing overtakes bytes their holders will
  // reclaim from the next instance.
  void stop_serving();
  // File `node` is gone (removed, its handles stale): so are its delegations.
  void file_gone(uint64_t node);

  int lease_ms() const { return options_.lease_ms; }

  struct Stats {
    std::atomic<uint64_t> granted{0};
    std::atomic<uint64_t> granted_write{0};  // of them, write delegations
    std::atomic<uint64_t> recalled{0};
    std::atomic<uint64_t> returned{0};
    std::atomic<uint64_t> expired{0};          // not returned within the lease: taken back
    std::atomic<uint64_t> dropped{0};          // the holder went (its connection, its owner)
    std::atomic<uint64_t> delayed{0};          // operations answered DELAY
    std::atomic<uint64_t> cooled{0};           // grants refused: the file was recalled lately
    std::atomic<uint64_t> refused_revoked{0};  // writes refused: their delegation was revoked
  };
  const Stats& stats() const { return stats_; }
  // Its counters under their own names (base/counter_sink.h). Thread-safe.
  void report_counters(const CounterSink& add) const;
  size_t held() const;
  // Delegations held by the client of `connection`'s calls.
  size_t held_by(uint64_t connection) const;

 private:
  struct Holder {
    uint64_t holder = 0;
    uint64_t id = 0;
    int64_t recalled_at_ms = 0;  // 0: not recalled
    bool write = false;
  };
  struct FileState {
    NodeRef node;  // pinned in the NodeTable while delegated (see grant)
    WireHandle fh{};
    std::vector<Holder> holders;
  };
  // The holder of `connection`'s calls. REQUIRES: mu_ held.
  uint64_t holder_locked(uint64_t connection) const {
    return holder_of_ ? holder_of_(connection) : connection;
  }
  // Removes holders of `node` other than `holder` (only write ones if writes_only) whose
  // lease ran out; returns how many such holders remain, and in *to_recall those still to
  // be sent a recall (marking them recalled). REQUIRES: mu_ held.
  size_t sweep_locked(uint64_t node, uint64_t holder, bool writes_only, int64_t now,
                      std::vector<Holder>* to_recall);
  // Recalls the holders sweep_locked picks and waits for them to go; false: DELAY.
  // REQUIRES: lock holds mu_.
  bool wait_for_holders_locked(std::unique_lock<std::mutex>& lock, uint64_t node,
                               uint64_t connection, bool writes_only);
  // Removes `holder`'s delegations (only its read ones if reads_only) from every file.
  // REQUIRES: mu_ held.
  void drop_holder_locked(uint64_t holder, bool reads_only);
  bool await_writers_slow(uint64_t node, uint64_t connection);
  bool revoked_slow(uint64_t node, uint64_t connection);
  // Forgets revocations of (node, holder); node 0: all of holder's; holder 0: all on node.
  // REQUIRES: mu_ held.
  void unrevoke_locked(uint64_t node, uint64_t holder);
  // Forgets holder h's count in per_holder_ and write_held_. REQUIRES: mu_ held.
  void uncount_locked(const Holder& h);
  void erase_if_empty_locked(uint64_t node);
  // Whether some holder of `node` satisfies pred. Takes mu_.
  bool any_holder_on(uint64_t node, bool (*pred)(const Holder&)) const;
  void end_change(uint64_t node);
  // Holder h of `node` leaves the table: uncount_locked, and a write one's end is noted for
  // write_ended. REQUIRES: mu_ held; node still in files_.
  void remove_locked(uint64_t node, const Holder& h);
  // Calls write_ended for the write delegations ended since the last call. One relaxed
  // load when none did. REQUIRES: mu_ not held.
  void tell_ended() {
    if (ended_count_.load(std::memory_order_relaxed) != 0) tell_ended_slow();
  }
  void tell_ended_slow();

  const Options options_;
  const RecallFn send_recall_;
  const WriteEndedFn write_ended_;
  const HolderFn holder_of_;
  mutable std::mutex mu_;
  std::condition_variable changed_;                  // a return, a drop or an expiry
  std::unordered_map<uint64_t, FileState> files_;    // by node id
  std::unordered_map<uint64_t, size_t> per_holder_;  // delegations held
  std::atomic<size_t> write_held_{0};                // write holders in files_ (written under mu_)
  // Files whose write delegations ended, for write_ended (capacity kept: no allocation once
  // grown). Guarded by mu_; ended_count_ its size, for the lock-free check.
  std::vector<NodeRef> ended_;
  std::atomic<size_t> ended_count_{0};
  uint64_t next_id_ = 1;
  int waiters_ = 0;
  bool stopping_ = false;           // stop_serving was called; guarded by mu_
  std::vector<uint64_t> changing_;  // nodes with a Change alive (few: one per RPC thread)
  // Write delegations taken back by expiry, (node, holder), until their holder returns
  // them or goes away. At most kMaxRevoked (the oldest go first, logged).
  static constexpr size_t kMaxRevoked = 4096;
  std::vector<std::pair<uint64_t, uint64_t>> revoked_;
  std::atomic<size_t> revoked_count_{0};  // revoked_.size(), for the lock-free check
  // Files recalled lately, by node id modulo the size, and their cool-downs (see
  // Options::cooldown_ms): a fixed table (a newer recall takes the slot), so remembering
  // costs no allocation. Guarded by mu_.
  static constexpr int64_t kMaxCooldowns = 8;
  struct Recalled {
    uint64_t node = 0;
    int64_t until_ms = 0;  // no grant but to `by` before it
    int64_t cool_ms = 0;   // this file's cool-down now (grows while it is contended)
    uint64_t by = 0;       // the holder that may still be granted one; 0: none may
  };
  std::array<Recalled, 4096> recently_recalled_{};
  Recalled& recalled_slot(uint64_t node) {
    return recently_recalled_[node % recently_recalled_.size()];
  }
  // Whether node cools down for a grant to holder (and counts it). REQUIRES: mu_ held.
  bool cooling_locked(uint64_t node, uint64_t holder, int64_t now);
  // A recall of node's delegations (a write one among them if `write`) by holder's call
  // starts or lengthens its cool-down. REQUIRES: mu_ held.
  void cool_down_locked(uint64_t node, uint64_t holder, bool write, int64_t now);
  // Something happened to node that a cool-down runs from (a change, a recalled holder's
  // expiry): while it cools, the cool-down now ends cool_ms from now. REQUIRES: mu_ held.
  void keep_cool_locked(uint64_t node, int64_t now);
  Stats stats_;
};

}  // namespace odafs::server
