// Unit: the crash-simulating file environment (server/file_env.h).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "server/file_env.h"
#include "tests/support/server_process.h"

using odafs::server::CrashSimulatingEnv;
using odafs::test::failed_with;
using odafs::test::pattern;
using odafs::test::read_local;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

void put(odafs::server::FileEnv& env, int fd, const std::string& data, off_t offset) {
  REQUIRE(env.pwrite(fd, data.data(), data.size(), offset) == static_cast<ssize_t>(data.size()));
}

}  // namespace

TEST_CASE("a simulated crash undoes exactly the changes after each file's last sync") {
  TempDir dir;
  std::string base = pattern(10000, 1);
  write_local(dir / "a", base);
  write_local(dir / "b", base);
  int a = open((dir / "a").c_str(), O_RDWR);
  int b = open((dir / "b").c_str(), O_RDWR);
  REQUIRE(a >= 0);
  REQUIRE(b >= 0);
  CrashSimulatingEnv env;

  // a: an overwrite and an extension, synced; then more, not synced.
  std::string synced = base;
  put(env, a, std::string(100, 'x'), 50);
  synced.replace(50, 100, std::string(100, 'x'));
  put(env, a, std::string(3000, 'y'), 9000);
  synced.replace(9000, 1000, std::string(3000, 'y'));
  REQUIRE(env.fsync(a) == 0);
  put(env, a, std::string(500, 'z'), 100);
  REQUIRE(env.ftruncate(a, 20) == 0);
  put(env, a, std::string(40000, 'w'), 30000);
  // b: shrunk, grown and overwritten, never synced.
  REQUIRE(env.ftruncate(b, 10) == 0);
  REQUIRE(env.ftruncate(b, 70000) == 0);
  put(env, b, std::string(5, 'q'), 2);
  CHECK(env.unsynced_files() == 2);

  close(a);  // the server may have closed its descriptors before the crash
  env.crash();
  CHECK(read_local(dir / "a") == synced);
  CHECK(read_local(dir / "b") == base);
  CHECK(env.unsynced_files() == 0);
  close(b);
}

TEST_CASE("fdatasync counts as a sync; after the crash every call fails with EIO") {
  TempDir dir;
  write_local(dir / "f", "");
  int fd = open((dir / "f").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  CrashSimulatingEnv env;
  put(env, fd, "durable", 0);
  REQUIRE(env.fdatasync(fd) == 0);
  put(env, fd, "-lost", 7);
  env.crash();
  CHECK(read_local(dir / "f") == "durable");
  char c;
  CHECK(failed_with(env.pread(fd, &c, 1, 0) < 0) == EIO);
  CHECK(failed_with(env.pwrite(fd, "x", 1, 0) < 0) == EIO);
  CHECK(failed_with(env.fsync(fd) != 0) == EIO);
  CHECK(read_local(dir / "f") == "durable");
  close(fd);
}
