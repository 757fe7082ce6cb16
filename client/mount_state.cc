#include "client/mount_state.h"

#include <chrono>
#include <functional>
#include <string_view>

#include "base/futex.h"
#include "base/log.h"
#include "base/net.h"
#include "client/client_impl.h"
#include "rpc/client_channel.h"

namespace odafs {

std::shared_ptr<ordma::EngineClient> EngineSlot::get(const ServerLimits& limits,
                                                     const ordma::Session& session,
                                                     const ordma::EngineClientOptions& options) {
  std::shared_ptr<ordma::EngineClient> c = client_.load();
  if (c && !c->broken()) return c;
  if (session.id == 0 || limits.engine.empty()) return nullptr;
  if (now_ms() < retry_at_ms_.load(std::memory_order_relaxed)) return nullptr;
  int expected = kIdle;
  if (!state_.compare_exchange_strong(expected, kConnecting)) return nullptr;
  // ordma/ reports a failed connect by throwing (its interface, not the client's): the
  // one place it is caught, and the answer is "no engine" (reads go by RPC), not an error.
  try {
    c = ordma::connect_engine(limits.engine_kind, net::parse_endpoint(limits.engine), session,
                              options);
    client_.store(c);
    retry_at_ms_.store(0, std::memory_order_relaxed);
  } catch (const std::exception& e) {
    ODAFS_LOG_WARN(
        "odafs: one-sided engine at %s unusable (%s); reading by RPC, retrying in %lld ms",
        limits.engine.c_str(), e.what(), static_cast<long long>(kRetryAfterFailureMs));
    client_.store(nullptr);
    c.reset();
    retry_at_ms_.store(now_ms() + kRetryAfterFailureMs, std::memory_order_relaxed);
  }
  state_.store(kIdle);
  return c;
}

MountState::~MountState() {
  if (channel) channel->set_callback_handler(nullptr);
  if (delegations) delegations->stop();
}

uint64_t cache_key(const Handle& fh) {
  return std::hash<std::string_view>{}(
      std::string_view(reinterpret_cast<const char*>(fh.data()), fh.size()));
}

}  // namespace odafs
