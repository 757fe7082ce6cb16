// Integration: RPC-with-TLS (RFC 9289) end to end, with certificates made at test time by
// scripts/make-test-ca.sh: the AUTH_TLS probe and its refusal, the server's certificate
// checked by name, client certificates refused (none, another CA's, expired), the export
// rules tls and mtls, the identity a certificate maps to, one-sided reads of a TLS mount,
// SIGHUP reloading the certificate, the mount, and hostile bytes where TLS is expected.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/futex.h"
#include "doctest/doctest.h"
#include "ordma/engine.h"
#include "proto/odafs_prot.h"
#include "rpc/client_channel.h"
#include "rpc/message_header.h"
#include "rpc/record.h"
#include "rpc/xdr_util.h"
#include "tests/support/client_util.h"
#include "tests/support/confinement_world.h"
#include "tests/support/hostile.h"
#include "tests/support/mount_process.h"
#include "tests/support/mounted.h"
#include "tests/support/rpc_calls.h"
#include "tests/support/server_process.h"
#include "tests/support/tcp_relay.h"

using odafs::Client;
using odafs::Error;
using odafs::File;
using odafs::MountOptions;
using odafs::test::eventually;
using odafs::test::MountProcess;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;

namespace {

// The certificates of scripts/make-test-ca.sh, made once per process.
const std::string& ca_dir() {
  static TempDir* dir = new TempDir();  // lives for the process: the servers read its files
  static const std::string path = [] {
    const std::string command = std::string("bash ") + ODAFS_SOURCE_DIR +
                                "/scripts/make-test-ca.sh " + dir->path() + " alice >/dev/null";
    REQUIRE(std::system(command.c_str()) == 0);
    return dir->path();
  }();
  return path;
}
std::string pem(const std::string& name) { return ca_dir() + "/" + name; }

std::vector<std::string> tls_flags(std::vector<std::string> more = {}) {
  std::vector<std::string> flags = {"--tls-cert",      pem("server.pem"), "--tls-key",
                                    pem("server.key"), "--tls-ca",        pem("ca.pem")};
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

MountOptions tls_options(const std::string& client = "") {
  MountOptions o;
  o.tls = true;
  o.tls_ca = pem("ca.pem");
  if (!client.empty()) {
    o.tls_cert = pem(client + ".pem");
    o.tls_key = pem(client + ".key");
  }
  return o;
}

// What mounting says when it fails ("" when it does not).
std::string mount_error(const std::string& url, const MountOptions& options) {
  try {
    Client::mount(url, options);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void write_file(Client& c, const std::string& path, const std::string& text) {
  File f = c.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  f.pwrite(text.data(), text.size(), 0);
  f.close();
}

std::string read_file(Client& c, const std::string& path) {
  File f = c.open(path, O_RDONLY);
  std::string out(1 << 16, '\0');
  out.resize(f.pread(out.data(), out.size(), 0));
  return out;
}

int connect_to(uint16_t port) {
  int fd = odafs::test::connect_from("127.0.0.1", port);
  REQUIRE(fd >= 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends record[0, len) on fd and returns the body of the reply record that comes back.
std::vector<char> exchange(int fd, const std::vector<char>& record, size_t len) {
  REQUIRE(send(fd, record.data(), len, MSG_NOSIGNAL) == static_cast<ssize_t>(len));
  char mark[4];
  REQUIRE(recv(fd, mark, 4, MSG_WAITALL) == 4);
  std::vector<char> body(odafs::rpc::read_record_mark(mark).length);
  REQUIRE(recv(fd, body.data(), body.size(), MSG_WAITALL) == static_cast<ssize_t>(body.size()));
  return body;
}

// Sends the AUTH_TLS probe on fd and returns the reply record's body.
std::vector<char> probe(int fd) {
  std::vector<char> record;
  odafs::rpc::CallSpec spec{77, ODAFS_PROGRAM, ODAFS_V3, 0, {}, true};
  auto len = odafs::rpc::encode_call_record(spec, odafs::rpc::to_xdrproc(odafs::rpc::xdr_nothing),
                                            nullptr, 4096, &record);
  REQUIRE(len.ok());
  return exchange(fd, record, *len);
}

odafs::rpc::Channel::Options channel_options() {
  auto context = odafs::tls::Context::make(odafs::tls::Context::Side::kClient,
                                           odafs::tls::Files{"", "", pem("ca.pem")});
  REQUIRE(context.ok());
  odafs::rpc::Channel::Options co;
  co.program = ODAFS_PROGRAM;
  co.version = ODAFS_V3;
  co.timeout_ms = 5000;
  co.tls = *context;
  co.tls_host = "127.0.0.1";
  return co;
}

// What connecting a TLS channel to 127.0.0.1:port says when it fails ("" when it does not).
std::string channel_error(uint16_t port) {
  auto ch = odafs::rpc::Channel::connect({"127.0.0.1", port}, channel_options());
  return ch.ok() ? "" : ch.status().to_string();
}

// A listening socket on 127.0.0.1 and the thread that serves its one connection with
// `serve` (given the accepted socket, blocking, closed afterwards). Joined on destruction.
class OneConnection {
 public:
  explicit OneConnection(std::function<void(int fd)> serve) {
    odafs::net::Endpoint bound;
    listen_fd_ = odafs::net::listen_tcp({"127.0.0.1", 0}, &bound).value();
    port_ = bound.port;
    thread_ = std::thread([this, serve = std::move(serve)] {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 10000) != 1) return;
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      timeval tv{5, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      serve(fd);
      close(fd);
    });
  }
  ~OneConnection() {
    thread_.join();
    close(listen_fd_);
  }
  uint16_t port() const { return port_; }

 private:
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

// Reads one whole record (mark and body, one fragment) from blocking fd; empty at EOF.
std::string read_record(int fd) {
  char mark[4];
  if (recv(fd, mark, 4, MSG_WAITALL) != 4) return "";
  std::string body(odafs::rpc::read_record_mark(mark).length, '\0');
  if (recv(fd, body.data(), body.size(), MSG_WAITALL) != static_cast<ssize_t>(body.size())) {
    return "";
  }
  return std::string(mark, 4) + body;
}

uint32_t xid_of(const std::string& record) {
  uint32_t xid = 0;
  if (record.size() >= 8) std::memcpy(&xid, record.data() + 4, 4);
  return ntohl(xid);
}

// A whole accepted-SUCCESS reply record with no results and an AUTH_NONE verifier whose
// body is `verifier` (a multiple of 4 bytes long).
std::string success_reply(uint32_t xid, const std::string& verifier = "") {
  odafs::test::confinement::Args a;
  a.u32(xid).u32(1 /* REPLY */).u32(0 /* MSG_ACCEPTED */).u32(0 /* AUTH_NONE */);
  a.str(verifier).u32(0 /* SUCCESS */);
  std::string record(4, '\0');
  odafs::rpc::put_record_mark(record.data(), static_cast<uint32_t>(a.b.size()), true);
  return record + a.b;
}

// A man in the middle on loopback: relays connections to 127.0.0.1:server_port and
// appends `injected` to each client's first record (its AUTH_TLS probe), in the same
// segment. Every other byte goes through untouched, both ways, until either side closes.
odafs::test::TcpRelay injecting_relay(uint16_t server_port, std::string injected) {
  return odafs::test::TcpRelay(
      server_port, [injected = std::move(injected)](int client, int server) {
        timeval tv{5, 0};  // a client that sends no probe does not hold the relay forever
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        std::string probe = read_record(client);
        if (probe.empty()) return false;
        probe += injected;
        return send(server, probe.data(), probe.size(), MSG_NOSIGNAL) ==
               static_cast<ssize_t>(probe.size());
      });
}

}  // namespace

TEST_CASE("a TLS mount reads and writes through the library; the server counts the session") {
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags());
  auto c = Client::mount(server.url(), tls_options());
  write_file(*c, "/f", "over tls");
  CHECK(read_file(*c, "/f") == "over tls");
  CHECK(server_stat(*c, "rpc.tls_sessions") >= 1);
  // The URL says it as well as the options do.
  auto by_url = Client::mount(server.url() + "?tls=1&tls_ca=" + pem("ca.pem"));
  CHECK(read_file(*by_url, "/f") == "over tls");
}

TEST_CASE("a server without TLS refuses the probe, and the client says so") {
  TempDir dir;
  ServerProcess server(dir.path());
  const std::string why = mount_error(server.url(), tls_options());
  CHECK(why.find("offers no TLS") != std::string::npos);
  // A raw probe gets the RFC's refusal: MSG_DENIED, AUTH_ERROR, AUTH_BADCRED.
  int fd = connect_to(server.port());
  std::vector<char> reply = probe(fd);
  odafs::rpc::ReplyHeader h;
  size_t at = 0;
  REQUIRE(odafs::rpc::decode_reply_header(reply.data(), reply.size(), &h, &at));
  CHECK(h.reply_stat == MSG_DENIED);
  CHECK(h.reject_stat == AUTH_ERROR);
  CHECK(h.auth_stat == AUTH_BADCRED);
  close(fd);
}

TEST_CASE("the server's certificate is checked: by CA and by name") {
  TempDir dir;
  SUBCASE("a CA the client does not trust") {
    ServerProcess server(dir.path(), tls_flags());
    MountOptions o = tls_options();
    o.tls_ca = pem("other-ca.pem");
    const std::string why = mount_error(server.url(), o);
    CHECK(why.find("certificate verify failed") != std::string::npos);
  }
  SUBCASE("a certificate for another name") {
    ServerProcess server(dir.path(), {"--tls-cert", pem("wrong-name-server.pem"), "--tls-key",
                                      pem("wrong-name-server.key")});
    const std::string why = mount_error(server.url(), tls_options());
    CHECK(why.find("certificate verify failed") != std::string::npos);
    CHECK(why.find("127.0.0.1") != std::string::npos);
  }
}

TEST_CASE("an mtls rule: no certificate, another CA's, an expired one are refused") {
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags({"--clients", "127.0.0.1(mtls,no_root_squash)"}));
  SUBCASE("no TLS at all: refused at MOUNT, the message names TLS") {
    const std::string why = mount_error(server.url(), MountOptions{});
    CHECK(why.find("AUTH_TOOWEAK") != std::string::npos);
    CHECK(why.find("TLS") != std::string::npos);
  }
  SUBCASE("TLS without a certificate") {
    const std::string why = mount_error(server.url(), tls_options());
    CHECK(why.find("AUTH_TOOWEAK") != std::string::npos);
  }
  SUBCASE("a certificate from another CA") {
    const std::string why = mount_error(server.url(), tls_options("other-client"));
    CHECK(why.find("refused this client's TLS session") != std::string::npos);
  }
  SUBCASE("an expired certificate") {
    const std::string why = mount_error(server.url(), tls_options("expired-client"));
    INFO(why);
    CHECK(why.find("refused this client's TLS session") != std::string::npos);
    CHECK(why.find("expired") != std::string::npos);
  }
  SUBCASE("a good certificate mounts") {
    CHECK(mount_error(server.url(), tls_options("client")) == "");
  }
}

TEST_CASE("a tls rule refuses clear connections and admits TLS ones without a certificate") {
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags({"--clients", "127.0.0.1(tls,no_root_squash)"}));
  CHECK(mount_error(server.url(), MountOptions{}).find("AUTH_TOOWEAK") != std::string::npos);
  auto c = Client::mount(server.url(), tls_options());
  write_file(*c, "/x", "y");
  CHECK(server_stat(*c, "auth.refused.tls_required") >= 1);
}

TEST_CASE("a certificate's mapped identity is what the server acts as" *
          doctest::skip(geteuid() != 0) *
          doctest::description(geteuid() != 0 ? "needs root: odafsd acts as callers" : "")) {
  TempDir dir;
  const std::string map = dir.path() + "-identities";
  {
    std::ofstream out(map);
    out << "# test map\nDNS:alice.odafs.test 4242:4242\nDNS:client.odafs.test trust\n";
  }
  ServerProcess server(dir.path(), tls_flags({"--tls-identity-map", map, "--auth-sys", "--clients",
                                              "127.0.0.1(mtls,no_root_squash)"}));
  chmod(dir.path().c_str(), 0777);  // uid 4242 may look and create in the export
  std::ofstream(std::filesystem::path(dir.path()) / "root-only") << "secret";
  chmod((std::filesystem::path(dir.path()) / "root-only").c_str(), 0600);
  std::ofstream(std::filesystem::path(dir.path()) / "alices") << "hers";
  chown((std::filesystem::path(dir.path()) / "alices").c_str(), 4242, 4242);
  chmod((std::filesystem::path(dir.path()) / "alices").c_str(), 0600);
  // alice's certificate makes every call uid 4242, though this process is root.
  auto alice = Client::mount(server.url(), tls_options("alice"));
  // (The library's open judges by its own uid, root here; the server refuses the read.)
  CHECK(odafs::test::errno_of([&] { read_file(*alice, "/root-only"); }) == EACCES);
  CHECK(read_file(*alice, "/alices") == "hers");
  write_file(*alice, "/made-by-alice", "a");
  struct stat st {};
  REQUIRE(stat((std::filesystem::path(dir.path()) / "made-by-alice").c_str(), &st) == 0);
  CHECK(st.st_uid == 4242u);
  // client's certificate maps to `trust`: its AUTH_SYS (root, no_root_squash) is believed.
  auto trusted = Client::mount(server.url(), tls_options("client"));
  CHECK(read_file(*trusted, "/root-only") == "secret");
  std::filesystem::remove(map);
}

TEST_CASE("one-sided reads on a TLS mount: through the ring, and over the engine's TCP in TLS") {
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags());
  const std::string data(256 * 1024, 'r');
  {
    auto w = Client::mount(server.url(), tls_options());
    write_file(*w, "/big", data);
  }
  // No data cache: the second read goes by the references the first one brought.
  MountOptions o = tls_options();
  o.cache_blocks = 0;
  SUBCASE("same host: the ring") {
    auto c = Client::mount(server.url(), o);
    CHECK(read_file(*c, "/big") == data.substr(0, 65536));
    CHECK(read_file(*c, "/big") == data.substr(0, 65536));
    CHECK(c->stats().ordma_reads.load() > 0);
    CHECK(c->engine_transport() == "ring");
  }
  SUBCASE("no ring: the engine's TCP connection, under TLS") {
    o.same_host_shortcut = false;
    auto c = Client::mount(server.url(), o);
    CHECK(read_file(*c, "/big") == data.substr(0, 65536));
    CHECK(read_file(*c, "/big") == data.substr(0, 65536));
    CHECK(c->stats().ordma_reads.load() > 0);
    CHECK(c->stats().fallbacks.load() == 0);
    CHECK(c->engine_transport() == "tcp");
  }
}

TEST_CASE("a TLS mount's engine session is refused in the clear, and good only under TLS") {
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags());
  odafs::rpc::Channel::Options co;
  co.program = ODAFS_PROGRAM;
  co.version = ODAFS_V3;
  co.timeout_ms = 10000;
  auto context = odafs::tls::Context::make(odafs::tls::Context::Side::kClient,
                                           odafs::tls::Files{"", "", pem("ca.pem")});
  REQUIRE(context.ok());
  co.tls = *context;
  co.tls_host = "127.0.0.1";
  std::unique_ptr<odafs::rpc::Channel> ch =
      odafs::test::open_channel({"127.0.0.1", server.port()}, co);
  mount_args a{};
  a.path = const_cast<char*>("/");
  mount_res res{};
  REQUIRE_OK(ch->call(ODAFSPROC_MOUNT, odafs::rpc::to_xdrproc(xdr_mount_args), &a,
                      odafs::rpc::to_xdrproc(xdr_mount_res), &res));
  REQUIRE(res.status == ODAFS_OK);
  odafs::ordma::Session session;
  session.id = res.mount_res_u.ok.session;
  std::memcpy(session.secret.data(), res.mount_res_u.ok.session_secret, session.secret.size());
  const odafs::net::Endpoint engine = odafs::net::parse_endpoint(res.mount_res_u.ok.engine);
  xdr_free(odafs::rpc::to_xdrproc(xdr_mount_res), reinterpret_cast<char*>(&res));
  CHECK(odafs::ordma::tls_bound(session.id));
  odafs::ordma::EngineClientOptions eo;
  eo.same_host_shortcut = false;
  eo.timeout_ms = 5000;
  // The secret is right, the proof correct: but in the clear, this session counts nothing.
  CHECK_THROWS(odafs::ordma::connect_engine("soft", engine, session, eo));
  // The same secret under TLS, its proof bound to that TLS session: accepted.
  eo.tls = *context;
  eo.tls_host = "127.0.0.1";
  auto client = odafs::ordma::connect_engine("soft", engine, session, eo);
  CHECK(!client->broken());
  CHECK(client->transport() == std::string("tcp"));
}

