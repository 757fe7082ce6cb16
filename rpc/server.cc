#include "rpc/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
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
#include "rpc/xdr_util.h"

namespace odafs::rpc {

struct Server::Connection : std::enable_shared_from_this<Connection> {
  Connection(uint64_t id, int fd, std::string host, std::string peer, size_t max_record,
             int64_t now_ms)
      : id(id),
        fd(fd),
        write_fd(dup(fd)),
        host(std::move(host)),
        peer(std::move(peer)),
        assembler(max_record),
        last_active_ms(now_ms) {}
  ~Connection() {
    close(fd);
    if (write_fd >= 0) close(write_fd);
  }

  const uint64_t id;
  const int fd;
  // A second descriptor of the same socket, registered in the epoll set for EPOLLOUT only
  // while replies are queued. Separate registrations keep the one-shot read arming (one
  // reader at a time) independent of write readiness.
  const int write_fd;
  const std::string host;  // the peer's address: the per-address limit counts by it
  const std::string peer;
  RecordAssembler assembler;  // touched only by the thread holding the read event
  // Holds a large-record permit. Changed by the read-event holder, or under write_mu by
  // the permit's hand-over while the connection waits for one.
  std::atomic<bool> permit{false};
  std::atomic<bool> closed{false};
  // When the connection last completed a record or a reply, and how many of its calls run
  // now: a connection is idle when nothing runs and nothing completed for idle_timeout.
  std::atomic<int64_t> last_active_ms;
  std::atomic<int> calls_running{0};
  bool idle_closed = false;  // guarded by Server::conns_mu_; the sweep shut it down

  std::mutex write_mu;  // replies from several threads go out whole and in order
  // Reply bytes the socket did not take yet (a client slow to read). Guarded by write_mu.
  std::vector<char> backlog;
  size_t backlog_head = 0;
  bool write_failed = false;  // guarded by write_mu; the socket is shut down, drop replies
  // Unsent reply bytes (backlog.size() - backlog_head) and when they last moved, readable
  // without write_mu by the shedding scan.
  std::atomic<size_t> backlog_bytes{0};
  std::atomic<int64_t> backlog_moved_ms{0};

  // Flow control, guarded by write_mu. `parked`: no thread holds or waits for the read
  // event (it is not armed); whoever clears the last reason re-arms it.
  bool blocked = false;         // replies wait: run no calls; cut ones wait in `pending`
  bool waiting_permit = false;  // a large record waits for a permit
  bool parked = false;
  bool shut = false;  // shut down (idle, failed): read to EOF and close, whatever else
  std::vector<std::vector<char>> pending;  // records cut but not run while blocked
  size_t pending_used = 0;

  size_t unsent() const { return backlog.size() - backlog_head; }
};

// Per pool thread: reusable buffers, so serving a call allocates nothing in steady state.
struct Server::Worker {
  std::vector<char> staging = std::vector<char>(64 * 1024);
  std::vector<std::vector<char>> batch;  // records cut in this round; slots reused
  size_t batch_used = 0;
  std::vector<std::vector<char>> resumed;  // a blocked connection's records, run on drain
  std::vector<char> reply;                 // 4-byte record mark + reply body
  CallerCred cred;
};

namespace {

constexpr uint32_t kListenTag = 1;
constexpr uint32_t kWakeTag = 2;
constexpr uint32_t kSweepTag = 4;
// Read events carry the Connection* itself, write events (id << 1) | kWriteTag; the tags
// above are neither valid pointers nor odd.
constexpr uint64_t kWriteTag = 1;

// Keep reading one connection for at most this many recv calls per event, so one busy
// client cannot hold a pool thread forever.
constexpr int kReadsPerEvent = 16;
// What a connection may hold of input without a permit: the record it is receiving plus
// records cut and waiting. Past kLargeRecord of one record it needs a permit.
constexpr size_t kSmallInput = 64 * 1024;
constexpr size_t kLargeRecord = kSmallInput / 2;
// Buffers above this are given back once used, so idle connections and threads stay small.
constexpr size_t kKeepBuffer = kSmallInput;
constexpr size_t kKeepBacklog = 1u << 20;

}  // namespace

XDR* Reply::results() {
  rpc_msg msg{};
  msg.rm_xid = xid_;
  msg.rm_direction = REPLY;
  msg.rm_reply.rp_stat = MSG_ACCEPTED;
  msg.acpted_rply.ar_verf = _null_auth;
  msg.acpted_rply.ar_stat = SUCCESS;
  msg.acpted_rply.ar_results.where = nullptr;
  msg.acpted_rply.ar_results.proc = to_xdrproc(xdr_nothing);
  xdr_setpos(out_, 0);
  xdr_replymsg(out_, &msg);
  started_ = true;
  return out_;
}

bool Reply::send(xdrproc_t xres, const void* res) {
  if (!xres(results(), const_cast<void*>(res), 0)) failed_ = true;
  return !failed_;
}

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
  listen_fd_ = net::listen_tcp(options_.listen, &bound_);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  sweep_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0 || sweep_fd_ < 0) {
    throw std::system_error(errno, std::generic_category(), "epoll/eventfd/timerfd");
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = kListenTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.events = EPOLLIN;  // level-triggered: wakes every thread at stop
  ev.data.u64 = kWakeTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
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
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, sweep_fd_, &ev);
  }
}

