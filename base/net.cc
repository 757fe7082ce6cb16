#include "base/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "base/futex.h"

namespace odafs::net {
namespace {

// The failure the last system call reported, with `what` for context (errno read first).
Status errno_status(const char* what) { return Status::from_errno(what); }

Result<addrinfo*> resolve(const Endpoint& where, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  std::string port = std::to_string(where.port);
  const char* host = where.host.empty() ? nullptr : where.host.c_str();
  int rc = getaddrinfo(host, port.c_str(), &hints, &result);
  if (rc != 0) {
    return Status(EHOSTUNREACH, "resolve " + where.to_string() + ": " + gai_strerror(rc));
  }
  return result;
}

// Drops the first n bytes of the iovec list (after a partial readv/sendmsg).
void advance(iovec*& iov, int& iovcnt, size_t n) {
  while (iovcnt > 0 && n >= iov->iov_len) {
    n -= iov->iov_len;
    ++iov;
    --iovcnt;
  }
  if (iovcnt > 0) {
    iov->iov_base = static_cast<char*>(iov->iov_base) + n;
    iov->iov_len -= n;
  }
}

}  // namespace

std::string Endpoint::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<Endpoint> try_parse_endpoint(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return Status(EINVAL, "expected HOST:PORT, got " + text);
  Endpoint e;
  e.host = text.substr(0, colon);
  if (e.host.size() >= 2 && e.host.front() == '[' && e.host.back() == ']') {
    e.host = e.host.substr(1, e.host.size() - 2);
  }
  std::string port = text.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  unsigned long value = std::strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || errno != 0 || value > 65535) {
    return Status(EINVAL, "bad port in " + text);
  }
  e.port = static_cast<uint16_t>(value);
  return e;
}

Endpoint parse_endpoint(const std::string& text) {
  Result<Endpoint> e = try_parse_endpoint(text);
  if (!e.ok()) throw std::invalid_argument(e.status().message());
  return std::move(e).value();
}

namespace {

// Tries each address `where` resolves to, in order: a socket of the address's family with
// `type_flags`, then use(fd, address) — 0 keeps that socket and returns it, an errno closes
// it and moves on. When none works, the last errno prefixed with `what`. out_of_time()
// true after a failure ends the search at once: no time is left for another address.
template <class Use, class OutOfTime>
Result<int> first_working_socket(const Endpoint& where, bool passive, int type_flags,
                                 const std::string& what, Use use, OutOfTime out_of_time) {
  Result<addrinfo*> list = resolve(where, passive);
  if (!list.ok()) return Status(list.errno_value(), what + ": " + list.status().message());
  int fd = -1;
  int saved_errno = 0;
  for (addrinfo* ai = *list; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | type_flags, ai->ai_protocol);
    if (fd < 0) {
      saved_errno = errno;
      continue;
    }
    saved_errno = use(fd, ai);
    if (saved_errno == 0) break;
    close(fd);
    fd = -1;
    if (out_of_time()) break;
  }
  freeaddrinfo(*list);
  if (fd < 0) return Status(saved_errno, what);
  return fd;
}

}  // namespace

Result<int> listen_tcp(const Endpoint& where, Endpoint* bound, int backlog) {
  Result<int> fd = first_working_socket(
      where, true, SOCK_NONBLOCK | SOCK_CLOEXEC, "listen on " + where.to_string(),
      [&](int s, addrinfo* ai) {
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        bool ok = bind(s, ai->ai_addr, ai->ai_addrlen) == 0 && listen(s, backlog) == 0;
        return ok ? 0 : errno;
      },
      [] { return false; });
  if (fd.ok() && bound != nullptr) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len);
    *bound = endpoint_of(addr);
  }
  return fd;
}

Endpoint endpoint_of(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  Endpoint e;
  if (addr.ss_family == AF_INET6) {
    auto* a6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof host);
    e.port = ntohs(a6->sin6_port);
  } else if (addr.ss_family == AF_INET) {
    auto* a4 = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a4->sin_addr, host, sizeof host);
    e.port = ntohs(a4->sin_port);
  }
  e.host = host;
  return e;
}

Result<int> connect_tcp(const Endpoint& where) {
  Result<int> fd = first_working_socket(
      where, false, SOCK_CLOEXEC, "connect to " + where.to_string(),
      [](int s, addrinfo* ai) { return connect(s, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno; },
      [] { return false; });
  if (fd.ok()) set_nodelay(*fd);
  return fd;
}

Status set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return errno_status("fcntl(F_GETFL)");
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) < 0) return errno_status("fcntl(F_SETFL)");
  return Status();
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