TEST_CASE("SIGHUP reloads the certificate: new connections get the new one, old ones go on") {
  TempDir dir;
  TempDir files;
  const std::string cert = (std::filesystem::path(files.path()) / "server.pem").string();
  const std::string key = (std::filesystem::path(files.path()) / "server.key").string();
  std::filesystem::copy_file(pem("server.pem"), cert);
  std::filesystem::copy_file(pem("server.key"), key);
  ServerProcess server(dir.path(), {"--tls-cert", cert, "--tls-key", key});
  auto before = Client::mount(server.url(), tls_options());
  write_file(*before, "/f", "1");
  // Another name's certificate, then SIGHUP: new connections are refused by name.
  std::filesystem::copy_file(pem("wrong-name-server.pem"), cert,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(pem("wrong-name-server.key"), key,
                             std::filesystem::copy_options::overwrite_existing);
  REQUIRE(kill(server.pid(), SIGHUP) == 0);
  CHECK(eventually(
      [&] {
        return mount_error(server.url(), tls_options()).find("certificate verify failed") !=
               std::string::npos;
      },
      10));
  CHECK(read_file(*before, "/f") == "1");  // the running session is untouched
  // A reload that fails (a key that does not match) keeps what serves.
  std::filesystem::copy_file(pem("server.key"), key,
                             std::filesystem::copy_options::overwrite_existing);
  REQUIRE(kill(server.pid(), SIGHUP) == 0);
  // A negative check: a reload that fails changes nothing a client can see (that is the
  // point), so no event says it has run; 300 ms is long past its time (~20 ms) here.
  usleep(300 * 1000);
  CHECK(mount_error(server.url(), tls_options()).find("certificate verify failed") !=
        std::string::npos);
}

TEST_CASE("garbage and truncated TLS records after STARTTLS never stop the server") {
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags());
  for (int round = 0; round < 3; ++round) {
    int fd = connect_to(server.port());
    std::vector<char> reply = probe(fd);
    odafs::rpc::ReplyHeader h;
    size_t at = 0;
    REQUIRE(odafs::rpc::decode_reply_header(reply.data(), reply.size(), &h, &at));
    REQUIRE(h.verf.bytes() == std::string_view("STARTTLS"));
    if (round == 0) {
      const char junk[] = "GET / HTTP/1.0\r\n\r\nnot a tls record at all";
      send(fd, junk, sizeof junk, MSG_NOSIGNAL);
    } else if (round == 1) {
      // A handshake record header that promises 16 KiB, then a few bytes and a close.
      const unsigned char partial[] = {0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x3f, 0xfc};
      send(fd, partial, sizeof partial, MSG_NOSIGNAL);
    }  // round 2: nothing at all, then a close
    if (round == 0) {
      char sink[256];
      CHECK(recv(fd, sink, sizeof sink, 0) >= 0);  // an alert or EOF, then closed
    }
    close(fd);
  }
  auto c = Client::mount(server.url(), tls_options());
  write_file(*c, "/still", "serving");
  CHECK(read_file(*c, "/still") == "serving");
  CHECK(server_stat(*c, "rpc.tls_failures") >= 1);
}

