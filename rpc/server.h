// The server side of ONC RPC over TCP: many connections, event loops, one program.
//
// The server runs `threads` event loops, each an epoll set with the connections it was
// given at accept (the loop with the fewest), driven by one thread at a time. A loop's
// thread reads a connection (armed one-shot), cuts the bytes into records (bounded by
// max_record), re-arms it, then decodes and runs the calls it cut, in order, and sends
// their replies together: one send per batch of calls, not one per reply. Nothing is
// shared between loops on the way of a call but the program's own state, so a call costs
// the same whatever the number of loops, and a connection's calls stay on one core.
//
// A procedure that is about to wait (for a client, a lease, the disk) calls
// before_blocking(): its thread's replies go out and its loop is handed to a spare thread,
// so the loop's other connections go on while this thread waits; once done, the thread
// becomes a spare itself. Spares are made on demand, up to max_blocked_threads.
// Replies go back in completion order, matched by XID at the client.
//
// libtirpc provides the XDR of message headers and credentials; its svc_run loop is
// single-threaded and global, so the loop here is our own.
#pragma once

#include <rpc/rpc.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/acceptor.h"
#include "base/counter_sink.h"
#include "base/net.h"
#include "base/tls.h"
#include "rpc/message_header.h"

namespace odafs::rpc {

// Called by a procedure handler about to wait for something other than the CPU: sends
// the replies its thread holds and hands the thread's event loop to a spare thread, so
// that the loop's other connections are served meanwhile.
//   kLong   a wait on another party (a client's bytes, a delegation holder's return), as
//           long as seconds: the loop is always handed over;
//   kShort  a wait on this machine (a disk flush): handed over only when another
//           connection of the loop has something ready now, since a hand-over costs two
//           context switches, more than a flush that the device acknowledges at once.
// Cheap to call more than once per call; a no-op outside a server's pool thread.
// Returns false when the loop stays with this thread: no spare can be had
// (max_blocked_threads) or the server stops. Every connection of the loop then waits as
// long as the handler does, the replies other callers' waits depend on included, so a
// handler whose wait is on another party should not start it: it answers DELAY (the
// client retries) or takes a way that does not wait. kShort's choice not to hand over
// (nothing ready) returns true.
enum class Wait { kShort, kLong };
bool before_blocking(Wait wait = Wait::kLong);

// What the program decided about a connection's peer when it accepted it (Options::admit),
// handed to every call on the connection. The RPC layer only carries it.
struct Admission {
  static constexpr uint32_t kNone = UINT32_MAX;
  uint32_t rule = kNone;       // the program's own index (an access rule); kNone: none matched
  uint16_t source_port = 0;    // the peer's TCP port
  sockaddr_storage address{};  // the peer's address, for rules the program may change later
  // The peer is a process on this host: it comes from one of the host's own addresses.
  bool local = false;
  // The peer is a process on this host and the kernel named the owner of its socket:
  // owner.uid, with owner.gid and owner.gids as the host's user database has them.
  bool owner_known = false;
  CallerCred owner;
  // The program admits the peer to nothing: the connection's first call, whatever it is
  // (NULL and the AUTH_TLS probe included), is answered AUTH_ERROR / AUTH_TOOWEAK and the
  // connection closed at once. It holds none of Options::max_connections' slots (they are
  // for admitted peers; max_refused_connections bounds these apart), reads no record past
  // what needs no permit, and starts no TLS.
  bool refused = false;
  // RPC-with-TLS (RFC 9289): set once the connection's TLS handshake is done, before any
  // call after it runs (Options::on_tls may fill the program's own fields below).
  bool tls = false;
  bool tls_client_verified = false;  // the client presented a certificate the CA vouches for
  uint32_t tls_identity = kNone;     // the program's own index (an identity map entry)
};

// What a procedure handler may know about its call. Valid during the handler only.
struct CallContext {
  uint32_t xid = 0;
  uint32_t proc = 0;
  // Who the call runs as: its credential as Options::authorize left it.
  const CallerCred* cred = nullptr;
  const std::string* peer = nullptr;  // "HOST:PORT" of the client
  uint64_t connection = 0;            // the connection's id: Server::send_to_connection
  const Admission* admission = nullptr;
  // The program's own word about the connection, kNoTag until a handler sets it (odafsd:
  // the export a MOUNT bound the connection to). Lives as long as the connection; any
  // thread may read or set it.
  static constexpr uint32_t kNoTag = UINT32_MAX;
  std::atomic<uint32_t>* connection_tag = nullptr;
};

// Builds the reply of one call. A handler must call results() (then encode into the
// stream), send() or refuse() exactly once; a handler that returns without replying
// produces SYSTEM_ERR.
class Reply {
 public:
  // Writes the accepted-SUCCESS reply header and returns the stream for the results.
  XDR* results();
  // results() + encode res with xres. Returns false if the results did not encode (the
  // reply buffer overflowed); the server then answers SYSTEM_ERR instead.
  bool send(xdrproc_t xres, const void* res);
  // The handler found, once running, that it cannot act as the call's credential (the
  // kernel refused to take it on): the server answers AUTH_ERROR with `why` instead of
  // whatever was encoded. REQUIRES: why != AUTH_OK.
  void refuse(auth_stat why) { refusal_ = why; }
  auth_stat refusal() const { return refusal_; }
  bool started() const { return started_; }
  bool failed() const { return failed_; }
  // The results' first 4-byte word as encoded so far (a program's status, where its
  // results start with one), or false when there is none yet.
  bool first_result_word(uint32_t* word) const;

