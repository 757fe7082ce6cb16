#include "tests/support/hostile.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "base/net.h"
#include "client/client.h"
#include "ordma/engine_impl/soft/handshake.h"
#include "ordma/engine_impl/soft/wire.h"
#include "proto/odafs_prot.h"
#include "proto/ref_xdr.h"
#include "rpc/call_credential.h"
#include "rpc/record.h"
#include "rpc/xdr_util.h"
#include "tests/support/rpc_calls.h"

namespace odafs::test {
namespace wire = ordma::wire;

using Clock = std::chrono::steady_clock;

int connect_from(const char* from, uint16_t port, int rcvbuf) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, from, &a.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  a.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool closed_by_peer(int fd, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, std::max<int>(0, static_cast<int>(left.count()))) <= 0) return false;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return true;
    }
  }
}

size_t count_closed(const std::vector<int>& fds, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t closed = 0;
  for (int fd : fds) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (closed_by_peer(fd, std::max<int>(0, static_cast<int>(left.count())))) ++closed;
  }
  return closed;
}

void close_all(std::vector<int>& fds) {
  for (int fd : fds) close(fd);
  fds.clear();
}

uint64_t stat_of(Client& fs, const std::string& key) {
  for (auto& [k, v] : fs.server_stats()) {
    if (k == key) return v;
  }
  FAIL("no server stat " << key);
  return 0;
}

bool ensure_fd_limit(rlim_t n) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur >= n) return true;
  if (lim.rlim_max < n) return false;
  lim.rlim_cur = n;
  return setrlimit(RLIMIT_NOFILE, &lim) == 0;
}

std::string rpc_call_record(uint32_t xid, uint32_t proc, xdrproc_t xargs, const void* args) {
  // Record mark, a call header with this process's AUTH_SYS credential (a hostile peer
  // is still someone: AUTH_NONE would run as the anonymous user), then the arguments.
  rpc::CallerCred me;
  me.uid = getuid();
  me.gid = getgid();
  static const rpc::CallCredential cred(me, "hostile");
  std::string rec(4 + 64 + cred.body().size() + xdr_sizeof(xargs, const_cast<void*>(args)), '\0');
  XDR x;
  xdrmem_create(&x, rec.data() + 4, static_cast<u_int>(rec.size() - 4), XDR_ENCODE);
  rpc_msg call{};
  call.rm_xid = xid;
  call.rm_direction = CALL;
  call.rm_call.cb_rpcvers = 2;
  call.rm_call.cb_prog = ODAFS_PROGRAM;
  call.rm_call.cb_vers = ODAFS_V3;
  call.rm_call.cb_proc = proc;
  call.rm_call.cb_cred.oa_flavor = AUTH_SYS;
  call.rm_call.cb_cred.oa_base = const_cast<char*>(cred.body().data());
  call.rm_call.cb_cred.oa_length = static_cast<u_int>(cred.body().size());
  call.rm_call.cb_verf = _null_auth;
  REQUIRE(xdr_callmsg(&x, &call));
  REQUIRE(xargs(&x, const_cast<void*>(args), 0));
  uint32_t len = xdr_getpos(&x);
  rpc::put_record_mark(rec.data(), len, /*last=*/true);
  rec.resize(len + 4);
  return rec;
}

namespace {
rpc::Channel::Options channel_options() {
  rpc::Channel::Options o;
  o.program = ODAFS_PROGRAM;
  o.version = ODAFS_V3;
  o.timeout_ms = 30000;
  o.auth = rpc::AuthSysCred{getuid(), getgid(), "test", {}};  // this process, as itself
  return o;
}
}  // namespace

HostileMount::HostileMount(uint16_t port, const std::string& name)
    : ch(open_channel({"127.0.0.1", port}, channel_options())) {
  mount_args ma{};
  ma.path = const_cast<char*>("/");
  mount_res mr{};
  REQUIRE_OK(ch->call(ODAFSPROC_MOUNT, rpc::to_xdrproc(xdr_mount_args), &ma,
                      rpc::to_xdrproc(xdr_mount_res), &mr));
  REQUIRE(mr.status == ODAFS_OK);
  session.id = mr.mount_res_u.ok.session;
  std::memcpy(session.secret.data(), mr.mount_res_u.ok.session_secret, session.secret.size());
  std::memcpy(root.data(), mr.mount_res_u.ok.root, root.size());
  xdr_free(rpc::to_xdrproc(xdr_mount_res), reinterpret_cast<char*>(&mr));
  diropargs la{};
  std::memcpy(la.dir, root.data(), root.size());
  la.name = const_cast<char*>(name.c_str());
  dirop_res lr{};
  REQUIRE_OK(ch->call(ODAFSPROC_LOOKUP, rpc::to_xdrproc(xdr_diropargs), &la,
                      rpc::to_xdrproc(xdr_dirop_res), &lr));
  REQUIRE(lr.status == ODAFS_OK);
  std::memcpy(file.data(), lr.dirop_res_u.ok.fh, file.size());
}

uint64_t open_file(rpc::Channel& ch, const Handle& dir, const std::string& name, uint32_t access) {
  open_args a{};
  std::memcpy(a.dir, dir.data(), dir.size());
  a.name = const_cast<char*>(name.c_str());
  a.access = access;
  open_res res{};
  REQUIRE_OK(ch.call(ODAFSPROC_OPEN, rpc::to_xdrproc(xdr_open_args), &a,
                     rpc::to_xdrproc(xdr_open_res), &res));
  return res.status == ODAFS_OK ? res.open_res_u.ok.delegation : 0;
}

void HostileMount::get_refs(size_t bytes) {
  for (uint64_t off = 0; off < bytes; off += 1 << 20) {
    getrefs_args ga{};
    std::memcpy(ga.fh, file.data(), file.size());
    ga.offset = off;
    ga.count = 1 << 20;
    ga.session = session.id;
    getrefs_res gr{};
    REQUIRE_OK(ch->call(ODAFSPROC_GETREFS, rpc::to_xdrproc(xdr_getrefs_args), &ga,
                        rpc::to_xdrproc(xdr_getrefs_res), &gr));
    REQUIRE(gr.status == ODAFS_OK);
    for (u_int i = 0; i < gr.getrefs_res_u.ok.refs.refs_len; ++i) {
      refs.push_back(ordma::reference_from_wire(gr.getrefs_res_u.ok.refs.refs_val[i]));
    }
    xdr_free(rpc::to_xdrproc(xdr_getrefs_res), reinterpret_cast<char*>(&gr));
  }
  REQUIRE(!refs.empty());
}

int HostileMount::engine_connection(uint16_t engine_port, int rcvbuf) {
  int fd = connect_from("127.0.0.1", engine_port, rcvbuf);
  REQUIRE(fd >= 0);
  ordma::answer_greeting(fd, session);
  unsigned char welcome[wire::kWelcomeBytes];
  REQUIRE(net::got_all(net::read_full_until(fd, welcome, sizeof welcome, nullptr)));
  REQUIRE(wire::welcome_valid(welcome));
  return fd;
}

size_t take_records(std::string* buffer) {
  size_t n = 0;
  size_t pos = 0;
  while (buffer->size() - pos >= 4) {
    const size_t len = rpc::read_record_mark(buffer->data() + pos).length;
    if (buffer->size() - pos - 4 < len) break;
    pos += 4 + len;
    ++n;  // every reply is one fragment
  }
  buffer->erase(0, pos);
  return n;
}

}  // namespace odafs::test
