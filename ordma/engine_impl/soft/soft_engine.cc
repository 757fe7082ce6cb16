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
#include "ordma/engine_impl/soft/soft_engine.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/acceptor.h"
#include "base/futex.h"
#include "base/log.h"
#include "ordma/engine_impl/soft/local_ring.h"
#include "ordma/engine_impl/soft/pull_table.h"
#include "ordma/engine_impl/soft/ring_server.h"
#include "ordma/engine_impl/soft/wire.h"

namespace odafs::ordma {
namespace {

// epoll tags: these small values, a Conn* (its socket), or a Conn* | 1 (its ring's doorbell;
// a Conn is aligned, so bit 0 is free).
constexpr uint64_t kListenTag = 1;
constexpr uint64_t kWakeTag = 2;
constexpr uint64_t kLocalListenTag = 3;
constexpr uint64_t kDoorbellBit = 1;
constexpr size_t kInBytes = 64 * 1024;  // an authenticated connection's input buffer
// How often each engine thread looks for handshakes that took too long.
constexpr int kHandshakeSweepMs = 250;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// Batches one wake-up serves from a ring before the engine turns to its other connections
// (it rings the doorbell itself to come back).
constexpr int kRingRoundsPerWake = 16;

struct Conn {
  int fd = -1;
  int ep = -1;         // the owning engine thread's epoll set
  bool local = false;  // came in on the Unix socket: sets up a ring, then only idles
  std::unique_ptr<Ring> ring;
  bool authed = false;
  uint64_t session = 0;
  Nonce nonce{};
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
  size_t backlog() const { return out.size() - out_head; }
  // The fd closes with the last holder (an RPC thread pushing may outlive the drop).
  ~Conn() {
    if (fd >= 0) close(fd);
  }
};

class SoftEngineImpl final : public SoftEngine {
 public:
  SoftEngineImpl(const EngineOptions& options, ExportedMemory memory)
      : options_(options), table_(memory.segments), memory_(memory) {
    listen_fd_ = net::listen_tcp(options_.listen, &bound_);
    int n = std::max(1, options_.threads);
    for (int i = 0; i < n; ++i) {
      int ep = epoll_create1(EPOLL_CLOEXEC);
      if (ep < 0) throw std::system_error(errno, std::generic_category(), "epoll_create1");
      epolls_.push_back(ep);
    }
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    for (int ep : epolls_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kWakeTag;
      epoll_ctl(ep, EPOLL_CTL_ADD, wake_fd_, &ev);
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenTag;
    epoll_ctl(epolls_[0], EPOLL_CTL_ADD, listen_fd_, &ev);
    if (options_.local_rings) open_local_listener();
  }

  ~SoftEngineImpl() override {
    stop();
    for (int ep : epolls_) close(ep);
    close(wake_fd_);
    close(listen_fd_);
    if (local_fd_ >= 0) close(local_fd_);
  }

  void start() override {
    for (size_t i = 0; i < epolls_.size(); ++i) {
      threads_.emplace_back([this, i] { loop(epolls_[i]); });
    }
  }

  void stop() override {
    if (stopping_.exchange(true)) return;
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
    for (auto& t : threads_) t.join();
    threads_.clear();
    {
      std::lock_guard lock(sessions_mu_);
      by_session_.clear();
    }
    pulls_.fail_all(Fault::kTransport);  // RPC threads waiting for bytes give up now
    std::lock_guard lock(conns_mu_);
    for (auto& [raw, c] : conns_) {
      std::lock_guard out_lock(c->out_mu);
      c->dead = true;
    }
    conns_.clear();
  }

  std::string endpoint() const override { return bound_.to_string(); }
  const EngineStats& stats() const override { return stats_; }

  const char* kind() const override { return "soft"; }
  Session open_session() override { return sessions_.issue(); }

  bool export_segment(uint32_t segment, uint32_t length, uint64_t session,
                      Reference* ref) override {
    if (segment >= table_.size() || length > memory_.segment_bytes) return false;
    // Exporting an exported segment would be harmless but costs a CAS; most references are
    // minted for blocks exported already.
    uint32_t gen = table_.state(segment) == ExportTable::State::kExported
                       ? table_.generation(segment)
                       : table_.export_segment(segment);
    *ref = Reference{};
    ref->segment = segment;
    ref->generation = gen;
    ref->offset = 0;
    ref->length = length;
    ref->rights = kRightRead;
    ref->session = session;
    authority_.seal(*ref);
    return true;
  }
  void revoke(uint32_t segment) override { table_.revoke(segment); }
  void begin_write(uint32_t segment) override { table_.lock(segment); }
  void end_write(uint32_t segment) override { table_.unlock(segment); }

  ExportTable& table() override { return table_; }
  const CapabilityAuthority& capabilities() const override { return authority_; }
  const SessionAuthority& sessions() const override { return sessions_; }

 private:
  // Binds the abstract Unix socket that local rings are set up through. Without it the
  // engine simply offers no rings.
  void open_local_listener() {
    if (RAND_bytes(ring_token_.data(), static_cast<int>(ring_token_.size())) != 1) return;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string name = ring::socket_name(ring_token_);
    std::memcpy(addr.sun_path, name.data(), name.size());
    auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 128) != 0) {
      ODAFS_LOG_WARN("engine: no local rings (%s)", strerror(errno));
      close(fd);
      return;
    }
    local_fd_ = fd;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kLocalListenTag;
    epoll_ctl(epolls_[0], EPOLL_CTL_ADD, local_fd_, &ev);
  }