namespace {

// The one receive loop behind the read_full* calls: recv with `flags` until len bytes
// have come; when recv would block, would_block() waits (ok) or gives up (its Status).
// false on EOF before any byte; ECONNRESET on EOF mid-record.
template <class WouldBlock>
Result<bool> recv_full(int fd, void* buf, size_t len, int flags, WouldBlock would_block) {
  auto* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = recv(fd, p + done, len - done, flags);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      if (done == 0) return false;
      return Status(ECONNRESET, "connection closed mid-record");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Status s = would_block(); !s.ok()) return s;
    } else if (errno != EINTR) {
      return errno_status("recv");
    }
  }
  return true;
}

}  // namespace

Result<bool> read_full(int fd, void* buf, size_t len) {
  return recv_full(fd, buf, len, MSG_WAITALL, [] { return errno_status("recv"); });
}

Status readv_full(int fd, iovec* iov, int iovcnt) {
  while (iovcnt > 0 && iov->iov_len == 0) {
    ++iov;
    --iovcnt;
  }
  while (iovcnt > 0) {
    ssize_t n = readv(fd, iov, iovcnt);
    if (n == 0) return Status(ECONNRESET, "connection closed mid-record");
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("recv");
    }
    advance(iov, iovcnt, static_cast<size_t>(n));
  }
  return Status();
}

namespace {

// The one send loop behind write_all and write_all_until: sendmsg with `flags` until every
// iovec is out; when the socket is full, wait_writable() waits (ok) or gives up.
template <class WaitWritable>
Status send_all(int fd, iovec* iov, int iovcnt, int flags, WaitWritable wait_writable) {
  while (iovcnt > 0 && iov->iov_len == 0) {
    ++iov;
    --iovcnt;
  }
  while (iovcnt > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(iovcnt);
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | flags);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (Status s = wait_writable(); !s.ok()) return s;
        continue;
      }
      return errno_status("send");
    }
    advance(iov, iovcnt, static_cast<size_t>(n));
  }
  return Status();
}

}  // namespace

Status write_all(int fd, iovec* iov, int iovcnt, int timeout_ms) {
  return send_all(fd, iov, iovcnt, 0, [&] {
    pollfd pfd{fd, POLLOUT, 0};
    int rc = poll(&pfd, 1, timeout_ms);
    if (rc == 0) return Status(ETIMEDOUT, "send stalled");
    if (rc < 0 && errno != EINTR) return errno_status("poll");
    return Status();
  });
}

Status wait_ready_until(int fd, short events, const timespec& deadline) {
  for (;;) {
    int ms = ms_until(deadline);
    if (ms == 0) return Status(ETIMEDOUT, "no answer before the deadline");
    pollfd pfd{fd, events, 0};
    int rc = poll(&pfd, 1, ms);
    if (rc > 0) return Status();
    if (rc < 0 && errno != EINTR) return errno_status("poll");
  }
}

Result<int> connect_tcp_until(const Endpoint& where, const timespec* deadline) {
  if (deadline == nullptr) return connect_tcp(where);
  // Numeric engine addresses: no lookup to wait on.
  Result<int> fd = first_working_socket(
      where, false, SOCK_NONBLOCK | SOCK_CLOEXEC, "connect to " + where.to_string(),
      [&](int s, addrinfo* ai) {
        if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) return 0;
        int err = errno;
        if (err != EINPROGRESS) return err;
        if (Status ready = wait_ready_until(s, POLLOUT, *deadline); !ready.ok()) {
          return ready.errno_value();
        }
        socklen_t len = sizeof err;
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        return err;
      },
      [&] { return deadline_passed(*deadline); });
  if (!fd.ok()) return fd;
  if (Status s = set_nonblocking(*fd, false); !s.ok()) {
    close(*fd);
    return s;
  }
  set_nodelay(*fd);
  return fd;
}

Result<bool> read_full_until(int fd, void* buf, size_t len, const timespec* deadline) {
  if (deadline == nullptr) return read_full(fd, buf, len);
  // MSG_DONTWAIT first: a waiting reader usually finds its bytes there, one system call.
  return recv_full(fd, buf, len, MSG_DONTWAIT,
                   [&] { return wait_ready_until(fd, POLLIN, *deadline); });
}

