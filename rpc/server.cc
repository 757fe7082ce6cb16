#include "rpc/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "rpc/log.h"
#include "rpc/record.h"
#include "rpc/xdr_util.h"

namespace odafs::rpc {

struct Server::Connection : std::enable_shared_from_this<Connection> {
  Connection(uint64_t id, int fd, std::string peer, size_t max_record)
      : id(id), fd(fd), write_fd(dup(fd)), peer(std::move(peer)), assembler(max_record) {}
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
  const std::string peer;
  RecordAssembler assembler;  // touched only by the thread holding the read event
  std::atomic<bool> closed{false};

  std::mutex write_mu;  // replies from several threads go out whole and in order
  // Reply bytes the socket did not take yet (a client slow to read). Guarded by write_mu.
  std::vector<char> backlog;
  size_t backlog_head = 0;
  bool write_failed = false;  // guarded by write_mu; the socket is shut down, drop replies

  // REQUIRES: write_mu held. Gives up on the socket; the reader then sees EOF and closes.
  void fail_writes() {
    write_failed = true;
    backlog = {};
    backlog_head = 0;
    shutdown(fd, SHUT_RDWR);
  }
};

// Per pool thread: reusable buffers, so serving a call allocates nothing in steady state.
struct Server::Worker {
  std::vector<char> staging = std::vector<char>(64 * 1024);
  std::vector<std::vector<char>> batch;  // records cut in this round; slots reused
  size_t batch_used = 0;
  std::vector<char> reply;  // 4-byte record mark + reply body
  CallerCred cred;
};

namespace {

constexpr uint32_t kListenTag = 1;
constexpr uint32_t kWakeTag = 2;
// Read events carry the Connection* itself, write events (id << 1) | kWriteTag; the tags
// above are neither valid pointers nor odd.
constexpr uint64_t kWriteTag = 1;

// Keep reading one connection for at most this many recv calls per event, so one busy
// client cannot hold a pool thread forever.
constexpr int kReadsPerEvent = 16;

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

Server::Server(Options options) : options_(std::move(options)) {
  listen_fd_ = net::listen_tcp(options_.listen, &bound_);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    throw std::system_error(errno, std::generic_category(), "epoll/eventfd");
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = kListenTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.events = EPOLLIN;  // level-triggered: wakes every thread at stop
  ev.data.u64 = kWakeTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
}

Server::~Server() {
  stop();
  close(listen_fd_);
  close(epoll_fd_);
  close(wake_fd_);
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
  epoll_event events[8];
  while (!stopping_.load(std::memory_order_acquire)) {
    int n = epoll_wait(epoll_fd_, events, 8, -1);
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
      if (tag & kWriteTag) {
        on_writable(tag >> 1);
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
    socklen_t len = sizeof addr;
    int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        ODAFS_LOG_WARN("accept: %s", strerror(errno));
      }
      break;
    }
    {
      std::lock_guard lock(conns_mu_);
      if (conns_.size() >= options_.max_connections) {
        counters_.refused.fetch_add(1, std::memory_order_relaxed);
        ODAFS_LOG_WARN("refusing a connection: %zu open (--max-connections)", conns_.size());
        close(fd);
        continue;
      }
    }
    net::set_nodelay(fd);
    char host[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;
    if (addr.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&addr);
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs(a->sin6_port);
    }
    std::shared_ptr<Connection> conn;
    {
      std::lock_guard lock(conns_mu_);
      uint64_t id = next_conn_id_++;
      conn = std::make_shared<Connection>(id, fd, net::Endpoint{host, port}.to_string(),
                                          options_.max_record);
      conns_.emplace(id, conn);
    }
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

void Server::close_connection(Connection* conn) {
  if (conn->closed.exchange(true)) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->fd, nullptr);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->write_fd, nullptr);
  shutdown(conn->fd, SHUT_RDWR);
  ODAFS_LOG_DEBUG("connection from %s closed", conn->peer.c_str());
  std::lock_guard lock(conns_mu_);
  conns_.erase(conn->id);  // the fd closes when the last in-progress call lets go
}

void Server::on_readable(Connection* raw, Worker& w) {
  std::shared_ptr<Connection> conn = raw->shared_from_this();
  w.batch_used = 0;
  bool open = true;
  std::string error;
  for (int round = 0; round < kReadsPerEvent; ++round) {
    ssize_t n = recv(conn->fd, w.staging.data(), w.staging.size(), 0);
    if (n > 0) {
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
        ODAFS_LOG_WARN("closing connection from %s: %s", conn->peer.c_str(), error.c_str());
        open = false;
        break;
      }
      if (static_cast<size_t>(n) < w.staging.size()) break;  // drained for now
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    open = false;  // EOF or error
    break;
  }
  if (open) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    ev.data.ptr = raw;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn->fd, &ev) != 0) open = false;
  }
  if (!open) {
    close_connection(raw);
    return;  // calls of a closing connection would have nowhere to reply
  }
  for (size_t i = 0; i < w.batch_used; ++i) {
    counters_.records.fetch_add(1, std::memory_order_relaxed);
    dispatch(*conn, w.batch[i], w);
    w.batch[i].clear();
  }
}