 private:
  friend class Server;
  Reply(XDR* out, uint32_t xid, const char* buffer) : out_(out), xid_(xid), buffer_(buffer) {}
  XDR* out_;
  uint32_t xid_;
  const char* buffer_;    // where out_ encodes from
  u_int results_at_ = 0;  // out_'s position where the results start
  bool started_ = false;
  bool failed_ = false;
  auth_stat refusal_ = AUTH_OK;
};

// One procedure: decodes arguments, runs, encodes results. Returns false when the
// arguments do not decode (the server then answers GARBAGE_ARGS).
using ProcedureFn = std::function<bool(const CallContext&, XDR* args, Reply& reply)>;

// Typed convenience: decodes Args with xargs into a zeroed struct, calls
// handler(ctx, args, reply), and frees what decoding allocated.
template <class Args, class Handler>
ProcedureFn typed_procedure(xdrproc_t xargs, Handler handler) {
  return [xargs, handler](const CallContext& ctx, XDR* in, Reply& reply) -> bool {
    Args args{};
    if (!xargs(in, &args, 0)) {
      xdr_free(xargs, reinterpret_cast<char*>(&args));
      return false;
    }
    struct Free {  // whatever way the handler leaves
      xdrproc_t xargs;
      Args* args;
      ~Free() { xdr_free(xargs, reinterpret_cast<char*>(args)); }
    } free_args{xargs, &args};
    handler(ctx, args, reply);
    return true;
  };
}

class Server {
 public:
  struct Options {
    net::Endpoint listen;
    int threads = 4;  // event loops: one thread drives each (see the header comment)
    // Threads waiting in handlers (before_blocking) beyond the loops' own, at most.
    int max_blocked_threads = 16;
    size_t max_record = 4u << 20;  // larger request records close the connection
    size_t max_reply = 4u << 20;   // per-thread reply buffer
    // Reply bytes queued for a client that does not read them; past this the connection
    // is closed. (Flow control keeps a connection far below it: see max_total_backlog.)
    size_t max_backlog = 64u << 20;
    // Memory budgets, so that what clients make the server hold does not grow with their
    // number (docs/RELIABILITY.md, "Memory"):
    //
    // Input. A connection may hold up to kSmallInput (64 KiB) of request bytes on its own
    // (the record it is receiving and records cut but not yet run). A record that grows
    // past half of that needs one of max_input_bytes / (max_record + 1 MiB) permits (at
    // least one) to be read on; without one the connection is not read (its bytes wait in
    // the kernel) until a permit frees up. A permit is held until the record completes, so
    // every holder can finish and there is no deadlock.
    size_t max_input_bytes = 32u << 20;
    // Output. A connection whose replies wait in the server (the socket did not take them)
    // is read and served no further until they went out: calls already read wait, cut, in
    // the connection. When the waiting replies of all connections together pass this
    // budget (never less than (threads + 1) * max_reply), the connections whose replies
    // made no progress for the longest are closed (rpc.slow_readers).
    size_t max_total_backlog = 32u << 20;
    // Connections beyond this are closed at accept: with kSmallInput it bounds the memory
    // that partial records can hold. Refused ones (Admission::refused) do not count.
    size_t max_connections = 1024;
    // Refused connections (Admission::refused) open at once, at most: more are closed at
    // accept. Each lives until its one answer (or the idle timeout), so peers no rule
    // admits cannot take the slots admitted ones need, and still hear why they are refused.
    size_t max_refused_connections = 64;
    // Connections from one address beyond this are closed at accept (0: no limit), so one
    // host cannot take every slot.
    size_t max_connections_per_address = 256;
    // A connection that completes no call for this long is closed (0: never). Partial
    // records do not count as activity, so a client dribbling bytes is closed too.
    int64_t idle_timeout_ms = 300000;
    uint32_t program = 0;
    uint32_t version = 0;
    // Called on each pool thread (loop drivers and spares) as it starts and before it exits
    // (e.g. CPU accounting).
    std::function<void()> on_thread_start;
    std::function<void()> on_thread_exit;
    // Called once for each connection as it closes, with its id and its tag
    // (CallContext::connection_tag), on the closing thread (with no server lock held: it
    // may call send_to_connection for other connections).
    std::function<void(uint64_t connection, uint32_t tag)> on_connection_closed;
    // Called once for each accepted connection, on the accepting thread, before any of its
    // calls: what the program makes of the peer (socket fd, address). Unset: Admission{}.
    std::function<Admission(int fd, const sockaddr_storage& peer)> admit;
    // Called for every call (NULL included) after its header and credential decoded and
    // before its procedure runs; may rewrite *cred (squashing it, say). A result other than
    // AUTH_OK refuses the call with AUTH_ERROR and that status. Unset: every call runs.
    // Thread-safety: called concurrently from every pool thread.
    std::function<auth_stat(const CallContext& ctx, CallerCred* cred)> authorize;
    // RPC-with-TLS (RFC 9289). The context a client's AUTH_TLS probe starts TLS with, read
    // at every probe (so a reloaded certificate serves new connections); unset or null: the
    // probe is refused with AUTH_BADCRED, as the RFC has a server without TLS answer.
    std::function<std::shared_ptr<const tls::Context>()> tls_context;
    // Called once a connection's TLS handshake is done, before its next call runs, on the
    // reading thread: what the program makes of the client's certificate (admission->tls
    // and tls_client_verified are set already). REQUIRES: the process ignores SIGPIPE.
    std::function<void(const tls::Session& session, const std::string& peer, Admission* admission)>
        on_tls;
  };

