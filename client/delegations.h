// The read delegations a mount holds, by the name they were opened under.
//
// OPEN may grant a read delegation (docs/protocol.md, "Open delegations"): until the
// server recalls it, this client may open the file again by the same name, and trust its
// attributes and cached blocks, without a call. The server recalls it with a CB_RECALL
// on this mount's connection before another client writes, truncates, renames or removes
// the file or opens it to write; the channel's receiver hands the recall here, which drops
// the entry and the file's cached data at once, and a worker thread sends the
// DELEGRETURN.
//
// Trust is bounded by the lease. A holder that does not answer a recall within lease_ms
// loses the delegation without being told, so an entry is used only while the channel has
// heard from the server within three quarters of the lease (Channel::confirmed_since_ns:
// every recall sent before that reply has been handled). A mount idle for longer opens
// with a call again, which renews the entry.
//
// This client's own changes never recall its own delegations (the server does not
// conflict a connection with itself), so the client forgets an entry itself when it
// changes the file or its name, and gives it back (DELEGRETURN), so that the server holds
// no delegation the client no longer knows of.
//
// Thread-safety: all members are thread-safe. recall() runs on the channel's receiver
// thread and never waits for a reply.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include "client/client.h"

namespace odafs {

namespace rpc {
class Channel;
}
class ClientCache;

class Delegations {
 public:
  // REQUIRES: channel and cache outlive stop() (MountState stops it before freeing them).
  Delegations(rpc::Channel* channel, ClientCache* cache);
  ~Delegations();
  Delegations(const Delegations&) = delete;
  Delegations& operator=(const Delegations&) = delete;

  struct Held {
    Handle fh{};
    Attr attr;
  };
  // The file `name` in directory `dir` names under a delegation this mount may trust now.
  // Allocates nothing.
  std::optional<Held> find(const Handle& dir, std::string_view name) const;
  // Records delegation `id` on fh, granted by an OPEN of `name` in `dir` that answered attr.
  void insert(const Handle& dir, std::string_view name, const Handle& fh, const Attr& attr,
              uint64_t id, uint32_t lease_ms);
  // This client is changing the file (writes, truncation, attributes) or its name.
  void forget_file(const Handle& fh);
  void forget_name(const Handle& dir, std::string_view name);

  // CB_RECALL of delegation id on fh: drops it and the file's cached data, and queues its
  // return. Called on the channel's receiver thread.
  void recall(const Handle& fh, uint64_t id);

  // Stops the return worker (pending returns are dropped: the connection goes with the
  // mount). Idempotent.
  void stop();

 private:
  struct Entry {
    Handle dir{};
    std::string name;
    Held held;
    uint64_t id = 0;
  };
  static uint64_t name_key(const Handle& dir, std::string_view name);
  bool trusted() const;
  void erase_file_locked(uint64_t file_key);
  void return_loop();

  rpc::Channel* const channel_;
  ClientCache* const cache_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> by_name_;     // name_key -> entry
  std::unordered_map<uint64_t, uint64_t> by_file_;  // cache_key(fh) -> name_key
  int64_t trust_ns_ = 0;                            // 3/4 of the lease; guarded by mu_
  std::atomic<size_t> held_{0};  // by_file_.size(), for a lock-free "none" (written under mu_)

  std::condition_variable returns_ready_;
  std::deque<std::pair<Handle, uint64_t>> returns_;  // guarded by mu_
  bool stopping_ = false;                            // guarded by mu_
  std::thread returner_;
};

}  // namespace odafs
