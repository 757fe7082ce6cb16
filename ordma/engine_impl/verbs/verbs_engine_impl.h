// The verbs engine's implementation class, shared by its source files (private to
// ordma/engine_impl/verbs/):
//   verbs_engine.cc          setup, the ORDMA policy (export, revoke, writes), teardown
//   verbs_engine_serve.cc    the service thread: rdma_cm events, handshakes, messages
//   verbs_engine_direct.cc   direct transfers: RDMA WRITE/READ into registered buffers
//   verbs_client.cc          the client (EngineClient)
//
// Locks, always taken in this order: a segment's mutex, a connection's windows_mu, its
// send_mu; conns_mu_ alone. A connection is torn down by the service thread only: it is
// first taken out of the maps and marked dead (under windows_mu), then out of every
// segment's bound list (under each segment's mutex), and only then are its queue pair and
// windows destroyed (under windows_mu and send_mu), so that whoever found it through a map
// or a bound list either sees it dead or finishes with it first.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/endian.h"
#include "ordma/engine.h"
#include "ordma/engine_impl/verbs/verbs_support.h"
#include "ordma/engine_impl/verbs/verbs_wire.h"
#include "ordma/session.h"

namespace odafs::ordma::verbs {

inline constexpr int kRecvSlots = 16;  // messages from one client the engine can take at once
// A bind, an invalidate, a message or a transfer not completed by then: the queue pair is
// stuck, and the engine disconnects it (which also ends every access through it).
inline constexpr int kSendTimeoutMs = 2000;
inline constexpr int kRegistrationWaitMs = 200;  // a direct buffer's REGISTER racing its RPC
inline constexpr int kSweepMs = 250;             // handshake timeouts are checked this often

// One block's key for one session: a type-2 window bound to the session's queue pair, or a
// region in the session's protection domain.
struct Window {
  MemoryWindow mw;
  MemoryRegion mr;
  uint32_t rkey = 0;
  uint32_t length = 0;
  bool bound = false;
  uint64_t binds = 0;  // on this window object: its key's low byte has gone round binds/256
};

struct RemoteBuffer {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t rkey = 0;
};

// Registered memory for one connection's messages.
struct MessageArea {
  Message recv[kRecvSlots];
  Message send;
};

// A connection's verbs objects, declared in the order they are made: freeing them is
// destroying this (in reverse: the queue pair first, the rdma_cm id last).
struct ConnVerbs {
  CmId cm;
  ProtectionDomain own_pd;  // regions only: the connection's own
  ibv_pd* pd = nullptr;     // own_pd's, or the engine's (windows)
  CompletionQueue send_cq;  // polled by whoever holds the Conn's send_mu
  std::unique_ptr<MessageArea> messages;
  MemoryRegion messages_mr;
  MemoryRegion generations_mr;  // regions only: the generation words in this pd
  std::vector<char> bounce;     // direct transfers' staging; under send_mu
  MemoryRegion bounce_mr;
  std::unordered_map<uint32_t, Window> windows;  // under the Conn's windows_mu
  QueuePair qp;                                  // cm's, once rdma_create_qp succeeded
};

struct Conn {
  uint64_t id = 0;  // names the connection in receive work request ids
  Nonce nonce{};
  int64_t accepted_ms = 0;

  std::atomic<bool> authenticated{false};
  uint64_t session = 0;  // set once, before authenticated

  std::mutex windows_mu;
  bool dead = false;  // under windows_mu (and read under send_mu after teardown began)
  std::mutex send_mu;
  // Under windows_mu and send_mu to free (release_conn); its fields read under the one that
  // guards them, once the connection is accepted.
  ConnVerbs v;

  std::mutex buffers_mu;
  std::condition_variable buffers_cv;
  std::unordered_map<uint32_t, RemoteBuffer> buffers;
};

struct SegmentState {
  std::mutex mu;
  bool locked = false;       // an RPC write is changing it
  std::vector<Conn*> bound;  // connections with a bound window over it
};

class VerbsEngine final : public Engine {
 public:
  VerbsEngine(const EngineOptions& options, ExportedMemory memory);
  ~VerbsEngine() override;

