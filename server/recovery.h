// Recovery after a restart: which clients may hold bytes the server never saw, and the
// grace period in which they write them back (docs/protocol.md, "Restart and reclaim").
//
// After NFSv4's stable client records and grace period (RFC 8881, 8.4.2 and 8.4.3). A
// client holding a write delegation may keep bytes past a close that only it has. A
// server that crashes forgets its delegations, so before it grants a client its first
// write delegation it writes the client's owner id (CLIENT_ID) into the recovery record,
// a small file on stable storage. A server that starts and finds owners in the record
// opens a grace period: until each of them has sent RECLAIM_COMPLETE, or grace_ms have
// passed, calls from their connections are served (their write-backs) and every other
// call waits (GRACE, which clients retry), so nobody reads or overwrites a file before its
// holder's bytes are back; no delegation is granted meanwhile. An owner that came back in
// time and is still writing back (connected, not complete) holds the period open past
// grace_ms, for at most another grace_ms. A record without owners
// opens no grace period: a restart with no write delegation out costs nothing.
//
// An owner leaves the record when the server gives up what it held for it while the server
// runs (forget: it closed its last connection holding nothing, or stayed away too long;
// server/client_owners.h), and every owner leaves it when a grace period ends (none holds
// a write delegation of the new instance yet); a server stopping or crashing leaves the
// record as it is. An owner away with its write delegations kept stays in it, so that a
// restart meanwhile still lets it reclaim.
//
// Thread-safety: thread-safe. holds_back and in_grace cost one relaxed load once the grace
// period is over.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "base/counter_sink.h"
#include "base/status.h"
#include "server/record_writer.h"

namespace odafs::server {

class Recovery {
 public:
  struct Options {
    // The record's file; its directory is made (0700) if missing, and must be private
    // (server/private_files.h). Empty: no record, so no write delegations (nothing could
    // be reclaimed) and no grace period.
    std::string record_path;
    int grace_ms = 10000;  // a grace period's length (twice it at most: see above)
    // The most owners a record may name: the server's connection limit (a recorded owner
    // is connected, or away and known to ClientOwners, which keeps no more than that many).
    // A record naming more is forged or corrupt.
    size_t max_owners = 1024;
  };
  using Owner = std::array<unsigned char, 16>;

  // Reads the record the previous instance left and opens the grace period if it names
  // owners. A record that cannot be read or parsed, is no regular file of root's or the
  // server's user's, or names more than max_owners owners is logged and treated as empty
  // (its clients then report their kept bytes lost: fail closed, the server still
  // starts); a directory that cannot be made or is not private turns write delegations
  // off (logged; odafsd refuses to start before that).
  explicit Recovery(Options options);
  ~Recovery();
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  struct Joined {
    bool reclaim = false;   // the owner was in the record: it may write back now
    uint32_t grace_ms = 0;  // left of the grace period
  };
  // CLIENT_ID: `connection` belongs to `owner`. EINVAL if the connection named another
  // owner before.
  Result<Joined> join(uint64_t connection, const Owner& owner);
  // RECLAIM_COMPLETE: the connection's owner has written back all it kept. Ends the grace
  // period when it was the last owner to come back.
  void reclaim_complete(uint64_t connection);
  // Whether a call from `connection` must wait for the grace period to end: true in the
  // grace period unless the connection's owner is reclaiming.
  bool holds_back(uint64_t connection) {
    return grace_.load(std::memory_order_relaxed) && holds_back_slow(connection);
  }
  // The grace period is on: grant no delegation.
  bool in_grace() { return grace_.load(std::memory_order_relaxed) && !grace_over_now(); }
  // Before a write delegation goes to `connection`: its owner is in the record (written
  // and synced the first time: waits for the disk). False: grant none (no owner named, no
  // record kept, or the server began to stop meanwhile).
  bool may_hold_writes(uint64_t connection);
  // The connection is gone (its owner stays recorded until forget).
  void connection_closed(uint64_t connection);
  // The server holds nothing for `owner` any more: it leaves the record, unless the server
  // is stopping or the owner is still to reclaim in a grace period. Does not wait for the
  // disk (an owner recorded too long only lets a client reclaim that need not).
  void forget(const Owner& owner);
  // The server is stopping: its connections close now, but their owners stay recorded; no
  // rewrite begins, and a grant waiting for one gives up. Never waits for the disk.
  void stopping();

  struct Stats {
    std::atomic<uint64_t> held_back{0};   // calls answered GRACE
    std::atomic<uint64_t> reclaimers{0};  // owners found in the record at start
    std::atomic<uint64_t> reclaimed{0};   // of them, RECLAIM_COMPLETE received
  };
  const Stats& stats() const { return stats_; }
  // Its counters under their own names (base/counter_sink.h). Thread-safe.
  void report_counters(const CounterSink& add);
  // Versions of the record written and synced.
  uint64_t record_writes() const { return writer_ ? writer_->writes() : 0; }

 private:
  bool holds_back_slow(uint64_t connection);
  // Ends the grace period if its time is up or nobody is left to reclaim; true if over.
  bool grace_over_now();
  // REQUIRES: mu_ held.
  bool grace_over_locked(int64_t now_ms);
  void end_grace_locked();
  // Queues recorded_ as the record's next version. REQUIRES: mu_ held.
  uint64_t submit_record_locked();
  void read_record(int dir_fd);

  const Options options_;
  const std::string name_;                // the record's name in its directory
  bool usable_ = false;                   // the record's directory is open; set at construction
  std::unique_ptr<RecordWriter> writer_;  // set at construction when usable_
  std::mutex mu_;
  std::atomic<bool> grace_{false};
  std::atomic<bool> stopping_{false};
  int64_t grace_ends_ms_ = 0;  // steady clock; guarded by mu_
  // In the record file, each with the version of it that first named the owner (0: read at
  // start); guarded by mu_.
  std::map<Owner, uint64_t> recorded_;
  std::set<Owner> pending_;           // to reclaim still; guarded by mu_
  std::map<uint64_t, Owner> owners_;  // by connection; guarded by mu_
  Stats stats_;
};

}  // namespace odafs::server