TEST_CASE("a call sent behind the AUTH_TLS probe, before its answer, closes the connection") {
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags());
  std::vector<char> probe_record, call_record;
  odafs::rpc::CallSpec p{1, ODAFS_PROGRAM, ODAFS_V3, 0, {}, true};
  odafs::rpc::CallSpec c{2, ODAFS_PROGRAM, ODAFS_V3, 0, {}, false};
  auto nothing = odafs::rpc::to_xdrproc(odafs::rpc::xdr_nothing);
  auto n1 = odafs::rpc::encode_call_record(p, nothing, nullptr, 4096, &probe_record);
  auto n2 = odafs::rpc::encode_call_record(c, nothing, nullptr, 4096, &call_record);
  REQUIRE((n1.ok() && n2.ok()));
  std::string both(probe_record.data(), *n1);
  both.append(call_record.data(), *n2);
  int fd = connect_to(server.port());
  REQUIRE(send(fd, both.data(), both.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(both.size()));
  // The STARTTLS reply may come; the NULL call behind it is never answered in the clear.
  std::string got;
  char buf[256];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
  CHECK(n == 0);            // closed by the server (not the 5 s receive timeout)
  CHECK(got.size() <= 36);  // at most the probe's reply (a 4-byte mark and 32 bytes)
  close(fd);
  auto client = Client::mount(server.url(), tls_options());
  write_file(*client, "/ok", "still serving");
  CHECK(read_file(*client, "/ok") == "still serving");
}