  void loop(int ep) {
    if (options_.on_thread_start) options_.on_thread_start();
    epoll_event events[16];
    // Connections dropped during a batch die after it: a later event of the same batch
    // (a ring's doorbell) may still name them.
    std::vector<std::shared_ptr<Conn>> dropped;
    std::vector<Conn*> late;
    int64_t next_sweep = now_ms() + kHandshakeSweepMs;
    while (!stopping_.load(std::memory_order_acquire)) {
      int64_t now = now_ms();
      if (now >= next_sweep) {
        next_sweep = now + kHandshakeSweepMs;
        for (Conn* c : late_handshakes(ep, now, &late)) dropped.push_back(drop(ep, c));
        dropped.clear();
      }
      int n = epoll_wait(ep, events, 16, static_cast<int>(next_sweep - now));
      if (n < 0) {
        if (errno == EINTR) continue;
        ODAFS_LOG_ERROR("engine epoll_wait: %s", strerror(errno));
        break;
      }
      for (int i = 0; i < n && !stopping_.load(std::memory_order_relaxed); ++i) {
        uint64_t tag = events[i].data.u64;
        if (tag == kWakeTag) break;
        if (tag == kListenTag || tag == kLocalListenTag) {
          accept_all(tag == kLocalListenTag);
          continue;
        }
        if (tag & kDoorbellBit) {
          serve_ring(reinterpret_cast<Conn*>(tag & ~kDoorbellBit));
          continue;
        }
        auto* c = static_cast<Conn*>(events[i].data.ptr);
        if (!service(ep, c, events[i].events)) dropped.push_back(drop(ep, c));
      }
      dropped.clear();
    }
    if (options_.on_thread_exit) options_.on_thread_exit();
  }

  // The connections of thread `ep` still unauthenticated past the handshake timeout.
  // Owner thread only (the caller drops them).
  const std::vector<Conn*>& late_handshakes(int ep, int64_t now, std::vector<Conn*>* late) {
    late->clear();
    std::lock_guard lock(conns_mu_);
    for (auto& [raw, c] : conns_) {
      if (c->ep == ep && !c->authed && now - c->accepted_ms >= options_.handshake_timeout_ms) {
        late->push_back(raw);
      }
    }
    if (!late->empty()) {
      stats_.handshake_timeouts.fetch_add(late->size(), std::memory_order_relaxed);
      ODAFS_LOG_INFO("engine: closing %zu connection(s) that did not authenticate in %d ms",
                     late->size(), options_.handshake_timeout_ms);
    }
    return *late;
  }

