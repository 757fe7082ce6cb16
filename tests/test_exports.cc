// odafsd --exports: the exports file's parser, --check-exports, several exports behind one
// listener reached by path, and SIGHUP's reload of their rules (server/exports_file.h,
// server/export_router.h).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>

#include "base/net.h"
#include "client/admin.h"
#include "client/client.h"
#include "proto/odafs_prot.h"
#include "rpc/client_channel.h"
#include "rpc/xdr_util.h"
#include "server/daemon_setup.h"
#include "server/exports_file.h"
#include "tests/support/client_util.h"
#include "tests/support/delegation_holder.h"
#include "tests/support/mount_process.h"
#include "tests/support/raw_mount.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::File;
using odafs::server::parse_exports;
using odafs::test::errno_of;
using odafs::test::read_local;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

// The output and exit status of a shell command.
struct Ran {
  std::string output;
  int status = -1;
};
Ran run(const std::string& command) {
  Ran r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int w = pclose(p);
  r.status = WIFEXITED(w) ? WEXITSTATUS(w) : -1;
  return r;
}

// Two exports under one temporary directory, a (rw) and b (ro), both for this host, in an
// exports file beside them; `tail` is appended to the file (more lines).
struct TwoExports {
  TempDir top;
  std::string a = top / "a";
  std::string b = top / "b";
  std::string file = top / "exports";
  TwoExports() {
    REQUIRE(mkdir(a.c_str(), 0777) == 0);
    REQUIRE(mkdir(b.c_str(), 0777) == 0);
    chmod(a.c_str(), 0777);
    chmod(b.c_str(), 0777);
    write_local(a + "/f", "in a");
    write_local(b + "/f", "in b");
    write_rules("rw,no_root_squash", "ro,no_root_squash");
  }
  void write_rules(const std::string& a_options, const std::string& b_options,
                   const std::string& a_client = "127.0.0.1") {
    write_local(file, "# two exports\n" + a + "  " + a_client + "(" + a_options +
                          ",sync,no_subtree_check)\n" + b + " \\\n   127.0.0.1(" + b_options +
                          ")\n");
  }
};

// Writes path whole and syncs it: on the server when this returns (a write delegation would
// keep the bytes in the client until then).
void write_synced(Client& fs, const std::string& path, const std::string& text) {
  File f = fs.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(f.pwrite(text.data(), text.size(), 0) == text.size());
  f.fsync();
  f.close();
}

}  // namespace

TEST_CASE("exports file: comments, continuations, quotes, line defaults and NFS options") {
  const std::string text =
      "# a comment line\n"
      "/srv/a  127.0.0.1(rw,no_root_squash) 10.0.0.0/8(ro)   # a trailing comment\n"
      "\n"
      "/srv//b/ -ro,all_squash 127.0.0.1 \\\n"
      "         ::1(rw,async,subtree_check,fsid=7,wdelay,sec=sys)\n"
      "\"/srv/with space\" *(ro,tls)\n";
  odafs::Result<std::vector<odafs::server::ExportLine>> parsed =
      parse_exports(text, "exports", 65534, 65534);
  REQUIRE(parsed.ok());
  const auto& e = *parsed;
  REQUIRE(e.size() == 3);
  CHECK(e[0].path == "/srv/a");
  CHECK(e[0].line == 2);
  REQUIRE(e[0].rules.size() == 2);
  CHECK(!e[0].rules.rule(0).read_only);
  CHECK(e[0].rules.rule(0).squash == odafs::server::ClientRule::Squash::kNone);
  CHECK(e[0].rules.rule(1).read_only);
  CHECK(e[1].path == "/srv/b");
  CHECK(e[1].line == 4);
  REQUIRE(e[1].rules.size() == 2);
  // The line's -defaults apply; a client's own options come after them and win.
  CHECK(e[1].rules.rule(0).read_only);
  CHECK(e[1].rules.rule(0).squash == odafs::server::ClientRule::Squash::kAll);
  CHECK(!e[1].rules.rule(1).read_only);
  CHECK(e[1].rules.rule(1).accepted_only == "async,subtree_check,fsid=7,wdelay,sec=sys");
  CHECK(e[2].path == "/srv/with space");
  CHECK(e[2].rules.rule(0).tls);
}

