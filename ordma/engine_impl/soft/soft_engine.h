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

// REQUIRES: memory outlives the engine.
std::unique_ptr<SoftEngine> make_soft_engine(const EngineOptions& options, ExportedMemory memory);

// Connects to a soft engine and authenticates as `session`; also sets up a local ring when
// the engine offers one and it can be reached (same host), else reads go over TCP. Throws
// std::system_error if the engine cannot be reached or refuses the session.
std::unique_ptr<EngineClient> connect_soft_engine(const net::Endpoint& engine,
                                                  const Session& session,
                                                  const EngineClientOptions& options = {});

}  // namespace odafs::ordma
