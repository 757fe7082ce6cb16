#include "server/delegations.h"

#include <algorithm>
#include <chrono>

#include "base/log.h"
#include "rpc/server.h"

namespace odafs::server {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Delegations::Delegations(Options options, RecallFn send_recall, WriteEndedFn write_ended,
                         HolderFn holder_of)
    : options_(options),
      send_recall_(std::move(send_recall)),
      write_ended_(std::move(write_ended)),
      holder_of_(std::move(holder_of)) {
  changing_.reserve(64);
  ended_.reserve(64);
}

Delegations::Change::~Change() {
  if (owner_ != nullptr) owner_->end_change(node_);
}

void Delegations::end_change(uint64_t node) {
  std::lock_guard lock(mu_);
  auto it = std::find(changing_.begin(), changing_.end(), node);
  if (it != changing_.end()) {
    *it = changing_.back();
    changing_.pop_back();
  }
}

Delegations::Grant Delegations::grant(const NodeRef& node_ref, uint64_t connection,
                                      const WireHandle& fh, bool write) {
  const uint64_t node = node_ref->id;
  std::lock_guard lock(mu_);
  if (stopping_) return {};
  if (std::find(changing_.begin(), changing_.end(), node) != changing_.end()) return {};
  const uint64_t holder = holder_locked(connection);
  FileState& f = files_[node];
  f.node = node_ref;
  f.fh = fh;
  Holder* own = nullptr;
  for (Holder& h : f.holders) {
    if (h.recalled_at_ms != 0) return {};  // a change is waiting for this file
    if (h.holder == holder) {
      own = &h;
    } else if (write || h.write) {
      erase_if_empty_locked(node);
      return {};  // conflicts with another holder's delegation
    }
  }
  if (own != nullptr) {
    // A new id for each grant: a DELEGRETURN of the old one (the client forgot it while
    // this OPEN was on its way) then takes nothing away.
    own->id = next_id_++;
    const bool new_write = write && !own->write;
    if (new_write) {
      own->write = true;
      write_held_.fetch_add(1, std::memory_order_relaxed);
      stats_.granted_write.fetch_add(1, std::memory_order_relaxed);
    }
    return {own->id, own->write, new_write};
  }
  auto held = per_holder_.find(holder);
  if ((held != per_holder_.end() && held->second >= options_.max_per_connection) ||
      cooling_locked(node, holder, now_ms())) {
    erase_if_empty_locked(node);
    return {};
  }
  uint64_t id = next_id_++;
  f.holders.push_back({holder, id, 0, write});
  ++per_holder_[holder];
  stats_.granted.fetch_add(1, std::memory_order_relaxed);
  if (write) {
    write_held_.fetch_add(1, std::memory_order_relaxed);
    stats_.granted_write.fetch_add(1, std::memory_order_relaxed);
  }
  return {id, write, write};
}

bool Delegations::cooling_locked(uint64_t node, uint64_t holder, int64_t now) {
  if (options_.cooldown_ms <= 0) return false;
  const Recalled& r = recalled_slot(node);
  if (r.node != node || now >= r.until_ms || r.by == holder) return false;
  stats_.cooled.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Delegations::cool_down_locked(uint64_t node, uint64_t holder, bool write, int64_t now) {
  if (options_.cooldown_ms <= 0) return;
  Recalled& r = recalled_slot(node);
  const bool same = r.node == node;
  // Recalled again soon after the last cool-down ended: someone re-grabs as soon as it
  // may, and the file cools longer each time (capped); quiet for a cool-down, it starts over.
  int64_t cool = options_.cooldown_ms;
  if (same && now < r.until_ms + r.cool_ms) {
    cool = std::min(2 * r.cool_ms, kMaxCooldowns * options_.cooldown_ms);
  }
  // A write one's recall cost its holder a write-back: no one gets a new delegation for a
  // while. A read one's: no one but the holder whose call recalled it (the writer may
  // still be granted one). A write cool-down under way stays one.
  const bool write_cooling = same && r.by == 0 && now < r.until_ms;
  r = {node, std::max(same ? r.until_ms : 0, now + cool), cool,
       write || write_cooling ? 0 : holder};
}

void Delegations::keep_cool_locked(uint64_t node, int64_t now) {
  Recalled& r = recalled_slot(node);
  if (r.node == node && now < r.until_ms) r.until_ms = std::max(r.until_ms, now + r.cool_ms);
}

void Delegations::uncount_locked(const Holder& h) {
  if (--per_holder_[h.holder] == 0) per_holder_.erase(h.holder);
  if (h.write) write_held_.fetch_sub(1, std::memory_order_relaxed);
}

void Delegations::remove_locked(uint64_t node, const Holder& h) {
  uncount_locked(h);
  if (!h.write || !write_ended_) return;
  auto f = files_.find(node);
  if (f == files_.end()) return;
  ended_.push_back(f->second.node);
  ended_count_.store(ended_.size(), std::memory_order_relaxed);
}

void Delegations::tell_ended_slow() {
  thread_local std::vector<NodeRef> ended;
  {
    std::lock_guard lock(mu_);
    ended.swap(ended_);
    ended_count_.store(0, std::memory_order_relaxed);
  }
  for (const NodeRef& node : ended) write_ended_(node);
  ended.clear();
}

bool Delegations::write_held_on(uint64_t node) const {
  return any_holder_on(node, [](const Holder& h) { return h.write; });
}

bool Delegations::held_on(uint64_t node) const {
  return any_holder_on(node, [](const Holder&) { return true; });
}

bool Delegations::any_holder_on(uint64_t node, bool (*pred)(const Holder&)) const {
  std::lock_guard lock(mu_);
  auto f = files_.find(node);
  return f != files_.end() && std::any_of(f->second.holders.begin(), f->second.holders.end(), pred);
}

size_t Delegations::sweep_locked(uint64_t node, uint64_t holder, bool writes_only, int64_t now,
                                 std::vector<Holder>* to_recall) {
  auto it = files_.find(node);
  if (it == files_.end()) return 0;
  std::vector<Holder>& holders = it->second.holders;
  size_t others = 0;
  bool expired = false;
  bool recalled = false;
  bool recalled_write = false;
  for (size_t i = 0; i < holders.size();) {
    Holder& h = holders[i];
    if (h.holder == holder || (writes_only && !h.write)) {
      ++i;
      continue;
    }
    if (h.recalled_at_ms != 0 && now - h.recalled_at_ms >= options_.lease_ms) {
      stats_.expired.fetch_add(1, std::memory_order_relaxed);
      expired = true;
      if (h.write) {
        if (revoked_.size() >= kMaxRevoked) {
          ODAFS_LOG_WARN_THROTTLED("delegations: over %zu revoked at once; forgetting the oldest",
                                   kMaxRevoked);
          revoked_.erase(revoked_.begin());
        }
        revoked_.emplace_back(node, h.holder);
        revoked_count_.store(revoked_.size(), std::memory_order_relaxed);
      }
      remove_locked(node, h);
      holders[i] = holders.back();
      holders.pop_back();
      continue;
    }
    if (h.recalled_at_ms == 0) {
      h.recalled_at_ms = std::max<int64_t>(now, 1);
      to_recall->push_back(h);
      recalled = true;
      recalled_write = recalled_write || h.write;
    }
    ++others;
    ++i;
  }
  // Cool the file down (see Options::cooldown_ms): from the recall, and again from the
  // end of a recall a holder let run out (it may grab again the moment the cool-down ends).
  if (recalled) cool_down_locked(node, holder, recalled_write, now);
  if (expired) keep_cool_locked(node, now);
  return others;
}

void Delegations::erase_if_empty_locked(uint64_t node) {
  auto it = files_.find(node);
  if (it != files_.end() && it->second.holders.empty()) files_.erase(it);
}

Delegations::Change Delegations::begin_change(uint64_t node, uint64_t connection) {
  bool clear;
  bool had_holders;
  {
    std::unique_lock lock(mu_);
    had_holders = node != 0 && files_.count(node) != 0;
    // A change keeps a cooling file cool: no one takes a delegation on a file another is
    // writing just to make the writer's next change wait. The clock only for a file that
    // may be cooling.
    if (node != 0 && options_.cooldown_ms > 0 && recalled_slot(node).node == node) {
      keep_cool_locked(node, now_ms());
    }
    clear = wait_for_holders_locked(lock, node, connection, /*writes_only=*/false);
    if (clear) changing_.push_back(node);
  }
  tell_ended();
  return clear ? Change(this, node, had_holders) : Change(nullptr, node);
}

Delegations::Change Delegations::begin_change_without_waiting(uint64_t node) {
  std::vector<Holder> to_recall;
  WireHandle fh{};
  {
    std::lock_guard lock(mu_);
    changing_.push_back(node);
    if (sweep_locked(node, /*holder=*/0, /*writes_only=*/false, now_ms(), &to_recall) > 0) {
      fh = files_[node].fh;
    } else {
      erase_if_empty_locked(node);  // the sweep may have expired the last holder
    }
  }
  for (const Holder& h : to_recall) {
    stats_.recalled.fetch_add(1, std::memory_order_relaxed);
    // Unreachable: its connection is closing (drop_holder drops it), or a named client is
    // away (it expires like any recalled one).
    (void)send_recall_(h.holder, fh, h.id);
  }
  return Change(this, node);
}

bool Delegations::await_writers_slow(uint64_t node, uint64_t connection) {
  bool clear;
  {
    std::unique_lock lock(mu_);
    clear = wait_for_holders_locked(lock, node, connection, /*writes_only=*/true);
  }
  tell_ended();
  return clear;
}

bool Delegations::wait_for_holders_locked(std::unique_lock<std::mutex>& lock, uint64_t node,
                                          uint64_t connection, bool writes_only) {
  if (files_.find(node) == files_.end()) return true;  // the common case
  const uint64_t holder = holder_locked(connection);
  const int64_t start = now_ms();
  bool waiting = false;
  auto leave = [&](bool clear) {
    if (waiting) --waiters_;
    erase_if_empty_locked(node);
    if (!clear) stats_.delayed.fetch_add(1, std::memory_order_relaxed);
    return clear;
  };
  for (;;) {
    std::vector<Holder> to_recall;
    const int64_t now = now_ms();
    if (sweep_locked(node, holder, writes_only, now, &to_recall) == 0) return leave(true);
    if (!to_recall.empty()) {
      const WireHandle fh = files_[node].fh;
      lock.unlock();
      std::vector<Holder> unreachable;
      for (const Holder& h : to_recall) {
        stats_.recalled.fetch_add(1, std::memory_order_relaxed);
        // A named client with no connection stays recalled: it expires after the lease
        // unless it comes back and writes back first.
        if (!send_recall_(h.holder, fh, h.id) && (h.holder & kNamedHolder) == 0) {
          unreachable.push_back(h);
        }
      }
      lock.lock();
      for (const Holder& h : unreachable) {
        // A stopping server keeps it (its bytes come back to the next instance, and must not
        // find the file changed under them): the change answers DELAY (below).
        if (stopping_) break;
        // Its connection is closing: drop_holder drops it too, whichever is first.
        auto f = files_.find(node);
        if (f == files_.end()) break;
        auto& holders = f->second.holders;
        auto gone = std::find_if(holders.begin(), holders.end(), [&](const Holder& x) {
          return x.holder == h.holder && x.id == h.id;
        });
        if (gone == holders.end()) continue;
        remove_locked(node, *gone);
        holders.erase(gone);
        stats_.dropped.fetch_add(1, std::memory_order_relaxed);
      }
      continue;
    }
    // A stopping server waits on no holder: the stop joins this thread, and would otherwise
    // last as long as the holders take to answer (up to wait_ms per call).
    if (stopping_ || now - start >= options_.wait_ms) return leave(false);
    if (!waiting) {
      if (waiters_ >= options_.max_waiters) return leave(false);
      ++waiters_;
      waiting = true;
      // The holders answer on other connections, perhaps of this thread's event loop: a
      // wait that would hold the loop (no spare to take it) is answered DELAY at once.
      lock.unlock();
      const bool loop_free = rpc::before_blocking();
      lock.lock();
      if (!loop_free) return leave(false);
      continue;
    }
    // Wake at the first lease to run out, or when this operation has waited long enough.
    int64_t until = start + options_.wait_ms;
    for (const Holder& h : files_[node].holders) {
      if (h.holder != holder && h.recalled_at_ms != 0) {
        until = std::min(until, h.recalled_at_ms + options_.lease_ms);
      }
    }
    changed_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(until - now, 1)));
  }
}