TEST_CASE("exports file: each mistake is refused with its line, nothing half taken") {
  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& bad : {
           Bad{"/srv/a\n", "names no client"},
           Bad{"/srv/a 127.0.0.1 (rw)\n", "follows a blank"},
           Bad{"srv/a 127.0.0.1\n", "not an absolute path"},
           Bad{"/srv/../etc 127.0.0.1\n", "not an absolute path"},
           Bad{"/srv/b ::1\n/srv/a 127.0.0.1\n/srv/a/ ::1\n", "exported twice"},
           Bad{"/srv/a 127.0.0.1(rw,bogus)\n", "unknown option 'bogus'"},
           Bad{"/srv/a 127.0.0.1(sec=krb5p)\n", "no Kerberos"},
           Bad{"\"/srv/a 127.0.0.1\n", "quote is not closed"},
           Bad{"/srv/a 127.0.0.1(rw) -ro\n", "come first"},
           Bad{"/srv/a 10.0.0.0/99\n", "prefix"},
           Bad{"/srv/a -ro 127.0.0.1(rw\n", "must end with ')'"},
       }) {
    CAPTURE(bad.text);
    odafs::Result<std::vector<odafs::server::ExportLine>> parsed =
        parse_exports(std::string("# first line\n") + bad.text, "FILE", 65534, 65534);
    REQUIRE(!parsed.ok());
    CHECK(parsed.status().errno_value() == EINVAL);
    // The line of the mistake: the last of the text.
    const std::string line =
        std::to_string(1 + std::count(bad.text, bad.text + std::strlen(bad.text), '\n'));
    CHECK(parsed.status().message().rfind("FILE:" + line + ": ", 0) == 0);
    CHECK(parsed.status().message().find(bad.says) != std::string::npos);
  }
}

TEST_CASE("odafsd --check-exports prints a good file's rules and names a bad file's line") {
  TwoExports x;
  Ran good = run(std::string(ODAFSD_PATH) + " --check-exports " + x.file);
  CHECK(good.status == 0);
  CHECK(good.output.find(x.a + "\n  127.0.0.1(rw,no_root_squash,sync,no_subtree_check) = "
                               "127.0.0.1/32 rw,no_root_squash,insecure (no effect in odafs: "
                               "sync,no_subtree_check)") != std::string::npos);
  CHECK(good.output.find(x.b + "\n") != std::string::npos);

  write_local(x.file, x.a + " 127.0.0.1\n" + x.b + " 127.0.0.1(rw,nosuch)\n");
  Ran bad = run(std::string(ODAFSD_PATH) + " --check-exports " + x.file);
  CHECK(bad.status == 2);
  CHECK(bad.output.find(x.file + ":2: 127.0.0.1(rw,nosuch): unknown option 'nosuch'") !=
        std::string::npos);

  write_local(x.file, x.top / "missing" + " 127.0.0.1\n");
  Ran missing = run(std::string(ODAFSD_PATH) + " --check-exports " + x.file);
  CHECK(missing.status == 2);
  CHECK(missing.output.find("is not a directory (it does not exist)") != std::string::npos);

  // --export and --exports together, and --clients with --exports, are refused.
  CHECK(run(std::string(ODAFSD_PATH) + " --listen 127.0.0.1:0 --export " + x.a + " --exports " +
            x.file)
            .status == 2);
}

TEST_CASE("two exports behind one odafsd: each reached by its path, under its own rules") {
  TwoExports x;
  ServerProcess server("", {"--exports", x.file});
  // What this host may mount, as showmount -e.
  std::vector<odafs::ExportInfo> listed = odafs::list_exports(server.url());
  REQUIRE(listed.size() == 2);
  CHECK(listed[0].path == x.a);
  CHECK(listed[0].options.rfind("rw,no_root_squash", 0) == 0);
  CHECK(listed[1].path == x.b);
  CHECK(listed[1].options.rfind("ro,no_root_squash", 0) == 0);

  auto a = Client::mount(server.url(x.a));
  auto b = Client::mount(server.url(x.b));
  CHECK(odafs::test::read_all(*a, "f", 100) == "in a");
  CHECK(odafs::test::read_all(*b, "f", 100) == "in b");
  write_synced(*a, "new", "written in a");
  CHECK(read_local(x.a + "/new") == "written in a");
  CHECK(errno_of([&] { write_synced(*b, "new", "refused"); }) == EROFS);
  CHECK(access((x.b + "/new").c_str(), F_OK) != 0);

  // A path inside an export mounts that export's directory; a path in none is not found.
  write_local(x.a + "/sub.txt", "");
  REQUIRE(mkdir((x.a + "/dir").c_str(), 0755) == 0);
  write_local(x.a + "/dir/g", "deeper");
  auto dir = Client::mount(server.url(x.a + "/dir"));
  CHECK(odafs::test::read_all(*dir, "g", 100) == "deeper");
  CHECK(errno_of([&] { Client::mount(server.url("/")); }) == ENOENT);
  CHECK(errno_of([&] { Client::mount(server.url(x.top.path())); }) == ENOENT);
  CHECK(errno_of([&] { Client::mount(server.url(x.a + "/../b")); }) == EINVAL);

  // Each export keeps its own counters: b's refusal is b's.
  CHECK(server_stat(*b, "auth.read_only") == 1);
  CHECK(server_stat(*a, "auth.read_only") == 0);
}

