// The soft engine's implementation class, shared by its source files (private to
// ordma/engine_impl/soft/; the server and tests see soft_engine.h):
//   soft_engine.cc         lifecycle, the engine threads' loop, accepting, dropping
//   soft_engine_serve.cc   TCP connections: handshake, READ frames, admission, output
//   soft_engine_rings.cc   local rings: setup and serving posted slots
//   soft_engine_direct.cc  direct transfers: PUT into and GET from client buffers
//
// The soft engine: one-sided reads served over TCP by dedicated engine threads.
//
// Each engine thread owns an epoll set and the connections assigned to it, so a
// connection's buffers are touched by one thread only and the read path takes no lock:
// decode a frame, check the capability (HMAC) and the session, bounds-check, pin the export
// table entry, copy the segment's bytes into the connection's output buffer, unpin. The
// copy is the soft engine's DMA: it lets go of the pin before the bytes reach the socket,
// so a slow client can never hold a segment pinned. The engine touches only the export
// table and the exported memory — never the file system, the RPC layer or server locks.
//
// Clients on the engine's host may also use local rings (local_ring.h): the same reads,
// posted in shared memory, answered with a copy into the client's slot.
#pragma once

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/acceptor.h"
#include "base/futex.h"
#include "base/log.h"
#include "base/tls.h"
#include "ordma/engine_impl/soft/local_ring.h"
#include "ordma/engine_impl/soft/pull_table.h"
#include "ordma/engine_impl/soft/ring_server.h"
#include "ordma/engine_impl/soft/soft_engine.h"
#include "ordma/engine_impl/soft/wire.h"

namespace odafs::ordma::soft {

// epoll tags: these small values, a Conn* (its socket), or a Conn* | 1 (its ring's doorbell;
// a Conn is aligned, so bit 0 is free).
inline constexpr uint64_t kListenTag = 1;
inline constexpr uint64_t kWakeTag = 2;
inline constexpr uint64_t kLocalListenTag = 3;
inline constexpr uint64_t kDoorbellBit = 1;
inline constexpr size_t kInBytes = 64 * 1024;  // an authenticated connection's input buffer
// How often each engine thread looks for handshakes that took too long.
inline constexpr int kHandshakeSweepMs = 250;

// Fair share: an engine thread serves its connections and rings in turns of at most this
// many reads, taking them from a run queue. One with work left after its turn goes to the
// back; one that had nothing to do and now has goes to the front, and the engine looks
// for such arrivals between any two turns. A client keeping thousands of reads in flight
// thus gets one turn in its place like the others, and a lone read of another client waits
// for about one turn, not for the flood.
inline constexpr int kReadsPerTurn = 64;
// ... and of at most about this many bytes (a turn ends after the read that crosses it):
// the copy and the send of a turn's output are most of its cost.
inline constexpr size_t kBytesPerTurn = 128 * 1024;

// What is left of a turn.
struct TurnBudget {
  int reads = kReadsPerTurn;
  size_t bytes = kBytesPerTurn;
  bool spent() const { return reads == 0 || bytes == 0; }
  void take(uint32_t length) {
    --reads;
    bytes -= std::min<size_t>(bytes, length);
  }
};

struct Conn {
  int fd = -1;
  int ep = -1;         // the owning engine thread's epoll set
  bool local = false;  // came in on the Unix socket: sets up a ring, then only idles
  std::unique_ptr<Ring> ring;
  bool authed = false;
  uint64_t session = 0;
  Nonce nonce{};
  // TLS (the client's HELLO asked for it): every later byte goes through it. Set by the
  // owner thread while unauthenticated, before any push can find the connection.
  std::unique_ptr<tls::Session> tls;
  bool tls_up = false;  // its handshake is done (owner thread only)
  // Sized for HELLO until the connection authenticates, then kInBytes: a connection that
  // never says a word costs no input buffer.
  std::vector<unsigned char> in = std::vector<unsigned char>(wire::kHelloBytes);
  int64_t accepted_ms = 0;
  size_t in_len = 0;
  // Output is shared with push(): responses from the owning engine thread and
  // server-initiated writes from RPC threads. Guarded by out_mu, and so is `events`.
  std::mutex out_mu;
  std::vector<unsigned char> out;
  size_t out_head = 0;
  uint32_t events = 0;  // what the epoll registration asks for now
  bool dead = false;    // dropped: pushes must not touch the socket; guarded by out_mu
  // A DATA frame's bytes being received (direct write): where they go, how many are left.
  // Owner thread only.
  std::shared_ptr<PullWaiter> sink;
  uint32_t sink_left = 0;
  uint32_t sink_at = 0;
  // Fair share (owner thread only): the owner's run queue of connections with work, an
  // intrusive list, so queueing allocates nothing.
  Conn* run_prev = nullptr;
  Conn* run_next = nullptr;
  bool queued = false;
  bool readable = false;      // epoll said EPOLLIN: the next turn reads the socket
  uint64_t ring_pending = 0;  // ring slots taken from `posted`, not served yet
  // Output accounting for max_total_backlog: the owner thread's index, the backlog last
  // added to its total, and when the output last moved. Written under out_mu, read by
  // the owner's shedding scan without it.
  size_t thread = 0;
  std::atomic<size_t> accounted{0};
  std::atomic<int64_t> moved_ms{0};
  size_t backlog() const { return out.size() - out_head; }
  // The fd closes with the last holder (an RPC thread pushing may outlive the drop).
  ~Conn() {
    if (fd >= 0) close(fd);
  }
};

// An engine thread's connections with work waiting, in turn order. Owner thread only.
class RunQueue {
 public:
  bool empty() const { return head_ == nullptr; }
  size_t size() const { return size_; }
  // Queues c last (work left after its turn); no-op if queued.
  void push_back(Conn* c) {
    if (c->queued) return;
    c->queued = true;
    c->run_next = nullptr;
    c->run_prev = tail_;
    (tail_ ? tail_->run_next : head_) = c;
    tail_ = c;
    ++size_;
  }
  // Queues c first (it was idle: new work); no-op if queued.
  void push_front(Conn* c) {
    if (c->queued) return;
    c->queued = true;
    c->run_prev = nullptr;
    c->run_next = head_;
    (head_ ? head_->run_prev : tail_) = c;
    head_ = c;
    ++size_;
  }
  Conn* pop() {
    Conn* c = head_;
    remove(c);
    return c;
  }
  void remove(Conn* c) {
    if (!c->queued) return;
    (c->run_prev ? c->run_prev->run_next : head_) = c->run_next;
    (c->run_next ? c->run_next->run_prev : tail_) = c->run_prev;
    c->run_prev = c->run_next = nullptr;
    c->queued = false;
    --size_;
  }

