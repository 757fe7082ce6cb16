// The one-sided access engine (the paper's NIC) behind one interface.
//
// Server side, an Engine serves client-initiated reads of exported memory: it checks the
// capability and the export table entry of each request and copies the segment's bytes
// out, without ever calling into the file server. Client side, an EngineClient issues
// those reads and reports each outcome as a Fault.
//
// Backends live in engine_impl/: `soft` (dedicated engine threads, reached over TCP or, from
// the same host, through shared-memory rings; always built) now;
// a verbs backend (memory windows as capabilities, invalidation as revocation,
// IBV_WC_REM_ACCESS_ERR as the fault) slots in behind the same two interfaces.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <sys/uio.h>

#include "ordma/capability.h"
#include "ordma/export_table.h"
#include "ordma/fault.h"
#include "ordma/session.h"
#include "rpc/net.h"

namespace odafs::ordma {

// The memory an engine exports: `segments` segments of `segment_bytes` each, segment i at
// base + i * segment_bytes. Segment i is governed by export table entry i.
struct ExportedMemory {
  const std::byte* base = nullptr;
  size_t segment_bytes = 0;
  size_t segments = 0;
};

struct EngineStats {
  std::atomic<uint64_t> connections{0};
  std::atomic<uint64_t> rings{0};  // local rings set up (same-host clients)
  std::atomic<uint64_t> bad_handshakes{0};  // wrong proof or magic: connection closed
  std::atomic<uint64_t> bad_frames{0};      // malformed request: connection closed
  std::atomic<uint64_t> reads{0};           // served with data
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> pushes{0};  // server-initiated writes (direct reads)
  std::atomic<uint64_t> push_bytes{0};
  std::atomic<uint64_t> pulls{0};  // server-initiated reads (direct writes)
  std::atomic<uint64_t> pull_bytes{0};
  std::array<std::atomic<uint64_t>, kFaultKinds> faults{};  // by Fault value
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual void start() = 0;
  // Stops serving and closes every connection. Idempotent.
  virtual void stop() = 0;
  // Where clients connect, "HOST:PORT".
  virtual std::string endpoint() const = 0;
  virtual const EngineStats& stats() const = 0;

  // Server-initiated write (DAFS direct read): queues the concatenated parts for
  // `session`'s engine connection, to land at `offset` of the client's registered buffer
  // `buffer`; `tag` names the client's call. The bytes are copied before return, so the
  // caller may release its memory. kWrongSession when the session has no engine
  // connection, kTransport when it cannot take more. Thread-safe.
  virtual Fault push(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag,
                     const iovec* parts, int nparts) = 0;

  // Server-initiated read (DAFS direct write): asks `session`'s client for `length` bytes
  // at `offset` of its registered buffer `buffer` and waits up to timeout_ms for them.
  // On kNone *data holds exactly `length` bytes. kWrongSession: no engine connection;
  // kTransport: timeout or connection lost; a client-side refusal comes back as its fault.
  // Thread-safe; blocks the calling thread.
  virtual Fault pull(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag,
                     uint32_t length, int timeout_ms, std::vector<char>* data) = 0;

  // Tells the client its direct call `tag` failed (a PUT with `fault` and no data), so it
  // stops waiting for a transfer. Thread-safe.
  virtual void cancel(uint64_t session, uint32_t tag, Fault fault) = 0;
};

struct SoftEngineOptions {
  net::Endpoint listen;
  int threads = 1;
  size_t max_backlog = 8u << 20;  // response bytes queued per connection before it stalls
  // Offer same-host clients shared-memory rings (engine_impl/local_ring.h), at most
  // max_rings at once; each costs 64 segments of memory.
  bool local_rings = true;
  size_t max_rings = 256;
  std::function<void()> on_thread_start;  // CPU accounting hooks
  std::function<void()> on_thread_exit;
};

// REQUIRES: table, authority, sessions and the memory outlive the engine.
std::unique_ptr<Engine> make_soft_engine(const SoftEngineOptions& options, ExportTable* table,
                                         const CapabilityAuthority* authority,
                                         const SessionAuthority* sessions, ExportedMemory memory);

class EngineClient {
 public:
  virtual ~EngineClient() = default;
  // Reads [offset, offset + length) of ref's segment into dst. Returns kNone with *got set
  // (== length), or the fault; on a fault dst is untouched. Thread-safe: calls from many
  // threads are in flight together on one connection.
  virtual Fault read(const Reference& ref, uint32_t offset, uint32_t length, void* dst,
                     uint32_t* got) = 0;
  // True once the connection failed; every read then returns kTransport.
  virtual bool broken() const = 0;
  // How reads travel now: "ring" (same-host shared memory) or "tcp".
  virtual const char* transport() const = 0;

  // Direct transfers: the client registers a buffer; the server writes into it (PUT)
  // while an RPC that names it runs. Registration is client-local bookkeeping.
  virtual uint32_t register_buffer(void* base, size_t length) = 0;
  virtual void unregister_buffer(uint32_t id) = 0;
  // Runs call(tag) (the RPC naming the buffer and tag, or just its start), then waits up
  // to timeout_ms until the server's transfer for tag is done: a PUT landed (*got = its
  // length) or a GET was answered from the buffer (*got = bytes sent). A transfer outside
  // the registered buffer is refused (kOutOfBounds); a cancel returns the server's fault.
  // If call throws, nothing is waited for.
  virtual Fault direct(const std::function<void(uint32_t tag)>& call, uint32_t* got,
                       int timeout_ms = 30000) = 0;
};

struct EngineClientOptions {
  bool local_rings = true;  // use the engine's shared-memory rings when it offers them
};

// Connects to a soft engine and authenticates as `session`; also sets up a local ring when
// the engine offers one and it can be reached (same host), else reads go over TCP. Throws
// std::system_error if the engine cannot be reached or refuses the session.
std::unique_ptr<EngineClient> connect_soft_engine(const net::Endpoint& engine,
                                                  const Session& session,
                                                  const EngineClientOptions& options = {});

}  // namespace odafs::ordma
