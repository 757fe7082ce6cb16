#include "client/delegations.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "base/futex.h"
#include "base/log.h"
#include "client/call_util.h"
#include "client/client_cache.h"
#include "client/client_impl.h"
#include "client/mount_state.h"
#include "client/shared_file.h"
#include "rpc/call_credential.h"
#include "rpc/client_channel.h"

namespace odafs {

Delegations::Delegations(rpc::Channel* channel, ClientCache* cache, std::string server,
                         size_t max_kept_bytes, int max_kept_ms, WriteBack write_back,
                         Release release, ConnectionLost connection_lost, Adopt adopt)
    : channel_(channel),
      cache_(cache),
      server_(std::move(server)),
      max_kept_bytes_(max_kept_bytes),
      max_kept_ns_(int64_t{max_kept_ms} * 1000000),
      write_back_(std::move(write_back)),
      release_(std::move(release)),
      connection_lost_(std::move(connection_lost)),
      adopt_(std::move(adopt)),
      returner_([this] { return_loop(); }) {}

Delegations::~Delegations() { stop(); }

namespace {

bool same_caller(const std::optional<rpc::CallerCred>& a, const std::optional<rpc::CallerCred>& b) {
  if (!a || !b) return !a && !b;
  return a->uid == b->uid && a->gid == b->gid && a->ngids == b->ngids &&
         std::equal(a->gids, a->gids + std::min<uint32_t>(a->ngids, 16), b->gids);
}

// The bytes `shared` holds back from the server (its run, and its uncommitted copies), and
// where its run ends (0: none).
std::pair<size_t, uint64_t> held_back(SharedFile& shared) {
  size_t n;
  uint64_t end = 0;
  {
    std::lock_guard behind(shared.behind_mu);
    n = shared.behind.size();
    if (n != 0) end = shared.behind_offset + n;
  }
  std::lock_guard lock(shared.mu);
  return {n + shared.pending_data.size(), end};
}

// Whether `shared` holds bytes the server may not have durably.
bool unwritten(SharedFile& shared) {
  if (shared.has_behind.load(std::memory_order_acquire)) return true;
  std::lock_guard lock(shared.mu);
  return shared.unstable;
}

}  // namespace

std::vector<Delegations::Return> Delegations::take_unsent() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  returns_ready_.notify_all();
  returns_done_.notify_all();
  if (returner_.joinable()) returner_.join();
  std::lock_guard lock(mu_);
  taken_ = true;
  std::vector<Return> out = std::move(unsent_);
  unsent_.clear();
  for (Return& r : returns_) {
    if (r.kept) out.push_back(std::move(r));
  }
  returns_.clear();
  for (auto& [key, e] : by_name_) {
    if (e.kept) out.push_back({e.held.fh, e.id, true, std::move(e.kept), e.caller});
  }
  return out;
}

Delegations::Unsent Delegations::unsent() const {
  std::vector<OpenFiles::Ref> kept;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, e] : by_name_) {
      if (e.kept) kept.push_back(e.kept);
    }
    for (const Return& r : returns_) {
      if (r.kept) kept.push_back(r.kept);
    }
    for (const Return& r : unsent_) {
      if (r.kept) kept.push_back(r.kept);
    }
  }
  Unsent out;
  for (const OpenFiles::Ref& sf : kept) {  // the files' locks outside mu_ (keep_open's order)
    if (!unwritten(*sf)) continue;
    out.paths.push_back(sf->path());
    out.bytes += held_back(*sf).first;
  }
  return out;
}

bool Delegations::keep_unsent(Return& r) {
  if (!r.kept) return false;
  {
    std::lock_guard lock(mu_);
    if (!taken_) {
      unsent_.push_back(std::move(r));
      return true;
    }
  }
  if (adopt_) adopt_(r);  // the re-mount has been and gone: reclaimed here and now
  return true;
}

