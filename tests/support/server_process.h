// Test support: real odafsd processes on 127.0.0.1 with temporary exports.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace odafs::test {

// args as the argv of posix_spawn/execv: pointers into args, then nullptr. REQUIRES: args
// outlives the result and is not resized meanwhile.
inline std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

// A directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Starts `odafsd --export DIR --listen 127.0.0.1:PORT ARGS...` and waits for its ready line
// (an empty DIR: no --export, for ARGS with --exports FILE).
// The destructor stops it (SIGTERM, then SIGKILL after 10 s). Throws std::runtime_error if
// the server does not come up within 15 s. nofile > 0 runs the server with RLIMIT_NOFILE
// (soft and hard) set to it, like `prlimit --nofile=N:N odafsd ...`.
class ServerProcess {
 public:
  explicit ServerProcess(std::string export_dir, std::vector<std::string> args = {},
                         uint16_t port = 0, unsigned long nofile = 0);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Stops the server and starts a new instance on the same port and export.
  void restart();
  // Stops the server (SIGTERM and wait). Returns its exit status as from waitpid.
  int stop();
  // Kills the server with SIGKILL (a crash) and reaps it.
  void kill_hard();
  // Sends sig and reaps the server; returns its wait status (for --simulate-crashes,
  // SIGUSR1: a simulated power loss).
  int signal_and_reap(int sig);
  // Starts the server again (same port and export) after it stopped or crashed.
  void start_again() { start(); }
  bool running() const { return pid_ > 0; }

  std::string url(const std::string& path = "/") const;
  uint16_t port() const { return port_; }
  // The one-sided engine's port, 0 when it runs without one (--no-ordma).
  uint16_t engine_port() const { return engine_port_; }
  pid_t pid() const { return pid_; }
  // The ready line of its last start ("odafsd ready rpc=... engine=...").
  const std::string& ready_line() const { return ready_line_; }
  const std::string& export_dir() const { return export_dir_; }

 private:
  void start();
  std::string export_dir_;
  TempDir state_dir_;  // --state-dir, unless args name one
  std::vector<std::string> args_;
  uint16_t port_;
  unsigned long nofile_;
  uint16_t engine_port_ = 0;
  std::string ready_line_;
  pid_t pid_ = -1;
};

// Sends SIGSTOP to `pid`, a child of this process, and waits until the stop is complete:
// every thread stopped, so none is still finishing a request it had picked up. (kill()
// returns before the threads stop.) Returns false if it could not.
bool stop_child(pid_t pid);

// How many servers stopped with SIGTERM did not exit cleanly (a crash, a sanitizer
// report, a leak). test_main fails the run when it is not zero.
int abnormal_server_exits();

// Bytes of a local file (throws if unreadable).
std::string read_local(const std::string& path);
void write_local(const std::string& path, const std::string& data);
// Runs fn; returns the errno of the odafs::Error it throws, or 0 if it throws nothing.
int errno_of(const std::function<void()>& fn);
// errno if `failed`, else 0. Write the call inside the argument, CHECK(failed_with(f() == -1)
// == ENOENT): errno is then read in the same expression as the call, before doctest's
// reporting (which may change errno, e.g. under -s) runs.
inline int failed_with(bool failed) { return failed ? errno : 0; }
// Deterministic pseudo-random bytes.
std::string pattern(size_t len, uint64_t seed);

// Polls pred every `every` (10 ms unless told) for up to `seconds`; whether it came true.
// For what another process or a client's own thread does in its own time: every wait of
// the tests goes through here. A shorter `every` for a state that passes quickly.
template <class Pred>
bool eventually(Pred&& pred, double seconds = 5.0,
                std::chrono::microseconds every = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(seconds));
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

// Waits up to `bound` for child pid to exit: its wait status, or -1 while it still runs
// (0 when pid is no child of this process).
inline int wait_exit(pid_t pid, std::chrono::milliseconds bound) {
  int status = -1;
  eventually(
      [&] {
        const pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return true;
        status = r < 0 && errno != EINTR ? 0 : -1;
        return status == 0;
      },
      std::chrono::duration<double>(bound).count());
  return status;
}

}  // namespace odafs::test