TEST_CASE("two exports: a handle of one is no handle on the other's connection") {
  TwoExports x;
  ServerProcess server("", {"--exports", x.file});
  odafs::test::RawMount a(server.port(), x.a.c_str());
  odafs::test::RawMount b(server.port(), x.b.c_str());
  CHECK(a.getattr_root() == ODAFS_OK);
  CHECK(b.getattr_root() == ODAFS_OK);
  CHECK(b.getattr(a.root) == ODAFS_ERR_STALE);
  CHECK(a.getattr(b.root) == ODAFS_ERR_STALE);

  // A connection that mounted a may not MOUNT b (it belongs to a's rules).
  mount_args m{};
  m.path = const_cast<char*>(x.b.c_str());
  mount_res res{};
  REQUIRE_OK(a.ch->call(ODAFSPROC_MOUNT, odafs::rpc::to_xdrproc(xdr_mount_args), &m,
                        odafs::rpc::to_xdrproc(xdr_mount_res), &res));
  CHECK(res.status == ODAFS_ERR_XDEV);

  // Before its MOUNT a connection may call nothing that names a file.
  odafs::rpc::Channel::Options o;
  o.program = ODAFS_PROGRAM;
  o.version = ODAFS_V3;
  o.timeout_ms = 10000;
  std::unique_ptr<odafs::rpc::Channel> unbound =
      odafs::test::open_channel({"127.0.0.1", server.port()}, o);
  getattr_args g{};
  std::memcpy(g.fh, a.root, sizeof g.fh);
  attr_res attr{};
  CHECK(unbound
            ->call(ODAFSPROC_GETATTR, odafs::rpc::to_xdrproc(xdr_getattr_args), &g,
                   odafs::rpc::to_xdrproc(xdr_attr_res), &attr)
            .errno_value() == EACCES);
}

TEST_CASE("SIGHUP reloads the exports: ro turns rw and a removed client is refused, live") {
  TwoExports x;
  ServerProcess server("", {"--exports", x.file});
  auto a = Client::mount(server.url(x.a));
  auto b = Client::mount(server.url(x.b));
  // A write delegation held on a, with bytes the server has not seen yet.
  write_synced(*a, "held", "v1");
  {
    File f = a->open("held", O_RDWR);
    REQUIRE(server_stat(*a, "delegations.granted_write") == 1);
    CHECK(f.pwrite("v2", 2, 0) == 2);
    f.close();
  }
  CHECK(errno_of([&] { write_synced(*b, "new", "refused"); }) == EROFS);

  x.write_rules("rw,no_root_squash", "rw,no_root_squash");
  REQUIRE(kill(server.pid(), SIGHUP) == 0);
  // The same connection, without a new mount: b takes the write from its next call.
  CHECK(odafs::test::eventually(
      [&] { return errno_of([&] { write_synced(*b, "new", "now rw"); }) == 0; }));
  CHECK(read_local(x.b + "/new") == "now rw");
  // The reload recalled nothing: a's delegation still holds its bytes, and hands them over
  // at its fsync.
  CHECK(server_stat(*a, "delegations.recalled") == 0);
  CHECK(server_stat(*a, "delegations.held") == 1);
  {
    File f = a->open("held", O_RDWR);
    f.fsync();
    f.close();
  }
  CHECK(read_local(x.a + "/held") == "v2");

  // a's line now admits another host only: this client is refused from its next call.
  x.write_rules("rw", "rw,no_root_squash", "10.99.99.99");
  REQUIRE(kill(server.pid(), SIGHUP) == 0);
  CHECK(odafs::test::eventually(
      [&] { return errno_of([&] { odafs::test::read_all(*a, "f", 100); }) == EACCES; }));
  CHECK(odafs::test::read_all(*b, "f", 100) == "in b");

  // A file that does not parse changes nothing, and the server serves on.
  write_local(x.file, x.b + " 127.0.0.1(rw,bogus)\n");
  REQUIRE(kill(server.pid(), SIGHUP) == 0);
  usleep(200 * 1000);
  write_synced(*b, "after", "still rw");
  CHECK(read_local(x.b + "/after") == "still rw");
}