  const char* kind() const override { return "verbs"; }
  Session open_session(bool tls_bound) override { return sessions_.issue(tls_bound); }
  bool export_segment(uint32_t segment, uint32_t length, uint64_t session, Reference* ref) override;
  void revoke(uint32_t segment) override;
  void begin_write(uint32_t segment) override;
  void end_write(uint32_t segment) override;

  void start() override;
  void stop() override;
  std::string endpoint() const override { return endpoint_; }
  const EngineStats& stats() const override { return stats_; }
  void backend_counters(
      const std::function<void(const char* name, uint64_t value)>& add) const override {
    add("binds", binds_.load(std::memory_order_relaxed));
    add("invalidations", invalidations_.load(std::memory_order_relaxed));
  }

  Fault push(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag, const iovec* parts,
             int nparts) override;
  Fault pull(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag, uint32_t length,
             int timeout_ms, std::vector<char>* data) override;
  void cancel(uint64_t session, uint32_t tag, Fault fault) override;

 private:
  // verbs_engine.cc
  void open_device();
  std::shared_ptr<Conn> by_session(uint64_t session);
  // REQUIRES: the segment's mutex and c.windows_mu held, c not dead.
  bool bind(Conn& c, uint32_t segment, uint32_t length, Window& w);
  void invalidate(Conn& c, Window& w);
  // Invalidates every window over the segment. REQUIRES: its mutex held.
  void invalidate_all(SegmentState& s, uint32_t segment);
  void release_conn(Conn& c);  // frees its verbs resources; REQUIRES: torn down
  // Sends one message on c's queue pair. REQUIRES: c.send_mu held.
  bool send_locked(Conn& c, const Message& m);

  // verbs_engine_serve.cc
  void serve();
  void on_cm_event(rdma_cm_event* event);
  void on_connect_request(rdma_cm_event* event);
  void on_receive(const ibv_wc& wc);
  void post_receive(Conn& c, int slot);
  void sweep_handshakes();
  void teardown(const std::shared_ptr<Conn>& c);

  // verbs_engine_direct.cc
  // One direct transfer of `length` bytes between the engine's bounce buffer and the
  // client's registered `buffer` at `offset`: RDMA WRITE to the client (to_client; bytes()
  // fills the bounce buffer first) or RDMA READ from it (bytes() takes them after), then
  // PUSH_DONE / PULL_DONE.
  Fault transfer(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag, uint32_t length,
                 bool to_client, int timeout_ms, const std::function<void(char* bounce)>& bytes);
  bool find_buffer(Conn& c, uint32_t id, RemoteBuffer* out);
  bool ensure_bounce(Conn& c, size_t bytes);
  Fault send_done(Conn& c, MessageKind kind, uint32_t tag, uint32_t value);

  EngineOptions options_;
  std::string rdma_device_;  // options_.backend's rdma_device; empty: rdma_cm's choice
  ExportedMemory memory_;
  SessionAuthority sessions_;
  EngineStats stats_;
  // The NIC serves reads unseen: windows bound (exports) and invalidated (revocations and
  // writes) are what this backend can count instead.
  std::atomic<uint64_t> binds_{0};
  std::atomic<uint64_t> invalidations_{0};
  std::string endpoint_;

  // Declared in the order they are made: the destructor frees them in reverse.
  EventChannel cm_channel_;
  CmId listener_;
  ibv_context* ctx_ = nullptr;  // the listener's device (rdma_cm owns it)
  ProtectionDomain pd_;
  bool windows_ = false;   // type-2 windows; else a region per block and session
  MemoryRegion arena_mr_;  // windows only: the exported memory, bindable
  std::unique_ptr<Be64[]> generations_;
  MemoryRegion generations_mr_;  // windows only (regions register per connection)
  CompletionChannel recv_channel_;
  CompletionQueue recv_cq_;  // every connection's receives; the service thread polls it
  uint8_t responder_resources_ = 1;
  uint8_t initiator_depth_ = 1;
  std::unique_ptr<SegmentState[]> segments_;

  std::shared_mutex conns_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Conn>> conns_;       // by Conn::id
  std::unordered_map<uint64_t, std::shared_ptr<Conn>> by_session_;  // authenticated only
  uint64_t next_conn_id_ = 1;                                       // service thread only

  std::thread thread_;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace odafs::ordma::verbs