Server::~Server() {
  stop();
  close(listen_fd_);
  close(epoll_fd_);
  close(wake_fd_);
  close(sweep_fd_);
}

void Server::add_procedure(uint32_t proc, const char* name, ProcedureFn fn) {
  if (procs_.size() <= proc) procs_.resize(proc + 1);
  procs_[proc].name = name;
  procs_[proc].fn = std::move(fn);
  procs_[proc].calls = std::make_unique<std::atomic<uint64_t>>(0);
}

uint64_t Server::calls(uint32_t proc) const {
  if (proc >= procs_.size() || !procs_[proc].calls) return 0;
  return procs_[proc].calls->load(std::memory_order_relaxed);
}

const char* Server::procedure_name(uint32_t proc) const {
  return proc < procs_.size() ? procs_[proc].name : nullptr;
}

void Server::start() {
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { worker_loop(); });
}

void Server::stop() {
  if (stopping_.exchange(true)) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
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

void Server::worker_loop() {
  if (options_.on_thread_start) options_.on_thread_start();
  Worker w;
  w.reply.resize(options_.max_reply + 4);
  // One event at a time: a handler may block (a direct write waits up to seconds for its
  // client's data), and events taken with it would wait behind it, their connections
  // disarmed for every other thread.
  epoll_event events[1];
  while (!stopping_.load(std::memory_order_acquire)) {
    int n = epoll_wait(epoll_fd_, events, 1, -1);
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
        continue;
      }
      if (tag == kSweepTag) {
        sweep_idle();
        continue;
      }
      if (tag & kWriteTag) {
        on_writable(tag >> 1, w);
        continue;
      }
      on_readable(reinterpret_cast<Connection*>(events[i].data.ptr), w);
    }
  }
  if (options_.on_thread_exit) options_.on_thread_exit();
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
    std::shared_ptr<Connection> conn;
    {
      std::lock_guard lock(conns_mu_);
      const char* refusal = nullptr;
      size_t& from_host = per_address_[host];
      if (conns_.size() >= options_.max_connections) {
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
      uint64_t id = next_conn_id_++;
      conn = std::make_shared<Connection>(id, fd, from.host, from.to_string(), options_.max_record,
                                          now_ms());
      conns_.emplace(id, conn);
    }
    net::set_nodelay(fd);
    counters_.connections.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_DEBUG("connection from %s", conn->peer.c_str());
    epoll_event ev{};
    ev.events = EPOLLONESHOT;  // registered, disarmed until a reply has to wait
    ev.data.u64 = (conn->id << 1) | kWriteTag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, conn->write_fd, &ev);
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    ev.data.ptr = conn.get();
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = kListenTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
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
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, sweep_fd_, &ev);
}

void Server::close_connection(Connection* conn) {
  if (conn->closed.exchange(true)) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->fd, nullptr);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->write_fd, nullptr);
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
  conns_.erase(conn->id);  // the fd closes when the last in-progress call lets go
}

