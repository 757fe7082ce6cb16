#include "client/delegations.h"

#include <cstring>
#include <functional>

#include "base/futex.h"
#include "base/log.h"
#include "client/call_util.h"
#include "client/client_cache.h"
#include "client/mount_state.h"
#include "rpc/client_channel.h"

namespace odafs {

Delegations::Delegations(rpc::Channel* channel, ClientCache* cache)
    : channel_(channel), cache_(cache), returner_([this] { return_loop(); }) {}

Delegations::~Delegations() { stop(); }

void Delegations::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  returns_ready_.notify_all();
  if (returner_.joinable()) returner_.join();
}

uint64_t Delegations::name_key(const Handle& dir, std::string_view name) {
  uint64_t h = cache_key(dir);
  return h ^ (std::hash<std::string_view>{}(name) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

bool Delegations::trusted() const {
  int64_t confirmed = channel_->confirmed_since_ns();
  return confirmed != 0 && monotonic_ns() < confirmed + trust_ns_;
}

std::optional<Delegations::Held> Delegations::find(const Handle& dir, std::string_view name) const {
  std::lock_guard lock(mu_);
  if (by_name_.empty() || !trusted()) return std::nullopt;
  auto it = by_name_.find(name_key(dir, name));
  if (it == by_name_.end() || it->second.dir != dir || it->second.name != name) {
    return std::nullopt;
  }
  return it->second.held;
}

void Delegations::insert(const Handle& dir, std::string_view name, const Handle& fh,
                         const Attr& attr, uint64_t id, uint32_t lease_ms) {
  const uint64_t key = name_key(dir, name);
  const uint64_t file = cache_key(fh);
  std::lock_guard lock(mu_);
  trust_ns_ = static_cast<int64_t>(lease_ms) * 750000;  // 3/4 of the lease
  // Every grant has a new id (the server renews a holder's id at each OPEN), so giving an
  // older one back can never take this one away.
  erase_file_locked(file);  // one name per file
  auto old = by_name_.find(key);
  if (old != by_name_.end()) erase_file_locked(cache_key(old->second.held.fh));
  Entry& e = by_name_[key];
  e.dir = dir;
  e.name.assign(name);
  e.held = {fh, attr};
  e.id = id;
  by_file_[file] = key;
  held_.store(by_file_.size(), std::memory_order_release);
}

void Delegations::erase_file_locked(uint64_t file_key) {
  auto f = by_file_.find(file_key);
  if (f == by_file_.end()) return;
  auto e = by_name_.find(f->second);
  if (e != by_name_.end()) {
    // Given back, so the server holds no more than this client trusts.
    if (!stopping_) returns_.emplace_back(e->second.held.fh, e->second.id);
    by_name_.erase(e);
  }
  by_file_.erase(f);
  held_.store(by_file_.size(), std::memory_order_release);
}

void Delegations::forget_file(const Handle& fh) {
  // Every write calls this: without delegations it costs one load, not the mutex.
  if (held_.load(std::memory_order_acquire) == 0) return;
  {
    std::lock_guard lock(mu_);
    erase_file_locked(cache_key(fh));
  }
  returns_ready_.notify_one();
}

void Delegations::forget_name(const Handle& dir, std::string_view name) {
  {
    std::lock_guard lock(mu_);
    auto it = by_name_.find(name_key(dir, name));
    if (it == by_name_.end() || it->second.dir != dir || it->second.name != name) return;
    erase_file_locked(cache_key(it->second.held.fh));
  }
  returns_ready_.notify_one();
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
    if (!known) returns_.emplace_back(fh, id);  // forgotten already, or never known
  }
  // Another client is about to change the file: what this one cached may be old soon.
  cache_->forget_file_data(file);
  returns_ready_.notify_one();
}

void Delegations::return_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    returns_ready_.wait(lock, [&] { return stopping_ || !returns_.empty(); });
    if (stopping_) return;
    auto [fh, id] = returns_.front();
    returns_.pop_front();
    lock.unlock();
    delegreturn_args args{};
    put_fh(args.fh, fh);
    args.delegation = id;
    stat_res res{};
    try {
      channel_->call(ODAFSPROC_DELEGRETURN, to_xdrproc(xdr_delegreturn_args), &args,
                     to_xdrproc(xdr_stat_res), &res);
    } catch (const rpc::RpcError& e) {
      // The connection is gone, and with it every delegation it held.
      ODAFS_LOG_DEBUG("odafs: returning a delegation failed: %s", e.what());
    }
    lock.lock();
  }
}

}  // namespace odafs
