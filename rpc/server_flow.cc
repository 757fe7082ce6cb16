#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/futex.h"
#include "base/log.h"
#include "rpc/record.h"
#include "rpc/server_internal.h"

namespace odafs::rpc {

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

// Whether conn's peer reset (or closed) it since the batch that started at batch_start_ms
// was read. Asked only once a batch has run for a while: the calls of a batch that runs at
// once are as good as run before any reset, and asking costs a poll(2) per call.
bool Server::reset_meanwhile(const Connection& conn, int64_t batch_start_ms) {
  constexpr int64_t kAskAfterMs = 1;
  if (now_ms() - batch_start_ms < kAskAfterMs) return false;
  pollfd p{conn.fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) != 0;
}

void Server::run_records(Connection& conn, std::vector<std::vector<char>>& records, size_t count,
                         Worker& w) {
  w.out_conn = &conn;
  const int64_t batch_start_ms = count > 1 ? now_ms() : 0;
  for (size_t i = 0; i < count; ++i) {
    if (conn.backlog_bytes.load(std::memory_order_relaxed) > 0) {
      std::lock_guard lock(conn.write_mu);
      if (conn.write_failed) {  // closing: nowhere to reply
        for (size_t j = i; j < count; ++j) recycle(records[j]);
        break;
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
        break;
      }
    }
    if (conn.tls.load(std::memory_order_acquire) != nullptr &&
        !conn.tls_ready.load(std::memory_order_acquire)) {
      // A call read in the clear after the AUTH_TLS probe (in its batch or by another
      // reader): the client did not wait for the STARTTLS reply, as RFC 9289 has it do, or
      // someone on the path added it. Nothing of it runs; the connection closes.
      ODAFS_LOG_WARN_THROTTLED("closing connection from %s: calls sent after the AUTH_TLS probe",
                               conn.peer.c_str());
      std::lock_guard lock(conn.write_mu);
      if (!conn.write_failed) fail_writes(conn);
      for (size_t j = i; j < count; ++j) recycle(records[j]);
      break;
    }
    // Calls not begun are not run, and go unanswered like those not read yet, when:
    // - the server stops: run, each could wait out its own bound, and a client's batch
    //   would set the stop's length (their clients send them to the next instance, or
    //   report them cut);
    // - the connection was reset: the client was told these calls failed with it, and may
    //   have gone on on another (issue #38): run late, a REMOVE would remove the file it
    //   made anew.
    const bool stopping = stopping_.load(std::memory_order_acquire);
    if (stopping || (i != 0 && reset_meanwhile(conn, batch_start_ms))) {
      if (!stopping) counters_.dropped_after_reset.fetch_add(count - i, std::memory_order_relaxed);
      for (size_t j = i; j < count; ++j) recycle(records[j]);
      break;
    }
    counters_.records.fetch_add(1, std::memory_order_relaxed);
    dispatch(conn, records[i], w);
    recycle(records[i]);
    if (conn.refused) {
      // Its one answer (dispatch refused the call) goes out, then the connection closes.
      flush_replies(w, /*call_running=*/false);
      std::lock_guard lock(conn.write_mu);
      if (!conn.write_failed) fail_writes(conn);
      for (size_t j = i + 1; j < count; ++j) recycle(records[j]);
      break;
    }
  }
  flush_replies(w, /*call_running=*/false);
  w.out_conn = nullptr;
}

void Server::send_reply(Connection& conn, Worker& w, size_t body_len) {
  put_record_mark(w.out.data() + w.out_used, static_cast<uint32_t>(body_len), true);
  w.out_used += body_len + 4;
  w.out_conn = &conn;
  if (w.out_used >= kCoalesceBytes) flush_replies(w, /*call_running=*/false);
}

void Server::flush_replies(Worker& w, bool call_running) {
  if (w.out_used > w.out_head) {
    size_t from = w.out_head;
    w.out_head = w.out_used;
    counters_.batches.fetch_add(1, std::memory_order_relaxed);
    send_record(*w.out_conn, w.out.data() + from, w.out_used - from);
  }
  // A running call encodes its reply at out_used + 4: its place must stay.
  if (!call_running) w.out_head = w.out_used = 0;
}

bool Server::send_to_connection(uint64_t connection, const char* record, size_t len) {
  std::shared_ptr<Connection> conn;
  {
    std::lock_guard lock(conns_mu_);
    auto it = conns_.find(connection);
    if (it == conns_.end()) return false;
    conn = it->second;
  }
  // A handler's record follows the replies its thread made before it on that connection.
  if (Worker* w = current_worker_; w != nullptr && w->out_conn == conn.get()) {
    flush_replies(*w, /*call_running=*/true);
  }
  return send_record(*conn, record, len);
}

bool Server::send_record(Connection& conn, const char* data, size_t len) {
  counters_.bytes_out.fetch_add(len, std::memory_order_relaxed);
  std::unique_lock lock(conn.write_mu);
  if (conn.closed.load(std::memory_order_relaxed) || conn.write_failed) return false;
  size_t sent = 0;
  if (conn.unsent() == 0) {  // nothing queued: try the socket now
    while (sent < len) {
      ssize_t n = write_some(conn, data + sent, len - sent);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        ODAFS_LOG_DEBUG("reply to %s failed: %s", conn.peer.c_str(), strerror(errno));
        fail_writes(conn);
        return false;
      }
    }
    if (sent == len) return true;
  }
  // The client is not keeping up: queue the rest, bounded, and let EPOLLOUT drain it.
  // Pool threads never block on a slow reader.
  bool was_empty = conn.unsent() == 0;
  if (conn.unsent() + (len - sent) > options_.max_backlog) {
    counters_.slow_readers.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("closing connection from %s: %zu bytes of replies unread",
                             conn.peer.c_str(), conn.unsent() + (len - sent));
    fail_writes(conn);
    return false;
  }
  conn.backlog.insert(conn.backlog.end(), data + sent, data + len);
  conn.backlog_bytes.store(conn.unsent(), std::memory_order_relaxed);
  if (was_empty) conn.backlog_moved_ms.store(now_ms(), std::memory_order_relaxed);
  size_t total = total_backlog_.fetch_add(len - sent, std::memory_order_relaxed) + (len - sent);
  if (was_empty) arm_writable(conn);
  lock.unlock();
  if (total > total_backlog_budget_) shed_backlog();
  return true;
}

ssize_t Server::write_some(Connection& conn, const char* data, size_t len) {
  if (tls::Session* t = conn.tls.load(std::memory_order_acquire)) return t->write(data, len);
  return send(conn.fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void Server::arm_readable(Connection& conn) {
  epoll_event ev{};
  ev.events = read_events(conn);
  ev.data.ptr = &conn;
  epoll_ctl(conn.loop.epoll_fd, EPOLL_CTL_MOD, conn.fd, &ev);
}

void Server::arm_writable(Connection& conn) {
  epoll_event ev{};
  ev.events = EPOLLOUT | EPOLLONESHOT;
  ev.data.u64 = (conn.id << 1) | kWriteTag;
  epoll_ctl(conn.loop.epoll_fd, EPOLL_CTL_MOD, conn.write_fd, &ev);
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
    ssize_t n = write_some(*conn, conn->backlog.data() + conn->backlog_head, conn->unsent());
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

}  // namespace odafs::rpc
