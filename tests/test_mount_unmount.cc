// Unmount and exit never discard kept bytes (docs/mount.md, "Unmounting"): bytes a close
// kept under a write delegation while the server is down wait for the server at unmount
// (by default, as an NFS hard mount's do), or, with a bound (unmount_wait_ms), go to a
// local rescue file, the exit status saying so. Through a real odafs-mount (skipped, with
// the reason, where FUSE cannot mount) and through the library's Client destructor.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/support/mount_process.h"
#include "tests/support/server_process.h"

using odafs::test::eventually;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

const std::string kPrecious = "precious\n";

// The files in dir (full paths).
std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().string());
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Whether child `pid` has exited; its wait status in *status then.
bool exited(pid_t pid, int* status) { return waitpid(pid, status, WNOHANG) == pid; }

// `echo precious > m/g`, and the bytes are only in the mount (kept under its write
// delegation: the export does not have them yet), then the server is killed.
void write_kept_then_kill(odafs::test::MountProcess& m, ServerProcess& server,
                          const std::string& exp) {
  write_local(m / "g", kPrecious);
  REQUIRE(read_local(exp + "/g").empty());  // kept: otherwise this test proves nothing
  server.kill_hard();
}

}  // namespace

ODAFS_MOUNT_TEST("unmount with the server down waits for it, by default, and the bytes land") {
  TempDir exp, mnt;
  ServerProcess server(exp.path());
  odafs::test::MountProcess m(server.url(), mnt.path());
  write_kept_then_kill(m, server, exp.path());
  // fusermount3 -u returns at once (the kernel's mount goes); odafs-mount stays to write
  // the bytes back, and says so.
  REQUIRE(odafs::test::fusermount({"-u", mnt.path()}) == 0);
  CHECK(eventually([&] { return contains(m.stderr_text(), "waiting for the server"); }, 20));
  const std::string said = m.stderr_text();
  CHECK(contains(said, "(g)"));  // the file, and the server
  CHECK(contains(said, "127.0.0.1:" + std::to_string(server.port())));
  int status = 0;
  REQUIRE_FALSE(exited(m.pid(), &status));
  server.start_again();  // the same port, export and state directory
  REQUIRE(eventually([&] { return exited(m.pid(), &status); }, 60));
  INFO("odafs-mount said: " << m.stderr_text());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(read_local(exp / "g") == kPrecious);
}

ODAFS_MOUNT_TEST("unmount_wait_ms gives up on a server that stays down: a rescue file, exit 1") {
  TempDir exp, mnt, rescue;
  ServerProcess server(exp.path());
  odafs::test::MountProcess m(server.url(), mnt.path(),
                              {"unmount_wait_ms=1500", "rescue_dir=" + rescue.path()});
  write_kept_then_kill(m, server, exp.path());
  REQUIRE(odafs::test::fusermount({"-u", mnt.path()}) == 0);
  int status = 0;
  REQUIRE(eventually([&] { return exited(m.pid(), &status); }, 30));
  const std::string said = m.stderr_text();
  INFO("odafs-mount said: " << said);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  const std::vector<std::string> saved = files_in(rescue.path());
  REQUIRE(saved.size() == 1);
  CHECK(read_local(saved[0]) == kPrecious);
  CHECK(contains(said, saved[0]));  // the path is printed
  CHECK(contains(said, "written to g on 127.0.0.1:" + std::to_string(server.port())));
  CHECK(read_local(exp / "g").empty());
}

ODAFS_MOUNT_TEST("a signal to odafs-mount waiting at unmount gives up into a rescue file") {
  TempDir exp, mnt, rescue;
  ServerProcess server(exp.path());
  odafs::test::MountProcess m(server.url(), mnt.path(), {"rescue_dir=" + rescue.path()});
  write_kept_then_kill(m, server, exp.path());
  REQUIRE(odafs::test::fusermount({"-u", mnt.path()}) == 0);
  REQUIRE(eventually([&] { return contains(m.stderr_text(), "waiting for the server"); }, 20));
  REQUIRE(kill(m.pid(), SIGTERM) == 0);
  int status = 0;
  REQUIRE(eventually([&] { return exited(m.pid(), &status); }, 30));
  INFO("odafs-mount said: " << m.stderr_text());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  const std::vector<std::string> saved = files_in(rescue.path());
  REQUIRE(saved.size() == 1);
  CHECK(read_local(saved[0]) == kPrecious);
}

TEST_CASE("the Client destructor puts kept bytes it cannot write back in a rescue file") {
  TempDir exp, rescue;
  ServerProcess server(exp.path());
  odafs::MountOptions options;
  options.unmount_wait_ms = 0;
  options.rescue_dir = rescue.path();
  auto client = odafs::Client::mount(server.url(), options);
  {
    odafs::File f = client->open("g", O_WRONLY | O_CREAT, 0644);
    f.pwrite(kPrecious.data(), kPrecious.size(), 0);
    f.close();
  }
  REQUIRE(read_local(exp / "g").empty());  // kept under the write delegation
  server.kill_hard();
  // Once the client has seen its connection go (until then its delegation is trusted and
  // the destructor would try to write back on it).
  REQUIRE(eventually([&] { return odafs::test::errno_of([&] { client->ping(); }) != 0; }));
  SUBCASE("the destructor") { client.reset(); }
  SUBCASE("try_unmount, which says where the bytes went") {
    odafs::Status s = client->try_unmount();
    CHECK(s.errno_value() == EIO);
    CHECK(contains(s.message(), rescue.path()));
    CHECK(contains(s.message(), "g"));
    client.reset();
  }
  const std::vector<std::string> saved = files_in(rescue.path());
  REQUIRE(saved.size() == 1);
  CHECK(read_local(saved[0]) == kPrecious);
}
