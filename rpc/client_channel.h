// The client side of ONC RPC over TCP: one connection, many calls in flight.
//
// A Channel sends each call as one record and matches replies to calls by XID, so any
// number of threads may have calls outstanding on it at once (async and batch I/O).
// A dedicated receiver thread reads replies and completes calls.
//
// Pre-posting (the paper's RDDP-RPC): before start(), a caller may post a buffer for a
// call whose reply has an opaque<> after a fixed-size header (e.g. READ). When the reply
// has that layout, the receiver reads the header into the call and the opaque's bytes
// straight from the socket into the posted buffer, with no intermediate copy; anything
// after the opaque (a trailer, e.g. READ's references) follows the header in the call's
// reply buffer.
#pragma once

#include <rpc/rpc.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/net.h"
#include "base/status.h"
#include "base/tls.h"
#include "rpc/call_credential.h"
#include "rpc/errors.h"
#include "rpc/message_header.h"

namespace odafs::rpc {

struct AuthSysCred {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string machine;
  std::vector<uint32_t> gids;
};

// What a thread runs just before it sleeps waiting for a reply (Channel::wait_until): a
// thread that serves others (odafs-mount's FUSE reader) hands its duty to another thread
// there, so that waiting for the server never stalls the requests behind it. Per thread;
// nullptr (the default) for none. The hook must not make calls of its own.
using BeforeBlockingHook = void (*)(void* arg);
void set_before_blocking_hook(BeforeBlockingHook hook, void* arg);

// One RPC: request and reply buffers plus completion state. Owned by the caller and
// reusable for any number of calls, one at a time; buffers keep their capacity, so a
// steady stream of calls allocates nothing.
class Call {
 public:
  Call() = default;
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Posts buf[0, capacity) for the reply's trailing opaque<>. header_bytes counts the
  // reply record's bytes from the XID up to and including the opaque's length word when
  // the call succeeds. REQUIRES: called before Channel::start; cleared by start's
  // completion (post again for each call).
  void post(void* buf, size_t capacity, size_t header_bytes) {
    posted_ = static_cast<char*>(buf);
    posted_capacity_ = capacity;
    posted_header_ = header_bytes;
  }

  // After Channel::wait: the number of payload bytes placed in the posted buffer, or
  // std::nullopt when the reply did not have the posted layout (an error status, say) and
  // went whole into the reply buffer instead.
  std::optional<size_t> posted_length() const { return posted_length_; }

  // True once the call started last has its reply (or its failure): Channel::wait then
  // returns without sleeping. Thread-safe.
  bool ready() const { return state_.load(std::memory_order_acquire) == kDone; }

  // When the call started last gives up (CLOCK_MONOTONIC): its start plus the channel's
  // timeout_ms. For callers that wait on several calls at once (Channel::wait_until).
  const timespec& deadline() const { return deadline_; }

  // A word the channel increments, then futex-wakes, each time one of this call's replies
  // (or failures) arrives, after the call is ready(): one thread can then sleep on a
  // single word for any of many calls. Kept for every later call; nullptr (the default)
  // for none. REQUIRES: not in flight; the word outlives every call made with it.
  void set_notify(std::atomic<uint32_t>* word) { notify_ = word; }

 private:
  friend class Channel;
  enum State : uint32_t { kIdle = 0, kPending = 1, kDone = 2 };

  uint32_t xid_ = 0;
  std::vector<char> request_;
  std::vector<char> reply_;  // reply record from the XID on (header only when posted)
  char* posted_ = nullptr;
  size_t posted_capacity_ = 0;
  size_t posted_header_ = 0;
  std::optional<size_t> posted_length_;
  std::atomic<uint32_t> state_{kIdle};
  std::atomic<uint32_t>* notify_ = nullptr;
  timespec deadline_{};
  int64_t started_ns_ = 0;  // CLOCK_MONOTONIC, when start() sent it
  std::string error_;       // non-empty: the transport failed this call
};

class Channel {
 public:
  struct Options {
    uint32_t program = 0;
    uint32_t version = 0;
    size_t max_record = 4u << 20;     // refuse replies larger than this
    std::optional<AuthSysCred> auth;  // AUTH_NONE when empty; a CallAs scope overrides it
    int timeout_ms = 60000;           // per call, from start to reply
    // RPC-with-TLS (RFC 9289): set, the connection sends the AUTH_TLS probe and runs TLS
    // 1.3 from the server's yes on; the server's certificate must name tls_host.
    std::shared_ptr<const tls::Context> tls;
    std::string tls_host;
  };