TEST_CASE("a record begun in the clear behind the AUTH_TLS probe never runs inside TLS") {
  // An attacker on the path appends to the victim's probe a fragment that does not end its
  // record: REMOVE with AUTH_NONE. Were it kept, the victim's first TLS record would end it,
  // and the REMOVE would run inside the victim's session as the victim.
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags());
  REQUIRE(chmod(dir.path().c_str(), 0777) == 0);  // even the anonymous user could remove
  odafs::test::write_local(dir / "victim3", "the victim's");
  odafs::Handle root{};
  REQUIRE(odafs::test::confinement::Raw(server.port(), std::nullopt).mount("/", &root) == ODAFS_OK);
  odafs::test::confinement::Args remove;
  remove.fh(root).str("victim3");
  bool_t (*args)(XDR*, odafs::test::confinement::Args*) = odafs::test::confinement::xdr_args_bytes;
  std::vector<char> record;
  auto len =
      odafs::rpc::encode_call_record({0x7777, ODAFS_PROGRAM, ODAFS_V3, ODAFSPROC_REMOVE, {}, false},
                                     odafs::rpc::to_xdrproc(args), &remove, 4096, &record);
  REQUIRE(len.ok());
  odafs::rpc::put_record_mark(record.data(), static_cast<uint32_t>(*len - 4), /*last=*/false);
  const std::string error = [&] {
    odafs::test::TcpRelay relay = injecting_relay(server.port(), std::string(record.data(), *len));
    return channel_error(relay.port());
  }();
  CHECK(!error.empty());  // the server closed the connection instead of going on with it
  CHECK(odafs::test::read_local(dir / "victim3") == "the victim's");
  auto c = Client::mount(server.url(), tls_options());  // and it serves on
  CHECK(read_file(*c, "/victim3") == "the victim's");
}

