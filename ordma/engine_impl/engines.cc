// The backend factory, client side (what both sides ask, and connect_engine); the one
// place with engines_server.cc that knows which backends exist.
#include <stdexcept>
#include <string>
#include <system_error>

#include "ordma/engine.h"
#include "ordma/engine_impl/soft/soft_engine.h"
#if ODAFS_HAVE_VERBS
#include "ordma/engine_impl/verbs/verbs_engine.h"
#endif

namespace odafs::ordma {

std::vector<std::string> built_backends() {
#if ODAFS_HAVE_VERBS
  return {"soft", "verbs"};
#else
  return {"soft"};
#endif
}

bool backend_usable(const std::string& kind, std::string* why) {
  if (kind == "soft") return true;
#if ODAFS_HAVE_VERBS
  if (kind == "verbs") return verbs_usable(why);
#else
  if (kind == "verbs") {
    *why = "not built: rdma-core (libibverbs-dev, librdmacm-dev) was missing at build time";
    return false;
  }
#endif
  *why = "no backend named '" + kind + "'";
  return false;
}

std::unique_ptr<EngineClient> connect_engine(const std::string& kind, const net::Endpoint& engine,
                                             const Session& session,
                                             const EngineClientOptions& options) {
  if (kind == "soft" || kind.empty()) return connect_soft_engine(engine, session, options);
  if (options.tls) {  // fail closed: a TLS mount's bytes never cross a network in the clear
    throw std::system_error(std::make_error_code(std::errc::protocol_not_supported),
                            "the '" + kind + "' engine has no TLS, and this mount asks for it");
  }
#if ODAFS_HAVE_VERBS
  if (kind == "verbs") return connect_verbs_engine(engine, session, options);
#endif
  throw std::system_error(std::make_error_code(std::errc::protocol_not_supported),
                          "no one-sided engine backend named '" + kind + "' in this client");
}

}  // namespace odafs::ordma
