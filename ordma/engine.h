// The one-sided access engine (the paper's NIC) behind one interface.
//
// Server side, an Engine owns every ORDMA decision about the memory the file server gives
// it (its cache arena, one segment per block): which segments are exported, how a
// reference is protected and revoked, which sessions exist. The file server only says
// "give this session a reference to segment s", "s is about to be reused" and "s is being
// written". The engine serves client-initiated reads of exported segments without ever
// calling into the file server. Client side, an EngineClient issues those reads and reports
// each outcome as a Fault.
//
// Backends live in engine_impl/<kind>/ and are chosen by kind through make_engine() and
// connect_engine(): `soft` (dedicated engine threads, reached over TCP or, from the same
// host, through shared-memory rings; a keyed MAC as the capability, a generation bump as
// revocation) now; a verbs backend (memory windows as capabilities, invalidation as
// revocation, IBV_WC_REM_ACCESS_ERR as the fault) slots in behind the same interfaces,
// without changes to server/ or client/.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/counter_sink.h"
#include "base/net.h"
#include "base/tls.h"
#include "ordma/fault.h"
#include "ordma/reference.h"
#include "ordma/session.h"

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
  std::atomic<uint64_t> bad_handshakes{0};      // wrong proof or magic: connection closed
  std::atomic<uint64_t> bad_frames{0};          // malformed request: connection closed
  std::atomic<uint64_t> refused{0};             // connections over max_connections
  std::atomic<uint64_t> handshake_timeouts{0};  // closed before authenticating in time
  std::atomic<uint64_t> shed{0};   // closed: output stalled while over max_total_backlog
  std::atomic<uint64_t> reads{0};  // served with data
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

  // --- ORDMA policy: what the file server asks. Thread-safe; cheap (hot paths call them).

  // The backend's name ("soft"); MOUNT tells clients, who connect with connect_engine().
  virtual const char* kind() const = 0;
  // A new client session (one per mount): its id and the secret the client proves.
  // tls_bound (a mount over TLS): the session is good only on an engine connection that
  // runs TLS, proved under that connection's exporter (ordma/session.h); a backend
  // without TLS refuses every connection of such a session.
  virtual Session open_session(bool tls_bound = false) = 0;
  // Exports segment `segment` if it is not exported and fills *ref with a reference to its
  // first `length` bytes (the block's valid bytes), readable by `session`. False for a
  // segment the engine does not have.
  virtual bool export_segment(uint32_t segment, uint32_t length, uint64_t session,
                              Reference* ref) = 0;
  // Every reference to `segment` stops working before this returns (the memory is about to
  // hold another block); a later export_segment issues new ones.
  virtual void revoke(uint32_t segment) = 0;
  // An RPC write changes the segment's bytes between these two calls: a one-sided read
  // meanwhile faults (kLocked) rather than return a mix of old and new bytes.
  virtual void begin_write(uint32_t segment) = 0;
  virtual void end_write(uint32_t segment) = 0;

  // --- Serving

  virtual void start() = 0;
  // Stops serving and closes every connection. Idempotent.
  virtual void stop() = 0;
  // Where clients connect, "HOST:PORT".
  virtual std::string endpoint() const = 0;
  // What every backend counts; and, by name, what only this backend keeps (the soft
  // engine's local rings, the verbs engine's windows bound and invalidated), which the
  // server's STATS lists as engine.NAME. add may be called any number of times.
  virtual const EngineStats& stats() const = 0;
  virtual void backend_counters(const CounterSink& add) const = 0;
  // stats(), backend_counters and the faults by name ("fault.NAME"), under their own names
  // (base/counter_sink.h). Thread-safe.
  void report_counters(const CounterSink& add) const;

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

struct EngineOptions {
  std::string kind = "soft";  // the backend; make_engine() throws for an unknown one
  net::Endpoint listen;
  int threads = 1;
  // Response bytes queued per connection before the engine stops reading it (the kernel's
  // socket buffer holds more).
  size_t max_backlog = 1u << 20;
  // Response bytes queued for all connections together (split evenly among the engine
  // threads, never less than 2 * max_backlog each): past it the connections whose output
  // moved least recently are closed (engine.shed); their clients read by RPC.
  size_t max_total_backlog = 32u << 20;
  // Connections (TCP and ring setup) beyond this are closed at accept; a connection that
  // has not authenticated within handshake_timeout_ms is closed. Until it authenticates a
  // connection holds a few dozen bytes, so unfinished handshakes cost almost nothing.
  size_t max_connections = 1024;
  int handshake_timeout_ms = 5000;
  // Settings only one backend knows, as name=value pairs: the seam carries them as text,
  // the chosen backend reads them into its own typed settings (each declares its own:
  // backend_settings()); make_engine throws std::invalid_argument naming one the chosen
  // backend does not know or a value it cannot take.
  std::vector<std::pair<std::string, std::string>> backend;
  std::function<void()> on_thread_start;  // CPU accounting hooks
  std::function<void()> on_thread_exit;
  // Whether a TCP peer may connect at all (the server's export rules); refused peers are
  // closed at accept (engine.refused). Unset: every peer. Same-host rings are local
  // sockets, admitted by the file system permissions of their socket.
  std::function<bool(const sockaddr_storage& peer)> admit_peer;
  // The TLS context engine TCP connections may start TLS with (the server's, read at
  // each connection, so a reload serves new ones); unset or null: the engine offers none.
  std::function<std::shared_ptr<const tls::Context>()> tls_context;
};

