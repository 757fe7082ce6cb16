// The verbs backend: the paper's engine on a real RNIC (InfiniBand, RoCE, iWARP, or the
// kernel's rdma_rxe), through libibverbs and librdmacm.
//
// Server: the block-cache arena is registered once. A reference is a memory window bound
// over one block for one session's queue pair (type 2, so another queue pair cannot use
// it), or, on devices without type-2 windows, a memory region registered over the block in
// the session's own protection domain. Revoking a block, and an RPC write to it, is a local
// invalidate of every window over it (a region is deregistered); the next export binds a
// new key. The engine's threads never serve reads: the NIC does.
//
// Client: one RC queue pair per engine client, reached through rdma_cm at the address MOUNT
// names. Each read is two RDMA READs posted together into registered staging memory: the
// block's bytes, then the block's generation word. A window's key changes only in its low
// 8 bits, so after 256 re-binds an old key works again; the generation word, read after the
// data on the same queue pair (an RC responder executes READs in order), tells the client
// that the block was revoked since its reference was issued, and the bytes are dropped
// (kStaleGeneration). A remote access error (a revoked, locked or forged key) is kRevoked;
// it moves the queue pair to the error state, so the client connects a new one in the
// background and answers kTransport (the RPC fallback) until it is up.
//
// Only tests and the backend factory include this header.
#pragma once

#include <memory>
#include <string>

#include "ordma/engine.h"

namespace odafs::ordma {

// True when this build has the backend and the machine has at least one RDMA device;
// otherwise false with *why saying which is missing.
bool verbs_usable(std::string* why);

// The verbs backend's one setting (EngineOptions::backend): rdma_device=NAME, the device
// to serve on (default: the one serving the listening address).
inline constexpr BackendSetting kVerbsSettings[] = {
    {"verbs", "--rdma-dev", "rdma_device", "NAME", nullptr,
     "RDMA device for --engine verbs (default: the one serving --engine-listen)"},
};

// The verbs backend's own setting (EngineOptions::backend): rdma_device=NAME, the RDMA
// device to use (ibv_get_device_name; default: the one rdma_cm finds for options.listen).
// REQUIRES: memory outlives the engine. Throws std::invalid_argument for another setting,
// std::system_error when no device can serve options.listen or a resource cannot be had.
std::unique_ptr<Engine> make_verbs_engine(const EngineOptions& options, ExportedMemory memory);

// Connects one RC queue pair to a verbs engine and authenticates as `session`, within
// options.timeout_ms. Throws std::system_error as connect_engine() says.
std::unique_ptr<EngineClient> connect_verbs_engine(const net::Endpoint& engine,
                                                   const Session& session,
                                                   const EngineClientOptions& options = {});

}  // namespace odafs::ordma
