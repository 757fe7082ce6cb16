#include <charconv>
#include <stdexcept>

#include "ordma/engine_impl/soft/setup_errors.h"
#include "ordma/engine_impl/soft/soft_engine_impl.h"

namespace odafs::ordma::soft {

SoftEngineImpl::SoftEngineImpl(const EngineOptions& options, ExportedMemory memory)
    : options_(options),
      settings_(soft_settings(options)),
      table_(memory.segments),
      memory_(memory) {
  listen_fd_ = value_or_fail(net::listen_tcp(options_.listen, &bound_));
  int n = std::max(1, options_.threads);
  out_totals_ = std::make_unique<std::atomic<size_t>[]>(static_cast<size_t>(n));
  out_share_ =
      std::max(options_.max_total_backlog / static_cast<size_t>(n), 2 * options_.max_backlog);
  for (int i = 0; i < n; ++i) {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) fail(errno, "epoll_create1");
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
  if (settings_.local_rings) open_local_listener();
}

SoftEngineImpl::~SoftEngineImpl() {
  stop();
  for (int ep : epolls_) close(ep);
  close(wake_fd_);
  close(listen_fd_);
  if (local_fd_ >= 0) close(local_fd_);
}

void SoftEngineImpl::start() {
  for (size_t i = 0; i < epolls_.size(); ++i) {
    threads_.emplace_back([this, i] { loop(epolls_[i]); });
  }
}

void SoftEngineImpl::stop() {
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

bool SoftEngineImpl::export_segment(uint32_t segment, uint32_t length, uint64_t session,
                                    Reference* ref) {
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

void SoftEngineImpl::open_local_listener() {
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

void SoftEngineImpl::loop(int ep) {
  if (options_.on_thread_start) options_.on_thread_start();
  epoll_event events[16];
  // Connections dropped during a round die after it: a later event of the same batch
  // (a ring's doorbell) may still name them.
  std::vector<std::shared_ptr<Conn>> dropped;
  std::vector<Conn*> late;
  const size_t thread =
      static_cast<size_t>(std::find(epolls_.begin(), epolls_.end(), ep) - epolls_.begin());
  RunQueue runq;  // connections and rings with work, a turn each in queue order
  auto drop_queued = [&](Conn* c) {
    runq.remove(c);
    dropped.push_back(drop(ep, c));
  };
  int64_t next_sweep = now_ms() + kHandshakeSweepMs;
  while (!stopping_.load(std::memory_order_acquire)) {
    int64_t now = now_ms();
    if (now >= next_sweep) {
      next_sweep = now + kHandshakeSweepMs;
      for (Conn* c : late_handshakes(ep, now, &late)) drop_queued(c);
      dropped.clear();
    }
    // While work is queued, only look for new events between turns; otherwise sleep
    // until some come.
    int n = epoll_wait(ep, events, 16, runq.empty() ? static_cast<int>(next_sweep - now) : 0);
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
        auto* c = reinterpret_cast<Conn*>(tag & ~kDoorbellBit);
        if (!c->dead) runq.push_front(c);  // dead: dropped earlier in this batch
        continue;
      }
      auto* c = static_cast<Conn*>(events[i].data.ptr);
      if (on_event(c, events[i].events)) {
        runq.push_front(c);
      } else {
        drop_queued(c);
      }
    }
    // One turn, then look for arrivals again.
    if (!runq.empty() && !stopping_.load(std::memory_order_relaxed)) {
      Conn* c = runq.pop();
      bool more = false;
      // A ring's setup socket only ever says hang-up (or breaks the rules): read it when
      // epoll says so; the ring itself is served from shared memory.
      if ((c->ring == nullptr || c->readable) && !take_turn(ep, c, &more)) {
        drop_queued(c);
      } else {
        if (c->ring) {
          bool ring_more = false;
          serve_ring(c, &ring_more);
          more = more || ring_more;
        }
        if (more) runq.push_back(c);
      }
      if (out_totals_[thread].load(std::memory_order_relaxed) > out_share_) {
        shed_output(ep, thread, drop_queued);
      }
    }
    dropped.clear();
  }
  if (options_.on_thread_exit) options_.on_thread_exit();
}

const std::vector<Conn*>& SoftEngineImpl::late_handshakes(int ep, int64_t now,
                                                          std::vector<Conn*>* late) {
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

void SoftEngineImpl::accept_all(bool local) {
  int listener = local ? local_fd_ : listen_fd_;
  for (;;) {
    sockaddr_storage peer{};
    int fd = acceptor_.accept(listener, local ? nullptr : &peer);
    if (fd == net::Acceptor::kShed) continue;
    if (fd < 0) return;
    if (!local && options_.admit_peer && !options_.admit_peer(peer)) {
      stats_.refused.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED("engine: refusing %s: no --clients rule admits it",
                               net::endpoint_of(peer).host.c_str());
      close(fd);
      continue;
    }
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
    const bool offers_tls = !local && options_.tls_context && options_.tls_context();
    wire::encode_greeting(c->nonce, offers_tls ? wire::kGreetingOffersTls : 0, greeting);
    c->out.assign(greeting, greeting + sizeof greeting);
    {
      std::lock_guard lock(conns_mu_);
      conns_.emplace(c, std::move(owned));
    }
    stats_.connections.fetch_add(1, std::memory_order_relaxed);
    size_t thread = next_thread_++ % epolls_.size();
    int ep = epolls_[thread];
    c->ep = ep;
    c->thread = thread;
    c->events = EPOLLIN | EPOLLOUT;  // the greeting goes out on the first EPOLLOUT
    epoll_event ev{};
    ev.events = c->events;
    ev.data.ptr = c;
    // From here on only the owning thread touches c.
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }
}

void SoftEngineImpl::shed_output(int ep, size_t thread,
                                 const std::function<void(Conn*)>& drop_queued) {
  for (int round = 0; round < 64; ++round) {
    if (out_totals_[thread].load(std::memory_order_relaxed) <= out_share_) return;
    Conn* victim = nullptr;
    int64_t oldest = INT64_MAX;
    {
      std::lock_guard lock(conns_mu_);
      for (auto& [raw, c] : conns_) {
        if (c->ep != ep || c->accounted.load(std::memory_order_relaxed) == 0) continue;
        int64_t moved = c->moved_ms.load(std::memory_order_relaxed);
        if (moved < oldest) {
          oldest = moved;
          victim = raw;
        }
      }
    }
    if (victim == nullptr) return;
    stats_.shed.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("engine: closing a connection with %zu bytes of answers unread (%s)",
                             victim->accounted.load(), "over the engine's output budget");
    drop_queued(victim);
  }
}

std::shared_ptr<Conn> SoftEngineImpl::drop(int ep, Conn* c) {
  {
    std::lock_guard out_lock(c->out_mu);
    c->dead = true;
    out_totals_[c->thread].fetch_sub(c->accounted.exchange(0), std::memory_order_relaxed);
    c->out = {};  // a dropped connection keeps none of its output
    c->out_head = 0;
  }
  epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
  if (c->ring) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->ring->doorbell, nullptr);
    rings_.fetch_sub(1, std::memory_order_relaxed);
  }
  shutdown(c->fd, SHUT_RDWR);
  bool was_the_sessions = false;
  {
    std::lock_guard lock(sessions_mu_);
    auto it = by_session_.find(c->session);
    if (it != by_session_.end() && it->second.get() == c) {
      by_session_.erase(it);
      was_the_sessions = true;
    }
  }
  // Direct writes waiting for this connection's data fail now, not at their timeout: the
  // RPC threads they hold go back to serving others.
  if (c->sink) c->sink->complete(Fault::kTransport);
  c->sink.reset();
  if (was_the_sessions) pulls_.fail_session(c->session, Fault::kTransport);
  std::lock_guard lock(conns_mu_);
  auto it = conns_.find(c);
  if (it == conns_.end()) return nullptr;
  std::shared_ptr<Conn> last = std::move(it->second);
  conns_.erase(it);
  return last;  // freed by the caller, or by the last push still holding it
}

}  // namespace odafs::ordma::soft

namespace odafs::ordma {

SoftSettings soft_settings(const EngineOptions& options) {
  SoftSettings s;
  for (const auto& [name, value] : options.backend) {
    size_t n = 0;
    auto [end, err] = std::from_chars(value.data(), value.data() + value.size(), n);
    const bool number = err == std::errc() && end == value.data() + value.size() && !value.empty();
    if (name == "local_rings" && number && n <= 1) {
      s.local_rings = n == 1;
    } else if (name == "max_rings" && number && n >= 1 && n <= 65536) {
      s.max_rings = n;
    } else {
      throw std::invalid_argument(
          "the soft engine takes local_rings=0|1 and max_rings=1..65536, "
          "not " +
          name + "=" + value);
    }
  }
  return s;
}

std::unique_ptr<SoftEngine> make_soft_engine(const EngineOptions& options, ExportedMemory memory) {
  return std::make_unique<soft::SoftEngineImpl>(options, memory);
}

}  // namespace odafs::ordma
