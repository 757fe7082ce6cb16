// PeerFence: fences the shared-store sessions of peer gateways that stay dead.
//
// Gateways of one CephFS export hold CephFS capabilities and delegations for their files;
// one that dies holds them (and every other client's access to its files waits) until the
// MDS times its session out (60 s by default, 30 s at least). A restarted gateway evicts
// the session its dead instance left; for one that stays dead, its peers do: each probes
// the others' listen addresses (--ceph-peers) and, once a peer seen alive has refused
// connections for Options::dead_after_ms, has the store evict the sessions that peer
// opened before it was last seen alive (evict), once per death.
//
// Only a refused connection counts: nothing listens there, so no process of that gateway
// serves. A timeout (an overloaded host, a partition) never fences, since a gateway fenced
// while it still serves loses its session for good; such a peer's session goes at the
// MDS's timeout instead. The cut-off "opened before last seen alive" keeps a restarted
// instance's new session, which opened after the old one died, out of the eviction, for
// clocks within Options::clock_margin_ms of each other. A peer never seen alive since this
// gateway started is not fenced (it may be starting).
//
// Thread-safety: its own thread probes; stats() is safe from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/counter_sink.h"
#include "base/net.h"
#include "base/status.h"

namespace odafs::server {

class PeerFence {
 public:
  struct Options {
    std::vector<net::Endpoint> peers;  // the other gateways' listen addresses
    int probe_every_ms = 500;
    int dead_after_ms = 3000;    // refused this long: fenced
    int clock_margin_ms = 2000;  // sessions opened this close to the last sighting stay
  };
  // Evicts the sessions gateway `peer` (its listen address as it names itself) opened
  // before `opened_before_ms` (wall clock, ms since the epoch); answers how many.
  using EvictFn = std::function<Result<int>(const std::string& peer, int64_t opened_before_ms)>;

  // Starts probing. REQUIRES: options.peers not empty.
  PeerFence(Options options, EvictFn evict);
  ~PeerFence();
  PeerFence(const PeerFence&) = delete;
  PeerFence& operator=(const PeerFence&) = delete;

  // Its counters under their own names (base/counter_sink.h). Thread-safe.
  void report_counters(const CounterSink& add) const;

 private:
  struct Peer {
    net::Endpoint at;
    std::string name;              // at.to_string(): how it names itself in its sessions
    int64_t seen_wall_ms = 0;      // last connection accepted (wall clock); 0: never
    int64_t refused_since_ms = 0;  // steady clock; 0: not refused now
    bool fenced = false;           // since it was last seen alive
  };
  void run();
  void probe(Peer& peer);

  const Options options_;
  const EvictFn evict_;
  std::vector<Peer> peers_;  // the thread's own
  std::atomic<uint64_t> fenced_peers_{0};
  std::atomic<uint64_t> evicted_sessions_{0};
  std::atomic<uint64_t> failed_evictions_{0};
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // mu_
  std::thread worker_;
};

}  // namespace odafs::server