  // Binds the listening socket (so bound() is known) but serves nothing until start().
  // Fails as the bind (EADDRINUSE, say) or the event set-up fails.
  static Result<std::unique_ptr<Server>> listen(Options options);
  ~Server();  // stop() + join
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // REQUIRES: before start(). proc numbers are dense from 0; gaps answer PROC_UNAVAIL.
  void add_procedure(uint32_t proc, const char* name, ProcedureFn fn);

  void start();
  // Stops accepting and serving, closes every connection, joins the pool. Idempotent.
  void stop();

  const net::Endpoint& bound() const { return bound_; }

  // Sends record[0, len) (a whole record, mark included: a one-way CALL to the client,
  // say) on connection `connection`, in order with its replies. Never blocks on the
  // client: what the socket does not take waits with the replies (and counts against
  // their budget). False when that connection is closed. Thread-safe.
  bool send_to_connection(uint64_t connection, const char* record, size_t len);

  // Connections open now, of admitted peers. Thread-safe (takes the connections' lock).
  size_t open_connections();
  // What is known of each admitted connection open now. Thread-safe; allocates.
  struct ConnectionInfo {
    uint64_t id = 0;
    std::string peer;  // "HOST:PORT"
    Admission admission;
    uint32_t tag = CallContext::kNoTag;
  };
  std::vector<ConnectionInfo> connections();