bool Server::acquire_permit(const std::shared_ptr<Connection>& conn) {
  {
    std::lock_guard lock(input_mu_);
    if (free_permits_ > 0) {
      --free_permits_;
      conn->permit.store(true);
      return true;
    }
    permit_waiters_.push_back(conn);
  }
  counters_.input_waits.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(conn->write_mu);
  if (conn->permit.load()) return true;  // handed over meanwhile
  if (conn->shut) return true;           // shut down meanwhile: read on to EOF
  conn->waiting_permit = true;
  conn->parked = true;
  conn->last_active_ms.store(now_ms(), std::memory_order_relaxed);  // waiting is not idling
  return false;
}

void Server::release_permit(Connection& conn) {
  conn.permit.store(false);
  for (;;) {
    std::shared_ptr<Connection> next;
    {
      std::lock_guard lock(input_mu_);
      if (permit_waiters_.empty()) {
        ++free_permits_;
        return;
      }
      next = std::move(permit_waiters_.front());
      permit_waiters_.erase(permit_waiters_.begin());
    }
    std::lock_guard lock(next->write_mu);
    if (next->closed.load()) continue;  // its close found no permit: pass it on
    next->permit.store(true);
    next->waiting_permit = false;
    if (next->parked && !next->blocked) {
      next->parked = false;
      arm_readable(*next);
    }
    return;
  }
}

std::vector<char> Server::take_large_buffer() {
  {
    std::lock_guard lock(input_mu_);
    if (!large_buffers_.empty()) {
      std::vector<char> buf = std::move(large_buffers_.back());
      large_buffers_.pop_back();
      return buf;
    }
  }
  std::vector<char> buf;
  buf.reserve(options_.max_record);
  return buf;
}

void Server::recycle(std::vector<char>& record) {
  if (record.capacity() <= kKeepBuffer) {
    record.clear();
    return;
  }
  std::vector<char> large;
  large.swap(record);
  if (large.capacity() < options_.max_record) return;  // freed
  large.clear();
  std::lock_guard lock(input_mu_);
  if (large_buffers_.size() < permits_) large_buffers_.push_back(std::move(large));
}

void Server::fail_writes(Connection& conn) {
  conn.write_failed = true;
  total_backlog_.fetch_sub(conn.unsent(), std::memory_order_relaxed);
  conn.backlog = {};
  conn.backlog_head = 0;
  conn.backlog_bytes.store(0, std::memory_order_relaxed);
  conn.shut = true;
  shutdown(conn.fd, SHUT_RDWR);
  if (conn.parked) {  // nobody holds its read event: arm it, so a reader sees EOF and closes
    conn.parked = false;
    arm_readable(conn);
  }
}

void Server::shed_backlog() {
  for (int round = 0; round < 1024; ++round) {
    if (total_backlog_.load(std::memory_order_relaxed) <= total_backlog_budget_) return;
    std::shared_ptr<Connection> victim;
    {
      std::lock_guard lock(conns_mu_);
      int64_t oldest = INT64_MAX;
      for (auto& [id, c] : conns_) {
        if (c->backlog_bytes.load(std::memory_order_relaxed) == 0) continue;
        int64_t moved = c->backlog_moved_ms.load(std::memory_order_relaxed);
        if (moved < oldest) {
          oldest = moved;
          victim = c;
        }
      }
    }
    if (!victim) return;
    std::lock_guard lock(victim->write_mu);
    if (victim->write_failed || victim->unsent() == 0) continue;
    counters_.slow_readers.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED(
        "closing connection from %s: %zu bytes of replies unread, %zu queued for all clients",
        victim->peer.c_str(), victim->unsent(), total_backlog_.load(std::memory_order_relaxed));
    fail_writes(*victim);
  }
}