TEST_CASE("a peer no rule admits gets no TLS: its probe is refused, and the client says why") {
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags({"--clients", "10.0.0.0/8(rw)"}));
  CHECK(channel_error(server.port()).find("do not admit this client") != std::string::npos);
}

TEST_CASE("the client takes no answer but its own before TLS, and none in the clear after it") {
  auto server_context =
      odafs::tls::Context::make(odafs::tls::Context::Side::kServer,
                                odafs::tls::Files{pem("server.pem"), pem("server.key"), ""});
  REQUIRE(server_context.ok());
  // A server that answers the probe with STARTTLS, with the probe's XID plus probe_shift,
  // followed in the clear by `after`; then runs TLS and answers the NULL check with its
  // XID plus null_shift.
  auto fake = [&](uint32_t probe_shift, std::string after, uint32_t null_shift) {
    return [&, probe_shift, after, null_shift](int fd) {
      const std::string probe = read_record(fd);
      if (probe.empty()) return;
      const std::string reply = success_reply(xid_of(probe) + probe_shift, "STARTTLS") + after;
      if (send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) return;
      auto session = odafs::tls::Session::make(*server_context, fd);
      if (!session.ok()) return;
      if (!(*session)->handshake_until(odafs::deadline_after_ms(5000)).ok()) return;
      char mark[4];
      const timespec deadline = odafs::deadline_after_ms(5000);
      auto got = (*session)->read_full(mark, 4, &deadline);
      if (!got.ok() || !*got) return;
      std::string call(4, '\0');
      std::memcpy(call.data(), mark, 4);
      call.resize(4 + odafs::rpc::read_record_mark(mark).length);
      got = (*session)->read_full(call.data() + 4, call.size() - 4, &deadline);
      if (!got.ok() || !*got) return;
      const std::string answer = success_reply(xid_of(call) + null_shift);
      (void)(*session)->write_all(answer.data(), answer.size(), &deadline);
      char sink[256];  // until the client gives up on the connection
      for (;;) {
        got = (*session)->read_full(sink, sizeof sink, &deadline);
        if (!got.ok() || !*got) break;
      }
    };
  };
  SUBCASE("the right XIDs: the channel connects (the fake server is sound)") {
    OneConnection s(fake(0, "", 0));
    CHECK(channel_error(s.port()) == "");
  }
  SUBCASE("STARTTLS with another XID") {
    OneConnection s(fake(1, "", 0));
    CHECK(channel_error(s.port()).find("XID") != std::string::npos);
  }
  SUBCASE("bytes in the clear behind STARTTLS") {
    OneConnection s(fake(0, success_reply(0x7777), 0));
    CHECK(channel_error(s.port()).find("in the clear") != std::string::npos);
  }
  SUBCASE("the NULL check answered with another XID (an injected call's reply)") {
    OneConnection s(fake(0, "", 0x1000));
    CHECK(channel_error(s.port()).find("XID") != std::string::npos);
  }
}

