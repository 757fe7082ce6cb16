// The soft backend: an Engine in software. Dedicated engine threads serve reads over TCP
// or, for clients on the same host, through shared-memory rings (local_ring.h). Its
// capability is a keyed MAC (capability.h); its revocation a generation bump in the export
// table (export_table.h), the paper's TPT.
//
// Only tests, fuzzers and the backend factory include this header; the file server and
// the client reach the backend through ordma/engine.h.
#pragma once

#include <memory>

#include "ordma/engine.h"
#include "ordma/engine_impl/soft/capability.h"
#include "ordma/engine_impl/soft/export_table.h"
#include "ordma/session.h"

namespace odafs::ordma {

class SoftEngine : public Engine {
 public:
  // The backend's state, for tests and fuzzers that forge, age or lock references.
  virtual ExportTable& table() = 0;
  virtual const CapabilityAuthority& capabilities() const = 0;
  virtual const SessionAuthority& sessions() const = 0;
};

// The soft backend's own settings (EngineOptions::backend), declared for daemons in
// kSoftSettings:
//   local_rings=0|1   offer same-host clients shared-memory rings (local_ring.h); default 1
//   max_rings=N       at most N rings at once, 1..65536 (each costs 64 segments); default 256
inline constexpr BackendSetting kSoftSettings[] = {
    {"soft", "--max-rings", "max_rings", "N", nullptr,
     "shared-memory rings offered to same-host clients (1..65536; default 256)"},
    {"soft", "--no-local-rings", "local_rings", nullptr, "0",
     "offer no rings (same-host clients use TCP)"},
};
struct SoftSettings {
  bool local_rings = true;
  size_t max_rings = 256;
};
// options.backend read as SoftSettings. Throws std::invalid_argument naming a setting the
// soft backend does not know or a value out of its range.
SoftSettings soft_settings(const EngineOptions& options);

// REQUIRES: memory outlives the engine. Throws std::invalid_argument as soft_settings.
std::unique_ptr<SoftEngine> make_soft_engine(const EngineOptions& options, ExportedMemory memory);

// Connects to a soft engine and authenticates as `session`; also sets up a local ring when
// the engine offers one and it can be reached (same host), else reads go over TCP. Throws
// std::system_error if the engine cannot be reached or refuses the session.
std::unique_ptr<EngineClient> connect_soft_engine(const net::Endpoint& engine,
                                                  const Session& session,
                                                  const EngineClientOptions& options = {});

}  // namespace odafs::ordma
