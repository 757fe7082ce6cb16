// Fuzz target: the client's decoding of server replies. A malicious or broken server must
// not crash or corrupt a client: every reply it can send ends in a result or a clean error.
//
// A fake server in this process answers each call of a real odafs::Client with the next
// chunk of the input. Input layout: byte 0 picks the client's read mode (bit 0: pre-posted
// READ, whose reply header the client parses by hand; else inline). Then chunks, each a
// 2-byte big-endian length and that many bytes: the reply after its XID (the harness
// writes the call's XID first, so replies match). When the chunks run out the fake server
// closes the connection. The client runs a fixed script: mount, stat, open, read, readdir,
// write, fsync, server stats.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/net.h"
#include "client/client.h"

namespace {

// One fake server connection: reads calls, answers with the input's chunks from *pos on.
void serve(int fd, const uint8_t* data, size_t size, size_t& pos) {
  for (;;) {
    unsigned char mark[4];
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 500) <= 0) break;
    try {
      if (!odafs::net::got_all(odafs::net::read_full(fd, mark, 4))) break;
      uint32_t len;
      std::memcpy(&len, mark, 4);
      len = ntohl(len) & 0x7fffffffu;
      if (len < 4 || len > (8u << 20)) break;
      std::vector<char> call(len);
      if (!odafs::net::readv_full(fd, std::vector<iovec>{{call.data(), len}}.data(), 1).ok()) break;
      if (pos + 2 > size) break;
      size_t n = (size_t{data[pos]} << 8) | data[pos + 1];
      pos += 2;
      n = std::min(n, size - pos);
      std::vector<char> reply(8 + n);
      uint32_t rmark = htonl(0x80000000u | static_cast<uint32_t>(4 + n));
      std::memcpy(reply.data(), &rmark, 4);
      std::memcpy(reply.data() + 4, call.data(), 4);  // the call's XID
      std::memcpy(reply.data() + 8, data + pos, n);
      pos += n;
      if (send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) break;
    } catch (const std::exception&) {
      break;
    }
  }
  close(fd);
}

struct Listener {
  int fd = -1;
  odafs::net::Endpoint where;
  Listener() { fd = odafs::net::listen_tcp({"127.0.0.1", 0}, &where).value(); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static Listener* listener = new Listener();
  odafs::MountOptions mo;
  mo.read_mode = (data[0] & 1) ? odafs::ReadMode::kPrePosted : odafs::ReadMode::kInline;
  mo.same_host_shortcut = false;
  mo.timeout_ms = 300;
  mo.cache_blocks = 16;
  mo.directory_entries = 64;
  // Serves every connection the client makes (it reconnects after a broken one) until
  // the script is done; once the chunks run out, each is closed at once.
  std::atomic<bool> done{false};
  std::thread server([&] {
    size_t pos = 0;
    while (!done.load()) {
      pollfd p{listener->fd, POLLIN, 0};
      if (poll(&p, 1, 10) <= 0) continue;
      int fd = accept4(listener->fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) serve(fd, data + 1, size - 1, pos);
    }
  });
  try {
    auto fs = odafs::Client::mount("odafs://" + listener->where.to_string() + "/", mo);
    auto attempt = [](auto&& fn) {
      try {
        fn();
      } catch (const odafs::Error&) {
      }
    };
    char buf[9000];
    attempt([&] { fs->stat("a"); });
    attempt([&] {
      odafs::File f = fs->open("a", O_RDWR);
      attempt([&] { f.pread(buf, sizeof buf, 0); });
      attempt([&] { f.pwrite(buf, 100, 0); });
      attempt([&] { f.fsync(); });
    });
    attempt([&] { fs->readdir("/"); });
    attempt([&] { fs->server_stats(); });
  } catch (const odafs::Error&) {
  }
  done = true;
  server.join();
  return 0;
}