TEST_CASE(
    "TLS changes nothing of who a local caller may be: an unprivileged one claiming root "
    "is refused, and AUTH_TLS on another procedure is no credential" *
    doctest::skip(geteuid() != 0) *
    doctest::description(geteuid() != 0 ? "needs root: the child becomes uid 65534" : "")) {
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags());  // the loopback default: kernel-named peers
  // Made here: the children below only copy it (a context made after fork could wait on a
  // lock another thread of the parent held).
  const odafs::rpc::Channel::Options tls_channel = channel_options();
  auto claiming = [&tls_channel](uint32_t uid) {
    odafs::rpc::Channel::Options co = tls_channel;
    co.auth = odafs::rpc::AuthSysCred{uid, uid, "tls-test", {}};
    return co;
  };
  // Mounts under TLS with that claim: 0 when MOUNT works, 1 when it is refused
  // AUTH_BADCRED, 2 otherwise.
  auto mount_as_claimed = [&](uint32_t uid) {
    odafs::rpc::CallFailure layer = odafs::rpc::CallFailure::kTransport;
    auto ch = odafs::rpc::Channel::connect({"127.0.0.1", server.port()}, claiming(uid), &layer);
    odafs::Status called = ch.status();
    mount_res res{};
    if (called.ok()) {
      mount_args a{};
      a.path = const_cast<char*>("/");
      called = (*ch)->call(ODAFSPROC_MOUNT, odafs::rpc::to_xdrproc(xdr_mount_args), &a,
                           odafs::rpc::to_xdrproc(xdr_mount_res), &res, &layer);
    }
    if (!called.ok()) {
      return layer == odafs::rpc::CallFailure::kDenied &&
                     called.message().find("AUTH_BADCRED") != std::string::npos
                 ? 1
                 : 2;
    }
    const bool ok = res.status == ODAFS_OK;
    xdr_free(odafs::rpc::to_xdrproc(xdr_mount_res), reinterpret_cast<char*>(&res));
    return ok ? 0 : 2;
  };
  CHECK(odafs::test::as_nobody([&] { return mount_as_claimed(0); }) == 1);
  CHECK(odafs::test::as_nobody([&] { return mount_as_claimed(odafs::test::kNobody); }) == 0);
  CHECK(mount_as_claimed(0) == 0);  // root's own socket may claim root
  // AUTH_TLS with a procedure other than NULL, raw: AUTH_BADCRED, nothing runs.
  int fd = connect_to(server.port());
  std::vector<char> record;
  odafs::rpc::CallSpec spec{9, ODAFS_PROGRAM, ODAFS_V3, ODAFSPROC_MOUNT, {}, true};
  mount_args a{};
  a.path = const_cast<char*>("/");
  auto len = odafs::rpc::encode_call_record(spec, odafs::rpc::to_xdrproc(xdr_mount_args), &a, 4096,
                                            &record);
  REQUIRE(len.ok());
  const std::vector<char> body = exchange(fd, record, *len);
  odafs::rpc::ReplyHeader h;
  size_t at = 0;
  REQUIRE(odafs::rpc::decode_reply_header(body.data(), body.size(), &h, &at));
  CHECK(h.reply_stat == MSG_DENIED);
  CHECK(h.auth_stat == AUTH_BADCRED);
  close(fd);
}