void Server::send_reply(Connection& conn, Worker& w, size_t body_len) {
  put_record_mark(w.reply.data(), static_cast<uint32_t>(body_len), true);
  const char* data = w.reply.data();
  size_t len = body_len + 4;
  counters_.bytes_out.fetch_add(len, std::memory_order_relaxed);
  std::lock_guard lock(conn.write_mu);
  if (conn.closed.load(std::memory_order_relaxed) || conn.write_failed) return;
  size_t sent = 0;
  if (conn.backlog.size() == conn.backlog_head) {  // nothing queued: try the socket now
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
        conn.fail_writes();
        return;
      }
    }
    if (sent == len) return;
  }
  // The client is not keeping up: queue the rest, bounded, and let EPOLLOUT drain it.
  // Pool threads never block on a slow reader.
  bool was_empty = conn.backlog.size() == conn.backlog_head;
  if (conn.backlog.size() - conn.backlog_head + (len - sent) > options_.max_backlog) {
    counters_.slow_readers.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN("closing connection from %s: %zu bytes of replies unread", conn.peer.c_str(),
                   conn.backlog.size() - conn.backlog_head + (len - sent));
    conn.fail_writes();
    return;
  }
  conn.backlog.insert(conn.backlog.end(), data + sent, data + len);
  if (was_empty) arm_writable(conn);
}

void Server::arm_writable(Connection& conn) {
  epoll_event ev{};
  ev.events = EPOLLOUT | EPOLLONESHOT;
  ev.data.u64 = (conn.id << 1) | kWriteTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn.write_fd, &ev);
}

void Server::on_writable(uint64_t conn_id) {
  std::shared_ptr<Connection> conn;
  {
    std::lock_guard lock(conns_mu_);
    auto it = conns_.find(conn_id);
    if (it == conns_.end()) return;  // closed while the event was on its way
    conn = it->second;
  }
  std::lock_guard lock(conn->write_mu);
  if (conn->closed.load(std::memory_order_relaxed) || conn->write_failed) return;
  while (conn->backlog_head < conn->backlog.size()) {
    ssize_t n = send(conn->fd, conn->backlog.data() + conn->backlog_head,
                     conn->backlog.size() - conn->backlog_head, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      conn->backlog_head += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      arm_writable(*conn);
      return;
    } else {
      conn->fail_writes();
      return;
    }
  }
  conn->backlog.clear();
  conn->backlog_head = 0;
}

void Server::dispatch(Connection& conn, std::vector<char>& record, Worker& w) {
  XDR in;
  xdrmem_create(&in, record.data(), static_cast<u_int>(record.size()), XDR_DECODE);
  char cred_area[2 * MAX_AUTH_BYTES];
  rpc_msg call{};
  call.rm_call.cb_cred.oa_base = cred_area;
  call.rm_call.cb_verf.oa_base = cred_area + MAX_AUTH_BYTES;
  if (!xdr_callmsg(&in, &call) || call.rm_direction != CALL) {
    counters_.garbage_records.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN("dropping undecodable rpc record (%zu bytes) from %s", record.size(),
                   conn.peer.c_str());
    return;
  }

  XDR out;
  xdrmem_create(&out, w.reply.data() + 4, static_cast<u_int>(w.reply.size() - 4), XDR_ENCODE);
  rpc_msg reply{};
  reply.rm_xid = call.rm_xid;
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

  if (call.rm_call.cb_rpcvers != RPC_MSG_VERSION) {
    reject([&] {
      reply.rm_reply.rp_stat = MSG_DENIED;
      reply.rjcted_rply.rj_stat = RPC_MISMATCH;
      reply.rjcted_rply.rj_vers.low = RPC_MSG_VERSION;
      reply.rjcted_rply.rj_vers.high = RPC_MSG_VERSION;
    });
    return;
  }

  CallerCred& cred = w.cred;
  cred = CallerCred{};
  const opaque_auth& oa = call.rm_call.cb_cred;
  bool cred_ok = oa.oa_flavor == AUTH_NONE;
  if (oa.oa_flavor == AUTH_SYS) {
    char machine[256];
    gid_t gids[16];
    authunix_parms parms{};
    parms.aup_machname = machine;
    parms.aup_gids = gids;
    XDR cx;
    xdrmem_create(&cx, oa.oa_base, oa.oa_length, XDR_DECODE);
    if (xdr_authunix_parms(&cx, &parms)) {
      cred_ok = true;
      cred.auth_sys = true;
      cred.uid = parms.aup_uid;
      cred.gid = parms.aup_gid;
      cred.ngids = std::min<u_int>(parms.aup_len, 16);
      for (uint32_t i = 0; i < cred.ngids; ++i) cred.gids[i] = gids[i];
    }
  }
  if (!cred_ok) {
    reject([&] {
      reply.rm_reply.rp_stat = MSG_DENIED;
      reply.rjcted_rply.rj_stat = AUTH_ERROR;
      reply.rjcted_rply.rj_why = AUTH_BADCRED;
    });
    return;
  }
  if (call.rm_call.cb_prog != options_.program) {
    reject(accept_error(PROG_UNAVAIL));
    return;
  }
  if (call.rm_call.cb_vers != options_.version) {
    reject([&] {
      reply.rm_reply.rp_stat = MSG_ACCEPTED;
      reply.acpted_rply.ar_verf = _null_auth;
      reply.acpted_rply.ar_stat = PROG_MISMATCH;
      reply.acpted_rply.ar_vers.low = options_.version;
      reply.acpted_rply.ar_vers.high = options_.version;
    });
    return;
  }
  uint32_t proc = call.rm_call.cb_proc;
  if (proc >= procs_.size() || !procs_[proc].fn) {
    reject(accept_error(PROC_UNAVAIL));
    return;
  }
  procs_[proc].calls->fetch_add(1, std::memory_order_relaxed);

  CallContext ctx;
  ctx.xid = call.rm_xid;
  ctx.proc = proc;
  ctx.cred = &cred;
  ctx.peer = &conn.peer;
  Reply r(&out, call.rm_xid);
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
    ODAFS_LOG_WARN("%s from %s: undecodable arguments", procs_[proc].name, conn.peer.c_str());
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
