// Fuzz target: every procedure's argument decoding and handling, against a real
// FileService over a temporary export, through a real rpc::Server on 127.0.0.1 (in this
// process, over one kept-open connection).
//
// Input layout: byte 0 picks the procedure, modulo the number the server registered
// (rpc::Server::procedure_count(): NULL through the highest, ACCESS today), so a procedure
// added to FileService's table is fuzzed without touching this file. Byte 1 says whether to
// splice valid file handles into the arguments (random handles are rejected by their MAC at
// once, so without this little past the handle check would be reached): bit 0 puts handle
// #(byte 2 % 4) at offset 0, bit 1 puts handle #(byte 3 % 4) at offset byte 4 (the second
// handle of RENAME or LINK, say). The rest are the XDR arguments. Handles: the root, a file,
// a directory, a symlink. Bits 2-3 of byte 1 pick the credential: AUTH_NONE, AUTH_SYS root,
// AUTH_SYS uid 1002 claiming groups 0 and 0xffffffff, or AUTH_SYS with 17 groups (which
// never decodes). The server applies its default export rules and, run as root, acts as
// each caller, as odafsd does.
// Every well-formed call must get a reply with its XID; the server must never crash, and
// nothing may appear outside the export (checked every 256 inputs).
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/net.h"
#include "proto/odafs_prot.h"
#include "rpc/server.h"
#include "server/cpu_accounting.h"
#include "server/export_router.h"
#include "server/file_service.h"

namespace {

namespace fs = std::filesystem;
using odafs::server::FileService;
using odafs::server::WireHandle;

struct Harness {
  std::string parent;  // holds the export and a sibling that must stay untouched
  std::string export_dir;
  odafs::server::CpuAccounting cpu;
  std::unique_ptr<FileService> service;
  std::unique_ptr<odafs::server::ExportRouter> router;
  std::unique_ptr<odafs::rpc::Server> server;
  std::vector<WireHandle> handles;
  int fd = -1;
  uint32_t xid = 1;

  Harness() {
    char tmpl[] = "/tmp/odafs-fuzz-XXXXXX";
    parent = mkdtemp(tmpl);
    export_dir = parent + "/export";
    fs::create_directories(export_dir + "/d");
    std::FILE* f = std::fopen((export_dir + "/f").c_str(), "w");
    std::fputs("some file data", f);
    std::fclose(f);
    symlink("f", (export_dir + "/l").c_str());
    std::FILE* o = std::fopen((parent + "/outside").c_str(), "w");
    std::fclose(o);

    FileService::Options so;
    so.export_root = export_dir;
    so.cache_bytes = 4u << 20;
    so.block_size = 4096;
    so.max_io = 65536;
    so.max_direct_writes = 0;  // a pull would wait for a client that is not there
    so.act_as_callers = geteuid() == 0;
    so.access.rules.add_loopback_default(65534, 65534);
    service = std::make_unique<FileService>(so, &cpu);
    odafs::rpc::Server::Options ro;
    ro.listen = {"127.0.0.1", 0};
    ro.threads = 1;
    ro.max_record = service->max_request_record();
    ro.max_reply = service->max_reply_record();
    ro.program = ODAFS_PROGRAM;
    ro.version = ODAFS_V3;
    router = std::make_unique<odafs::server::ExportRouter>(
        std::vector<odafs::server::ExportRouter::Export>{{"/", service.get()}});
    router->configure(&ro);
    server = odafs::rpc::Server::listen(ro).value();
    router->register_procedures(server.get());
    odafs::ordma::EngineOptions eo;
    eo.listen = {"127.0.0.1", 0};
    eo.backend.emplace_back("local_rings", "0");
    service->start_engine(eo);
    server->start();
    fd = odafs::net::connect_tcp(server->bound()).value();

    odafs::server::NodeTable& nodes = service->nodes();
    handles.push_back(nodes.handle_of(*nodes.root()));
    for (const char* name : {"f", "d", "l"}) {
      struct stat st;
      odafs::Result<odafs::server::OpenNode> root = nodes.open(nodes.root());
      if (!root) __builtin_trap();
      odafs::Result<odafs::server::NodeRef> n = nodes.lookup(*root, name, &st);
      if (!n) __builtin_trap();
      handles.push_back(nodes.handle_of(**n));
    }
  }