TEST_CASE("odafs CLI: a URL's path names the export, and odafs exports lists them") {
  TwoExports x;
  ServerProcess server("", {"--exports", x.file});
  const std::string cli = ODAFS_CLI_PATH;
  Ran cat = run(cli + " cat " + server.url(x.b + "/f"));
  CHECK(cat.status == 0);
  CHECK(cat.output == "in b");
  Ran put = run("printf 'by path' | " + cli + " put - " + server.url(x.a + "/put.txt"));
  CHECK(put.status == 0);
  CHECK(read_local(x.a + "/put.txt") == "by path");
  Ran ro = run("printf x | " + cli + " put - " + server.url(x.b + "/put.txt"));
  CHECK(ro.status == 1);
  Ran none = run(cli + " cat " + server.url(x.top / "exports"));
  CHECK(none.status == 1);
  CHECK(none.output.find("in no export this host may mount") != std::string::npos);
  Ran listed = run(cli + " exports " + server.url());
  CHECK(listed.status == 0);
  CHECK(listed.output.find(x.a) != std::string::npos);
  CHECK(listed.output.find(x.b) != std::string::npos);
}

namespace {

// GET path from the HTTP server at port on 127.0.0.1: the status line's code and the body.
std::pair<int, std::string> http_get(uint16_t port, const std::string& path,
                                     const std::string& method = "GET") {
  const int fd = odafs::net::connect_tcp({"127.0.0.1", port}).value();
  const std::string request = method + " " + path + " HTTP/1.0\r\nHost: x\r\n\r\n";
  REQUIRE(write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) response.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  REQUIRE(body != std::string::npos);
  return {std::stoi(response.substr(response.find(' ') + 1)), response.substr(body + 4)};
}

// The value of the sample named exactly `series` (name and labels) in Prometheus text; -1
// when absent. Checks each line has the format's shape.
double sample(const std::string& text, const std::string& series) {
  double found = -1;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    const double value = std::stod(line.substr(space + 1));
    if (line.compare(0, space, series) == 0) found = value;
  }
  return found;
}

uint16_t metrics_port(const ServerProcess& server) {
  const std::string& line = server.ready_line();
  const size_t at = line.find("metrics=127.0.0.1:");
  REQUIRE(at != std::string::npos);
  return static_cast<uint16_t>(std::stoi(line.substr(at + 18)));
}

}  // namespace

TEST_CASE("--metrics: Prometheus text at /metrics whose counters and call times move") {
  TwoExports x;
  const std::string log = x.top / "odafsd.log";
  ServerProcess server("", {"--exports", x.file, "--metrics", "127.0.0.1:0", "--log", log});
  const uint16_t port = metrics_port(server);
  auto [code, before] = http_get(port, "/metrics");
  CHECK(code == 200);
  CHECK(before.find("# TYPE odafs_io_bytes_read_total counter") != std::string::npos);
  CHECK(before.find("# TYPE odafs_delegations_held gauge") != std::string::npos);
  const std::string a_label = "{export=\"" + x.a + "\"}";
  const std::string b_label = "{export=\"" + x.b + "\"}";
  CHECK(sample(before, "odafs_io_bytes_read_total" + a_label) == 0);
  CHECK(sample(before, "odafs_auth_read_only_total" + b_label) == 0);
  CHECK(sample(before, "odafs_recovery_in_grace" + a_label) == 0);

  auto a = Client::mount(server.url(x.a));
  auto b = Client::mount(server.url(x.b));
  CHECK(odafs::test::read_all(*a, "f", 100) == "in a");
  CHECK(errno_of([&] { write_synced(*b, "new", "refused"); }) == EROFS);

  const std::string after = http_get(port, "/metrics").second;
  CHECK(sample(after, "odafs_io_bytes_read_total" + a_label) >= 4);
  CHECK(sample(after, "odafs_io_bytes_read_total" + b_label) == 0);
  CHECK(sample(after, "odafs_auth_read_only_total" + b_label) == 1);
  CHECK(sample(after, "odafs_refused_EROFS_total" + b_label) == 1);
  CHECK(sample(after, "odafs_refused_EROFS_total" + a_label) == 0);
  // The refusal is logged (to --log FILE), naming the call, the client and the export.
  const std::string logged = read_local(log);
  CHECK(logged.find("CREATE of 127.0.0.1:") != std::string::npos);
  CHECK(logged.find("on " + x.b + " refused: read-only") != std::string::npos);
  CHECK(sample(after, "odafs_rpc_open_connections") >= 2);
  const std::string opens = "export=\"" + x.a + "\",procedure=\"OPEN\"";
  const double count = sample(after, "odafs_call_seconds_count{" + opens + "}");
  CHECK(count >= 1);
  CHECK(sample(after, "odafs_call_seconds_bucket{" + opens + ",le=\"+Inf\"}") == count);
  CHECK(sample(after, "odafs_call_seconds_sum{" + opens + "}") > 0);

  CHECK(http_get(port, "/other").first == 404);
  CHECK(http_get(port, "/metrics", "POST").first == 405);
}