bool Delegations::revoked_slow(uint64_t node, uint64_t connection) {
  std::lock_guard lock(mu_);
  const bool found = std::find(revoked_.begin(), revoked_.end(),
                               std::make_pair(node, holder_locked(connection))) != revoked_.end();
  if (found) stats_.refused_revoked.fetch_add(1, std::memory_order_relaxed);
  return found;
}

void Delegations::unrevoke_locked(uint64_t node, uint64_t holder) {
  if (revoked_.empty()) return;
  std::erase_if(revoked_, [&](const std::pair<uint64_t, uint64_t>& r) {
    return (node == 0 || r.first == node) && (holder == 0 || r.second == holder);
  });
  revoked_count_.store(revoked_.size(), std::memory_order_relaxed);
}

bool Delegations::returned(uint64_t node, uint64_t connection, uint64_t id) {
  {
    std::lock_guard lock(mu_);
    const uint64_t holder = holder_locked(connection);
    unrevoke_locked(node, holder);
    auto f = files_.find(node);
    if (f == files_.end()) return false;
    auto& holders = f->second.holders;
    auto it = std::find_if(holders.begin(), holders.end(),
                           [&](const Holder& h) { return h.holder == holder && h.id == id; });
    if (it == holders.end()) {
      // Renewed under another id (an OPEN crossed the return): still held, nothing lost.
      return std::any_of(holders.begin(), holders.end(),
                         [&](const Holder& h) { return h.holder == holder; });
    }
    remove_locked(node, *it);
    holders.erase(it);
    stats_.returned.fetch_add(1, std::memory_order_relaxed);
    erase_if_empty_locked(node);
    changed_.notify_all();
  }
  tell_ended();
  return true;
}