  void accept_all(bool local) {
    int listener = local ? local_fd_ : listen_fd_;
    for (;;) {
      int fd = acceptor_.accept(listener, nullptr);
      if (fd == net::Acceptor::kShed) continue;
      if (fd < 0) return;
      {
        std::lock_guard lock(conns_mu_);
        if (conns_.size() >= options_.max_connections) {
          stats_.refused.fetch_add(1, std::memory_order_relaxed);
          ODAFS_LOG_WARN_THROTTLED("engine: refusing connections: %zu open (%s)", conns_.size(),
                                   "--engine-max-connections");
          close(fd);
          continue;
        }
      }
      if (!local) net::set_nodelay(fd);
      auto owned = std::make_shared<Conn>();
      Conn* c = owned.get();
      c->fd = fd;
      c->local = local;
      c->accepted_ms = now_ms();
      if (RAND_bytes(c->nonce.data(), static_cast<int>(c->nonce.size())) != 1)
        continue;  // c closes fd
      unsigned char greeting[wire::kGreetingBytes];
      wire::encode_greeting(c->nonce, greeting);
      c->out.assign(greeting, greeting + sizeof greeting);
      {
        std::lock_guard lock(conns_mu_);
        conns_.emplace(c, std::move(owned));
      }
      stats_.connections.fetch_add(1, std::memory_order_relaxed);
      int ep = epolls_[next_thread_++ % epolls_.size()];
      c->ep = ep;
      c->events = EPOLLIN | EPOLLOUT;  // the greeting goes out on the first EPOLLOUT
      epoll_event ev{};
      ev.events = c->events;
      ev.data.ptr = c;
      // From here on only the owning thread touches c.
      epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
  }

  // Unregisters c and returns the last reference to it, for the caller to release once no
  // event of the current batch can name it.
  std::shared_ptr<Conn> drop(int ep, Conn* c) {
    {
      std::lock_guard out_lock(c->out_mu);
      c->dead = true;
    }
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
    if (c->ring) {
      epoll_ctl(ep, EPOLL_CTL_DEL, c->ring->doorbell, nullptr);
      rings_.fetch_sub(1, std::memory_order_relaxed);
    }
    shutdown(c->fd, SHUT_RDWR);
    {
      std::lock_guard lock(sessions_mu_);
      auto it = by_session_.find(c->session);
      if (it != by_session_.end() && it->second.get() == c) by_session_.erase(it);
    }
    std::lock_guard lock(conns_mu_);
    auto it = conns_.find(c);
    if (it == conns_.end()) return nullptr;
    std::shared_ptr<Conn> last = std::move(it->second);
    conns_.erase(it);
    return last;  // freed by the caller, or by the last push still holding it
  }

  // Returns false when the connection is to be closed.
  bool service(int ep, Conn* c, uint32_t events) {
    std::lock_guard out_lock(c->out_mu);
    if (events & (EPOLLERR | EPOLLHUP)) return false;
    if ((events & EPOLLIN) && c->backlog() < options_.max_backlog) {
      for (int round = 0; round < 8; ++round) {
        ssize_t n = recv(c->fd, c->in.data() + c->in_len, c->in.size() - c->in_len, 0);
        if (n == 0) return false;
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          return false;
        }
        c->in_len += static_cast<size_t>(n);
        if (!parse(c)) return false;
        if (c->in_len < c->in.size() || c->backlog() >= options_.max_backlog) break;
      }
    }
    if (!flush(c)) return false;
    // Ask for EPOLLOUT while output waits; stop reading while too much of it waits.
    uint32_t want = (c->backlog() < options_.max_backlog ? uint32_t{EPOLLIN} : 0u) |
                    (c->backlog() > 0 ? uint32_t{EPOLLOUT} : 0u);
    if (want != c->events) {
      c->events = want;
      epoll_event ev{};
      ev.events = want;
      ev.data.ptr = c;
      epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    }
    // Input parked behind a full backlog is parsed once the backlog drains.
    if (c->backlog() < options_.max_backlog && c->in_len >= wire::kReadRequestBytes && c->authed) {
      return parse(c) && flush(c);
    }
    return true;
  }

