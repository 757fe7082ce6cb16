#include "base/acceptor.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/log.h"

namespace odafs::net {
namespace {

int open_spare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

}  // namespace

Acceptor::Acceptor(std::string what) : what_(std::move(what)) { spare_ = open_spare(); }

Acceptor::~Acceptor() {
  int fd = spare_.exchange(-1);
  if (fd >= 0) close(fd);
}

int Acceptor::accept(int listen_fd, sockaddr_storage* addr) {
  for (;;) {
    socklen_t len = sizeof(sockaddr_storage);
    int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(addr), addr ? &len : nullptr,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) return fd;
    int err = errno;
    if (err == EINTR || err == ECONNABORTED) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) return kNonePending;
    if (err != EMFILE && err != ENFILE) {
      // ENOBUFS, ENOMEM, EPERM (firewall) ...: transient; the listener is re-armed.
      ODAFS_LOG_WARN("%s accept: %s", what_.c_str(), strerror(err));
      return kNonePending;
    }
    int spare = spare_.exchange(-1);
    if (spare < 0) {
      // Another thread holds the spare, or it could not be reopened: pause briefly rather
      // than spin; the backlog keeps the connection meanwhile.
      note_shed(err);
      spare_ = open_spare();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return kNonePending;
    }
    close(spare);
    fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) close(fd);
    spare_ = open_spare();
    note_shed(err);
    if (fd < 0) return kNonePending;
    return kShed;
  }
}

void Acceptor::note_shed(int err) {
  shed_.fetch_add(1, std::memory_order_relaxed);
  ODAFS_LOG_WARN_THROTTLED("%s accept: %s; closing new connections at once (raise ulimit -n)",
                           what_.c_str(), strerror(err));
}

}  // namespace odafs::net
