#include "rpc/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/futex.h"
#include "base/log.h"
#include "rpc/message_header.h"
#include "rpc/record.h"
#include "rpc/server_internal.h"
#include "rpc/xdr_util.h"

namespace odafs::rpc {

Server::Server(Options options) : options_(std::move(options)), acceptor_("rpc") {
  // A permit holder may hold its record and one event's worth of records cut after it.
  size_t per_permit = options_.max_record + kReadsPerEvent * size_t{64 * 1024};
  permits_ = std::max<size_t>(1, options_.max_input_bytes / per_permit);
  free_permits_ = permits_;
  // Each pool thread may add one reply to a connection that just backed up: an honest
  // client reading as fast as it can must fit.
  total_backlog_budget_ =
      std::max(options_.max_total_backlog,
               static_cast<size_t>(options_.threads + 1) * (options_.max_reply + 4));
  options_.threads = std::max(options_.threads, 1);
  options_.max_blocked_threads = std::max(options_.max_blocked_threads, 0);
}

Result<std::unique_ptr<Server>> Server::listen(Options options) {
  std::unique_ptr<Server> server(new Server(std::move(options)));
  ODAFS_RETURN_IF_ERROR(server->open());
  return server;
}

Status Server::open() {
  ODAFS_ASSIGN_OR_RETURN(listen_fd_, net::listen_tcp(options_.listen, &bound_));
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Status::from_errno("eventfd");
  sweep_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (sweep_fd_ < 0) return Status::from_errno("timerfd_create");
  epoll_event ev{};
  for (int i = 0; i < options_.threads; ++i) {
    int fd = epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0) return Status::from_errno("epoll_create1");
    loops_.push_back(std::make_unique<Loop>(fd));
    ev.events = EPOLLIN;  // level-triggered: wakes every loop at stop
    ev.data.u64 = kWakeTag;
    epoll_ctl(fd, EPOLL_CTL_ADD, wake_fd_, &ev);
  }
  const int first = loops_[0]->epoll_fd;  // accepts and sweeps
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = kListenTag;
  epoll_ctl(first, EPOLL_CTL_ADD, listen_fd_, &ev);
  if (options_.idle_timeout_ms > 0) {
    // Sweep a few times per timeout, so a connection lives at most ~1.25x the timeout.
    int64_t period = std::clamp<int64_t>(options_.idle_timeout_ms / 4, 50, 1000);
    itimerspec spec{};
    spec.it_interval.tv_sec = period / 1000;
    spec.it_interval.tv_nsec = (period % 1000) * 1000000;
    spec.it_value = spec.it_interval;
    timerfd_settime(sweep_fd_, 0, &spec, nullptr);
    ev.events = EPOLLIN | EPOLLONESHOT;  // one thread sweeps at a time
    ev.data.u64 = kSweepTag;
    epoll_ctl(first, EPOLL_CTL_ADD, sweep_fd_, &ev);
  }
  return Status();
}