void Delegations::stop() {
  std::vector<Return> dropped;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
  }
  dropped = take_unsent();
  for (Return& r : dropped) {
    if (!r.kept) continue;
    // A File still open on the file reports it at its next fsync or close; otherwise this
    // is the only word of it.
    if (r.kept.use_count() <= 2 && unwritten(*r.kept)) {
      ODAFS_LOG_ERROR(
          "odafs: writes to %s on %s kept under a write delegation were not written back "
          "before the connection went (lost)",
          r.kept->path().c_str(), server_.c_str());
    }
    release_(r.fh, r.kept);
  }
}

uint64_t Delegations::name_key(const Handle& dir, std::string_view name) {
  uint64_t h = cache_key(dir);
  return h ^ (std::hash<std::string_view>{}(name) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

bool Delegations::trusted() const {
  // A broken connection's delegations are gone at the server (dropped with it).
  if (channel_->broken()) return false;
  int64_t confirmed = channel_->confirmed_since_ns();
  return confirmed != 0 && monotonic_ns() < confirmed + trust_ns_;
}

std::optional<Delegations::Held> Delegations::find(const Handle& dir, std::string_view name) const {
  // Every lookup and open asks: without delegations it costs one load, not the mutex.
  if (held_.load(std::memory_order_acquire) == 0) return std::nullopt;
  std::lock_guard lock(mu_);
  if (by_name_.empty() || !trusted()) return std::nullopt;
  auto it = by_name_.find(name_key(dir, name));
  if (it == by_name_.end() || it->second.dir != dir || it->second.name != name) {
    return std::nullopt;
  }
  return it->second.held;
}

bool Delegations::holds_write(const Handle& fh) const {
  if (held_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(mu_);
  if (!trusted()) return false;
  auto f = by_file_.find(cache_key(fh));
  if (f == by_file_.end()) return false;
  auto e = by_name_.find(f->second);
  return e != by_name_.end() && e->second.held.write && e->second.held.fh == fh;
}

bool Delegations::keep_open(const Handle& fh, const OpenFiles::Ref& shared) {
  if (held_.load(std::memory_order_acquire) == 0) return false;
  // Before mu_: pwrite takes behind_mu, then mu_.
  const auto [bytes, run_end] = held_back(*shared);
  std::lock_guard lock(mu_);
  if (stopping_ || !trusted()) return false;
  auto f = by_file_.find(cache_key(fh));
  if (f == by_file_.end()) return false;
  Entry& e = by_name_[f->second];
  if (!e.held.write || e.held.fh != fh) return false;
  const rpc::CallCredential* as = rpc::CallAs::current();
  std::optional<rpc::CallerCred> caller;
  if (as != nullptr) caller = as->id();
  if (e.kept && e.kept != shared) return false;
  if (run_end > e.held.space_limit) return false;  // the server promised no room for it
  // Over the bound: this close sends its bytes, and the entry keeps what it kept before.
  if (kept_bytes_ - e.kept_bytes + bytes > max_kept_bytes_) return false;
  if (!e.kept) {
    e.kept = shared;
    e.caller = caller;
    e.kept_since_ns = monotonic_ns();
    keeps_.emplace_back(f->first, e.kept_since_ns);
    if (keeps_.size() == 1) returns_ready_.notify_one();  // the worker's next deadline
  }
  if (!same_caller(e.caller, caller)) return false;
  kept_bytes_ = kept_bytes_ - e.kept_bytes + bytes;
  e.kept_bytes = bytes;
  // The size later opens start from once `shared` is gone (written back by age and let go):
  // only this client's writes change it while the delegation holds, and its truncations
  // give the delegation back.
  e.held.attr.size = std::max(e.held.attr.size, shared->size.load(std::memory_order_relaxed));
  return true;
}

bool Delegations::wrote(const Handle& fh, uint64_t end) {
  // Every write calls this: without delegations it costs one load, not the mutex.
  if (held_.load(std::memory_order_acquire) == 0) return false;
  {
    std::lock_guard lock(mu_);
    const uint64_t file = cache_key(fh);
    auto f = by_file_.find(file);
    if (f == by_file_.end()) return false;
    Held& held = by_name_[f->second].held;
    if (held.write) {
      // The sole writer's own writes: what it trusts stays true.
      held.attr.size = std::max(held.attr.size, end);
      return true;
    }
    erase_file_locked(file);
  }
  returns_ready_.notify_one();
  return false;
}

void Delegations::insert(const Handle& dir, std::string_view name, const Handle& fh,
                         const Attr& attr, uint64_t id, uint32_t lease_ms, bool write,
                         uint64_t space_limit) {
  const uint64_t key = name_key(dir, name);
  const uint64_t file = cache_key(fh);
  std::lock_guard lock(mu_);
  trust_ns_ = static_cast<int64_t>(lease_ms) * 750000;  // 3/4 of the lease
  Return renewed{fh, 0, write, nullptr, {}};
  size_t kept_bytes = 0;
  int64_t kept_since = 0;
  if (auto f = by_file_.find(file); write && f != by_file_.end()) {
    Entry& before = by_name_[f->second];  // renewed: its kept bytes still this client's
    renewed.id = before.id;
    renewed.kept = std::move(before.kept);
    renewed.caller = before.caller;
    kept_bytes = before.kept_bytes;
    kept_since = before.kept_since_ns;
  }
  // Every grant has a new id (the server renews a holder's id at each OPEN): the older one
  // is gone at the server, so it is dropped here without a DELEGRETURN.
  erase_file_locked(file, nullptr, /*renewed=*/true);  // one name per file
  // Recalled (and given back) before the OPEN's reply got here: the server holds it no
  // more. The recall went out first on this connection, so it was seen first. Kept bytes
  // go back as a recall's would.
  if (std::find(recalled_unknown_.begin(), recalled_unknown_.end(), id) !=
      recalled_unknown_.end()) {
    if (renewed.kept && !stopping_) {
      returns_.push_back(std::move(renewed));
      returns_ready_.notify_one();
    }
    return;
  }
  auto old = by_name_.find(key);
  if (old != by_name_.end()) erase_file_locked(cache_key(old->second.held.fh));
  if (write && !held_write_) {
    held_write_ = true;
    // The worker may sleep untimed (nothing kept yet): from now on it watches the
    // connection, so that a restart is noticed and reclaimed even if nothing else calls.
    returns_ready_.notify_one();
  }
  Entry& e = by_name_[key];
  e.dir = dir;
  e.name.assign(name);
  e.held = {fh, attr, write, space_limit};
  e.id = id;
  if (renewed.kept) {
    e.kept = std::move(renewed.kept);
    e.caller = renewed.caller;
    e.kept_bytes = kept_bytes;
    e.kept_since_ns = kept_since;
    kept_bytes_ += kept_bytes;
  }
  by_file_[file] = key;
  held_.store(by_file_.size(), std::memory_order_release);
}

void Delegations::erase_file_locked(uint64_t file_key, std::optional<Return>* now, bool renewed) {
  auto f = by_file_.find(file_key);
  if (f == by_file_.end()) return;
  auto e = by_name_.find(f->second);
  if (e != by_name_.end()) {
    // Given back, so the server holds no more than this client trusts.
    Entry& gone = e->second;
    kept_bytes_ -= gone.kept_bytes;
    Return r{gone.held.fh, gone.id, gone.held.write, std::move(gone.kept), gone.caller};
    if (now != nullptr && (r.write || renewed)) {
      giving_back_.push_back(r.id);
      *now = std::move(r);
    } else if (!stopping_ && (!renewed || r.kept)) {  // kept bytes still go back
      returns_.push_back(std::move(r));
    }
    by_name_.erase(e);
  }
  by_file_.erase(f);
  held_.store(by_file_.size(), std::memory_order_release);
}

void Delegations::forget_file(const Handle& fh) {
  if (held_.load(std::memory_order_acquire) == 0) return;
  std::optional<Return> now;
  {
    std::lock_guard lock(mu_);
    erase_file_locked(cache_key(fh), &now);
  }
  returns_ready_.notify_one();
  if (now) give_back(*now);
}

void Delegations::forget_name(const Handle& dir, std::string_view name) {
  std::optional<Return> now;
  {
    std::lock_guard lock(mu_);
    auto it = by_name_.find(name_key(dir, name));
    if (it == by_name_.end() || it->second.dir != dir || it->second.name != name) return;
    erase_file_locked(cache_key(it->second.held.fh), &now);
  }
  returns_ready_.notify_one();
  if (now) give_back(*now);
}

std::optional<Delegations::Return> Delegations::take_for_remove(const Handle& dir,
                                                                std::string_view name) {
  std::optional<Return> now;
  {
    std::lock_guard lock(mu_);
    auto it = by_name_.find(name_key(dir, name));
    if (it == by_name_.end() || it->second.dir != dir || it->second.name != name) return now;
    // nlink is the OPEN's: while a delegation is held no one else links the file (a LINK
    // by another client recalls it), and this client's own LINK gives it back.
    const bool only_link = it->second.held.attr.nlink <= 1;
    erase_file_locked(cache_key(it->second.held.fh), &now, /*renewed=*/only_link);
    if (now && only_link) return now;
  }
  returns_ready_.notify_one();
  if (now) give_back(*now);
  return std::nullopt;
}

void Delegations::removed(Return& r, bool done) {
  if (!done) {
    r.removing = true;
    return give_back(r);
  }
  // The bytes went with the file, and the delegation too: the server drops a file's
  // delegations when its last link goes, so there is nothing to give back.
  if (r.kept) release_(r.fh, r.kept);
  given_back(r.id);
}

void Delegations::given_back(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = std::find(giving_back_.begin(), giving_back_.end(), id);
  if (it == giving_back_.end()) return;
  *it = giving_back_.back();
  giving_back_.pop_back();
}

void Delegations::recall(const Handle& fh, uint64_t id) {
  const uint64_t file = cache_key(fh);
  {
    std::lock_guard lock(mu_);
    auto f = by_file_.find(file);
    bool known =
        f != by_file_.end() && by_name_.count(f->second) != 0 && by_name_[f->second].id == id;
    erase_file_locked(file);  // queues the return of what this client knew of
    if (stopping_) return;
    const bool caller_returns =
        std::find(giving_back_.begin(), giving_back_.end(), id) != giving_back_.end();
    if (!known && !caller_returns) {  // forgotten already, or its OPEN's reply not here yet
      returns_.push_back({fh, id, false, nullptr, {}});
      recalled_unknown_[recalled_next_++ % recalled_unknown_.size()] = id;
    }
  }
  // Another client is about to change the file: what this one cached may be old soon.
  cache_->forget_file_data(file);
  returns_ready_.notify_one();
}

void Delegations::return_all() {
  {
    std::lock_guard lock(mu_);
    while (!by_file_.empty()) erase_file_locked(by_file_.begin()->first);
  }
  returns_ready_.notify_one();
  std::unique_lock lock(mu_);
  returns_done_.wait(lock, [&] { return stopping_ || (returns_.empty() && !returning_); });
}

bool Delegations::write_back(Return& r, bool* lost) {
  *lost = false;
  // As the caller whose close kept them, as its own close would have sent them.
  std::optional<rpc::CallCredential> cred;
  std::optional<rpc::CallAs> as;
  if (r.caller) {
    cred.emplace(*r.caller, "odafs");
    as.emplace(*cred);
  }
  Result<bool> wrote = write_back_(r.fh, r.kept);
  if (wrote.ok()) return *wrote;
  if (channel_->broken()) {  // for the next mount to reclaim (take_unsent)
    *lost = true;
    return false;
  }
  // Kept in the SharedFile: a File still open on it reports it at its fsync or close.
  if (wrote.errno_value() != ESTALE) {  // ESTALE: the file is gone, and its bytes with it
    ODAFS_LOG_ERROR("odafs: writing back a write delegation's writes failed: %s",
                    wrote.status().to_string().c_str());
  }
  return false;
}

int64_t Delegations::take_due_locked(int64_t now, Return* due) {
  while (!keeps_.empty()) {
    const auto [file, since] = keeps_.front();
    auto f = by_file_.find(file);
    Entry* e = f == by_file_.end() ? nullptr : &by_name_[f->second];
    if (e == nullptr || !e->kept || e->kept_since_ns != since) {
      keeps_.pop_front();  // given back, or kept again later (queued again then)
      continue;
    }
    if (now < since + max_kept_ns_) return since + max_kept_ns_;
    keeps_.pop_front();
    kept_bytes_ -= e->kept_bytes;
    e->kept_bytes = 0;
    *due = Return{e->held.fh, e->id, true, std::move(e->kept), e->caller};
    return now;
  }
  return 0;
}

void Delegations::give_back(Return& r) {
  bool wrote_back = false;
  if (r.write) {
    bool lost = false;
    wrote_back = write_back(r, &lost);
    if (lost && keep_unsent(r)) {  // the connection went, and the delegation with it
      given_back(r.id);
      return;
    }
    // What this client cached may be old once another client changes the file.
    cache_->forget_file_data(cache_key(r.fh));
  }
  if (r.kept) release_(r.fh, r.kept);
  delegreturn_args args{};
  put_fh(args.fh, r.fh);
  args.delegation = r.id;
  stat_res res{};
  if (Status called = call<ODAFSPROC_DELEGRETURN>(*channel_, args, &res); !called.ok()) {
    // The connection is gone, and with it every delegation it held.
    ODAFS_LOG_DEBUG("odafs: returning a delegation failed: %s", called.to_string().c_str());
  } else if (wrote_back && res.status == ODAFS_ERR_INVAL) {
    ODAFS_LOG_WARN(
        "odafs: a write delegation on %s on %s had expired before its writes were written "
        "back: another client may have accessed the file without them",
        r.kept ? r.kept->path().c_str() : "a file open here", server_.c_str());
  }
  given_back(r.id);
}

void Delegations::return_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (stopping_) return;
    if (!returns_.empty()) {
      Return r = std::move(returns_.front());
      returns_.pop_front();
      returning_ = true;
      lock.unlock();
      give_back(r);
      lock.lock();
      returning_ = false;
      if (returns_.empty()) returns_done_.notify_all();
      continue;
    }
    Return due;
    const int64_t now = monotonic_ns();
    const int64_t next = take_due_locked(now, &due);
    if (due.kept) {
      // Written back by age: the delegation stays, and later closes keep again.
      returning_ = true;  // return_all waits for this too
      lock.unlock();
      bool lost = false;
      write_back(due, &lost);
      if (!lost || !keep_unsent(due)) release_(due.fh, due.kept);
      lock.lock();
      returning_ = false;
      if (returns_.empty()) returns_done_.notify_all();
      continue;
    }
    // Kept bytes wait: a connection broken meanwhile is noticed within kLostPoll, so
    // that the client re-mounts and reclaims them within the server's grace period even
    // when nothing else calls.
    // Also once it held a write delegation: the server's recovery record names this client
    // then, and a restarted server waits for it (its grace period) until it comes back.
    constexpr int64_t kLostPollNs = 200'000'000;
    const bool keeping = !keeps_.empty() || !unsent_.empty() || held_write_;
    if (keeping && !lost_told_ && channel_->broken() && connection_lost_) {
      lost_told_ = true;
      lock.unlock();
      connection_lost_();
      lock.lock();
      continue;
    }
    // Also wakes for the first write delegation (held_write_, set by the grant), which
    // makes this loop watch the connection from then on.
    auto ready = [&] {
      return stopping_ || !returns_.empty() || keeps_.size() == 1 || (held_write_ && !lost_told_);
    };
    if (next == 0 && !(keeping && !lost_told_)) {
      returns_ready_.wait(lock, ready);
    } else {
      const int64_t wait_ns = next == 0 ? kLostPollNs : std::min(next - now, kLostPollNs);
      returns_ready_.wait_for(lock, std::chrono::nanoseconds(wait_ns));
    }
  }
}

}  // namespace odafs