 private:
  Conn* head_ = nullptr;
  Conn* tail_ = nullptr;
  size_t size_ = 0;
};

class SoftEngineImpl final : public SoftEngine {
 public:
  SoftEngineImpl(const EngineOptions& options, ExportedMemory memory);

  ~SoftEngineImpl() override;

  void start() override;

  void stop() override;

  std::string endpoint() const override { return bound_.to_string(); }
  const EngineStats& stats() const override { return stats_; }
  void backend_counters(
      const std::function<void(const char* name, uint64_t value)>& add) const override {
    add("rings", rings_set_up_.load(std::memory_order_relaxed));
  }

  const char* kind() const override { return "soft"; }
  Session open_session(bool tls_bound) override { return sessions_.issue(tls_bound); }

  bool export_segment(uint32_t segment, uint32_t length, uint64_t session, Reference* ref) override;
  void revoke(uint32_t segment) override { table_.revoke(segment); }
  void begin_write(uint32_t segment) override { table_.lock(segment); }
  void end_write(uint32_t segment) override { table_.unlock(segment); }

  ExportTable& table() override { return table_; }
  const CapabilityAuthority& capabilities() const override { return authority_; }
  const SessionAuthority& sessions() const override { return sessions_; }

 private:
  // Binds the abstract Unix socket that local rings are set up through. Without it the
  // engine simply offers no rings.
  void open_local_listener();

  void loop(int ep);

  // The connections of thread `ep` still unauthenticated past the handshake timeout.
  // Owner thread only (the caller drops them).
  const std::vector<Conn*>& late_handshakes(int ep, int64_t now, std::vector<Conn*>* late);

  void accept_all(bool local);

  // Unregisters c and returns the last reference to it, for the caller to release once no
  // event of the current batch can name it.
  std::shared_ptr<Conn> drop(int ep, Conn* c);

  // An epoll event for c's socket: notes what it says. Returns false when the connection
  // is to be closed.
  bool on_event(Conn* c, uint32_t events);