// Takes a mount away on destruction, whatever the test's end (fusermount3 -u -z).
struct LazyUnmount {
  std::string dir;
  ~LazyUnmount() { odafs::test::fusermount({"-u", "-z", dir}); }
};

ODAFS_MOUNT_TEST("a background mount's write-back failure reaches its log file (log=FILE)") {
  TwoExports x;
  ServerProcess server("", {"--exports", x.file});
  TempDir where;
  const std::string mountpoint = where / "m";
  const std::string log = where / "mount.log";
  REQUIRE(mkdir(mountpoint.c_str(), 0755) == 0);
  // In the background (no -f): it returns once mounted, its stderr then goes nowhere.
  Ran started = run(std::string(odafs::test::mount_binary()) + " -o log=" + log + " " +
                    server.url(x.a) + " " + mountpoint);
  REQUIRE(started.status == 0);
  const LazyUnmount unmount{mountpoint};
  REQUIRE(odafs::test::eventually([&] { return odafs::test::is_odafs_mounted(mountpoint); }));

  // A close the mount acknowledged, its bytes kept under a write delegation.
  write_local(mountpoint + "/kept", "acknowledged");
  // The export turns read-only: the write-back the recall below asks for is refused.
  x.write_rules("ro,no_root_squash", "ro,no_root_squash");
  REQUIRE(kill(server.pid(), SIGHUP) == 0);
  usleep(100 * 1000);
  auto other = Client::mount(server.url(x.a));
  (void)errno_of([&] { odafs::test::read_all(*other, "kept", 100); });
  CHECK(odafs::test::eventually(
      [&] {
        return read_local(log).find("writing back a write delegation's writes failed") !=
               std::string::npos;
      },
      10));
  CHECK(read_local(log).find("Read-only file system") != std::string::npos);
}

namespace {

// How many of pid's descriptors are open on files already deleted.
int deleted_fds(pid_t pid) {
  int n = 0;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.size() > 10 && target.ends_with(" (deleted)")) ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("files deleted in an export hold no disk space a second later, however deleted") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto writer = Client::mount(server.url());
  auto remover = Client::mount(server.url());
  const std::string data(256 << 10, 'x');
  std::vector<File> open_files;
  for (int i = 0; i < 25; ++i) {
    const std::string name = "f" + std::to_string(i);
    write_synced(*writer, name, data);
    // Held open by a client (with its delegation), read through the server's cache.
    open_files.push_back(writer->open(name, O_RDONLY));
    CHECK(odafs::test::read_all(open_files.back(), 100) == data.substr(0, 100));
  }
  // Removed by another client, and (the last five) on the server's disk directly.
  for (int i = 0; i < 20; ++i) remover->unlink("f" + std::to_string(i));
  for (int i = 20; i < 25; ++i) REQUIRE(unlink((dir / ("f" + std::to_string(i))).c_str()) == 0);
  CHECK(odafs::test::eventually([&] { return deleted_fds(server.pid()) == 0; }, 1.0));
  for (File& f : open_files) f.close();
}

