// The odafs command-line tool, run as a process against real odafsd: --timeout against a
// stopped server, and `get` and `put`, which replace their target whole or not at all.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/server_process.h"
#include "tests/support/tmpfs.h"
#include "tests/support/watchdog.h"

extern char** environ;

using odafs::test::pattern;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::Watchdog;
using odafs::test::write_local;
using Clock = std::chrono::steady_clock;

namespace {

// One run of the odafs tool, its stdout and stderr in files of its own. The destructor
// kills it if it still runs.
class Tool {
 public:
  // stdin_path: what the tool reads on its standard input (empty: this process's).
  explicit Tool(const std::vector<std::string>& args, const std::string& stdin_path = "") {
    std::vector<std::string> argv_s = {ODAFS_CLI_PATH};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv = odafs::test::argv_of(argv_s);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, (io_ / "out").c_str(), O_WRONLY | O_CREAT, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, (io_ / "err").c_str(), O_WRONLY | O_CREAT, 0600);
    if (!stdin_path.empty())
      posix_spawn_file_actions_addopen(&fa, 0, stdin_path.c_str(), O_RDONLY, 0);
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
    if (pid_ <= 0) return true;
    const int status = odafs::test::wait_exit(pid_, bound);
    if (status == -1) return false;
    status_ = status;
    seconds_ = std::chrono::duration<double>(Clock::now() - start_).count();
    pid_ = -1;
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
                          std::chrono::milliseconds bound = std::chrono::seconds(30),
                          const std::string& stdin_path = "") {
  auto t = std::make_unique<Tool>(args, stdin_path);
  REQUIRE(t->wait(bound));
  return t;
}

// The names in dir, sorted.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
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
  REQUIRE(odafs::test::stop_child(server.pid()));
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

TEST_CASE("odafs get of a missing remote file leaves no local file behind") {
  TempDir dir, local;
  ServerProcess server(dir.path());
  auto t = run({"get", server.url("/missing"), local / "out"});
  CHECK(t->exit_code() == 1);
  CHECK(contains(t->err(), "No such file"));
  CHECK(names_in(local.path()).empty());  // neither LOCAL nor a temporary file
}

TEST_CASE("odafs get replaces LOCAL whole, keeping its mode, and leaves nothing else") {
  TempDir dir, local;
  ServerProcess server(dir.path());
  std::string data = pattern(3 << 20, 41);
  write_local(dir / "big", data);
  write_local(local / "out", "old contents");
  REQUIRE(chmod((local / "out").c_str(), 0640) == 0);
  auto t = run({"get", server.url("/big"), local / "out"});
  CHECK(t->exit_code() == 0);
  CHECK(read_local(local / "out") == data);
  struct stat st;
  REQUIRE(stat((local / "out").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  CHECK(names_in(local.path()) == std::vector<std::string>{"out"});
  // Something that is not a regular file cannot be replaced: the bytes go straight to it.
  auto to_null = run({"get", server.url("/big"), "/dev/null"});
  CHECK(to_null->exit_code() == 0);
}

TEST_CASE("odafs get that fails mid-way leaves an existing LOCAL as it was") {
  TempDir dir, local;
  ServerProcess server(dir.path());
  std::string data = pattern(64 << 20, 42);
  write_local(dir / "big", data);
  const std::string before = "the local file, before get";
  write_local(local / "out", before);
  // --timeout bounds how long the tool may wait on the dead server, whatever it was doing
  // when the server died (a one-sided read on a local ring is answered by nobody then).
  Tool tool({"--timeout", "5000", "get", server.url("/big"), local / "out"});
  // Wait until the copy is under way (bytes written to a file beside LOCAL, or to LOCAL
  // itself), then freeze the tool there, so that the server dies mid-transfer whatever
  // the machine's speed.
  // (Looked for every 200 us: the copy may take only milliseconds.)
  auto copying = [&] {
    for (const std::string& name : names_in(local.path())) {
      struct stat st;
      if (stat((local / name).c_str(), &st) == 0 && st.st_size > 0 &&
          (name != "out" || static_cast<size_t>(st.st_size) != before.size())) {
        return true;
      }
    }
    return false;
  };
  REQUIRE(odafs::test::eventually(copying, 20, std::chrono::microseconds(200)));
  REQUIRE(odafs::test::stop_child(tool.pid()));
  REQUIRE(tool.running());  // it had not finished: the file is much larger than a chunk
  server.kill_hard();
  REQUIRE(kill(tool.pid(), SIGCONT) == 0);
  REQUIRE(tool.wait(std::chrono::seconds(20)));
  CHECK(tool.exit_code() == 1);
  CHECK(read_local(local / "out") == before);
  CHECK(names_in(local.path()) == std::vector<std::string>{"out"});  // the temporary is gone
}

namespace {

// The names in the export's directory that are put's hidden temporaries of `name`.
std::vector<std::string> temporaries_of(const std::string& dir, const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& n : names_in(dir)) {
    if (n.rfind("." + name + ".odafs-put.", 0) == 0) out.push_back(n);
  }
  return out;
}

}  // namespace

TEST_CASE("odafs put replaces the remote file whole, keeping its mode; a new file gets 0644") {
  TempDir dir, local;
  ServerProcess server(dir.path());
  write_local(dir / "f", "the old remote contents");
  REQUIRE(chmod((dir / "f").c_str(), 0640) == 0);
  const std::string data = pattern(3 << 20, 43);
  write_local(local / "in", data);
  auto t = run({"put", local / "in", server.url("/f")});
  INFO(t->err());
  CHECK(t->exit_code() == 0);
  CHECK(read_local(dir / "f") == data);
  struct stat st;
  REQUIRE(stat((dir / "f").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  auto fresh = run({"put", local / "in", server.url("/new")});
  CHECK(fresh->exit_code() == 0);
  CHECK(read_local(dir / "new") == data);
  REQUIRE(stat((dir / "new").c_str(), &st) == 0);
  const mode_t mask = umask(022);  // the tool's, which it inherits from this process
  umask(mask);
  CHECK((st.st_mode & 07777) == (0644 & ~mask));
  CHECK(names_in(dir.path()) == std::vector<std::string>{"f", "new"});  // no temporary left
  // --in-place writes into the file, as put did before.
  auto in_place = run({"put", "--in-place", local / "in", server.url("/f")});
  CHECK(in_place->exit_code() == 0);
  CHECK(read_local(dir / "f") == data);
  // From standard input, through a symlink: the file it names is replaced, the link stays.
  REQUIRE(symlink("f", (dir / "link").c_str()) == 0);
  write_local(local / "small", "from stdin");
  auto piped = run({"put", "-", server.url("/link")}, std::chrono::seconds(30), local / "small");
  INFO(piped->err());
  CHECK(piped->exit_code() == 0);
  CHECK(read_local(dir / "f") == "from stdin");
  struct stat lst;
  REQUIRE(lstat((dir / "link").c_str(), &lst) == 0);
  CHECK(S_ISLNK(lst.st_mode));
  REQUIRE(stat((dir / "f").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
}

TEST_CASE("odafs put of a directory fails before it touches the remote file") {
  TempDir dir, local;
  ServerProcess server(dir.path());
  const std::string before = "the remote file, before put";
  write_local(dir / "f", before);
  for (bool in_place : {false, true}) {
    CAPTURE(in_place);
    std::vector<std::string> args = {"put", local.path(), server.url("/f")};
    if (in_place) args.insert(args.begin() + 1, "--in-place");
    auto t = run(args);
    CHECK(t->exit_code() == 1);
    CHECK(contains(t->err(), local.path() + " is a directory"));
    CHECK(read_local(dir / "f") == before);
    CHECK(names_in(dir.path()) == std::vector<std::string>{"f"});
  }
}

TEST_CASE("odafs put killed mid-way leaves the old remote file whole") {
  TempDir dir, local;
  ServerProcess server(dir.path());
  const std::string before = pattern(3 << 20, 44);
  write_local(dir / "f", before);
  // The source is a FIFO this test feeds: the put is mid-way, for certain, while the test
  // holds the rest back.
  const std::string fifo = local / "in";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  Tool tool({"put", fifo, server.url("/f")});
  int feed = -1;
  REQUIRE(odafs::test::eventually([&] {
    feed = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // ENXIO until it reads
    return feed >= 0 || !tool.running();
  }));
  REQUIRE(feed >= 0);
  REQUIRE(fcntl(feed, F_SETFL, 0) == 0);
  // 2 MiB: the tool has read all but a pipe's worth of it once the writes return, so it
  // has opened the remote file and written to it.
  const std::string part = pattern(2 << 20, 45);
  for (size_t done = 0; done < part.size();) {
    ssize_t n = ::write(feed, part.data() + done, part.size() - done);
    REQUIRE(n > 0);
    done += static_cast<size_t>(n);
  }
  CHECK(odafs::test::eventually([&] { return !temporaries_of(dir.path(), "f").empty(); }));
  REQUIRE(tool.running());
  REQUIRE(kill(tool.pid(), SIGKILL) == 0);
  REQUIRE(tool.wait(std::chrono::seconds(10)));
  ::close(feed);
  CHECK(read_local(dir / "f") == before);
  // Through the server too (no copy of it in a client's hands).
  auto get = run({"get", server.url("/f"), local / "out"});
  CHECK(get->exit_code() == 0);
  CHECK(read_local(local / "out") == before);
}

TEST_CASE("odafs put into a full export fails, naming the file; the old one stays whole" *
          doctest::skip(*odafs::test::tmpfs_skip_reason() != '\0') *
          doctest::description(odafs::test::tmpfs_skip_reason())) {
  TempDir dir, local;
  odafs::test::Tmpfs fs_guard(dir / "export", "size=1m");
  REQUIRE(fs_guard.mounted);
  const std::string root = fs_guard.dir;
  ServerProcess server(root);
  const std::string before = pattern(300000, 46);
  write_local(root + "/f", before);
  write_local(local / "in", pattern(2 << 20, 47));  // more than the export holds
  for (bool in_place : {false, true}) {
    CAPTURE(in_place);
    std::vector<std::string> args = {"put", local / "in", server.url("/f")};
    if (in_place) args.insert(args.begin() + 1, "--in-place");
    auto t = run(args);
    INFO(t->err());
    CHECK(t->exit_code() == 1);
    CHECK(contains(t->err(), strerror(ENOSPC)));
    if (in_place) break;  // what --in-place promises no more: the file is cut
    CHECK(contains(t->err(), server.url("/f")));
    CHECK(contains(t->err(), "unchanged"));
    CHECK(read_local(root + "/f") == before);
    CHECK(names_in(root) == std::vector<std::string>{"f"});  // no temporary left behind
  }
}

TEST_CASE("odafs rm removes every operand, says each failure and goes on; -r takes trees") {
  TempDir dir;
  ServerProcess server(dir.path());
  write_local(dir / "one", "1");
  write_local(dir / "two", "2");
  std::filesystem::create_directories(dir / "t/a/b");
  std::filesystem::create_directories(dir / "t/c");
  for (int i = 0; i < 100; ++i) {  // more names than the tool keeps in flight at once
    write_local(dir / ("t/a/f" + std::to_string(i)), "x");
    write_local(dir / ("t/a/b/g" + std::to_string(i)), "y");
  }
  std::filesystem::create_symlink("nowhere", dir / "t/c/dangling");
  const std::string url = server.url();
  auto many = run({"rm", url + "one", url + "missing", url + "two"});
  CHECK(many->exit_code() == 1);
  CHECK(many->err().find("missing: No such file or directory") != std::string::npos);
  CHECK(!std::filesystem::exists(dir / "one"));
  CHECK(!std::filesystem::exists(dir / "two"));
  auto no_r = run({"rm", url + "t"});  // a directory without -r: refused, left whole
  CHECK(no_r->exit_code() == 1);
  CHECK(no_r->err().find("Is a directory") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "t/a/f0"));
  auto tree = run({"rm", "-r", url + "t"});
  INFO("stderr: ", tree->err());
  CHECK(tree->exit_code() == 0);
  CHECK(!std::filesystem::exists(dir / "t"));
  CHECK(names_in(dir.path()).empty());
  CHECK(run({"rm"})->exit_code() == 2);  // nothing to remove: the usage
}

TEST_CASE("odafs is strict: an unknown option or an extra argument is an error with a hint") {
  TempDir dir;
  ServerProcess server(dir.path());
  write_local(dir / "f", "data");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"ls", server.url("/"), "--no-such-option"},
           {"ls", server.url("/"), server.url("/f")},  // one URL only
           {"stat", server.url("/f"), "extra"},
           {"frobnicate", server.url("/")},
           {"get", server.url("/f")},  // LOCAL missing
       }) {
    CAPTURE(args[0]);
    auto t = run(args);
    CHECK(t->exit_code() == 2);
    CHECK(contains(t->err(), "usage: odafs --help"));
    CHECK(t->out().empty());
  }
  CHECK(read_local(dir / "f") == "data");  // nothing ran
  auto version = run({"--version"});
  CHECK(version->exit_code() == 0);
  CHECK(contains(version->out(), "odafs "));
  auto help = run({"rm", "--help"});
  CHECK(help->exit_code() == 0);
  CHECK(contains(help->out(), "--recursive"));
}

TEST_CASE("odafs takes its options after the command too (a --timeout there is kept)") {
  TempDir dir;
  ServerProcess server(dir.path());
  REQUIRE(odafs::test::stop_child(server.pid()));
  pid_t pid = server.pid();
  Watchdog watchdog(std::chrono::seconds(20), [pid] { kill(pid, SIGCONT); });
  Tool tool({"ls", server.url("/"), "--timeout", "1000"});
  const bool ended = tool.wait(std::chrono::seconds(10));  // was 60 s: the option ignored
  CHECK_FALSE(watchdog.finish());
  REQUIRE(ended);
  CHECK(tool.exit_code() == 1);
  CHECK(contains(tool.err(), "1000 ms timeout"));
}

TEST_CASE("odafs get URL - writes to standard output; ls -l and stat say it all readably") {
  TempDir dir;
  ServerProcess server(dir.path());
  const std::string data = pattern(300000, 9);
  write_local(dir / "big", data);
  REQUIRE(::chmod((dir / "big").c_str(), 0640) == 0);
  std::filesystem::create_directory(dir / "sub");
  std::filesystem::create_symlink("big", dir / "link");
  auto got = run({"get", server.url("/big"), "-"});
  CHECK(got->exit_code() == 0);
  CHECK(got->out() == data);
  auto ls = run({"ls", "-l", server.url("/")});
  CHECK(ls->exit_code() == 0);
  const std::string out = ls->out();
  CHECK(contains(out, "-rw-r----- "));
  CHECK(contains(out, " 300000 "));
  CHECK(contains(out, " big\n"));
  CHECK(contains(out, "\nd"));  // sub, a directory
  CHECK(contains(out, " sub\n"));
  CHECK(contains(out, "lrwxrwxrwx"));
  auto st = run({"stat", server.url("/big")});
  CHECK(st->exit_code() == 0);
  CHECK(contains(st->out(), "mode: 0640"));
  // "mtime: 2026-11-29 12:00:00.123456789 +0000", not seconds since 1970.
  const size_t at = st->out().find("mtime: ");
  REQUIRE(at != std::string::npos);
  const std::string mtime = st->out().substr(at + 7, 30);
  CHECK(mtime[4] == '-');
  CHECK(mtime[10] == ' ');
  CHECK(mtime[13] == ':');
}

namespace {

// Runs the tool with its stderr on a pseudo-terminal (stdout to /dev/null); what it wrote
// there, or "" with *ok false if it did not end within 30 s.
std::string stderr_on_a_terminal(const std::vector<std::string>& args, bool* ok) {
  int master = -1, slave = -1;
  REQUIRE(openpty(&master, &slave, nullptr, nullptr, nullptr) == 0);
  std::vector<std::string> argv_s = {ODAFS_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv = odafs::test::argv_of(argv_s);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, slave, 2);
  posix_spawn_file_actions_addclose(&fa, master);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, ODAFS_CLI_PATH, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(slave);
  REQUIRE(rc == 0);
  std::string said;
  char buf[4096];
  for (;;) {  // until the tool closes its side (EIO on Linux once the slave is gone)
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;
    said.append(buf, static_cast<size_t>(n));
  }
  ::close(master);
  *ok = odafs::test::wait_exit(pid, std::chrono::seconds(30)) == 0;
  return said;
}

}  // namespace

TEST_CASE("odafs get and put show their progress on a terminal, and only there") {
  TempDir dir, local;
  ServerProcess server(dir.path());
  const std::string data = pattern(24 << 20, 4);  // over the 16 MiB a progress line needs
  write_local(dir / "big", data);
  write_local(local / "up", data);
  bool ok = false;
  const std::string got = stderr_on_a_terminal({"get", server.url("/big"), local / "down"}, &ok);
  CHECK(ok);
  CHECK(read_local(local / "down") == data);
  CHECK(contains(got, "get /big: "));
  CHECK(contains(got, "of 24.0 MiB (100%)"));
  const std::string put = stderr_on_a_terminal({"put", local / "up", server.url("/up")}, &ok);
  CHECK(ok);
  CHECK(contains(put, "of 24.0 MiB (100%)"));
  // Not on a terminal (a file): nothing but errors.
  auto quiet = run({"get", server.url("/big"), local / "again"});
  CHECK(quiet->exit_code() == 0);
  CHECK(quiet->err().empty());
}

TEST_CASE("every program answers --version, and odafsd's --help leaves out the test-only flags") {
  std::vector<std::string> programs = {ODAFS_CLI_PATH, ODAFSD_PATH};
#ifdef ODAFS_MOUNT_PATH
  programs.push_back(ODAFS_MOUNT_PATH);
#endif
  for (const std::string& program : programs) {
    CAPTURE(program);
    TempDir io;
    const std::string command = program + " --version >" + (io / "out") + " 2>&1";
    CHECK(std::system(command.c_str()) == 0);
    CHECK(contains(read_local(io / "out"), " " ODAFS_VERSION));
  }
  TempDir io;
  const std::string help = std::string(ODAFSD_PATH) + " --help >" + (io / "out") + " 2>&1";
  CHECK(std::system(help.c_str()) == 0);
  const std::string text = read_local(io / "out");
  CHECK(contains(text, "--export"));
  CHECK(contains(text, "--version"));
  CHECK(!contains(text, "--simulate-crashes"));
  CHECK(!contains(text, "--slow-writes"));
}