  // c's turn: reads its socket once if it was readable, serves its requests while the
  // turn's budget lasts, flushes. Sets *more when work is left for the next
  // round. Returns false when the connection is to be closed.
  bool take_turn(int ep, Conn* c, bool* more);

  // Serves the complete frames in c's input while the turn's budget lasts.
  // A HELLO that asks for TLS: starts the server's side of it on c. False: refused (no
  // TLS offered, or asked out of turn), c is to close.
  bool start_tls(Conn* c);
  bool parse(Conn* c, TurnBudget* budget);

  // Builds c's ring and sends WELCOME with its memfd and doorbell. Owner thread, out_mu
  // held. False closes the connection.
  bool open_ring(Conn* c);

  // A slot's data area holds one segment.
  uint32_t slot_bytes() const { return static_cast<uint32_t>(memory_.segment_bytes); }

  // c's ring's turn: serves posted slots while the turn's budget lasts; *more when some
  // are left.
  // Owner thread only. engine_awake tells clients they need not ring: it stays 1 while the
  // ring has work queued (the engine comes back without a doorbell), and the store of 0 and
  // the re-check of `posted` pair with the client's fetch_or and load (seq_cst), so a post
  // is never left unseen.
  void serve_ring(Conn* c, bool* more);

  // Returns the bytes served (0 on a fault).
  uint32_t serve_slot(const Conn* c, Ring& r, uint32_t i);

  // Admits r and pins its segment; counts the outcome either way. On kNone, *bytes is the
  // requested range and the caller unpins once the bytes are copied or sent. The read is
  // counted before its bytes can reach the client: whoever sees the data sees the count.
  Fault admit_and_pin(const Conn* c, const wire::ReadRequest& r, const std::byte** bytes);

  Fault admit(const Conn* c, const wire::ReadRequest& r) const;

  // Answers one request. With send_now, tries to send header and bytes from the segment
  // itself (no copy) while the segment is pinned; a non-blocking send, so the pin lasts
  // microseconds. What the socket does not take is copied to the output buffer.
  void serve(Conn* c, const wire::ReadRequest& r, bool send_now);

  // Sends what it can of c's output, then accounts for what is left. out_mu held.
  bool flush(Conn* c);
  // Brings c's share of its thread's output total up to date. out_mu held.
  void account(Conn* c);
  // While thread `thread` holds more output than its share of max_total_backlog, closes
  // its connection whose output moved least recently. Owner thread only.
  void shed_output(int ep, size_t thread, const std::function<void(Conn*)>& drop_queued);

  Fault push(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag, const iovec* parts,
             int nparts) override;

  void cancel(uint64_t session, uint32_t tag, Fault fault) override;

  Fault pull(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag, uint32_t length,
             int timeout_ms, std::vector<char>* data) override;

 private:
  // Queues a PUT/GET header (plus the parts' bytes) on `session`'s connection and tries to
  // send. Lock order: sessions_mu_ alone, then the connection's out_mu.
  Fault send_to(uint64_t session, uint8_t kind, Fault fault, uint32_t tag, uint32_t buffer,
                uint32_t offset, uint32_t length, const iovec* parts, int nparts);

  void finish_sink(Conn* c);

  EngineOptions options_;
  SoftSettings settings_;
  // The soft backend's ORDMA state: the TPT, the capability key, the session key.
  ExportTable table_;
  CapabilityAuthority authority_;
  SessionAuthority sessions_;
  ExportedMemory memory_;
  net::Endpoint bound_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int local_fd_ = -1;  // the Unix socket rings are set up through; -1: no rings
  ring::Token ring_token_{};
  std::atomic<size_t> rings_{0};
  std::vector<int> epolls_;
  std::unique_ptr<std::atomic<size_t>[]> out_totals_;  // queued output, by engine thread
  size_t out_share_ = 0;                               // each thread's share of the budget
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  size_t next_thread_ = 0;            // only the thread owning the listener (thread 0) uses it
  net::Acceptor acceptor_{"engine"};  // thread 0 only, like the listeners
  std::mutex conns_mu_;
  std::unordered_map<Conn*, std::shared_ptr<Conn>> conns_;  // ownership
  std::mutex sessions_mu_;  // never held while waiting for a Conn::out_mu
  std::unordered_map<uint64_t, std::shared_ptr<Conn>> by_session_;  // for push()
  PullTable pulls_;
  EngineStats stats_;
  std::atomic<uint64_t> rings_set_up_{0};  // local rings set up (same-host clients)
};

}  // namespace odafs::ordma::soft
