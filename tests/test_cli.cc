// The odafs command-line tool, run as a process against real odafsd: --timeout against a
// stopped server.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/server_process.h"
#include "tests/support/watchdog.h"

extern char** environ;

using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::Watchdog;
using Clock = std::chrono::steady_clock;

namespace {

// One run of the odafs tool, its stdout and stderr in files of its own. The destructor
// kills it if it still runs.
class Tool {
 public:
  explicit Tool(const std::vector<std::string>& args) {
    std::vector<std::string> argv_s = {ODAFS_CLI_PATH};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, (io_ / "out").c_str(), O_WRONLY | O_CREAT, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, (io_ / "err").c_str(), O_WRONLY | O_CREAT, 0600);
    int rc = posix_spawn(&pid_, ODAFS_CLI_PATH, &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE(rc == 0);
    start_ = Clock::now();
  }
  ~Tool() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Tool(const Tool&) = delete;
  Tool& operator=(const Tool&) = delete;

  pid_t pid() const { return pid_; }
  // Waits up to `bound` for the tool to exit; false (and it keeps running) if it does not.
  bool wait(std::chrono::milliseconds bound) {
    auto deadline = Clock::now() + bound;
    while (pid_ > 0) {
      if (waitpid(pid_, &status_, WNOHANG) == pid_) {
        seconds_ = std::chrono::duration<double>(Clock::now() - start_).count();
        pid_ = -1;
        break;
      }
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  bool running() const { return pid_ > 0; }
  // Its exit code once it exited normally; -1 if a signal ended it.
  int exit_code() const { return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1; }
  double seconds() const { return seconds_; }
  std::string err() const { return read_local(io_ / "err"); }
  std::string out() const { return read_local(io_ / "out"); }

 private:
  TempDir io_;
  pid_t pid_ = -1;
  int status_ = 0;
  Clock::time_point start_;
  double seconds_ = 0;
};

// Runs the tool to its end (at most `bound`); REQUIREs that it ended.
std::unique_ptr<Tool> run(const std::vector<std::string>& args,
                          std::chrono::milliseconds bound = std::chrono::seconds(30)) {
  auto t = std::make_unique<Tool>(args);
  REQUIRE(t->wait(bound));
  return t;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("odafs --timeout gives up on a stopped server, naming the timeout") {
  TempDir dir;
  ServerProcess server(dir.path());
  std::vector<std::string> args;
  SUBCASE("--timeout MS") { args = {"--timeout", "1000", "ls", server.url("/")}; }
  SUBCASE("--timeout=MS") { args = {"--timeout=1000", "ls", server.url("/")}; }
  SUBCASE("?timeout_ms=N in the URL") { args = {"ls", server.url("/?timeout_ms=1000")}; }
  REQUIRE(kill(server.pid(), SIGSTOP) == 0);
  pid_t pid = server.pid();
  Watchdog watchdog(std::chrono::seconds(20), [pid] { kill(pid, SIGCONT); });
  Tool tool(args);
  bool ended = tool.wait(std::chrono::seconds(10));
  CHECK_FALSE(watchdog.finish());
  REQUIRE(ended);
  CHECK(tool.exit_code() == 1);
  CHECK(tool.seconds() >= 1.0);
  CHECK(tool.seconds() < 10);
  std::string err = tool.err();
  CHECK(contains(err, "timed out"));
  CHECK(contains(err, "1000 ms timeout"));
}

TEST_CASE("odafs --timeout refuses what is not a sane number of milliseconds") {
  // Nothing listens on port 1: a value that got through would fail differently (exit 1).
  for (const char* bad : {"abc", "0", "-5", "1.5", "3600001", "99999999999"}) {
    CAPTURE(bad);
    auto t = run({"--timeout", bad, "ls", "odafs://127.0.0.1:1/"});
    CHECK(t->exit_code() == 2);
    CHECK(contains(t->err(), std::string("bad --timeout '") + bad + "'"));
  }
  auto missing = run({"ls", "odafs://127.0.0.1:1/", "--timeout"});  // options come first
  CHECK(missing->exit_code() != 0);
  auto bare = run({"--timeout"});
  CHECK(bare->exit_code() == 2);
  CHECK(contains(bare->err(), "usage"));
}
