// Test support for the odafs-mount suites (test_mount*.cc): an export served by odafsd and
// mounted with odafs-mount, and small helpers for system calls on it. Checks with doctest:
// include it from test files only.
#pragma once

#include <dirent.h>
#include <doctest/doctest.h>
#include <grp.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/client.h"
#include "tests/support/client_util.h"
#include "tests/support/mount_process.h"
#include "tests/support/server_process.h"

namespace odafs::test {

// An export served by odafsd and mounted with odafs-mount. Members go in reverse on
// destruction: the mount first, then the server, then the directories.
struct Mounted {
  explicit Mounted(std::vector<std::string> options = {}, std::vector<std::string> server_args = {})
      : server(exp.path(), std::move(server_args)), m(server.url(), mnt.path(), options) {}
  std::string operator/(const std::string& name) const { return m / name; }
  std::string local(const std::string& name) const { return exp / name; }
  // File `name` of the export as another client of the server reads it. A close through
  // the mount may keep its bytes in the mount (a write delegation's, as a page cache would);
  // another client's access recalls them, so this is what the mount wrote.
  std::string read_by_another_client(const std::string& name) const {
    auto other = Client::mount(server.url());
    return read_all(*other, name, 1 << 20);
  }
  // Writes text at offset 0 of `name` (created if need be) through another client of the
  // server, whose unmount puts the bytes on the server before this returns.
  void write_by_another_client(const std::string& name, const std::string& text) const {
    auto other = Client::mount(server.url());
    File f = other->open(name, O_WRONLY | O_CREAT, 0644);
    f.pwrite(text.data(), text.size(), 0);
    f.close();
  }

  TempDir exp;
  TempDir mnt;
  ServerProcess server;
  MountProcess m;
};

// The whole file at path, through read(2).
inline std::string cat(const std::string& path) { return read_local(path); }

inline ssize_t write_at(int fd, const std::string& s, off_t off) {
  return pwrite(fd, s.data(), s.size(), off);
}

// The names readdir(3) lists in dir, "." and ".." included.
inline std::set<std::string> list(const std::string& dir) {
  std::set<std::string> names;
  DIR* d = opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) names.insert(e->d_name);
  closedir(d);
  return names;
}

// Waits up to `bound` for child pid to exit; its wait status, or -1 when it had to be
// killed (a hang).
inline int wait_child(pid_t pid, std::chrono::milliseconds bound) {
  const int status = wait_exit(pid, bound);
  if (status == -1) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return status;
}

// Runs fn in a child process and waits up to `bound` for it; returns its exit code, or -1
// if it had to be killed (a hang) or died of a signal. fn must use system calls only (the
// child of a process with threads).
template <class Fn>
int in_child(std::chrono::milliseconds bound, Fn&& fn) {
  pid_t pid = fork();
  if (pid == 0) _exit(fn());
  const int status = wait_child(pid, bound);
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Why a test that needs FUSE and root cannot run here ("" when it can).
inline const char* root_mount_skip() {
  if (!fuse_available()) return fuse_skip_description();
  return geteuid() != 0 ? "needs root: odafsd --auth-sys acts as other uids" : "";
}

// A test case that mounts and acts as other users: skipped, with the reason, where that
// cannot be done (root_mount_skip).
#define ODAFS_ROOT_MOUNT_TEST(name)                                          \
  TEST_CASE(name* doctest::skip(*::odafs::test::root_mount_skip() != '\0') * \
            doctest::description(::odafs::test::root_mount_skip()))

inline constexpr uid_t kNobody = 65534;

// Runs fn in a child that has become uid/gid 65534 (no groups), for up to 20 s; its exit
// code, 90 when the switch failed, -1 when it hung.
template <class Fn>
int as_nobody(Fn&& fn) {
  return in_child(std::chrono::seconds(20), [&] {
    if (setgroups(0, nullptr) != 0 || setresgid(kNobody, kNobody, kNobody) != 0 ||
        setresuid(kNobody, kNobody, kNobody) != 0) {
      return 90;
    }
    return fn();
  });
}

}  // namespace odafs::test
