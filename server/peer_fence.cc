#include "server/peer_fence.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <utility>

#include "base/futex.h"
#include "base/log.h"

namespace odafs::server {
PeerFence::PeerFence(Options options, EvictFn evict)
    : options_(std::move(options)), evict_(std::move(evict)) {
  for (const net::Endpoint& at : options_.peers) peers_.push_back(Peer{at, at.to_string()});
  worker_ = std::thread([this] { run(); });
}

PeerFence::~PeerFence() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  worker_.join();
}

void PeerFence::run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    for (Peer& peer : peers_) probe(peer);
    lock.lock();
    wake_.wait_for(lock, std::chrono::milliseconds(options_.probe_every_ms),
                   [&] { return stopping_; });
  }
}

void PeerFence::probe(Peer& peer) {
  const timespec deadline = deadline_after_ms(options_.probe_every_ms);
  Result<int> fd = net::connect_tcp_until(peer.at, &deadline);
  if (fd.ok()) {
    close(*fd);
    peer.seen_wall_ms = wall_ms();
    peer.refused_since_ms = 0;
    peer.fenced = false;
    return;
  }
  if (fd.errno_value() != ECONNREFUSED) {  // no answer is not death (see the header)
    peer.refused_since_ms = 0;
    return;
  }
  const int64_t now = now_ms();
  if (peer.refused_since_ms == 0) peer.refused_since_ms = now;
  if (peer.fenced || peer.seen_wall_ms == 0 ||
      now - peer.refused_since_ms < options_.dead_after_ms) {
    return;
  }
  Result<int> evicted = evict_(peer.name, peer.seen_wall_ms - options_.clock_margin_ms);
  if (!evicted.ok()) {
    failed_evictions_.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN(
        "fence: cannot evict the sessions of peer %s (refusing connections for %lld ms): %s",
        peer.name.c_str(), static_cast<long long>(now - peer.refused_since_ms),
        evicted.status().to_string().c_str());
    return;  // tried again at the next probe
  }
  peer.fenced = true;
  fenced_peers_.fetch_add(1, std::memory_order_relaxed);
  evicted_sessions_.fetch_add(static_cast<uint64_t>(*evicted), std::memory_order_relaxed);
  ODAFS_LOG_WARN("fence: peer %s refused connections for %lld ms: evicted %d session(s) it held",
                 peer.name.c_str(), static_cast<long long>(now - peer.refused_since_ms), *evicted);
}

void PeerFence::report_counters(const CounterSink& add) const {
  add("fenced_peers", fenced_peers_.load());
  add("evicted_sessions", evicted_sessions_.load());
  add("failed_evictions", failed_evictions_.load());
}

}  // namespace odafs::server