  // Counters, safe to read from any thread at any time.
  struct Counters {
    std::atomic<uint64_t> connections{0};
    std::atomic<uint64_t> records{0};
    std::atomic<uint64_t> garbage_records{0};  // undecodable call headers
    std::atomic<uint64_t> garbage_args{0};
    std::atomic<uint64_t> rejected{0};      // PROG/PROC/RPC/AUTH errors
    std::atomic<uint64_t> oversized{0};     // connections closed for record size
    std::atomic<uint64_t> slow_readers{0};  // connections closed for unread replies
    std::atomic<uint64_t> refused{0};       // connections over a connection limit
    std::atomic<uint64_t> unadmitted{0};    // connections of peers admitted to nothing
    std::atomic<uint64_t> idle_closed{0};   // connections closed by the idle timeout
    // Calls read with others in one batch and not run: their connection was reset while
    // the ones before them ran (run_records).
    std::atomic<uint64_t> dropped_after_reset{0};
    std::atomic<uint64_t> shed{0};         // accepted and closed: out of descriptors
    std::atomic<uint64_t> paused{0};       // stopped reading: its replies wait (flow control)
    std::atomic<uint64_t> input_waits{0};  // waited for a large-record permit
    std::atomic<uint64_t> bytes_in{0};
    std::atomic<uint64_t> bytes_out{0};
    std::atomic<uint64_t> handovers{0};  // loops handed to a spare (before_blocking)
    std::atomic<uint64_t> no_spare{0};   // before_blocking found no spare: the loop stayed
    // Threads started beyond the loops' own (changed under drivers_mu_ only).
    std::atomic<uint64_t> spare_threads{0};
    std::atomic<uint64_t> batches{0};       // reply sends (each holds one or more replies)
    std::atomic<uint64_t> tls_sessions{0};  // connections that completed a TLS handshake
    std::atomic<uint64_t> tls_failures{0};  // TLS handshakes or records that failed
  };
  const Counters& counters() const { return counters_; }
  // Its counters under their own names (base/counter_sink.h), and each procedure's calls
  // by its name. Thread-safe (report_counters takes the connections' lock).
  void report_counters(const CounterSink& add);
  void report_calls(const CounterSink& add) const;
  uint64_t calls(uint32_t proc) const;
  const char* procedure_name(uint32_t proc) const;
  size_t procedure_count() const { return procs_.size(); }
  int loops() const { return options_.threads; }

 private:
  struct Connection;
  struct Worker;
  struct Loop;
  explicit Server(Options options);  // the options' arithmetic; listen() opens the rest
  Status open();
  friend bool before_blocking(Wait wait);
  static thread_local Worker* current_worker_;  // the calling pool thread's, else null
  struct Procedure {
    const char* name = nullptr;
    ProcedureFn fn;
    std::unique_ptr<std::atomic<uint64_t>> calls;
  };

  // A pool thread: drives `loop` until it hands it over (before_blocking), then waits as a
  // spare for a loop to drive (loop null: starts as a spare).
  void worker_loop(Loop* loop);
  // Spares: blocks until a loop needs a driver; null when the server stops.
  Loop* wait_for_loop();
  // before_blocking(wait) for the calling worker w: flush, then give w's loop to a spare.
  // False when no spare can be had (w keeps its loop).
  bool hand_over(Worker& w, Wait wait);
  void spawn_thread(Loop* loop);  // REQUIRES: drivers_mu_ held
  Loop& least_loaded_loop();
  void accept_all();
  void sweep_idle();
  // `events`: what epoll reported with the event (EPOLLERR/EPOLLHUP: the peer reset it).
  void on_readable(Connection* conn, Worker& w, uint32_t events);
  // on_readable's read: up to `limit` bytes of conn's calls, cut into records in w.batch
  // (kReadsPerEvent reads at most). False when conn is to close (EOF, an error, an
  // oversized record). shut: closing, so what comes is drained and nothing is kept.
  bool read_calls(Connection& conn, Worker& w, size_t limit, bool shut);
  // After a read, before the re-arm (from then on another thread may read conn): the
  // large-record permit given back once conn holds no large record, and a large buffer
  // back to the pool.
  void settle_input_buffers(Connection& conn, bool open);
  void close_connection(Connection* conn);
  // Runs records [0, count) of `records` unless the connection's replies back up; then the
  // rest wait in the connection (flow control) and are run when its backlog has drained.
  // A connection reset while a batch runs drops the batch's calls not run yet: the client
  // was told they failed with the connection, and may have gone on on another one. So does
  // the server's stop: it joins this thread, and waits for no call not begun.
  void run_records(Connection& conn, std::vector<std::vector<char>>& records, size_t count,
                   Worker& w);
  static bool reset_meanwhile(const Connection& conn, int64_t batch_start_ms);
  void dispatch(Connection& conn, std::vector<char>& record, Worker& w);
  // dispatch's steps. Each check answers why the call may not run (a Refusal, empty when
  // it may); run_procedure runs it and answers why its reply is not the handler's.
  struct Refusal;
  Refusal check_header(const Connection& conn, CallHeaderStatus header, const CallHeader& call,
                       size_t record_size);
  Refusal check_call(const CallHeader& call, CallerCred* cred);
  Refusal run_procedure(Connection& conn, const CallHeader& call, CallerCred& cred,
                        const char* args, size_t args_len, Reply& reply);
  // Encodes the refusal's reply for call `xid` into out (from its start) and sends it.
  void send_refusal(Connection& conn, Worker& w, XDR* out, uint32_t xid, const Refusal& why);
  // Answers an AUTH_TLS probe (RFC 9289 section 4.1) that asked on conn: the STARTTLS
  // reply goes out in the clear, and every byte after it is TLS. False: the connection
  // cannot start TLS now (the caller refuses the probe).
  bool start_tls(Connection& conn, uint32_t xid, Worker& w);
  // A step of conn's TLS handshake, by the holder of its read event. False: the
  // connection is to close (handshake failed); *done: finished now or before.
  bool continue_handshake(Connection& conn, bool* done);
  // recv / send on conn, through its TLS session once it has one. write_some REQUIRES
  // conn.write_mu held; read_some, the read event.
  static ssize_t read_some(Connection& conn, char* buf, size_t len);
  static ssize_t write_some(Connection& conn, const char* data, size_t len);
  // The events to arm conn's read event with: EPOLLOUT as well while its TLS session holds
  // bytes the socket no longer shows (or waits to write), so the event fires at once.
  static uint32_t read_events(const Connection& conn);
  // Adds the reply encoded at w's output position to w's batch; sends the batch once it
  // holds kCoalesceBytes. flush_replies sends what w holds (at the end of every run, and
  // from a handler about to wait: call_running keeps the running call's place).
  void send_reply(Connection& conn, Worker& w, size_t body_len);
  void flush_replies(Worker& w, bool call_running);
  // Sends or queues a whole record on conn. False when conn can take no more.
  bool send_record(Connection& conn, const char* data, size_t len);
  void arm_readable(Connection& conn);
  void arm_writable(Connection& conn);
  void on_writable(uint64_t conn_id, Worker& w);
  // Large-record permits (Options::max_input_bytes). acquire: true with the permit, or
  // false with the connection parked until release() hands it one.
  bool acquire_permit(const std::shared_ptr<Connection>& conn);
  void release_permit(Connection& conn);
  // Large-record buffers (max_record bytes each) are pooled, at most one per permit, so a
  // stream of large WRITEs reuses memory instead of faulting in fresh pages.
  std::vector<char> take_large_buffer();
  // Returns a record's buffer: a large one to the pool (or freed), a small one cleared.
  void recycle(std::vector<char>& record);
  // Closes the connections whose replies stalled longest until the backlog of all
  // connections is within max_total_backlog. REQUIRES: no write_mu held.
  void shed_backlog();
  // REQUIRES: conn.write_mu held. Gives up on the socket; the reader sees EOF and closes.
  void fail_writes(Connection& conn);