TEST_CASE("a TLS mount rides a server restart: it reconnects under TLS, one-sided reads too") {
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags());
  const std::string data(65536, 'z');
  {
    auto w = Client::mount(server.url(), tls_options());
    write_file(*w, "/kept", data);
  }
  MountOptions o = tls_options();
  o.cache_blocks = 0;
  o.same_host_shortcut = false;  // the engine's TCP path, under TLS
  o.reconnect_window_ms = 10000;
  auto c = Client::mount(server.url(), o);
  CHECK(read_file(*c, "/kept") == data);
  CHECK(read_file(*c, "/kept") == data);
  const uint64_t before = c->stats().ordma_reads.load();
  CHECK(before > 0);
  server.restart();
  CHECK(read_file(*c, "/kept") == data);  // a new connection, a new TLS session
  CHECK(read_file(*c, "/kept") == data);  // by the new references, one-sided
  CHECK(c->stats().ordma_reads.load() > before);
  CHECK(c->engine_transport() == "tcp");
  CHECK(server_stat(*c, "rpc.tls_sessions") >= 1);
}

TEST_CASE("the engine port: STARTTLS then garbage, a cut record, or silence never stop it") {
  TempDir dir;
  ServerProcess server(dir.path(), tls_flags());
  for (int round = 0; round < 3; ++round) {
    int fd = connect_to(server.engine_port());
    unsigned char greeting[24];
    REQUIRE(recv(fd, greeting, sizeof greeting, MSG_WAITALL) == 24);
    CHECK((greeting[7] & 1) == 1);  // the GREETING's flags: TLS offered
    // HELLO: magic "ODAE", version 2, flags STARTTLS, session 0, proof 0.
    unsigned char hello[32] = {'O', 'D', 'A', 'E', 0, 2, 0, 1};
    REQUIRE(send(fd, hello, sizeof hello, MSG_NOSIGNAL) == 32);
    if (round == 0) {
      const char junk[] = "\x16\x03\x01\x00\x05hello, this is not a ClientHello";
      send(fd, junk, sizeof junk, MSG_NOSIGNAL);
      char sink[256];
      CHECK(recv(fd, sink, sizeof sink, 0) >= 0);  // an alert, or EOF
    } else if (round == 1) {
      const unsigned char partial[] = {0x16, 0x03, 0x01, 0x40, 0x00, 0x01};
      send(fd, partial, sizeof partial, MSG_NOSIGNAL);
    }
    close(fd);
  }
  MountOptions o = tls_options();
  o.same_host_shortcut = false;
  o.cache_blocks = 0;
  {
    auto w = Client::mount(server.url(), tls_options());
    write_file(*w, "/after", std::string(8192, 'a'));
  }
  auto c = Client::mount(server.url(), o);
  CHECK(read_file(*c, "/after").size() == 8192);
  CHECK(read_file(*c, "/after").size() == 8192);
  CHECK(c->stats().ordma_reads.load() > 0);
}

ODAFS_MOUNT_TEST("odafs-mount -o tls: a file written through the mount reads back over TLS") {
  TempDir dir;
  TempDir mnt;
  ServerProcess server(dir.path(), tls_flags());
  MountProcess m(server.url(), mnt.path(), {"tls_ca=" + pem("ca.pem")});
  std::ofstream(m / "through-mount") << "mounted over tls";
  auto c = Client::mount(server.url(), tls_options());
  CHECK(read_file(*c, "/through-mount") == "mounted over tls");
  CHECK(server_stat(*c, "rpc.tls_sessions") >= 2);
}

namespace {

// A client certificate from the test CA with subjectAltName entries no config line can
// write: an iPAddress of 5 bytes (an address is 4 or 16), DNS:bad-san.odafs.test, a good
// IP:10.1.2.3 and an iPAddress of none. Files bad-san.pem and bad-san.key beside the CA's.
void make_bad_san_certificate() {
  static const bool made = [] {
    // SEQUENCE { [7] 01 02 03 04 05, [2] "bad-san.odafs.test", [7] 0a 01 02 03, [7] "" }
    const std::string der =
        "30238705010203040582126261642d73616e2e6f646166732e7465737487040a0102038700";
    const std::string command =
        "cd '" + ca_dir() +
        "' && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out bad-san.key "
        "2>/dev/null && openssl req -new -key bad-san.key -out bad-san.csr -subj "
        "'/O=odafs test/CN=bad-san' 2>/dev/null && printf "
        "'basicConstraints=CA:FALSE\\nkeyUsage=critical,digitalSignature\\n"
        "extendedKeyUsage=clientAuth\\nsubjectAltName=DER:" +
        der +
        "\\n' >bad-san.ext && openssl x509 -req -in bad-san.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out bad-san.pem -days 365 -extfile bad-san.ext 2>/dev/null";
    REQUIRE(std::system(command.c_str()) == 0);
    return true;
  }();
  (void)made;
}

}  // namespace