void Delegations::stop_serving() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  changed_.notify_all();
}

void Delegations::drop_holder_locked(uint64_t holder, bool reads_only) {
  if (per_holder_.find(holder) == per_holder_.end()) return;
  size_t left = 0;
  for (auto f = files_.begin(); f != files_.end();) {
    auto& holders = f->second.holders;
    const size_t before = holders.size();
    std::erase_if(holders, [&](const Holder& h) {
      if (h.holder != holder) return false;
      if (reads_only && h.write) {
        ++left;
        return false;
      }
      if (h.write) {
        write_held_.fetch_sub(1, std::memory_order_relaxed);
        if (write_ended_) ended_.push_back(f->second.node);
      }
      return true;
    });
    stats_.dropped.fetch_add(before - holders.size(), std::memory_order_relaxed);
    f = holders.empty() ? files_.erase(f) : std::next(f);
  }
  ended_count_.store(ended_.size(), std::memory_order_relaxed);
  if (left == 0) {
    per_holder_.erase(holder);
  } else {
    per_holder_[holder] = left;
  }
  changed_.notify_all();
}

void Delegations::drop_holder(uint64_t holder) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;  // the server is going: its delegations stay in force to the end
    unrevoke_locked(0, holder);
    drop_holder_locked(holder, /*reads_only=*/false);
  }
  tell_ended();
}