Server::~Server() {
  stop();
  for (int fd : {listen_fd_, wake_fd_, sweep_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void Server::add_procedure(uint32_t proc, const char* name, ProcedureFn fn) {
  if (procs_.size() <= proc) procs_.resize(proc + 1);
  procs_[proc].name = name;
  procs_[proc].fn = std::move(fn);
  procs_[proc].calls = std::make_unique<std::atomic<uint64_t>>(0);
}

size_t Server::open_connections() {
  std::lock_guard lock(conns_mu_);
  return conns_.size() - refused_open_;
}

std::vector<Server::ConnectionInfo> Server::connections() {
  std::lock_guard lock(conns_mu_);
  std::vector<ConnectionInfo> out;
  out.reserve(conns_.size());
  for (const auto& [id, conn] : conns_) {
    if (conn->refused) continue;
    out.push_back({id, conn->peer, conn->admission, conn->tag.load()});
  }
  return out;
}

uint64_t Server::calls(uint32_t proc) const {
  if (proc >= procs_.size() || !procs_[proc].calls) return 0;
  return procs_[proc].calls->load(std::memory_order_relaxed);
}

const char* Server::procedure_name(uint32_t proc) const {
  return proc < procs_.size() ? procs_[proc].name : nullptr;
}

void Server::start() {
  std::lock_guard lock(drivers_mu_);
  for (auto& loop : loops_) threads_.emplace_back([this, l = loop.get()] { worker_loop(l); });
}

void Server::stop() {
  {
    std::lock_guard lock(drivers_mu_);  // no spare is spawned after this
    if (stopping_.exchange(true)) return;
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
  drivers_cv_.notify_all();
  // Threads are only added under drivers_mu_ while not stopping: the set is final now.
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  {
    std::lock_guard lock(input_mu_);
    permit_waiters_.clear();
  }
  std::lock_guard lock(conns_mu_);
  for (auto& [raw, conn] : conns_) {
    conn->closed = true;
    shutdown(conn->fd, SHUT_RDWR);
  }
  conns_.clear();
}

thread_local Server::Worker* Server::current_worker_ = nullptr;

bool before_blocking(Wait wait) {
  Server::Worker* w = Server::current_worker_;
  if (w == nullptr || w->loop == nullptr) return true;  // not a pool thread, or handed over
  if (wait == Wait::kShort) {
    // An epoll set polls readable while it has ready events: nothing is taken from it.
    pollfd ready{w->loop->epoll_fd, POLLIN, 0};
    if (poll(&ready, 1, 0) <= 0) return true;
  }
  return w->server->hand_over(*w, wait);
}

bool Server::hand_over(Worker& w, Wait wait) {
  flush_replies(w, /*call_running=*/true);  // replies made must not wait for this call
  std::lock_guard lock(drivers_mu_);
  if (stopping_.load(std::memory_order_relaxed)) return false;
  // Spares already promised to other loops are not free.
  if (idle_spares_ <= static_cast<int>(driverless_.size())) {
    if (counters_.spare_threads.load(std::memory_order_relaxed) >=
        static_cast<uint64_t>(options_.max_blocked_threads)) {
      counters_.no_spare.fetch_add(1, std::memory_order_relaxed);
      // A flush keeps its loop a moment, which a disk under load makes common; a long wait
      // is given up by its caller, which is worth saying.
      if (wait == Wait::kLong) {
        ODAFS_LOG_WARN_THROTTLED(
            "all %d spare rpc threads wait in calls: a call that would "
            "wait with its loop answers at once",
            options_.max_blocked_threads);
      }
      return false;
    }
    counters_.spare_threads.fetch_add(1, std::memory_order_relaxed);
    spawn_thread(w.loop);
  } else {
    driverless_.push_back(w.loop);
    drivers_cv_.notify_one();
  }
  counters_.handovers.fetch_add(1, std::memory_order_relaxed);
  w.loop = nullptr;  // a spare drives it now
  return true;
}

void Server::spawn_thread(Loop* loop) {
  threads_.emplace_back([this, loop] { worker_loop(loop); });
}

Server::Loop* Server::wait_for_loop() {
  std::unique_lock lock(drivers_mu_);
  ++idle_spares_;
  drivers_cv_.wait(
      lock, [this] { return stopping_.load(std::memory_order_relaxed) || !driverless_.empty(); });
  --idle_spares_;
  if (driverless_.empty()) return nullptr;
  Loop* loop = driverless_.front();
  driverless_.pop_front();
  return loop;
}

void Server::worker_loop(Loop* loop) {
  if (options_.on_thread_start) options_.on_thread_start();
  Worker w;
  w.server = this;
  w.out.resize(kCoalesceBytes + options_.max_reply + 4);
  current_worker_ = &w;
  // One event at a time: a handler may block without handing its loop over (no spare to
  // be had), and events taken with it would wait behind it.
  epoll_event events[1];
  while (!stopping_.load(std::memory_order_acquire)) {
    if (loop == nullptr && (loop = wait_for_loop()) == nullptr) break;
    w.loop = loop;
    int n = epoll_wait(loop->epoll_fd, events, 1, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      ODAFS_LOG_ERROR("epoll_wait: %s", strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) break;
      if (tag == kListenTag) {
        accept_all();
      } else if (tag == kSweepTag) {
        sweep_idle();
      } else if (tag & kWriteTag) {
        on_writable(tag >> 1, w);
      } else {
        on_readable(reinterpret_cast<Connection*>(events[i].data.ptr), w, events[i].events);
      }
    }
    if (w.loop == nullptr) loop = nullptr;  // handed over: this thread becomes a spare
  }
  current_worker_ = nullptr;
  if (options_.on_thread_exit) options_.on_thread_exit();
}

Server::Loop& Server::least_loaded_loop() {
  Loop* best = loops_[0].get();
  for (auto& loop : loops_) {
    if (loop->connections.load(std::memory_order_relaxed) <
        best->connections.load(std::memory_order_relaxed)) {
      best = loop.get();
    }
  }
  return *best;
}

void Server::accept_all() {
  for (;;) {
    sockaddr_storage addr{};
    int fd = acceptor_.accept(listen_fd_, &addr);
    if (fd == net::Acceptor::kShed) {
      counters_.shed.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (fd < 0) break;
    net::Endpoint from = net::endpoint_of(addr);
    const char* host = from.host.c_str();
    Admission admission;
    if (options_.admit) admission = options_.admit(fd, addr);
    std::shared_ptr<Connection> conn;
    {
      std::lock_guard lock(conns_mu_);
      const char* refusal = nullptr;
      size_t& from_host = per_address_[host];
      if (admission.refused) {
        if (refused_open_ >= options_.max_refused_connections) {
          refusal = "no rule admits it, and as many such connections wait for their refusal";
        }
      } else if (conns_.size() - refused_open_ >= options_.max_connections) {
        refusal = "--max-connections";
      } else if (options_.max_connections_per_address > 0 &&
                 from_host >= options_.max_connections_per_address) {
        refusal = "--max-connections-per-address";
      }
      if (refusal != nullptr) {
        if (from_host == 0) per_address_.erase(host);
        counters_.refused.fetch_add(1, std::memory_order_relaxed);
        ODAFS_LOG_WARN_THROTTLED("refusing connections from %s: %zu open in all, %zu from it (%s)",
                                 host, conns_.size(), from_host, refusal);
        close(fd);
        continue;
      }
      ++from_host;
      if (admission.refused) {
        ++refused_open_;
        counters_.unadmitted.fetch_add(1, std::memory_order_relaxed);
      }
      uint64_t id = next_conn_id_++;
      Loop& loop = least_loaded_loop();
      loop.connections.fetch_add(1, std::memory_order_relaxed);
      // A refused connection's one record needs no large-record permit: those are for
      // admitted peers' WRITEs.
      conn = std::make_shared<Connection>(id, fd, loop, from.host, from.to_string(), admission,
                                          admission.refused ? kLargeRecord : options_.max_record,
                                          now_ms());
      conns_.emplace(id, conn);
    }
    net::set_nodelay(fd);
    counters_.connections.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_DEBUG("connection from %s", conn->peer.c_str());
    epoll_event ev{};
    ev.events = EPOLLONESHOT;  // registered, disarmed until a reply has to wait
    ev.data.u64 = (conn->id << 1) | kWriteTag;
    epoll_ctl(conn->loop.epoll_fd, EPOLL_CTL_ADD, conn->write_fd, &ev);
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    ev.data.ptr = conn.get();
    epoll_ctl(conn->loop.epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = kListenTag;
  epoll_ctl(loops_[0]->epoll_fd, EPOLL_CTL_MOD, listen_fd_, &ev);
}

void Server::sweep_idle() {
  uint64_t expirations;
  [[maybe_unused]] ssize_t n = read(sweep_fd_, &expirations, sizeof expirations);
  int64_t cutoff = now_ms() - options_.idle_timeout_ms;
  {
    std::lock_guard lock(conns_mu_);
    for (auto& [id, conn] : conns_) {
      if (conn->idle_closed || conn->calls_running.load(std::memory_order_acquire) > 0) continue;
      if (conn->last_active_ms.load(std::memory_order_relaxed) > cutoff) continue;
      // Only the thread holding the read event may close a connection: shut the socket
      // down so that its reader sees EOF and closes it.
      conn->idle_closed = true;
      counters_.idle_closed.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_INFO("closing connection from %s: idle for %lld ms", conn->peer.c_str(),
                     static_cast<long long>(options_.idle_timeout_ms));
      std::lock_guard write_lock(conn->write_mu);  // order: conns_mu_, then write_mu
      if (!conn->write_failed) fail_writes(*conn);
    }
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = kSweepTag;
  epoll_ctl(loops_[0]->epoll_fd, EPOLL_CTL_MOD, sweep_fd_, &ev);
}

void Server::close_connection(Connection* conn) {
  if (conn->closed.exchange(true)) return;
  epoll_ctl(conn->loop.epoll_fd, EPOLL_CTL_DEL, conn->fd, nullptr);
  epoll_ctl(conn->loop.epoll_fd, EPOLL_CTL_DEL, conn->write_fd, nullptr);
  conn->loop.connections.fetch_sub(1, std::memory_order_relaxed);
  shutdown(conn->fd, SHUT_RDWR);
  ODAFS_LOG_DEBUG("connection from %s closed", conn->peer.c_str());
  bool had_permit;
  {
    std::lock_guard lock(conn->write_mu);
    total_backlog_.fetch_sub(conn->unsent(), std::memory_order_relaxed);
    conn->backlog = {};
    conn->backlog_head = 0;
    conn->backlog_bytes.store(0, std::memory_order_relaxed);
    conn->write_failed = true;
    conn->pending = {};
    conn->pending_used = 0;
    had_permit = conn->permit.exchange(false);
  }
  {
    std::lock_guard lock(input_mu_);
    auto it = std::find_if(permit_waiters_.begin(), permit_waiters_.end(),
                           [conn](const auto& c) { return c.get() == conn; });
    if (it != permit_waiters_.end()) permit_waiters_.erase(it);
  }
  if (had_permit) release_permit(*conn);
  std::lock_guard lock(conns_mu_);
  auto host = per_address_.find(conn->host);
  if (host != per_address_.end() && --host->second == 0) per_address_.erase(host);
  if (conn->refused) --refused_open_;
  conns_.erase(conn->id);  // the fd closes when the last in-progress call lets go
  if (options_.on_connection_closed) options_.on_connection_closed(conn->id, conn->tag.load());
}

void Server::on_readable(Connection* raw, Worker& w, uint32_t events) {
  std::shared_ptr<Connection> conn = raw->shared_from_this();
  // The idle sweep leaves a connection alone while one of its events is being handled.
  conn->calls_running.fetch_add(1, std::memory_order_acq_rel);
  struct Running {
    Connection& c;
    ~Running() { c.calls_running.fetch_sub(1, std::memory_order_acq_rel); }
  } running{*conn};
  w.batch_used = 0;
  bool shut;
  {
    std::lock_guard lock(conn->write_mu);
    shut = conn->shut;
    if (!shut && conn->blocked) {
      // Its replies wait in the server: read no more calls until they went out. The
      // bytes wait in the kernel, and the client's sends stall (TCP flow control).
      conn->parked = true;
      return;  // on_writable re-arms once the backlog drained
    }
  }
  bool open = true;
  bool handshake_done = true;
  if (!shut && !continue_handshake(*conn, &handshake_done)) open = false;
  // Without a permit a connection holds at most kSmallInput of input: read only that much.
  size_t limit = kReadsPerEvent * w.staging.size();
  if (!shut && !conn->permit.load(std::memory_order_relaxed)) {
    size_t held = conn->assembler.buffered();
    if (held > kLargeRecord) {
      if (!acquire_permit(conn)) return;      // parked until release_permit hands one over
      if (!conn->permit.load()) shut = true;  // shut down while asking: drain to EOF
    } else {
      limit = kSmallInput - held;
    }
  }
  if (conn->permit.load(std::memory_order_relaxed) &&
      conn->assembler.capacity() < options_.max_record) {
    std::vector<char> large = take_large_buffer();  // the record fits, no regrowth
    conn->assembler.exchange_buffer(large);
  }
  if (open && handshake_done) open = read_calls(*conn, w, limit, shut);
  if (open && !shut && (events & (EPOLLERR | EPOLLHUP)) != 0) {
    // The peer reset the connection before these calls were read: its client was told they
    // failed with it and may have gone on on another (issue #38: a CREATE that sat unread
    // while every thread waited made, once run, a file the client had since found absent
    // and counted removed). The kernel still hands out what arrived before the reset.
    // Calls read in an earlier event are settled by run_records (reset_meanwhile). Not
    // when this server shut the connection itself (its own shutdown reports EPOLLHUP too):
    // that one drains to EOF as before, so closing it never resets replies in flight.
    counters_.dropped_after_reset.fetch_add(w.batch_used, std::memory_order_relaxed);
    open = false;
  }
  settle_input_buffers(*conn, open);
  if (open) {
    epoll_event ev{};
    ev.events = read_events(*conn);
    ev.data.ptr = raw;
    if (epoll_ctl(conn->loop.epoll_fd, EPOLL_CTL_MOD, conn->fd, &ev) != 0) open = false;
  }
  if (!open) {
    close_connection(raw);
    for (size_t i = 0; i < w.batch_used; ++i) recycle(w.batch[i]);
    return;  // calls of a closing connection would have nowhere to reply
  }
  if (w.batch_used == 0) return;
  run_records(*conn, w.batch, w.batch_used, w);
  conn->last_active_ms.store(now_ms(), std::memory_order_relaxed);
}

bool Server::read_calls(Connection& conn, Worker& w, size_t limit, bool shut) {
  const bool tls = conn.tls.load(std::memory_order_acquire) != nullptr;
  size_t got = 0;
  for (int round = 0; round < kReadsPerEvent && got < limit; ++round) {
    // TLS started meanwhile (this read began in the clear): what the socket holds now is
    // TLS, for the next event, which judges the clear bytes taken (continue_handshake).
    if (!tls && conn.tls.load(std::memory_order_acquire) != nullptr) break;
    size_t want = std::min(w.staging.size(), limit - got);
    ssize_t n = read_some(conn, w.staging.data(), want);
    if (n > 0 && shut) continue;  // closing: drain to EOF, run nothing more
    if (n > 0) {
      got += static_cast<size_t>(n);
      counters_.bytes_in.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      auto keep = [&w](std::vector<char>& record) {
        if (w.batch_used == w.batch.size()) w.batch.emplace_back();
        w.batch[w.batch_used++].swap(record);
      };
      Status fed = conn.assembler.feed(w.staging.data(), static_cast<size_t>(n), keep);
      if (!fed.ok()) {
        counters_.oversized.fetch_add(1, std::memory_order_relaxed);
        ODAFS_LOG_WARN_THROTTLED("closing connection from %s: %s", conn.peer.c_str(),
                                 fed.message().c_str());
        return false;
      }
      // A short recv drained the socket. A TLS read returns a record at a time, from what
      // one recv (read ahead) took: nothing left in the session means drained too.
      if (static_cast<size_t>(n) < want && (!tls || !conn.tls.load()->has_pending())) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && tls && !shut) {
      counters_.tls_failures.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED("closing connection from %s: TLS: %s", conn.peer.c_str(),
                               conn.tls.load()->last_error().c_str());
    }
    return false;  // EOF or error
  }
  return true;
}

void Server::settle_input_buffers(Connection& conn, bool open) {
  if (open && conn.permit.load(std::memory_order_relaxed) &&
      conn.assembler.buffered() <= kLargeRecord) {
    release_permit(conn);
  }
  if (!conn.permit.load(std::memory_order_relaxed) && conn.assembler.capacity() > kKeepBuffer) {
    std::vector<char> small;  // a large buffer left over: back to the pool
    small.reserve(kKeepBuffer);
    conn.assembler.exchange_buffer(small);
    recycle(small);
  }
}

void Server::report_counters(const CounterSink& add) {
  const Counters& c = counters_;
  add("connections", c.connections.load());
  add("open_connections", open_connections());
  add("records", c.records.load());
  add("garbage_records", c.garbage_records.load());
  add("garbage_args", c.garbage_args.load());
  add("rejected", c.rejected.load());
  add("oversized", c.oversized.load());
  add("slow_readers", c.slow_readers.load());
  add("refused", c.refused.load());
  add("unadmitted", c.unadmitted.load());
  add("idle_closed", c.idle_closed.load());
  add("dropped_after_reset", c.dropped_after_reset.load());
  add("shed", c.shed.load());
  add("paused", c.paused.load());
  add("input_waits", c.input_waits.load());
  add("bytes_in", c.bytes_in.load());
  add("bytes_out", c.bytes_out.load());
  add("loops", static_cast<uint64_t>(loops()));
  add("handovers", c.handovers.load());
  add("no_spare", c.no_spare.load());
  add("spare_threads", c.spare_threads.load());
  add("reply_batches", c.batches.load());
  add("tls_sessions", c.tls_sessions.load());
  add("tls_failures", c.tls_failures.load());
}

void Server::report_calls(const CounterSink& add) const {
  for (uint32_t p = 0; p < procedure_count(); ++p) {
    if (const char* name = procedure_name(p)) add(name, calls(p));
  }
}

}  // namespace odafs::rpc
