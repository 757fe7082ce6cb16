#include "tests/support/tcp_relay.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "base/net.h"

namespace odafs::test {
namespace {

// Closes fd with a reset rather than a FIN: SO_LINGER with a zero timeout.
void reset(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  shutdown(fd, SHUT_RDWR);
}

int connect_loopback(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

TcpRelay::TcpRelay(uint16_t server_port, Prelude prelude)
    : server_port_(server_port), prelude_(std::move(prelude)) {
  net::Endpoint bound;
  Result<int> listening = net::listen_tcp({"127.0.0.1", 0}, &bound);
  listen_fd_ = listening.ok() ? *listening : -1;
  if (listen_fd_ < 0 || pipe2(stop_pipe_, O_CLOEXEC) != 0) {
    throw std::runtime_error("tcp relay: cannot listen");
  }
  port_ = bound.port;
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpRelay::~TcpRelay() {
  (void)!write(stop_pipe_[1], "x", 1);
  acceptor_.join();
  for (std::thread& t : threads_) t.join();
  close(listen_fd_);
  close(stop_pipe_[0]);
  close(stop_pipe_[1]);
}

void TcpRelay::accept_loop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) continue;
    if (p[1].revents != 0) return;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    if (std::lock_guard lock(mu_); refusing_) {
      reset(client);
      close(client);
      continue;
    }
    const int server = connect_loopback(server_port_);
    if (server < 0) {
      close(client);
      continue;
    }
    Pair pair{client, server};
    {
      std::lock_guard lock(mu_);
      live_.push_back(pair);
      ++accepted_;
    }
    threads_.emplace_back([this, pair] { relay(pair); });
  }
}

void TcpRelay::relay(Pair pair) {
  if (!prelude_ || prelude_(pair.client, pair.server)) {
    pollfd p[3] = {{pair.client, POLLIN, 0}, {pair.server, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    char buf[65536];
    for (bool open = true; open && poll(p, 3, -1) >= 0 && p[2].revents == 0;) {
      for (int i = 0; i < 2 && open; ++i) {
        if (p[i].revents == 0) continue;
        const ssize_t n = recv(p[i].fd, buf, sizeof buf, 0);
        open = n > 0 && send(p[1 - i].fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL) == n;
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    std::erase_if(live_, [&](const Pair& x) { return x.client == pair.client; });
  }
  close(pair.client);
  close(pair.server);
}

size_t TcpRelay::reset_all() {
  std::lock_guard lock(mu_);
  // Shut down under the lock: the relaying thread closes its descriptors only after it has
  // left live_, so none is reused by then.
  for (const Pair& pair : live_) {
    reset(pair.client);
    reset(pair.server);
  }
  return live_.size();
}

void TcpRelay::set_refusing(bool refusing) {
  std::lock_guard lock(mu_);
  refusing_ = refusing;
}

size_t TcpRelay::accepted() const {
  std::lock_guard lock(mu_);
  return accepted_;
}

}  // namespace odafs::test