// dist/odafsd.service's command lines, run as written but for where they listen and what
// they read: the unit's flags are odafsd's.
TEST_CASE("the systemd unit's ExecStartPre and ExecStart are command lines odafsd takes") {
  TwoExports x;
  std::string unit = read_local(ODAFS_SOURCE_DIR "/dist/odafsd.service");
  auto command_of = [&unit](const std::string& key) {
    const size_t at = unit.find("\n" + key + "=");
    REQUIRE(at != std::string::npos);
    const size_t from = at + key.size() + 2;
    std::istringstream words(unit.substr(from, unit.find('\n', from) - from));
    std::vector<std::string> argv;
    for (std::string w; words >> w;) argv.push_back(w);
    return argv;
  };
  std::vector<std::string> pre = command_of("ExecStartPre");
  REQUIRE(pre.size() == 3);
  CHECK(pre[0] == "/usr/local/bin/odafsd");
  CHECK(run(std::string(ODAFSD_PATH) + " " + pre[1] + " " + x.file).status == 0);

  std::vector<std::string> start = command_of("ExecStart");
  REQUIRE(start.size() > 1);
  CHECK(start[0] == "/usr/local/bin/odafsd");
  std::vector<std::string> args(start.begin() + 1, start.end());
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--exports") args[i + 1] = x.file;
    if (args[i] == "--metrics") args[i + 1] = "127.0.0.1:0";
    if (args[i] == "--listen") args.erase(args.begin() + i, args.begin() + i + 2), --i;
  }
  ServerProcess server("", args);  // ServerProcess gives --listen 127.0.0.1:PORT
  CHECK(server.ready_line().find("metrics=") != std::string::npos);
  CHECK(odafs::test::read_all(*Client::mount(server.url(x.a)), "f", 100) == "in a");
}

// The fstab way: mount(8) -t fuse.odafs-mount runs mount.fuse3 as below, which runs
// odafs-mount from the PATH (mount(8) gives it a fixed one, where cmake --install puts
// odafs-mount; here the build's directory stands in for it). docs/exports.md.
ODAFS_MOUNT_TEST("mount.fuse3 -t fuse.odafs-mount mounts an export by URL, as fstab does") {
  TwoExports x;
  ServerProcess server("", {"--exports", x.file});
  TempDir where;
  const std::string mountpoint = where / "m";
  REQUIRE(mkdir(mountpoint.c_str(), 0755) == 0);
  const std::string bin = std::filesystem::path(odafs::test::mount_binary()).parent_path();
  Ran mounted = run("PATH=" + bin + ":$PATH /sbin/mount.fuse3 " + server.url(x.a) + " " +
                    mountpoint + " -t fuse.odafs-mount -o _netdev,rw");
  CAPTURE(mounted.output);
  REQUIRE(mounted.status == 0);
  const LazyUnmount unmount{mountpoint};
  CHECK(read_local(mountpoint + "/f") == "in a");
  Ran shown = run("findmnt -n -o SOURCE,FSTYPE " + mountpoint);
  CHECK(shown.output.find(server.url(x.a) + " fuse.odafs-mount") != std::string::npos);
}

TEST_CASE("odafs clients: root on the server's host sees each connection; no one else does" *
          doctest::skip(geteuid() != 0) *
          doctest::description(geteuid() != 0 ? "needs root: the listing is root's, and the "
                                                "refusal needs another user to run as"
                                              : "")) {
  TwoExports x;
  ServerProcess server("", {"--exports", x.file});
  auto a = Client::mount(server.url(x.a));
  write_synced(*a, "held", "held under a delegation");
  File f = a->open("held", O_RDWR);
  std::vector<odafs::ClientInfo> listed = odafs::list_clients(server.url());
  auto mine = std::find_if(listed.begin(), listed.end(),
                           [&](const odafs::ClientInfo& c) { return c.export_path == x.a; });
  REQUIRE(mine != listed.end());
  CHECK(mine->identity == "uid:0");
  CHECK(!mine->tls);
  CHECK(mine->delegations >= 1);
  CHECK(mine->address.rfind("127.0.0.1:", 0) == 0);

  const std::string cli = ODAFS_CLI_PATH;
  Ran table = run(cli + " clients " + server.url());
  CHECK(table.status == 0);
  CHECK(table.output.find(x.a) != std::string::npos);
  // Another user on the same host: refused, as over raw RPC.
  Ran other =
      run("setpriv --reuid=65534 --regid=65534 --clear-groups " + cli + " clients " + server.url());
  CHECK(other.status == 1);
  CHECK(other.output.find("Operation not permitted") != std::string::npos);
  f.close();
}

TEST_CASE("two exports: a client one export admits and the other does not mounts only the one") {
  TwoExports x;
  // b for another host only.
  write_local(x.file, x.a + " 127.0.0.1(rw)\n" + x.b + " 10.99.99.99(rw)\n");
  ServerProcess server("", {"--exports", x.file});
  CHECK(odafs::test::read_all(*Client::mount(server.url(x.a)), "f", 100) == "in a");
  CHECK(errno_of([&] { Client::mount(server.url(x.b)); }) == EACCES);
  // Nor does EXPORTS list it to this host.
  std::vector<odafs::ExportInfo> listed = odafs::list_exports(server.url());
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].path == x.a);
}