void Server::on_readable(Connection* raw, Worker& w) {
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
  bool open = true;
  std::string error;
  size_t got = 0;
  for (int round = 0; round < kReadsPerEvent && got < limit; ++round) {
    size_t want = std::min(w.staging.size(), limit - got);
    ssize_t n = recv(conn->fd, w.staging.data(), want, 0);
    if (n > 0 && shut) continue;  // closing: drain to EOF, run nothing more
    if (n > 0) {
      got += static_cast<size_t>(n);
      counters_.bytes_in.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      bool ok = conn->assembler.feed(
          w.staging.data(), static_cast<size_t>(n),
          [&w](std::vector<char>& record) {
            if (w.batch_used == w.batch.size()) w.batch.emplace_back();
            w.batch[w.batch_used++].swap(record);
          },
          &error);
      if (!ok) {
        counters_.oversized.fetch_add(1, std::memory_order_relaxed);
        ODAFS_LOG_WARN_THROTTLED("closing connection from %s: %s", conn->peer.c_str(),
                                 error.c_str());
        open = false;
        break;
      }
      if (static_cast<size_t>(n) < want) break;  // drained for now
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    open = false;  // EOF or error
    break;
  }
  // Settled before the re-arm: from then on another thread may read the connection.
  if (open && conn->permit.load(std::memory_order_relaxed) &&
      conn->assembler.buffered() <= kLargeRecord) {
    release_permit(*conn);
  }
  if (!conn->permit.load(std::memory_order_relaxed) && conn->assembler.capacity() > kKeepBuffer) {
    std::vector<char> small;  // a large buffer left over: back to the pool
    small.reserve(kKeepBuffer);
    conn->assembler.exchange_buffer(small);
    recycle(small);
  }
  if (open) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    ev.data.ptr = raw;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn->fd, &ev) != 0) open = false;
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

void Server::run_records(Connection& conn, std::vector<std::vector<char>>& records, size_t count,
                         Worker& w) {
  for (size_t i = 0; i < count; ++i) {
    if (conn.backlog_bytes.load(std::memory_order_relaxed) > 0) {
      std::lock_guard lock(conn.write_mu);
      if (conn.write_failed) {  // closing: nowhere to reply
        for (size_t j = i; j < count; ++j) recycle(records[j]);
        return;
      }
      if (conn.unsent() > 0) {
        // Replies back up: the rest wait, cut, until on_writable has sent the backlog.
        if (!conn.blocked) counters_.paused.fetch_add(1, std::memory_order_relaxed);
        conn.blocked = true;
        for (size_t j = i; j < count; ++j) {
          if (conn.pending_used == conn.pending.size()) conn.pending.emplace_back();
          conn.pending[conn.pending_used++].swap(records[j]);
          recycle(records[j]);
        }
        return;
      }
    }
    counters_.records.fetch_add(1, std::memory_order_relaxed);
    dispatch(conn, records[i], w);
    recycle(records[i]);
  }
}

void Server::send_reply(Connection& conn, Worker& w, size_t body_len) {
  put_record_mark(w.reply.data(), static_cast<uint32_t>(body_len), true);
  const char* data = w.reply.data();
  size_t len = body_len + 4;
  counters_.bytes_out.fetch_add(len, std::memory_order_relaxed);
  std::unique_lock lock(conn.write_mu);
  if (conn.closed.load(std::memory_order_relaxed) || conn.write_failed) return;
  size_t sent = 0;
  if (conn.unsent() == 0) {  // nothing queued: try the socket now
    while (sent < len) {
      ssize_t n = send(conn.fd, data + sent, len - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        ODAFS_LOG_DEBUG("reply to %s failed: %s", conn.peer.c_str(), strerror(errno));
        fail_writes(conn);
        return;
      }
    }
    if (sent == len) return;
  }
  // The client is not keeping up: queue the rest, bounded, and let EPOLLOUT drain it.
  // Pool threads never block on a slow reader.
  bool was_empty = conn.unsent() == 0;
  if (conn.unsent() + (len - sent) > options_.max_backlog) {
    counters_.slow_readers.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("closing connection from %s: %zu bytes of replies unread",
                             conn.peer.c_str(), conn.unsent() + (len - sent));
    fail_writes(conn);
    return;
  }
  conn.backlog.insert(conn.backlog.end(), data + sent, data + len);
  conn.backlog_bytes.store(conn.unsent(), std::memory_order_relaxed);
  if (was_empty) conn.backlog_moved_ms.store(now_ms(), std::memory_order_relaxed);
  size_t total = total_backlog_.fetch_add(len - sent, std::memory_order_relaxed) + (len - sent);
  if (was_empty) arm_writable(conn);
  lock.unlock();
  if (total > total_backlog_budget_) shed_backlog();
}

