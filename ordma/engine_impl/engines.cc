// The backend factory: the one place that knows which backends exist.
#include <stdexcept>
#include <string>

#include "ordma/engine.h"
#include "ordma/engine_impl/soft/soft_engine.h"

namespace odafs::ordma {

std::unique_ptr<Engine> make_engine(const EngineOptions& options, ExportedMemory memory) {
  if (options.kind == "soft") return make_soft_engine(options, memory);
  throw std::invalid_argument("no one-sided engine backend named '" + options.kind + "'");
}

std::unique_ptr<EngineClient> connect_engine(const std::string& kind, const net::Endpoint& engine,
                                             const Session& session,
                                             const EngineClientOptions& options) {
  if (kind == "soft" || kind.empty()) return connect_soft_engine(engine, session, options);
  throw std::system_error(std::make_error_code(std::errc::protocol_not_supported),
                          "no one-sided engine backend named '" + kind + "'");
}

}  // namespace odafs::ordma
