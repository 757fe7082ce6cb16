// The direct writes waiting for their data: an RPC thread that asked a client for bytes
// (a GET frame) waits here until the engine thread reading that client's connection hands
// them over, or the wait fails.
//
// Thread-safety: all members are thread-safe. A waiter is completed exactly once: whoever
// takes it out of the table completes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/futex.h"
#include "ordma/fault.h"

namespace odafs::ordma {

struct PullWaiter {
  std::vector<char> data;          // sized by the waiter; the engine thread fills it
  std::atomic<uint32_t> state{0};  // futex word: 1 once fault/data are final
  Fault fault = Fault::kTransport;

  void complete(Fault f) {
    fault = f;
    state.store(1, std::memory_order_release);
    futex_wake(&state);
  }
  bool done() const { return state.load(std::memory_order_acquire) != 0; }
};

class PullTable {
 public:
  // A new waiter for (session, tag) expecting `length` bytes; null if that tag has a waiter
  // already. (Replacing it would orphan the older one: no answer, fail_session or fail_all
  // could reach it, and its RPC thread would wait out its whole timeout, holding a stop.)
  std::shared_ptr<PullWaiter> add(uint64_t session, uint32_t tag, uint32_t length) {
    std::lock_guard lock(mu_);
    auto [it, inserted] = pulls_.try_emplace(Key{session, tag});
    if (!inserted) return nullptr;
    it->second = std::make_shared<PullWaiter>();
    it->second->data.resize(length);
    return it->second;
  }
  // Removes and returns the waiter for (session, tag), null if there is none (answered,
  // timed out, or never asked).
  std::shared_ptr<PullWaiter> take(uint64_t session, uint32_t tag) {
    std::lock_guard lock(mu_);
    auto it = pulls_.find(Key{session, tag});
    if (it == pulls_.end()) return nullptr;
    std::shared_ptr<PullWaiter> w = std::move(it->second);
    pulls_.erase(it);
    return w;
  }
  // Completes every waiter of `session` with `fault` (its engine connection is gone: no
  // data can come any more).
  void fail_session(uint64_t session, Fault fault) {
    std::lock_guard lock(mu_);
    for (auto it = pulls_.begin(); it != pulls_.end();) {
      if (it->first.session == session) {
        it->second->complete(fault);
        it = pulls_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Completes every waiter with `fault` and empties the table (the engine stops).
  void fail_all(Fault fault) {
    std::lock_guard lock(mu_);
    for (auto& [key, w] : pulls_) w->complete(fault);
    pulls_.clear();
  }

 private:
  struct Key {
    uint64_t session;
    uint32_t tag;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.session ^ k.tag); }
  };
  std::mutex mu_;
  std::unordered_map<Key, std::shared_ptr<PullWaiter>, KeyHash> pulls_;
};

}  // namespace odafs::ordma
