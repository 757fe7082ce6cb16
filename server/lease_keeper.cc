#include "server/lease_keeper.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/futex.h"
#include "base/log.h"

namespace odafs::server {

LeaseKeeper::LeaseKeeper(Store& store, NodeTable& nodes, Delegations& delegations,
                         cache::BlockCache& cache, Options options)
    : store_(store),
      nodes_(nodes),
      delegations_(delegations),
      cache_(cache),
      options_(options),
      active_(store.leases()) {
  if (!active_) return;
  // Only notes the id: the store calls this from its own threads, perhaps inside ours.
  store_.set_lease_recall([this](const ObjectId& id) {
    stats_.recalled.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lock(mu_);
      to_give_back_.push_back(id);
    }
    wake_.notify_one();
  });
  worker_ = std::thread([this] { run(); });
}

LeaseKeeper::~LeaseKeeper() {
  if (!active_) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  worker_.join();
  returning_.clear();  // their changes end; their leases are in held_, given back below
  // No client is served any more: the blocks go with the server, the leases back.
  std::unordered_map<ObjectId, OpenNode, ObjectIdHash> held;
  {
    std::lock_guard lock(mu_);
    held.swap(held_);
    writers_.clear();
  }
  // With nothing registered any more, a late recall finds no lease and never reaches the
  // recall function, whose `this` is about to go.
  for (auto& [key, node] : held) store_.give_back_lease(node.object());
}

bool LeaseKeeper::may_cache(const OpenNode& node) {
  if (!active_ || node->lease.held.load(std::memory_order_acquire)) return true;
  const int64_t now = now_ms();
  if (now - node->lease.refused_ms.load(std::memory_order_relaxed) < options_.refused_retry_ms) {
    return false;
  }
  std::lock_guard taking(taking_mu_);
  if (node->lease.held.load(std::memory_order_acquire)) return true;
  {
    // Pinned and findable before the store is asked: its recall may come at once.
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    held_.try_emplace(node->key, node.another_pin());
  }
  const Store::LeaseKind kind =
      node.writable() ? Store::LeaseKind::kWrite : Store::LeaseKind::kRead;
  if (Status s = store_.take_lease(node.object(), node->key, kind); !s.ok()) {
    {
      std::lock_guard lock(mu_);
      held_.erase(node->key);
    }
    node->lease.refused_ms.store(now, std::memory_order_relaxed);
    stats_.refused.fetch_add(1, std::memory_order_relaxed);
    // Perhaps refused for our own open to read (an object reopened to write in place):
    // closed once idle, the file reopens.
    if (node.writable()) watch_writer(node);
    return false;
  }
  node->lease.write.store(kind == Store::LeaseKind::kWrite, std::memory_order_release);
  node->lease.held.store(true, std::memory_order_release);
  stats_.taken.fetch_add(1, std::memory_order_relaxed);
  if (kind == Store::LeaseKind::kWrite) stats_.taken_write.fetch_add(1, std::memory_order_relaxed);
  bool over_bound = false;
  {
    std::lock_guard lock(mu_);
    taken_order_.push_back(node->key);
    if (held_.size() > options_.max_leases) {
      // The oldest lease still held goes back, on the keeper's thread.
      while (!taken_order_.empty() && !over_bound) {
        const ObjectId oldest = taken_order_.front();
        taken_order_.pop_front();
        over_bound = held_.count(oldest) != 0 && !(oldest == node->key);
        if (over_bound) to_give_back_.push_back(oldest);
      }
    } else if (taken_order_.size() > 2 * options_.max_leases) {
      std::erase_if(taken_order_, [&](const ObjectId& k) { return held_.count(k) == 0; });
    }
  }
  if (over_bound) wake_.notify_one();
  return true;
}

OpenNode LeaseKeeper::held_pin(const ObjectId& key) {
  std::lock_guard lock(mu_);
  auto it = held_.find(key);
  return it == held_.end() ? OpenNode() : it->second.another_pin();
}

void LeaseKeeper::give_back(const ObjectId& key) {
  if (!active_) return;
  const OpenNode node = held_pin(key);
  if (!node) return;  // none held (every lease held has its entry)
  const Delegations::Change change = delegations_.begin_change_without_waiting(node->id);
  drop_and_give_back(node);
}

void LeaseKeeper::start_give_back(const ObjectId& key) {
  OpenNode node = held_pin(key);
  if (!node) return;
  // 1. Recalled, without waiting here: a holder's return may need calls of its own
  // answered first, and other files' recalls are waited for side by side.
  Delegations::Change change = delegations_.begin_change_without_waiting(node->id);
  if (!delegations_.held_on(node->id)) return drop_and_give_back(node);
  const int64_t deadline = now_ms() + delegations_.lease_ms();
  returning_.push_back(Returning{std::move(node), std::move(change), deadline});
}