bool Delegations::holder_away(uint64_t holder) {
  bool stays;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return true;
    drop_holder_locked(holder, /*reads_only=*/true);
    stays = per_holder_.find(holder) != per_holder_.end() ||
            std::any_of(revoked_.begin(), revoked_.end(),
                        [&](const std::pair<uint64_t, uint64_t>& r) { return r.second == holder; });
  }
  tell_ended();
  return stays;
}

void Delegations::file_gone(uint64_t node) {
  std::lock_guard lock(mu_);
  unrevoke_locked(node, 0);
  auto f = files_.find(node);
  if (f == files_.end()) return;
  for (const Holder& h : f->second.holders) {
    remove_locked(node, h);
    stats_.dropped.fetch_add(1, std::memory_order_relaxed);
  }
  files_.erase(f);
  changed_.notify_all();
}

size_t Delegations::held_by(uint64_t connection) const {
  std::lock_guard lock(mu_);
  auto it = per_holder_.find(holder_locked(connection));
  return it == per_holder_.end() ? 0 : it->second;
}

size_t Delegations::held() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [holder, count] : per_holder_) n += count;
  return n;
}

void Delegations::report_counters(const CounterSink& add) const {
  add("held", held());
  add("granted", stats_.granted.load());
  add("granted_write", stats_.granted_write.load());
  add("recalled", stats_.recalled.load());
  add("returned", stats_.returned.load());
  add("expired", stats_.expired.load());
  add("dropped", stats_.dropped.load());
  add("delayed", stats_.delayed.load());
  add("cooled", stats_.cooled.load());
  add("refused_revoked", stats_.refused_revoked.load());
}

}  // namespace odafs::server
