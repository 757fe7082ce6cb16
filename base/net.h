// Small socket helpers shared by the RPC transport (and later the one-sided engine).
//
// Every function that can fail returns a Status or a Result<T> (base/status.h) carrying the
// errno, so that a socket's failure reaches the caller as a value, one form all the way up
// (rpc/ and ordma/ pass it on unchanged). parse_endpoint, for command lines and tests, is
// the one that throws.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>

#include "base/status.h"

namespace odafs::net {

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  std::string to_string() const;
};

// Parses "HOST:PORT" (HOST may be empty for 0.0.0.0, or [v6]): EINVAL with a readable
// message for anything else.
Result<Endpoint> try_parse_endpoint(const std::string& text);
// try_parse_endpoint for command lines and tests: throws std::invalid_argument (its message).
Endpoint parse_endpoint(const std::string& text);

// Binds and listens; port 0 picks a free port. Returns the listening fd (non-blocking,
// close-on-exec) and stores the bound endpoint in *bound.
Result<int> listen_tcp(const Endpoint& where, Endpoint* bound, int backlog = 128);

// The address and port of a socket address (IPv4 or IPv6; host "?" for another family).
Endpoint endpoint_of(const sockaddr_storage& addr);

// Whether addr is a loopback address (127.0.0.0/8, ::1, or 127.x mapped into IPv6).
bool is_loopback(const sockaddr_storage& addr);

// Whether addr is one of this host's own addresses: loopback, or an address of any of its
// interfaces (getifaddrs; IPv4 mapped into IPv6 counts as the IPv4 address). A process on
// this host may bind any of them, so a peer coming from one is a local process, whatever
// address it connected to. When the interface list cannot be read, true (fail closed: the
// peer is then judged as a local one the kernel may not name).
bool is_host_address(const sockaddr_storage& addr);

// The other end of connected TCP socket fd, when it is on this host.
struct LocalPeer {
  bool local = false;  // the peer's address is one of this host's (is_host_address)
  // The uid owning the peer's socket: the kernel's own record (NETLINK_SOCK_DIAG), which a
  // process cannot forge. -1 when the peer is not local, or the kernel would not say: a
  // local peer with -1 must be trusted with nothing a named one would be.
  int64_t uid = -1;
};
// Costs a netlink round trip or two: call it once per connection.
LocalPeer local_peer(int fd);

// Connects a blocking TCP socket with TCP_NODELAY set.
Result<int> connect_tcp(const Endpoint& where);

Status set_nonblocking(int fd, bool on);
void set_nodelay(int fd);

// Reads exactly len bytes from a blocking fd. false on orderly EOF before the first byte;
// fails on error, and ECONNRESET on EOF in the middle.
Result<bool> read_full(int fd, void* buf, size_t len);
// Whether a read_full* call brought its bytes: false at EOF and on failure alike, for
// callers to whom both mean "the peer is gone" (tests, probes). Mind that a Result<bool>'s
// own operator bool says only ok(): an EOF is ok.
inline bool got_all(const Result<bool>& read) { return read.ok() && *read; }

// Fills every iovec from a blocking fd (iovecs may be empty). Fails on error or EOF
// (ECONNRESET). Modifies iov.
Status readv_full(int fd, iovec* iov, int iovcnt);

// Writes all iovecs to fd. For a non-blocking fd it waits for POLLOUT up to timeout_ms per
// stall. Fails on error or timeout (ETIMEDOUT). Modifies iov.
Status write_all(int fd, iovec* iov, int iovcnt, int timeout_ms = 30000);

// Deadline forms of connect_tcp, read_full and write_all, for peers that may stop
// answering. `deadline` is CLOCK_MONOTONIC (base/futex.h: deadline_after_ms); nullptr
// means none, and the call is exactly its plain form. They work on blocking and
// non-blocking fds alike and never wait past the deadline: once it passes they fail
// ETIMEDOUT. A read or write cut short that way may have moved part of a
// record, so the caller must give up on the stream.
Result<int> connect_tcp_until(const Endpoint& where, const timespec* deadline);
Result<bool> read_full_until(int fd, void* buf, size_t len, const timespec* deadline);
// read_full_until for a blocking fd whose SO_RCVTIMEO (set_receive_timeout) bounds each
// recv: it blocks in recv instead of polling first, one system call where a reader waits
// for a reply that is not there yet. The deadline is checked when a recv times out, so the
// call may overrun it by up to one receive timeout.
Result<bool> read_full_blocking_until(int fd, void* buf, size_t len, const timespec* deadline);
void set_receive_timeout(int fd, int timeout_ms);
Status write_all_until(int fd, iovec* iov, int iovcnt, const timespec* deadline);
// Waits until fd is ready for `events` (poll flags; an error or hang-up counts as ready),
// or fails ETIMEDOUT at the deadline.
Status wait_ready_until(int fd, short events, const timespec& deadline);

}  // namespace odafs::net