void LeaseKeeper::finish_returned() {
  const int64_t now = now_ms();
  for (auto it = returning_.begin(); it != returning_.end();) {
    const Node& n = *it->node;
    // 2. Waited for until every holder is back, a write of the file waits in the store
    // (see the header comment), or the lease ran out.
    const bool returned = !delegations_.held_on(n.id);
    if (!returned && n.lease.writes_in_store.load(std::memory_order_acquire) == 0 &&
        now < it->deadline_ms) {
      ++it;
      continue;
    }
    if (!returned) stats_.unreturned.fetch_add(1, std::memory_order_relaxed);
    drop_and_give_back(it->node);
    it = returning_.erase(it);  // its Change ends after the give-back
  }
}

size_t LeaseKeeper::held() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

void LeaseKeeper::note_written(const OpenNode& node) {
  if (!active_) return;
  node->lease.last_write_ms.store(now_ms(), std::memory_order_relaxed);
  watch_writer(node);
}

void LeaseKeeper::watch_writer(const OpenNode& node) {
  if (node->lease.writer_watched.load(std::memory_order_relaxed) ||
      node->lease.writer_watched.exchange(true, std::memory_order_acq_rel)) {
    return;
  }
  {
    std::lock_guard lock(mu_);
    writers_.push_back(node.node());
  }
  wake_.notify_one();  // the keeper's thread may wait with nothing to time
}

void LeaseKeeper::run() {
  std::unique_lock lock(mu_);
  int64_t last_sweep = now_ms();
  std::deque<ObjectId> recalled;
  for (;;) {
    auto ready = [&] { return stopping_ || !to_give_back_.empty(); };
    if (!returning_.empty()) {
      // Returns come on RPC threads, which do not wake this one: look again soon.
      wake_.wait_for(lock, std::chrono::milliseconds(kReturnPollMs), ready);
    } else if (writers_.empty()) {
      wake_.wait(lock, [&] { return ready() || !writers_.empty(); });
    } else {
      wake_.wait_for(lock, std::chrono::milliseconds(options_.writer_idle_ms / 4 + 1), ready);
    }
    if (stopping_) return;
    recalled.swap(to_give_back_);
    lock.unlock();
    for (const ObjectId& key : recalled) start_give_back(key);
    recalled.clear();
    finish_returned();
    lock.lock();
    if (const int64_t now = now_ms(); now - last_sweep >= options_.writer_idle_ms / 4) {
      last_sweep = now;
      close_idle_writers_locked(lock);
    }
  }
}

void LeaseKeeper::close_idle_writers_locked(std::unique_lock<std::mutex>& lock) {
  const int64_t now = now_ms();
  std::vector<NodeRef> idle;
  std::erase_if(writers_, [&](const NodeRef& n) {
    if (n->lease.held.load(std::memory_order_acquire)) {
      // Open for its write lease: watched again once that goes (drop_and_give_back).
      n->lease.writer_watched.store(false, std::memory_order_release);
      return true;
    }
    const bool stopped =
        now - n->lease.last_write_ms.load(std::memory_order_relaxed) >= options_.writer_idle_ms;
    if (stopped) idle.push_back(n);
    return stopped;
  });
  if (idle.empty()) return;
  lock.unlock();
  std::vector<NodeRef> busy;
  for (NodeRef& n : idle) {
    // Cleared first: a write from here on watches the file again.
    n->lease.writer_watched.store(false, std::memory_order_release);
    if (!nodes_.close_unpinned(*n) &&
        !n->lease.writer_watched.exchange(true, std::memory_order_acq_rel)) {
      busy.push_back(std::move(n));  // a call has it pinned: next time
    }
  }
  lock.lock();
  writers_.insert(writers_.end(), busy.begin(), busy.end());
}

void LeaseKeeper::drop_and_give_back(const OpenNode& node) {
  // 3. Cleared first: a fill from here on keeps nothing (FileService::pin_block checks the
  // flag after it read the store, with its block already in the cache's map, so the drop
  // catches a fill that checked before the clear). Dropping the blocks revokes every
  // reference to them. 4. Only then may the other client's access proceed. taking_mu_
  // makes 3 and 4 one step for may_cache, which could otherwise find the lease still held
  // between them and take it "again" just before it goes back. No lock of the file's is
  // taken: a read of ours may be waiting in the store for this very give-back.
  bool was_leased;
  {
    std::lock_guard taking(taking_mu_);
    was_leased = node->lease.held.exchange(false, std::memory_order_acq_rel);
    node->lease.write.store(false, std::memory_order_release);
    cache_.invalidate(node->id, 0, UINT64_MAX);
    store_.give_back_lease(node.object());
    std::lock_guard lock(mu_);
    held_.erase(node->key);
  }
  if (was_leased) stats_.given_back.fetch_add(1, std::memory_order_relaxed);
  // Open to write, the file keeps others from a read lease: closed once idle.
  if (node.writable()) note_written(node);
}

void LeaseKeeper::report_counters(const CounterSink& add) const {
  add("held", held());
  add("taken", stats_.taken.load());
  add("taken_write", stats_.taken_write.load());
  add("refused", stats_.refused.load());
  add("recalled", stats_.recalled.load());
  add("given_back", stats_.given_back.load());
  add("unreturned", stats_.unreturned.load());
}

}  // namespace odafs::server