void Server::arm_readable(Connection& conn) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.ptr = &conn;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn.fd, &ev);
}

void Server::arm_writable(Connection& conn) {
  epoll_event ev{};
  ev.events = EPOLLOUT | EPOLLONESHOT;
  ev.data.u64 = (conn.id << 1) | kWriteTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn.write_fd, &ev);
}

void Server::on_writable(uint64_t conn_id, Worker& w) {
  std::shared_ptr<Connection> conn;
  {
    std::lock_guard lock(conns_mu_);
    auto it = conns_.find(conn_id);
    if (it == conns_.end()) return;  // closed while the event was on its way
    conn = it->second;
  }
  std::unique_lock lock(conn->write_mu);
  if (conn->closed.load(std::memory_order_relaxed) || conn->write_failed) return;
  size_t moved = 0;
  bool again = false;
  while (conn->unsent() > 0) {
    ssize_t n = send(conn->fd, conn->backlog.data() + conn->backlog_head, conn->unsent(),
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      conn->backlog_head += static_cast<size_t>(n);
      moved += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      again = true;
      break;
    } else {
      fail_writes(*conn);
      return;
    }
  }
  if (moved > 0) {
    total_backlog_.fetch_sub(moved, std::memory_order_relaxed);
    conn->backlog_bytes.store(conn->unsent(), std::memory_order_relaxed);
    int64_t now = now_ms();
    conn->backlog_moved_ms.store(now, std::memory_order_relaxed);
    conn->last_active_ms.store(now, std::memory_order_relaxed);  // a slow reader, not idle
  }
  if (again) {
    // Drop what went out once it is most of the buffer, so the buffer does not keep it.
    if (conn->backlog_head >= conn->unsent()) {
      conn->backlog.erase(conn->backlog.begin(),
                          conn->backlog.begin() + static_cast<ptrdiff_t>(conn->backlog_head));
      conn->backlog_head = 0;
    }
    arm_writable(*conn);
    return;
  }
  if (conn->backlog.capacity() > kKeepBacklog) {
    conn->backlog = {};
  } else {
    conn->backlog.clear();
  }
  conn->backlog_head = 0;
  if (!conn->blocked) return;
  // Drained: run the calls that waited, then let the connection be read again.
  conn->blocked = false;
  size_t count = conn->pending_used;
  w.resumed.swap(conn->pending);
  conn->pending_used = 0;
  lock.unlock();
  conn->calls_running.fetch_add(1, std::memory_order_acq_rel);
  run_records(*conn, w.resumed, count, w);
  conn->last_active_ms.store(now_ms(), std::memory_order_relaxed);
  conn->calls_running.fetch_sub(1, std::memory_order_acq_rel);
  lock.lock();
  if (!conn->blocked && conn->parked && !conn->waiting_permit && !conn->write_failed) {
    conn->parked = false;
    arm_readable(*conn);
  }
}

