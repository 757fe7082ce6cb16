// The soak's TCP relay: clients connect to it instead of odafsd, it connects each of them on
// to the server, and cut_all() resets every connection it carries at once (an RST to both
// ends), as a NAT, a load balancer or a flaky link does while the server stays up.
//
// One thread moves the bytes of every connection with poll(); each direction holds at most
// kBufferBytes in flight, so a slow reader slows its writer instead of growing a buffer.
// A connection one end closes is closed at the other end too (no half-close: the odafs
// protocol has none).
//
// Thread-safety: port(), cut_all() and cuts() may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

namespace odafs::soak {

class TcpRelay {
 public:
  // Listens on 127.0.0.1 (a free port) and relays to 127.0.0.1:target_port. Throws
  // std::runtime_error if it cannot listen.
  explicit TcpRelay(uint16_t target_port);
  // Stops the thread and closes every connection.
  ~TcpRelay();
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  uint16_t port() const { return port_; }
  // Resets every connection the relay carries now (asynchronously: done within one turn of
  // the relay's loop). New connections are accepted as before.
  void cut_all();
  // Connections reset by cut_all so far.
  uint64_t cuts() const { return cuts_.load(std::memory_order_relaxed); }

  static constexpr size_t kBufferBytes = 256 * 1024;

 private:
  void run();

  const uint16_t target_port_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: a cut or the stop is asked for
  uint16_t port_ = 0;
  std::atomic<bool> cut_wanted_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> cuts_{0};
  std::thread thread_;
};

}  // namespace odafs::soak
