// Accepting connections without spinning when the process is out of descriptors.
//
// When accept() fails with EMFILE or ENFILE the connection stays in the kernel's backlog and
// the listening socket stays readable, so an event loop that simply retries spins on a core
// and logs without end, while the client waits in the backlog. The Acceptor keeps one spare
// descriptor instead: on EMFILE it closes the spare, accepts the connection, closes it at
// once (the client sees its connection closed, not a hang) and reopens the spare. Shed
// connections are logged at most once a second, with how many were shed since.
//
// Thread-safety: accept() may be called from several threads; the spare is swapped
// atomically. The counters may be read from any thread.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace odafs::net {

class Acceptor {
 public:
  // what names the listener in log lines ("rpc", "engine").
  explicit Acceptor(std::string what);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  enum : int {
    kNonePending = -1,  // nothing more to accept now (or a transient error): re-arm and wait
    kShed = -2,         // a connection was accepted and closed for lack of descriptors
  };
  // Accepts one connection from a non-blocking listening socket. Returns its descriptor
  // (non-blocking, close-on-exec), kNonePending or kShed. addr may be null.
  int accept(int listen_fd, sockaddr_storage* addr);

  uint64_t shed() const { return shed_.load(std::memory_order_relaxed); }

 private:
  void note_shed(int err);

  std::string what_;
  std::atomic<int> spare_{-1};
  std::atomic<uint64_t> shed_{0};
};

}  // namespace odafs::net