void Server::dispatch(Connection& conn, std::vector<char>& record, Worker& w) {
  CallHeader call;
  size_t args_offset = 0;
  CallHeaderStatus header = decode_call_header(record.data(), record.size(), &call, &args_offset);
  if (header == CallHeaderStatus::kGarbage) {
    counters_.garbage_records.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("dropping a %zu-byte rpc record from %s: not a call", record.size(),
                             conn.peer.c_str());
    return;
  }

  XDR out;
  xdrmem_create(&out, w.reply.data() + 4, static_cast<u_int>(w.reply.size() - 4), XDR_ENCODE);
  rpc_msg reply{};
  reply.rm_xid = call.xid;
  reply.rm_direction = REPLY;
  auto reject = [&](auto fill) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    fill();
    xdr_setpos(&out, 0);
    xdr_replymsg(&out, &reply);
    send_reply(conn, w, xdr_getpos(&out));
  };
  auto accept_error = [&](accept_stat stat) {
    return [&reply, stat] {
      reply.rm_reply.rp_stat = MSG_ACCEPTED;
      reply.acpted_rply.ar_verf = _null_auth;
      reply.acpted_rply.ar_stat = stat;
      reply.acpted_rply.ar_results.where = nullptr;
      reply.acpted_rply.ar_results.proc = to_xdrproc(xdr_nothing);
    };
  };
  auto auth_error = [&](auth_stat why) {
    return [&reply, why] {
      reply.rm_reply.rp_stat = MSG_DENIED;
      reply.rjcted_rply.rj_stat = AUTH_ERROR;
      reply.rjcted_rply.rj_why = why;
    };
  };

  switch (header) {
    case CallHeaderStatus::kOk:
      break;
    case CallHeaderStatus::kGarbage:
    case CallHeaderStatus::kTruncated:
      counters_.garbage_records.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: header truncated (%zu-byte record)",
                               conn.peer.c_str(), record.size());
      reject(accept_error(GARBAGE_ARGS));
      return;
    case CallHeaderStatus::kRpcMismatch:
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: RPC version %u, not 2", conn.peer.c_str(),
                               call.rpcvers);
      reject([&] {
        reply.rm_reply.rp_stat = MSG_DENIED;
        reply.rjcted_rply.rj_stat = RPC_MISMATCH;
        reply.rjcted_rply.rj_vers.low = RPC_MSG_VERSION;
        reply.rjcted_rply.rj_vers.high = RPC_MSG_VERSION;
      });
      return;
    case CallHeaderStatus::kBadCredential:
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: %u-byte credential (limit %u)", conn.peer.c_str(),
                               call.cred_length, kMaxAuthBytes);
      reject(auth_error(AUTH_BADCRED));
      return;
    case CallHeaderStatus::kBadVerifier:
      ODAFS_LOG_WARN_THROTTLED("rpc call from %s: %u-byte verifier (limit %u)", conn.peer.c_str(),
                               call.verf_length, kMaxAuthBytes);
      reject(auth_error(AUTH_BADVERF));
      return;
  }

  CallerCred& cred = w.cred;
  bool cred_ok = decode_credential(call, &cred);
  if (!cred_ok) {
    reject(auth_error(AUTH_BADCRED));
    return;
  }
  if (call.prog != options_.program) {
    reject(accept_error(PROG_UNAVAIL));
    return;
  }
  if (call.vers != options_.version) {
    reject([&] {
      reply.rm_reply.rp_stat = MSG_ACCEPTED;
      reply.acpted_rply.ar_verf = _null_auth;
      reply.acpted_rply.ar_stat = PROG_MISMATCH;
      reply.acpted_rply.ar_vers.low = options_.version;
      reply.acpted_rply.ar_vers.high = options_.version;
    });
    return;
  }
  uint32_t proc = call.proc;
  if (proc >= procs_.size() || !procs_[proc].fn) {
    reject(accept_error(PROC_UNAVAIL));
    return;
  }
  procs_[proc].calls->fetch_add(1, std::memory_order_relaxed);

  CallContext ctx;
  ctx.xid = call.xid;
  ctx.proc = proc;
  ctx.cred = &cred;
  ctx.peer = &conn.peer;
  XDR in;
  xdrmem_create(&in, record.data() + args_offset, static_cast<u_int>(record.size() - args_offset),
                XDR_DECODE);
  Reply r(&out, call.xid);
  bool decoded = false;
  try {
    decoded = procs_[proc].fn(ctx, &in, r);
  } catch (const std::exception& e) {
    ODAFS_LOG_ERROR("%s from %s failed: %s", procs_[proc].name, conn.peer.c_str(), e.what());
    reject(accept_error(SYSTEM_ERR));
    return;
  }
  if (!decoded) {
    counters_.garbage_args.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("%s from %s: undecodable arguments", procs_[proc].name,
                             conn.peer.c_str());
    reject(accept_error(GARBAGE_ARGS));
    return;
  }
  if (r.failed()) {
    ODAFS_LOG_ERROR("%s from %s: results do not fit the %zu-byte reply buffer", procs_[proc].name,
                    conn.peer.c_str(), options_.max_reply);
    reject(accept_error(SYSTEM_ERR));
    return;
  }
  if (!r.started()) {
    ODAFS_LOG_ERROR("%s from %s: handler produced no reply", procs_[proc].name, conn.peer.c_str());
    reject(accept_error(SYSTEM_ERR));
    return;
  }
  send_reply(conn, w, xdr_getpos(&out));
}

}  // namespace odafs::rpc
