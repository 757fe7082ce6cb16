#include "client/mount_state.h"

#include <functional>
#include <string_view>

#include "base/log.h"
#include "base/net.h"

namespace odafs {

std::shared_ptr<ordma::EngineClient> EngineSlot::get(const ServerLimits& limits,
                                                     const ordma::Session& session,
                                                     const ordma::EngineClientOptions& options) {
  std::shared_ptr<ordma::EngineClient> c = client_.load();
  if (c && !c->broken()) return c;
  if (session.id == 0 || limits.engine.empty()) return nullptr;
  int expected = kIdle;
  if (!state_.compare_exchange_strong(expected, kConnecting)) return nullptr;
  try {
    c = ordma::connect_engine(limits.engine_kind, net::parse_endpoint(limits.engine), session,
                              options);
    client_.store(c);
    state_.store(kIdle);
    return c;
  } catch (const std::exception& e) {
    ODAFS_LOG_WARN("odafs: one-sided engine at %s unusable (%s); reading by RPC",
                   limits.engine.c_str(), e.what());
    client_.store(nullptr);
    state_.store(kFailed);
    return nullptr;
  }
}

uint64_t cache_key(const Handle& fh) {
  return std::hash<std::string_view>{}(
      std::string_view(reinterpret_cast<const char*>(fh.data()), fh.size()));
}

}  // namespace odafs