  // Connects (and starts TLS if asked). Fails with connect's errno when the server cannot
  // be reached; with a message saying why when TLS cannot start (the server offers none, a
  // certificate is refused on either side; *failure kDenied when the server's rules admit
  // this client to nothing, kTransport otherwise).
  static Result<std::unique_ptr<Channel>> connect(const net::Endpoint& server, Options options,
                                                  CallFailure* failure = nullptr);
  ~Channel();  // fails outstanding calls, joins the receiver
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Encodes and sends a call. Fails (ECONNRESET) if the channel is broken; a failed send
  // breaks it. REQUIRES: c is not in flight. Thread-safe.
  Status start(Call& c, uint32_t proc, xdrproc_t xargs, const void* args);

  // Waits for c's reply and checks the RPC reply header. On success *results is an XDR
  // decode stream over c's reply positioned at the procedure results (valid until c is
  // reused). Fails on transport failure, timeout (ETIMEDOUT) or an RPC-level rejection;
  // *failure (when given) then says which layer.
  Status wait(Call& c, XDR* results, CallFailure* failure = nullptr);
  // wait() bounded by an absolute CLOCK_MONOTONIC deadline (e.g. c.deadline()) instead of
  // timeout_ms from now. A deadline already passed does not sleep: the call completes if
  // its reply is there, else it times out.
  Status wait_until(Call& c, XDR* results, timespec deadline, CallFailure* failure = nullptr);

  // start + wait + decode results with xres into res (free them with xdr_free).
  Status call(uint32_t proc, xdrproc_t xargs, const void* args, xdrproc_t xres, void* res,
              CallFailure* failure = nullptr);

  // True once the connection has failed; every later call fails.
  bool broken() const { return broken_.load(std::memory_order_acquire); }

  // Calls the server makes on this connection (callbacks: one-way, no reply is sent).
  // The handler runs on the receiver thread, in order with the replies around it: it must
  // be quick and must never wait for a reply on this channel. Thread-safe.
  using CallbackHandler = std::function<void(const CallHeader& header, XDR* args)>;
  void set_callback_handler(CallbackHandler handler);

  // When (CLOCK_MONOTONIC ns) the newest call that has its reply was started: the server
  // answered this connection after that moment, and every callback it sent before
  // answering has been handled. 0 before the first reply. Thread-safe.
  int64_t confirmed_since_ns() const { return confirmed_ns_.load(std::memory_order_acquire); }

  // Bytes of an accepted, successful reply header with AUTH_NONE verifier (XID included).
  static constexpr size_t kAcceptedReplyHeaderBytes = 24;

 private:
  explicit Channel(Options options);
  void receive_loop();
  // One record from the server: a reply (completing its call), a callback, or the skipped
  // reply of an abandoned call. false when the stream ended cleanly (every call failed);
  // a failure when it broke (*reading: the call whose reply was being read, if any).
  Result<bool> receive_record(Call** reading);
  // RFC 9289 on the new connection, before the receiver runs: probe, handshake, and one
  // NULL call under TLS, so a refused client certificate is reported here.
  Status start_tls(const net::Endpoint& server, CallFailure* failure);
  // One whole reply record read before the receiver runs (start_tls), body into *out.
  Status read_record_now(std::vector<char>* out, const timespec& deadline);
  // The connection's bytes, through TLS once it runs. read_full: false at EOF before the
  // first byte; read_rest (the rest of a record begun) fails at EOF too.
  Result<bool> read_full(void* buf, size_t len);
  Status read_rest(void* buf, size_t len);
  Status readv_full(iovec* iov, int count);
  Status write_all(const char* data, size_t len);
  void fail_all(const std::string& why);
  Call* take_pending(uint32_t xid);
  void complete(Call* c);
  Status read_generic(Call* c, size_t frag_left, bool last);
  // Reads a CALL record from the server (its XID and direction already read) and runs the
  // callback handler on it.
  Status take_callback(const char* xid_and_direction, size_t frag_left, bool last);
  static constexpr size_t kMaxCallbackRecord = 4096;
  Status discard(size_t frag_left, bool last);
  // The next fragment's record mark, within a record begun.
  Status read_fragment_mark(size_t* length, bool* last);

  Options options_;
  int fd_ = -1;
  std::unique_ptr<tls::Session> tls_;       // set by start_tls, then constant
  std::optional<CallCredential> own_cred_;  // Options::auth, encoded; empty for AUTH_NONE
  std::atomic<uint32_t> next_xid_;
  std::atomic<bool> broken_{false};

  std::mutex send_mu_;  // one record on the wire at a time

  std::mutex pending_mu_;
  std::vector<Call*> pending_;  // few in flight: a linear scan beats hashing here
  std::string broken_reason_;   // guarded by pending_mu_

  std::shared_ptr<const CallbackHandler> callback_handler_;  // guarded by pending_mu_
  std::vector<char> callback_record_;                        // the receiver's alone
  std::atomic<int64_t> confirmed_ns_{0};

  std::thread receiver_;
};

}  // namespace odafs::rpc