  bool parse(Conn* c) {
    size_t pos = 0;
    if (c->authed && c->local) return false;  // a ring's socket carries nothing after setup
    if (!c->authed) {
      if (c->in_len < wire::kHelloBytes) return true;
      Proof proof;
      uint64_t session = 0;
      if (!wire::decode_hello(c->in.data(), &session, &proof) ||
          !sessions_.verify(session, c->nonce, proof)) {
        stats_.bad_handshakes.fetch_add(1, std::memory_order_relaxed);
        ODAFS_LOG_WARN_THROTTLED("engine: refused a connection (%s)",
                                 "bad magic, version or session proof");
        return false;
      }
      c->authed = true;
      c->session = session;
      c->in.resize(kInBytes);
      if (c->local) return c->in_len == wire::kHelloBytes && open_ring(c);
      {
        // Registered before WELCOME leaves, so a client may start direct I/O at once.
        // Lock order: out_mu (held) then sessions_mu_; push() never holds both.
        std::lock_guard lock(sessions_mu_);
        std::lock_guard conns_lock(conns_mu_);
        auto it = conns_.find(c);
        if (it != conns_.end()) by_session_[session] = it->second;
      }
      unsigned char welcome[wire::kWelcomeBytes];
      wire::encode_welcome(local_fd_ >= 0 ? wire::kWelcomeOffersRings : 0,
                           local_fd_ >= 0 ? ring_token_.data() : nullptr, welcome);
      c->out.insert(c->out.end(), welcome, welcome + sizeof welcome);
      pos = wire::kHelloBytes;
    }
    while (pos < c->in_len) {
      if (c->sink_left > 0) {  // streaming a DATA frame's bytes to its waiter
        uint32_t n = static_cast<uint32_t>(std::min<size_t>(c->sink_left, c->in_len - pos));
        if (c->sink) std::memcpy(c->sink->data.data() + c->sink_at, c->in.data() + pos, n);
        c->sink_at += n;
        c->sink_left -= n;
        pos += n;
        if (c->sink_left == 0) finish_sink(c);
        continue;
      }
      if (c->in[pos] == wire::kTypeData) {
        if (c->in_len - pos < wire::kDataHeaderBytes) break;
        wire::Data d = wire::decode_data(c->in.data() + pos);
        Fault fault = d.fault;
        uint32_t tag = d.tag, length = d.length;
        pos += wire::kDataHeaderBytes;
        std::shared_ptr<PullWaiter> w = pulls_.take(c->session, tag);
        c->sink.reset();
        if (w && fault == Fault::kNone && length == w->data.size()) {
          c->sink = w;
        } else if (w) {
          w->complete(fault != Fault::kNone ? fault : Fault::kBadRequest);
        }
        c->sink_left = length;  // an unexpected frame's bytes are read and dropped
        c->sink_at = 0;
        if (length == 0) finish_sink(c);
        continue;
      }
      if (c->in_len - pos < wire::kReadRequestBytes || c->backlog() >= options_.max_backlog) break;
      wire::ReadRequest req;
      if (!wire::decode(c->in.data() + pos, &req)) {
        stats_.bad_frames.fetch_add(1, std::memory_order_relaxed);
        ODAFS_LOG_WARN_THROTTLED("engine: closing a connection after a %s", "malformed frame");
        return false;
      }
      pos += wire::kReadRequestBytes;
      // The last request of a batch, with nothing queued before it, may go straight from
      // the segment to the socket.
      bool last = c->in_len - pos < wire::kReadRequestBytes;
      serve(c, req, last && c->backlog() == 0);
    }
    if (pos > 0) {
      std::memmove(c->in.data(), c->in.data() + pos, c->in_len - pos);
      c->in_len -= pos;
    }
    return true;
  }