Result<bool> read_full_blocking_until(int fd, void* buf, size_t len, const timespec* deadline) {
  if (deadline == nullptr) return read_full(fd, buf, len);
  return recv_full(fd, buf, len, 0, [&] {  // a recv timed out (SO_RCVTIMEO)
    return deadline_passed(*deadline) ? Status(ETIMEDOUT, "recv") : Status();
  });
}

void set_receive_timeout(int fd, int timeout_ms) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

Status write_all_until(int fd, iovec* iov, int iovcnt, const timespec* deadline) {
  if (deadline == nullptr) return write_all(fd, iov, iovcnt);
  return send_all(fd, iov, iovcnt, MSG_DONTWAIT,
                  [&] { return wait_ready_until(fd, POLLOUT, *deadline); });
}

bool is_loopback(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
    return (ntohl(in.sin_addr.s_addr) >> 24) == 127;
  }
  if (addr.ss_family != AF_INET6) return false;
  const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr;
  if (IN6_IS_ADDR_LOOPBACK(&in6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&in6) && in6.s6_addr[12] == 127;
}

namespace {

// Fills a sock_diag address from a socket address: IPv4 as is, IPv4 mapped into IPv6 as
// IPv4 (the other end's socket is then an AF_INET one).
bool diag_address(const sockaddr_storage& a, uint8_t* family, __be16* port, __be32 out[4]) {
  std::memset(out, 0, 16);
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    *family = AF_INET;
    *port = in.sin_port;
    std::memcpy(out, &in.sin_addr, 4);
    return true;
  }
  if (a.ss_family != AF_INET6) return false;
  const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
  *port = in6.sin6_port;
  if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) {
    *family = AF_INET;
    std::memcpy(out, in6.sin6_addr.s6_addr + 12, 4);
  } else {
    *family = AF_INET6;
    std::memcpy(out, in6.sin6_addr.s6_addr, 16);
  }
  return true;
}

}  // namespace

bool is_host_address(const sockaddr_storage& addr) {
  if (is_loopback(addr)) return true;
  uint8_t family = 0;
  __be16 port;
  __be32 want[4];
  if (!diag_address(addr, &family, &port, want)) return false;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return true;
  bool found = false;
  for (const ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr ||
        (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) {
      continue;
    }
    sockaddr_storage mine{};
    std::memcpy(&mine, i->ifa_addr,
                i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    uint8_t mine_family = 0;
    __be32 have[4];
    found = diag_address(mine, &mine_family, &port, have) && mine_family == family &&
            std::memcmp(have, want, family == AF_INET ? 4 : 16) == 0;
  }
  freeifaddrs(list);
  return found;
}

LocalPeer local_peer(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return {true, -1};  // cannot tell: as a local peer the kernel does not name
  }
  if (!is_host_address(peer)) return {};
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } query{};
  query.header.nlmsg_len = sizeof query;
  query.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  query.header.nlmsg_flags = NLM_F_REQUEST;
  inet_diag_req_v2& r = query.request;
  r.sdiag_protocol = IPPROTO_TCP;
  r.idiag_states = ~0u;
  // The peer's socket, seen from its side: its source is our peer, its destination us.
  uint8_t peer_family = 0, local_family = 0;
  if (!diag_address(peer, &peer_family, &r.id.idiag_sport, r.id.idiag_src) ||
      !diag_address(local, &local_family, &r.id.idiag_dport, r.id.idiag_dst) ||
      peer_family != local_family) {
    return {true, -1};
  }
  r.sdiag_family = peer_family;
  r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return {true, -1};
  int64_t uid = -1;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(nl, &query, sizeof query, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) ==
      static_cast<ssize_t>(sizeof query)) {
    alignas(nlmsghdr) char buf[8192];
    ssize_t n;
    do {
      n = recv(nl, buf, sizeof buf, 0);
    } while (n < 0 && errno == EINTR);
    auto* h = reinterpret_cast<nlmsghdr*>(buf);
    if (n > 0 && NLMSG_OK(h, static_cast<size_t>(n)) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
        h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      uid = static_cast<const inet_diag_msg*>(NLMSG_DATA(h))->idiag_uid;
    }
  }
  close(nl);
  return {true, uid};
}

}  // namespace odafs::net
