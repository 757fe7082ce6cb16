// Test support for hostile-client tests: raw sockets from chosen loopback addresses, raw
// ONC RPC records, and probes of a server process (RSS, CPU, descriptors).
#pragma once

#include <rpc/rpc.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "client/client.h"
#include "ordma/reference.h"
#include "ordma/session.h"
#include "rpc/client_channel.h"
#include "tests/support/process_probe.h"  // its probes are part of this support

namespace odafs {
class Client;
}

namespace odafs::test {

// A TCP connection to 127.0.0.1:port from the local address `from` (any 127.x.y.z works
// on Linux loopback, so one machine can play several hosts). rcvbuf > 0 sets SO_RCVBUF
// before connecting. Returns -1 if it fails.
int connect_from(const char* from, uint16_t port, int rcvbuf = 0);

// True once the peer has closed fd (EOF or reset), waiting up to timeout_ms. Whatever
// the peer sent before (a greeting) is read and dropped.
bool closed_by_peer(int fd, int timeout_ms);
// How many of fds the peer closed, waiting up to timeout_ms in all.
size_t count_closed(const std::vector<int>& fds, int timeout_ms);
void close_all(std::vector<int>& fds);

// The server's counter `key` from STATS (fails the test if there is none).
uint64_t stat_of(Client& fs, const std::string& key);

// Raises this process's descriptor limit to at least n (tests open many sockets).
bool ensure_fd_limit(rlim_t n);

// One ONC RPC call record (record mark included, one fragment): CALL of `proc` of the odafs
// program with AUTH_NONE, arguments encoded by xargs.
std::string rpc_call_record(uint32_t xid, uint32_t proc, xdrproc_t xargs, const void* args);

// A client's standing without the client library, for clients that misbehave: its own
// MOUNT (so its own engine session), a file's handle, references to the file's blocks as
// GETREFS hands them out, and authenticated raw engine TCP connections.
struct HostileMount {
  std::unique_ptr<rpc::Channel> ch;
  ordma::Session session;
  Handle root{}, file{};
  std::vector<ordma::Reference> refs;

  // Mounts the server on 127.0.0.1:port and looks `name` up in the export's root.
  HostileMount(uint16_t port, const std::string& name);
  // References to the file's blocks in [0, bytes).
  void get_refs(size_t bytes);
  // An authenticated engine TCP connection for this session (the WELCOME read); rcvbuf as
  // for connect_from.
  int engine_connection(uint16_t engine_port, int rcvbuf = 0);
};

// OPEN of `name` in directory `dir` on ch with `access` (ODAFS_OPEN_READ, | ODAFS_OPEN_WRITE):
// the delegation granted, 0 for none (or a failed OPEN). A channel without a callback
// handler answers no recall: the delegation comes back only with its lease.
uint64_t open_file(rpc::Channel& ch, const Handle& dir, const std::string& name, uint32_t access);

// Splits a stream of reply records: appends what arrived to *buffer and removes every
// complete record from its front, returning how many there were.
size_t take_records(std::string* buffer);

}  // namespace odafs::test