  // Builds c's ring and sends WELCOME with its memfd and doorbell. Owner thread, out_mu
  // held. False closes the connection.
  bool open_ring(Conn* c) {
    if (!flush(c) || c->backlog() > 0) return false;  // the greeting left long ago
    // The ring's place under the cap is taken here and held by c->ring from now on: every
    // failure below closes c, and the drop gives the place back.
    if (rings_.fetch_add(1, std::memory_order_relaxed) >= options_.max_rings) {
      rings_.fetch_sub(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED("engine: refused a local ring (%zu open)", options_.max_rings);
      return false;
    }
    int mfd = -1;
    c->ring = create_ring(slot_bytes(), &mfd);
    if (!c->ring) {
      ODAFS_LOG_WARN("engine: local ring setup failed: %s", strerror(errno));
      return false;
    }
    Ring& r = *c->ring;
    // Registered and counted before WELCOME: once the client has it, the ring is live.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;  // every doorbell write is an edge; the count is never read
    ev.data.u64 = reinterpret_cast<uintptr_t>(c) | kDoorbellBit;
    if (epoll_ctl(c->ep, EPOLL_CTL_ADD, r.doorbell, &ev) != 0) {
      close(mfd);
      return false;
    }
    stats_.rings.fetch_add(1, std::memory_order_relaxed);
    bool sent = send_ring_welcome(c->fd, mfd, r.doorbell);
    close(mfd);               // the mapping and the client's copy keep the memory
    if (!sent) return false;  // the drop undoes it all
    c->in_len = 0;
    return true;
  }

  // A slot's data area holds one segment.
  uint32_t slot_bytes() const { return static_cast<uint32_t>(memory_.segment_bytes); }

  // Serves the posted slots of c's ring until none are left (or the round budget is
  // spent). Owner thread only. engine_awake tells clients they need not ring: the store of
  // 0 and the re-check of `posted` pair with the client's fetch_or and load (seq_cst), so a
  // post is never left unseen.
  void serve_ring(Conn* c) {
    std::lock_guard out_lock(c->out_mu);
    if (c->dead || !c->ring) return;
    Ring& r = *c->ring;
    ring::Header* h = ring::header(r.base);
    h->engine_awake.store(1, std::memory_order_seq_cst);
    for (int round = 0;; ++round) {
      uint64_t pending = h->posted.exchange(0, std::memory_order_acq_rel);
      if (pending == 0) {
        h->engine_awake.store(0, std::memory_order_seq_cst);
        if (h->posted.load(std::memory_order_seq_cst) == 0) return;
        h->engine_awake.store(1, std::memory_order_seq_cst);
        continue;
      }
      while (pending != 0) {
        serve_slot(c, r, static_cast<uint32_t>(__builtin_ctzll(pending)));
        pending &= pending - 1;
      }
      if (round + 1 == kRingRoundsPerWake) {  // come back after the others had a turn
        uint64_t one = 1;
        [[maybe_unused]] ssize_t n = write(r.doorbell, &one, sizeof one);
        return;
      }
    }
  }

  void serve_slot(const Conn* c, Ring& r, uint32_t i) {
    ring::Slot& s = *ring::slot(r.base, i);
    uint32_t state = s.state.load(std::memory_order_acquire);
    if (state != ring::kPosted && state != ring::kPostedWaiting) return;  // a stray bit
    unsigned char frame[wire::kReadRequestBytes];
    std::memcpy(frame, s.request, sizeof frame);  // checked and used from our copy only
    wire::ReadRequest req;
    Fault f = Fault::kBadRequest;
    const std::byte* bytes = nullptr;
    if (wire::decode(frame, &req)) {
      f = admit_and_pin(c, req, &bytes);
    } else {
      stats_.faults[static_cast<size_t>(f)].fetch_add(1, std::memory_order_relaxed);
    }
    uint32_t length = 0;
    if (f == Fault::kNone) {
      // admit() kept the range inside one segment, and a slot holds a segment.
      std::memcpy(ring::slot_data(r.base, slot_bytes(), i), bytes, req.length);
      table_.unpin(req.ref.segment);
      length = req.length;
    }
    s.fault.store(static_cast<uint32_t>(f), std::memory_order_relaxed);
    s.length.store(length, std::memory_order_relaxed);
    if (s.state.exchange(ring::kDone, std::memory_order_acq_rel) == ring::kPostedWaiting) {
      futex_wake(&s.state, 1, FutexScope::kShared);
    }
  }

  // Admits r and pins its segment; counts the outcome either way. On kNone, *bytes is the
  // requested range and the caller unpins once the bytes are copied or sent. The read is
  // counted before its bytes can reach the client: whoever sees the data sees the count.
  Fault admit_and_pin(const Conn* c, const wire::ReadRequest& r, const std::byte** bytes) {
    Fault f = admit(c, r);
    if (f == Fault::kNone) f = table_.pin(r.ref.segment, r.ref.generation);
    if (f != Fault::kNone) {
      stats_.faults[static_cast<size_t>(f)].fetch_add(1, std::memory_order_relaxed);
      return f;
    }
    stats_.reads.fetch_add(1, std::memory_order_relaxed);
    stats_.bytes.fetch_add(r.length, std::memory_order_relaxed);
    *bytes = memory_.base + size_t{r.ref.segment} * memory_.segment_bytes + r.offset;
    return Fault::kNone;
  }

  Fault admit(const Conn* c, const wire::ReadRequest& r) const {
    if (r.ref.session != c->session) return Fault::kWrongSession;
    if (Fault f = authority_.check(r.ref, c->session); f != Fault::kNone) return f;
    if ((r.ref.rights & kRightRead) == 0) return Fault::kBadCapability;
    if (r.ref.segment >= memory_.segments) return Fault::kUnknownSegment;
    uint64_t ref_end = uint64_t{r.ref.offset} + r.ref.length;
    uint64_t end = uint64_t{r.offset} + r.length;
    if (ref_end > memory_.segment_bytes || r.offset < r.ref.offset || end > ref_end) {
      return Fault::kOutOfBounds;
    }
    return Fault::kNone;
  }

  // Answers one request. With send_now, tries to send header and bytes from the segment
  // itself (no copy) while the segment is pinned; a non-blocking send, so the pin lasts
  // microseconds. What the socket does not take is copied to the output buffer.
  void serve(Conn* c, const wire::ReadRequest& r, bool send_now) {
    wire::Response resp;
    resp.tag = r.tag;
    const std::byte* bytes = nullptr;
    resp.fault = admit_and_pin(c, r, &bytes);
    size_t at = c->out.size();
    if (resp.fault != Fault::kNone) {
      c->out.resize(at + wire::kResponseBytes);
      wire::encode(resp, c->out.data() + at);
      return;
    }
    resp.length = r.length;
    size_t sent = 0;
    unsigned char head[wire::kResponseBytes];
    wire::encode(resp, head);
    if (send_now) {
      iovec iov[2] = {{head, sizeof head}, {const_cast<std::byte*>(bytes), r.length}};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      ssize_t n = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) sent = static_cast<size_t>(n);
    }
    size_t total = sizeof head + r.length;
    if (sent < total) {
      size_t from_head = sent < sizeof head ? sizeof head - sent : 0;
      c->out.resize(at + (total - sent));
      std::memcpy(c->out.data() + at, head + (sizeof head - from_head), from_head);
      size_t body_sent = sent > sizeof head ? sent - sizeof head : 0;
      std::memcpy(c->out.data() + at + from_head, bytes + body_sent, r.length - body_sent);
    }
    table_.unpin(r.ref.segment);
  }