// A setting only one backend knows, as that backend declares it, so that a daemon offers
// it without naming backends: the flag, and the EngineOptions::backend pair it becomes.
struct BackendSetting {
  const char* backend;       // "soft"
  const char* flag;          // "--max-rings"
  const char* name;          // "max_rings": the pair's name
  const char* value_name;    // "N": the flag takes a value, the pair's; nullptr: a switch
  const char* switch_value;  // a switch's pair value ("0" for --no-local-rings)
  const char* help;
};
// Every built backend's settings.
std::vector<BackendSetting> backend_settings();

// The backends built into this binary ("soft" always; "verbs" where rdma-core was found).
std::vector<std::string> built_backends();
// True when backend `kind` is built and this machine can run it (verbs: an RDMA device
// exists); otherwise false with *why saying what is missing.
bool backend_usable(const std::string& kind, std::string* why);

// Builds the engine options.kind names over `memory` (binds its listening sockets; serves
// from start()). Throws std::invalid_argument for an unknown kind, std::system_error when
// it cannot listen. REQUIRES: memory outlives the engine.
std::unique_ptr<Engine> make_engine(const EngineOptions& options, ExportedMemory memory);

// One read of a batch (EngineClient::read_many): the arguments of read() and its outcome.
struct ReadOp {
  Reference ref;
  uint32_t offset = 0;
  uint32_t length = 0;
  void* dst = nullptr;
  Fault fault = Fault::kTransport;  // out
  uint32_t got = 0;                 // out, when fault is kNone
};

class EngineClient {
 public:
  virtual ~EngineClient() = default;
  // Reads [offset, offset + length) of ref's segment into dst. Returns kNone with *got set
  // (== length), or the fault; on a fault dst is untouched. Thread-safe: calls from many
  // threads are in flight together on one connection. Returns within the client's
  // timeout_ms (EngineClientOptions): a read the engine has not answered by then returns
  // kTransport and breaks the client, so that the engine's late answer completes nothing.
  virtual Fault read(const Reference& ref, uint32_t offset, uint32_t length, void* dst,
                     uint32_t* got) = 0;
  // Reads every op, all in flight at once (read-ahead: one doorbell or one send for the
  // lot, so the engine serves them in one pass), and returns when all are done, each with
  // what read() would have returned. The default reads them one after another.
  virtual void read_many(std::span<ReadOp> ops) {
    for (ReadOp& op : ops) op.fault = read(op.ref, op.offset, op.length, op.dst, &op.got);
  }
  // True once the connection failed or a wait on it timed out; every read then returns
  // kTransport. The owner drops a broken client and connects anew.
  virtual bool broken() const = 0;
  // How reads travel now: "ring" (same-host shared memory), "tcp" or "verbs".
  virtual const char* transport() const = 0;
  // How many times the client connected anew after its connection failed under it (the
  // verbs backend re-establishes its queue pair after a remote access error). 0 for
  // backends whose owner reconnects instead (broken()).
  virtual uint64_t reconnects() const { return 0; }

  // Direct transfers: the client registers a buffer; the server writes into it (PUT)
  // while an RPC that names it runs. Registration is client-local bookkeeping.
  virtual uint32_t register_buffer(void* base, size_t length) = 0;
  virtual void unregister_buffer(uint32_t id) = 0;
  // Runs call(tag) (the RPC naming the buffer and tag, or just its start), then waits up
  // to timeout_ms (< 0: the client's timeout_ms; 0: no limit) until the server's transfer
  // for tag is done: a PUT landed (*got = its length) or a GET was answered from the buffer
  // (*got = bytes sent). A transfer outside the registered buffer is refused
  // (kOutOfBounds); a cancel returns the server's fault. A timeout returns kTransport and
  // breaks the client, like a read's. If call fails, nothing is waited for, its Status is
  // returned, and a transfer for tag that comes later is dropped.
  virtual Result<Fault> direct(const std::function<Status(uint32_t tag)>& call, uint32_t* got,
                               int timeout_ms = -1) = 0;
};

struct EngineClientOptions {
  // On the engine's own host, take the faster path it offers such a client (the soft
  // engine's shared-memory rings); false keeps to the network path (TCP).
  bool same_host_shortcut = true;
  // The longest any wait on the engine may take: connecting, each transport's handshake,
  // and each read from its post to its completion, over the ring or TCP. An engine that
  // stops answering (its host or process stopped) then costs a read this long, not
  // forever: the read returns kTransport and the client turns broken(), as when the
  // connection fails; connect_engine() throws ETIMEDOUT. <= 0: no limit. libodafs passes
  // MountOptions::timeout_ms, so a one-sided read gives up when an RPC would.
  int timeout_ms = 60000;
  // How a read waits for its completion: spinning (lowest latency, a core per client busy
  // while reads are in flight; the verbs backend polls its completion queue) or asleep
  // until woken (an interrupt and a wakeup per completion).
  bool spin_wait = false;
  // TLS (the mount's RPC-with-TLS): set, the engine's TCP path runs TLS 1.3 with this
  // context, checking the engine's certificate against tls_host, and proves the session on
  // that TLS session only (bound by its exporter). Shared-memory rings need none (the
  // kernel isolates them). A backend without TLS refuses such a mount's connection.
  std::shared_ptr<const tls::Context> tls;
  std::string tls_host;
};

// Connects to the engine of backend `kind` (as MOUNT named it; empty means "soft", what
// servers before backends had names ran) and authenticates as `session`, within
// options.timeout_ms. Throws std::system_error if the engine cannot be reached, refuses
// the session, does not answer in time (ETIMEDOUT), or the backend is not built into this
// client.
std::unique_ptr<EngineClient> connect_engine(const std::string& kind, const net::Endpoint& engine,
                                             const Session& session,
                                             const EngineClientOptions& options = {});

}  // namespace odafs::ordma
