// Test support: a TCP relay on 127.0.0.1 in front of a server, for what happens on the path
// between a client and odafsd: bytes an attacker injects, and connections a middlebox cuts.
// No doctest.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace odafs::test {

class TcpRelay {
 public:
  // Runs once per relayed connection, before the relay copies bytes both ways: it may read
  // from `client` and write to `server` (both blocking). False: the connection is closed.
  using Prelude = std::function<bool(int client, int server)>;

  // Listens on 127.0.0.1 (a free port) and relays every connection it accepts to
  // 127.0.0.1:server_port. Throws std::runtime_error if it cannot listen.
  explicit TcpRelay(uint16_t server_port, Prelude prelude = {});
  // Stops accepting and relaying; every relayed connection is closed.
  ~TcpRelay();
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  uint16_t port() const { return port_; }
  // Resets every connection relayed now, both sides (RST, as a middlebox dropping its state
  // does); connections accepted later are relayed as before. Returns how many it reset.
  size_t reset_all();
  // While refusing, a connection the relay accepts is reset at once (a path that is down);
  // the ones relayed already go on.
  void set_refusing(bool refusing);
  // Connections accepted and relayed so far (refused ones not counted).
  size_t accepted() const;

 private:
  struct Pair {
    int client = -1;
    int server = -1;
  };
  void accept_loop();
  void relay(Pair pair);

  const uint16_t server_port_;
  const Prelude prelude_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};  // written at destruction: wakes every thread's poll
  uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::vector<Pair> live_;            // guarded by mu_
  size_t accepted_ = 0;               // guarded by mu_
  bool refusing_ = false;             // guarded by mu_
  std::vector<std::thread> threads_;  // the relaying threads; touched by accept_loop only
  std::thread acceptor_;
};

}  // namespace odafs::test