// ---- odafsd's start-up decisions, without a process (server/daemon_setup.h).

TEST_CASE("daemon setup: --clients rules, and the loopback default only on a loopback listen") {
  odafs::server::AccessFlags flags;
  for (const char* host : {"127.0.0.1", "localhost", "::1", "127.9.9.9"}) {
    CAPTURE(host);
    odafs::Result<odafs::server::ExportRules> rules = odafs::server::rules_from_flags(flags, host);
    REQUIRE(rules.ok());
    CHECK(rules->size() == 2);  // 127.0.0.0/8 and ::1
    CHECK(rules->rule(0).named_peers_only);
  }
  for (const char* host : {"0.0.0.0", "", "10.1.2.3", "::"}) {
    CAPTURE(host);
    odafs::Result<odafs::server::ExportRules> rules = odafs::server::rules_from_flags(flags, host);
    REQUIRE(!rules.ok());
    CHECK(rules.status().message().find("reachable from other hosts") != std::string::npos);
  }
  flags.clients = {"10.0.0.0/8(ro)", "192.168.1.7"};
  odafs::Result<odafs::server::ExportRules> given = odafs::server::rules_from_flags(flags, "::");
  REQUIRE(given.ok());
  CHECK(given->size() == 2);
  CHECK(given->rule(0).read_only);
  flags.clients = {"10.0.0.0/8(ro,bogus)"};
  odafs::Result<odafs::server::ExportRules> bad = odafs::server::rules_from_flags(flags, "::");
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().rfind("--clients 10.0.0.0/8(ro,bogus): unknown option", 0) == 0);
}

TEST_CASE("daemon setup: an exports file loads only with every export an existing directory") {
  TempDir dir;
  REQUIRE(mkdir((dir / "a").c_str(), 0755) == 0);
  write_local(dir / "f", "");
  write_local(dir / "good", dir / "a" + " 127.0.0.1\n");
  write_local(dir / "missing", dir / "a" + " 127.0.0.1\n" + dir / "b" + " 127.0.0.1\n");
  write_local(dir / "file", dir / "f" + " 127.0.0.1\n");
  write_local(dir / "empty", "# nothing\n");
  odafs::server::AccessFlags flags;
  CHECK(odafs::server::load_exports(dir / "good", flags).ok());
  odafs::Result<std::vector<odafs::server::ExportLine>> missing =
      odafs::server::load_exports(dir / "missing", flags);
  REQUIRE(!missing.ok());
  CHECK(missing.status().errno_value() == ENOENT);
  CHECK(missing.status().message() ==
        dir / "missing" + ":2: " + dir / "b" + " is not a directory (it does not exist)");
  CHECK(odafs::server::load_exports(dir / "file", flags).status().errno_value() == ENOTDIR);
  CHECK(odafs::server::load_exports(dir / "empty", flags)
            .status()
            .message()
            .find("exports nothing") != std::string::npos);
  CHECK(odafs::server::load_exports(dir / "absent", flags).status().errno_value() == ENOENT);
}

TEST_CASE("daemon setup: tls and mtls rules need what serves them") {
  odafs::server::ExportRules rules;
  rules.add("*(tls)", 65534, 65534);
  odafs::server::TlsIdentities::Files files;
  CHECK(odafs::server::tls_rules_problem(rules, false, files).find("give --tls-cert") !=
        std::string::npos);
  CHECK(odafs::server::tls_rules_problem(rules, true, files).empty());
  odafs::server::ExportRules mutual;
  mutual.add("*(mtls)", 65534, 65534);
  CHECK(odafs::server::tls_rules_problem(mutual, true, files).find("give --tls-ca") !=
        std::string::npos);
  files.tls.ca = "/some/ca.pem";
  CHECK(odafs::server::tls_rules_problem(mutual, true, files).empty());
}

TEST_CASE("daemon setup: one recovery record per export, in a private state directory") {
  TempDir dir;
  TempDir export_a, export_b;
  const std::string state = dir / "state";
  odafs::Result<std::string> a = odafs::server::prepare_recovery_record(state, export_a.path());
  odafs::Result<std::string> b = odafs::server::prepare_recovery_record(state, export_b.path());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->rfind(state + "/recovery-", 0) == 0);
  CHECK(*a != *b);
  // Two spellings of one directory share one record.
  CHECK(*odafs::server::prepare_recovery_record(state, export_a.path() + "/.") == *a);
  struct stat st;
  REQUIRE(stat(state.c_str(), &st) == 0);
  CHECK((st.st_mode & 077) == 0);
  // A state directory others may write is refused.
  const std::string open_dir = dir / "open";
  REQUIRE(mkdir(open_dir.c_str(), 0777) == 0);
  REQUIRE(chmod(open_dir.c_str(), 0777) == 0);
  odafs::Result<std::string> refused =
      odafs::server::prepare_recovery_record(open_dir, export_a.path());
  REQUIRE(!refused.ok());
  CHECK(refused.status().message().rfind("--state-dir " + open_dir + ": ", 0) == 0);
}

