#include "tests/soak/tcp_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <list>
#include <stdexcept>
#include <vector>

namespace odafs::soak {
namespace {

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// Closes fd so that its peer sees a reset, not an orderly end.
void reset(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

// One direction of a relayed connection: bytes read from `from`, not yet written to `to`.
struct Flow {
  int from = -1, to = -1;
  std::vector<char> buf;
  size_t start = 0, end = 0;  // buf[start, end) waits to be written
  bool room() const { return end < buf.size(); }
  bool pending() const { return start < end; }
  // false: the connection is over (end of stream or an error on either side).
  bool read_some() {
    const ssize_t n = read(from, buf.data() + end, buf.size() - end);
    if (n > 0) end += static_cast<size_t>(n);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR));
  }
  bool write_some() {
    const ssize_t n = send(to, buf.data() + start, end - start, MSG_NOSIGNAL);
    if (n > 0) start += static_cast<size_t>(n);
    if (start == end) start = end = 0;
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR));
  }
};

// Reads what `rev` says f's source has, if f has room; false once the source is over.
bool readable(Flow& f, short rev) {
  if (rev & POLLERR) return false;
  if ((rev & (POLLIN | POLLHUP)) && f.room()) return f.read_some();
  return (rev & POLLHUP) == 0;  // closed, with bytes still unread: over too
}

struct Connection {
  Flow up, down;  // client to server, server to client
};

}  // namespace

TcpRelay::TcpRelay(uint16_t target_port) : target_port_(target_port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  sockaddr_in a = loopback(0);
  socklen_t len = sizeof a;
  if (listen_fd_ < 0 || wake_fd_ < 0 ||
      bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(listen_fd_, 256) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (listen_fd_ >= 0) close(listen_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
    throw std::runtime_error("tcp relay: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { run(); });
}

TcpRelay::~TcpRelay() {
  stopping_.store(true);
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  thread_.join();
  close(listen_fd_);
  close(wake_fd_);
}

void TcpRelay::cut_all() {
  cut_wanted_.store(true);
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void TcpRelay::run() {
  std::list<Connection> conns;
  std::vector<pollfd> fds;
  auto end_one = [](Connection& c, bool hard) {
    if (hard) {
      reset(c.up.from);
      reset(c.up.to);
    } else {
      close(c.up.from);
      close(c.up.to);
    }
  };
  while (!stopping_.load()) {
    if (cut_wanted_.exchange(false)) {
      cuts_.fetch_add(conns.size(), std::memory_order_relaxed);
      for (Connection& c : conns) end_one(c, true);
      conns.clear();
    }
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (Connection& c : conns) {
      // Each side: readable while its flow has room, writable while the other flow waits.
      fds.push_back(
          {c.up.from,
           static_cast<short>((c.up.room() ? POLLIN : 0) | (c.down.pending() ? POLLOUT : 0)), 0});
      fds.push_back(
          {c.up.to,
           static_cast<short>((c.down.room() ? POLLIN : 0) | (c.up.pending() ? POLLOUT : 0)), 0});
    }
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) {
      uint64_t n;
      (void)!read(wake_fd_, &n, sizeof n);
    }
    if (fds[1].revents & POLLIN) {
      for (int client;
           (client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;) {
        // Loopback: the connect is answered at once (refused while the server restarts,
        // which the client sees as its connection reset).
        const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const sockaddr_in to = loopback(target_port_);
        if (server < 0 || connect(server, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
          if (server >= 0) close(server);
          reset(client);
          continue;
        }
        fcntl(server, F_SETFL, O_NONBLOCK);
        const int one = 1;
        setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        Connection& c = conns.emplace_back();
        c.up = {client, server, std::vector<char>(kBufferBytes)};
        c.down = {server, client, std::vector<char>(kBufferBytes)};
      }
    }
    // The connections, in the order their pollfds were pushed (two each, from fds[2]).
    size_t i = 2;
    for (auto it = conns.begin(); it != conns.end(); i += 2) {
      const short a = fds[i].revents, b = fds[i + 1].revents;
      bool alive = readable(it->up, a) && readable(it->down, b);
      if (alive && (b & POLLOUT)) alive = it->up.write_some();
      if (alive && (a & POLLOUT)) alive = it->down.write_some();
      if (alive) {
        ++it;
      } else {
        end_one(*it, false);
        it = conns.erase(it);
      }
    }
  }
  for (Connection& c : conns) end_one(c, false);
}

}  // namespace odafs::soak