  // The credential (flavor, then body) of kind 0..3; see the file comment.
  static std::vector<uint32_t> credential(unsigned kind) {
    if (kind == 0) return {0, 0};  // AUTH_NONE
    std::vector<uint32_t> gids;
    uint32_t uid = 0, gid = 0;
    if (kind == 2) {
      uid = gid = 1002;
      gids = {0, 0xffffffffu};
    } else if (kind == 3) {
      gids.assign(17, 100);
    }
    // stamp, empty machine name, uid, gid, groups
    std::vector<uint32_t> c = {1 /*AUTH_SYS*/,
                               4u * (5 + static_cast<uint32_t>(gids.size())),
                               0,
                               0,
                               uid,
                               gid,
                               static_cast<uint32_t>(gids.size())};
    c.insert(c.end(), gids.begin(), gids.end());
    return c;
  }

  // Sends one call and waits for its reply. False if the connection broke.
  bool call(uint32_t proc, unsigned cred_kind, const std::vector<unsigned char>& args) {
    uint32_t id = xid++;
    std::vector<uint32_t> words = {id, 0, 2, ODAFS_PROGRAM, ODAFS_V3, proc};
    for (uint32_t w : credential(cred_kind)) words.push_back(w);
    words.push_back(0);  // verifier: AUTH_NONE
    words.push_back(0);
    for (uint32_t& w : words) w = htonl(w);
    const size_t header = words.size() * 4;
    uint32_t body = static_cast<uint32_t>(header + args.size());
    uint32_t mark = htonl(0x80000000u | body);
    std::vector<unsigned char> msg(4 + body);
    std::memcpy(msg.data(), &mark, 4);
    std::memcpy(msg.data() + 4, words.data(), header);
    if (!args.empty()) std::memcpy(msg.data() + 4 + header, args.data(), args.size());
    if (send(fd, msg.data(), msg.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(msg.size())) {
      return false;
    }
    // Read one reply record; its XID must be ours.
    unsigned char head[8];
    if (!odafs::net::got_all(odafs::net::read_full(fd, head, sizeof head))) return false;
    uint32_t len, got;
    std::memcpy(&len, head, 4);
    std::memcpy(&got, head + 4, 4);
    len = ntohl(len) & 0x7fffffffu;
    if (ntohl(got) != id || len < 4) __builtin_trap();
    std::vector<char> rest(len - 4);
    return odafs::net::got_all(odafs::net::read_full(fd, rest.data(), rest.size()));
  }

  void check_confined() {
    for (const auto& e : fs::directory_iterator(parent)) {
      std::string name = e.path().filename();
      if (name != "export" && name != "outside") __builtin_trap();
    }
    if (fs::file_size(parent + "/outside") != 0) __builtin_trap();
  }
};

Harness& harness() {
  static Harness* h = new Harness();
  return *h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  Harness& h = harness();
  // 0 .. the highest registered number (all of them registered today, ACCESS = 24 the last).
  uint32_t proc = data[0] % static_cast<uint32_t>(h.server->procedure_count());
  std::vector<unsigned char> args(data + 5, data + size);
  auto splice = [&](size_t at, const WireHandle& handle) {
    if (args.size() < at + handle.size()) args.resize(at + handle.size());
    std::memcpy(args.data() + at, handle.data(), handle.size());
  };
  if (data[1] & 1) splice(0, h.handles[data[2] % 4]);
  if (data[1] & 2) splice(data[4], h.handles[data[3] % 4]);
  if (!h.call(proc, (data[1] >> 2) & 3, args)) {
    // The server closed the connection (an oversized record, say): reconnect.
    close(h.fd);
    h.fd = odafs::net::connect_tcp(h.server->bound()).value();
  }
  static unsigned runs = 0;
  if (++runs % 256 == 0) h.check_confined();
  return 0;
}