  Options options_;
  size_t total_backlog_budget_ = 0;
  net::Endpoint bound_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int sweep_fd_ = -1;  // timerfd of the idle sweep
  net::Acceptor acceptor_;
  std::vector<Procedure> procs_;
  std::vector<std::unique_ptr<Loop>> loops_;  // fixed at construction; loops_[0] accepts
  std::atomic<bool> stopping_{false};

  // Pool threads and hand-overs. drivers_mu_ is never held with another lock.
  std::mutex drivers_mu_;
  std::condition_variable drivers_cv_;
  std::vector<std::thread> threads_;  // every pool thread ever started; drivers_mu_
  std::deque<Loop*> driverless_;      // loops handed over, waiting for a spare; drivers_mu_
  int idle_spares_ = 0;               // drivers_mu_
  Counters counters_;

  // Owns every open connection, by id. Read events carry the Connection* (only the one
  // thread holding a connection's one-shot read event may close it, so the pointer is live
  // while that event is handled); write events carry the id, looked up here, because a
  // write event can still be in flight when the reader closes the connection.
  std::mutex conns_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> conns_;
  uint64_t next_conn_id_ = 1;                            // guarded by conns_mu_
  std::unordered_map<std::string, size_t> per_address_;  // open connections by host; conns_mu_
  size_t refused_open_ = 0;  // of conns_, those refused (Admission::refused); conns_mu_

  // Reply bytes queued in all connections, for max_total_backlog.
  std::atomic<size_t> total_backlog_{0};
  // Large-record permits: how many are free, and the connections parked waiting for one
  // (FIFO). input_mu_ is never held with another lock.
  std::mutex input_mu_;
  size_t free_permits_ = 0;
  size_t permits_ = 0;
  std::vector<std::vector<char>> large_buffers_;  // at most permits_
  std::deque<std::shared_ptr<Connection>> permit_waiters_;
};

}  // namespace odafs::rpc