// The server's side names the peer from its certificate (the identity map's input): an
// iPAddress of the wrong length is no address (inet_ntop would read 16 bytes of a 5-byte
// string), the other names stand.
TEST_CASE("a client certificate with a malformed iPAddress SAN: that name is ignored, not read") {
  make_bad_san_certificate();
  auto server_context = odafs::tls::Context::make(
      odafs::tls::Context::Side::kServer,
      odafs::tls::Files{pem("server.pem"), pem("server.key"), pem("ca.pem")});
  auto client_context = odafs::tls::Context::make(
      odafs::tls::Context::Side::kClient,
      odafs::tls::Files{pem("bad-san.pem"), pem("bad-san.key"), pem("ca.pem")});
  REQUIRE(server_context.ok());
  REQUIRE(client_context.ok());
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  auto server = odafs::tls::Session::make(*server_context, fds[0]);
  auto client = odafs::tls::Session::make(*client_context, fds[1], "localhost");
  REQUIRE(server.ok());
  REQUIRE(client.ok());
  // Both ends in turn until both are done (each step moves what the other sent).
  for (int step = 0; step < 100 && !((*server)->handshake_done() && (*client)->handshake_done());
       ++step) {
    for (auto* s : {server->get(), client->get()}) {
      const odafs::Status st = s->handshake();
      REQUIRE((st.ok() || st.errno_value() == EAGAIN));
    }
  }
  REQUIRE((*server)->handshake_done());
  const odafs::tls::PeerCertificate peer = (*server)->peer();
  CHECK(peer.present);
  CHECK(peer.alt_names == std::vector<std::string>{"DNS:bad-san.odafs.test", "IP:10.1.2.3"});
  server->reset();
  client->reset();
  close(fds[0]);
  close(fds[1]);
}

// The same certificate against odafsd: it is mapped by its good names and serves on.
TEST_CASE("odafsd takes a client certificate with a malformed iPAddress SAN without harm") {
  make_bad_san_certificate();
  TempDir dir;
  const std::string map = dir.path() + "-identities";
  {
    std::ofstream out(map);
    out << "DNS:bad-san.odafs.test trust\n";
  }
  ServerProcess server(dir.path(), tls_flags({"--tls-identity-map", map, "--clients",
                                              "127.0.0.1(mtls,no_root_squash)"}));
  MountOptions o = tls_options();
  o.tls_cert = pem("bad-san.pem");
  o.tls_key = pem("bad-san.key");
  auto c = Client::mount(server.url(), o);
  write_file(*c, "/f", "served");
  CHECK(read_file(*c, "/f") == "served");
  CHECK(server_stat(*c, "auth.refused.tls_required") == 0);
  std::filesystem::remove(map);
}

// SIGHUP with a line of the identity map gone: a connection that was given that identity
// is refused from its next call; new connections of that certificate are unmapped
// (anonymous under mtls).
TEST_CASE("SIGHUP removing an identity map line cuts the connections that ran as it" *
          doctest::skip(geteuid() != 0) *
          doctest::description(geteuid() != 0 ? "needs root: odafsd acts as callers" : "")) {
  TempDir dir;
  const std::string map = dir.path() + "-identities";
  auto write_map = [&](const std::string& text) {
    std::ofstream out(map + ".new");
    out << text;
    out.close();
    std::filesystem::rename(map + ".new", map);
  };
  write_map("DNS:alice.odafs.test 4242:4242\nDNS:client.odafs.test trust\n");
  ServerProcess server(dir.path(), tls_flags({"--tls-identity-map", map, "--auth-sys", "--clients",
                                              "127.0.0.1(mtls,no_root_squash)"}));
  chmod(dir.path().c_str(), 0777);
  auto alice = Client::mount(server.url(), tls_options("alice"));
  auto owner_of = [&](const std::string& name) {
    struct stat st {};
    return stat((std::filesystem::path(dir.path()) / name).c_str(), &st) == 0
               ? static_cast<int64_t>(st.st_uid)
               : -1;
  };
  auto admin = Client::mount(server.url(), tls_options("client"));  // a line that stays
  write_file(*alice, "/before", "a");
  REQUIRE(owner_of("before") == 4242);
  // alice's line goes. Once a new connection of hers is no longer 4242, the reload is done.
  write_map("DNS:client.odafs.test trust\n");
  REQUIRE(kill(server.pid(), SIGHUP) == 0);
  int probes = 0;
  CHECK(eventually(
      [&] {
        const std::string name = "probe" + std::to_string(probes++);
        odafs::test::errno_of([&] {
          write_file(*Client::mount(server.url(), tls_options("alice")), "/" + name, "p");
        });
        return owner_of(name) != 4242;
      },
      10));
  // The connection that ran as alice: refused, and nothing more is made as 4242 (whatever
  // the library does next: a new connection is unmapped, anonymous).
  odafs::test::errno_of([&] { write_file(*alice, "/after", "a"); });
  CHECK(owner_of("after") != 4242);
  CHECK(server_stat(*admin, "auth.refused.identity_unmapped") >= 1);
  // The connection of a line that stayed goes on as it was.
  write_file(*admin, "/by-admin", "a");
  CHECK(owner_of("by-admin") == 0);
  std::filesystem::remove(map);
}