  bool flush(Conn* c) {
    while (c->backlog() > 0) {
      ssize_t n =
          send(c->fd, c->out.data() + c->out_head, c->backlog(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        c->out_head += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        return false;
      }
    }
    if (c->out_head == c->out.size()) {
      c->out.clear();  // keeps its capacity: steady state allocates nothing
      c->out_head = 0;
    }
    return true;
  }

  Fault push(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag, const iovec* parts,
             int nparts) override {
    size_t length = 0;
    for (int i = 0; i < nparts; ++i) length += parts[i].iov_len;
    Fault f = send_to(session, wire::kKindPut, Fault::kNone, tag, buffer, offset,
                      static_cast<uint32_t>(length), parts, nparts);
    if (f == Fault::kNone) {
      stats_.pushes.fetch_add(1, std::memory_order_relaxed);
      stats_.push_bytes.fetch_add(length, std::memory_order_relaxed);
    }
    return f;
  }

  void cancel(uint64_t session, uint32_t tag, Fault fault) override {
    send_to(session, wire::kKindPut, fault, tag, 0, 0, 0, nullptr, 0);
  }

  Fault pull(uint64_t session, uint32_t buffer, uint32_t offset, uint32_t tag, uint32_t length,
             int timeout_ms, std::vector<char>* data) override {
    std::shared_ptr<PullWaiter> w = pulls_.add(session, tag, length);
    Fault f =
        send_to(session, wire::kKindGet, Fault::kNone, tag, buffer, offset, length, nullptr, 0);
    if (f == Fault::kNone) {
      timespec deadline = deadline_after_ms(timeout_ms);
      while (!w->done() && !deadline_passed(deadline)) futex_wait(&w->state, 0, &deadline);
    }
    pulls_.take(session, tag);  // gone if answered; removed here on failure or timeout
    if (!w->done()) return f == Fault::kNone ? Fault::kTransport : f;
    if (w->fault == Fault::kNone) {
      data->swap(w->data);
      stats_.pulls.fetch_add(1, std::memory_order_relaxed);
      stats_.pull_bytes.fetch_add(length, std::memory_order_relaxed);
    }
    return w->fault;
  }

 private:
  // Queues a PUT/GET header (plus the parts' bytes) on `session`'s connection and tries to
  // send. Lock order: sessions_mu_ alone, then the connection's out_mu.
  Fault send_to(uint64_t session, uint8_t kind, Fault fault, uint32_t tag, uint32_t buffer,
                uint32_t offset, uint32_t length, const iovec* parts, int nparts) {
    std::shared_ptr<Conn> held;
    {
      std::lock_guard lock(sessions_mu_);
      auto it = by_session_.find(session);
      if (it == by_session_.end()) return Fault::kWrongSession;  // no engine connection
      held = it->second;
    }
    Conn* c = held.get();
    size_t body = kind == wire::kKindPut ? length : 0;
    std::lock_guard out_lock(c->out_mu);
    if (c->dead) return Fault::kTransport;
    if (c->backlog() + body > options_.max_backlog * 4) return Fault::kTransport;
    size_t at = c->out.size();
    c->out.resize(at + wire::kResponseBytes + wire::kPutExtraBytes + body);
    unsigned char* p = c->out.data() + at;
    wire::encode(wire::Transfer{tag, fault, kind, length, buffer, offset}, p);
    p += wire::kResponseBytes + wire::kPutExtraBytes;
    for (int i = 0; i < nparts; ++i) {
      std::memcpy(p, parts[i].iov_base, parts[i].iov_len);
      p += parts[i].iov_len;
    }
    if (!flush(c)) return Fault::kTransport;  // the owner thread sees the error and drops
    if (c->backlog() > 0 && !(c->events & EPOLLOUT)) {
      c->events |= EPOLLOUT;
      epoll_event ev{};
      ev.events = c->events;
      ev.data.ptr = c;
      epoll_ctl(c->ep, EPOLL_CTL_MOD, c->fd, &ev);
    }
    return Fault::kNone;
  }

  void finish_sink(Conn* c) {
    if (c->sink) c->sink->complete(Fault::kNone);
    c->sink.reset();
  }

  EngineOptions options_;
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
};

}  // namespace

std::unique_ptr<SoftEngine> make_soft_engine(const EngineOptions& options, ExportedMemory memory) {
  return std::make_unique<SoftEngineImpl>(options, memory);
}

}  // namespace odafs::ordma