TEST_CASE("daemon setup: a CephFS gateway's session uuid is kept, and held by one odafsd") {
  TempDir dir;
  const std::string state = dir / "state";
  const std::string record = *odafs::server::prepare_recovery_record(state, "ceph:/@conf");
  odafs::Result<odafs::server::CephSession> first = odafs::server::claim_ceph_session(record);
  REQUIRE(first.ok());
  CHECK(first->uuid.size() == 32);
  CHECK(first->uuid.find_first_not_of("0123456789abcdef") == std::string::npos);
  // A second odafsd of the same export and state directory would evict the first's
  // session: refused while the first lives.
  odafs::Result<odafs::server::CephSession> second = odafs::server::claim_ceph_session(record);
  REQUIRE(!second.ok());
  CHECK(second.errno_value() == EBUSY);
  CHECK(second.status().message().find("--state-dir") != std::string::npos);
  // Once it is gone (its descriptor closed, as at its exit or crash), a restart takes the
  // same uuid: the one whose session it evicts.
  close(first->lock_fd);
  odafs::Result<odafs::server::CephSession> restarted = odafs::server::claim_ceph_session(record);
  REQUIRE(restarted.ok());
  CHECK(restarted->uuid == first->uuid);
  struct stat st;
  REQUIRE(stat((record + ".ceph-session").c_str(), &st) == 0);
  CHECK((st.st_mode & 077) == 0);
  close(restarted->lock_fd);
  // Another export's gateway has its own.
  const std::string other = *odafs::server::prepare_recovery_record(state, "ceph:/a@conf");
  odafs::Result<odafs::server::CephSession> theirs = odafs::server::claim_ceph_session(other);
  REQUIRE(theirs.ok());
  CHECK(theirs->uuid != first->uuid);
  close(theirs->lock_fd);
}

TEST_CASE("daemon setup: a handle key file must be private and long enough") {
  TempDir dir;
  REQUIRE(chmod(dir.path().c_str(), 0700) == 0);
  const std::string key = dir / "key";
  write_local(key, std::string(40, 'k'));
  REQUIRE(chmod(key.c_str(), 0600) == 0);
  odafs::Result<odafs::server::NodeTable::SharedKey> one =
      odafs::server::read_handle_key(key, "ceph:/a");
  odafs::Result<odafs::server::NodeTable::SharedKey> other =
      odafs::server::read_handle_key(key, "ceph:/b");
  REQUIRE(one.ok());
  REQUIRE(other.ok());
  CHECK(*one != *other);  // keyed by the export too
  REQUIRE(chmod(key.c_str(), 0644) == 0);
  CHECK(odafs::server::read_handle_key(key, "ceph:/a")
            .status()
            .message()
            .find("may be read by others") != std::string::npos);
  REQUIRE(chmod(key.c_str(), 0600) == 0);
  write_local(key, "short");
  CHECK(odafs::server::read_handle_key(key, "ceph:/a")
            .status()
            .message()
            .find("32 or more are needed") != std::string::npos);
}

TEST_CASE("two exports: a write delegation's kept bytes come home across a server crash") {
  TwoExports x;
  ServerProcess server("", {"--exports", x.file});
  auto a = Client::mount(server.url(x.a));
  {
    File f = a->open("kept", O_RDWR | O_CREAT, 0644);
    REQUIRE(f.pwrite("acknowledged", 12, 0) == 12);
    f.close();  // kept under the write delegation: not on the disk yet
  }
  REQUIRE(server_stat(*a, "delegations.granted_write") == 1);
  CHECK(read_local(x.a + "/kept").empty());
  server.kill_hard();
  server.start_again();
  // The client re-mounts its export by path, reclaims in a's grace period, writes back.
  File f = a->open("kept", O_RDWR);
  f.fsync();
  f.close();
  CHECK(read_local(x.a + "/kept") == "acknowledged");
  // b, which no one held anything of, serves the other export meanwhile.
  CHECK(odafs::test::read_all(*Client::mount(server.url(x.b)), "f", 100) == "in b");
}
