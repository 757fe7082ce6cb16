// Test support for the delegation suites (test_delegations, test_write_delegations): a file
// written through a client, a timer, and a child process that takes a delegation and then
// holds it while the test stops or kills it. Uses doctest's REQUIRE: test binaries only.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>

#include "client/client.h"

namespace odafs::test {

// Creates (or opens) path, writes text at 0 and closes. The CREATE (or OPEN) may grant fs
// a write delegation, which then keeps the bytes past the close.
inline void write_path(Client& fs, const std::string& path, const std::string& text,
                       int flags = 0) {
  File f = fs.open(path, O_RDWR | O_CREAT | flags, 0644);
  f.pwrite(text.data(), text.size(), 0);
  f.close();
}

// write_path through a client of its own, unmounted before this returns: the bytes are on
// the server and no client holds a delegation on the file.
inline void make_file(const std::string& url, const std::string& path, const std::string& text) {
  auto maker = Client::mount(url);
  write_path(*maker, path, text);
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Writes "before" to `path` through a client of its own, then forks a child that mounts
// url and runs take(client) (which takes a delegation on path), says so on a pipe and then
// waits to be stopped or killed. Returns the child's pid once take has returned.
inline pid_t holder_process(const std::string& url, const std::string& path,
                            const std::function<void(Client&)>& take) {
  make_file(url, path, "before");
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    try {
      auto fs = Client::mount(url);
      take(*fs);
      (void)!write(fds[1], "k", 1);
      for (;;) pause();
    } catch (...) {
      _exit(2);
    }
  }
  close(fds[1]);
  char c = 0;
  bool ready = read(fds[0], &c, 1) == 1;
  close(fds[0]);
  REQUIRE(ready);
  return pid;
}

// Ends a holder, stopped or not. SIGKILL first: continued, a write-delegation holder would
// write back its late bytes.
inline void reap(pid_t pid) {
  kill(pid, SIGKILL);
  kill(pid, SIGCONT);
  waitpid(pid, nullptr, 0);
}

}  // namespace odafs::test
