// One mount's view of the server, published as an immutable snapshot.
//
// A Client swaps in a new MountState when it (re)mounts; every operation loads the current
// one once and uses it to the end, so a re-mount after a server restart never pulls the
// channel, root, limits, session or cache out from under a call in flight: the call
// finishes with the mount it started on, and the old state is freed with its last user.
//
// The engine connection is the one mutable part, and it is made without any lock: the
// first read that wants the engine connects, while reads racing it go by RPC.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "client/client.h"
#include "client/client_cache.h"
#include "client/delegations.h"
#include "client/dir_cache.h"
#include "ordma/engine.h"
#include "ordma/session.h"

namespace odafs {

namespace rpc {
class Channel;
}

// The mount's connection to its one-sided engine, made lazily.
// Thread-safety: all members are thread-safe and never block on another thread.
class EngineSlot {
 public:
  // The connected engine, connecting first if nobody has and nobody is; null while another
  // thread connects, when the mount has no engine, or for kRetryAfterFailureMs after
  // connecting failed (reads go by RPC meanwhile: a server that stalled for a moment does
  // not turn one-sided reads off for the rest of the mount). A broken engine is replaced
  // the same way.
  std::shared_ptr<ordma::EngineClient> get(const ServerLimits& limits,
                                           const ordma::Session& session,
                                           const ordma::EngineClientOptions& options);
  // The engine as it is now; never connects.
  std::shared_ptr<ordma::EngineClient> current() const { return client_.load(); }

 private:
  static constexpr int64_t kRetryAfterFailureMs = 5000;
  enum State : int { kIdle, kConnecting };
  std::atomic<int> state_{kIdle};
  std::atomic<int64_t> retry_at_ms_{0};  // steady clock; 0: no failure to wait out
  std::atomic<std::shared_ptr<ordma::EngineClient>> client_;
};

struct MountState {
  MountState() = default;
  // Stops the delegations' worker and unhooks them from the channel, which may outlive
  // this state.
  ~MountState();
  MountState(const MountState&) = delete;
  MountState& operator=(const MountState&) = delete;

  std::shared_ptr<rpc::Channel> channel;
  // The host of the server this mount reached (the one a TLS certificate must name, for
  // the engine's connection too).
  std::string server_host;
  Handle root{};
  ServerLimits limits;
  ordma::Session session;  // id 0: the server has no engine
  // This mount's directory and data cache. A new mount starts empty: the old instance's
  // references would all fault, and its data may be stale.
  std::unique_ptr<ClientCache> cache;
  std::unique_ptr<DirCache> dirs;  // directory handles by path (see dir_cache.h)
  // Read delegations this connection holds (see delegations.h); recalled through the
  // channel's callback handler.
  std::shared_ptr<Delegations> delegations;
  mutable EngineSlot engine;
  // Why the bytes this mount writes home for the last one were kept from the server (the
  // log says so): "a server restart", or "a reconnection" when the server kept this
  // client's delegations across a lost connection (client_id_ok.kept).
  const char* reclaim_after = "a server restart";
};

// The key a file's blocks have in the client cache: a hash of its handle. Not the file id:
// an inode number comes back for the next file created after a remove, while the server
// never reissues a handle, so a reused inode can never find the old file's blocks.
uint64_t cache_key(const Handle& fh);

}  // namespace odafs
