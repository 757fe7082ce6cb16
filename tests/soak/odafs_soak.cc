// odafs_soak: many client processes against one odafsd for a set time.
//
//   odafs_soak [--clients 64] [--seconds 600] [--shared-files 32] [--cache-mb 64]
//              [--sample-seconds 5] [--max-rss-mb N] [--restart-every S] [--cut-every S]
//              [--json FILE]
//
// Starts odafsd on a temporary export on 127.0.0.1, then --clients processes (this binary
// again, with --child), a third each reading one-sided over the local ring, one-sided over
// the engine's TCP transport (with direct writes), and by RPC only. Each runs the mixed
// workload of soak_client.h and checks every byte it reads. Meanwhile the server's RSS,
// descriptors, threads and CPU are sampled. At the end the export's files are checked on
// disk, the descriptors the clients used must be closed, and a table and a JSON record
// are printed. Exits 1 on any checksum error, unexpected error, kept bytes a client reported
// lost, a client or server that died, RSS above the bound, or a descriptor left behind.
//
// --restart-every S restarts the server every S seconds (SIGKILL and SIGTERM in turn);
// --cut-every S sends the clients' RPC connections through a TCP relay
// (tests/support/tcp_relay.h) that resets all of them every S seconds while the server
// stays up. Either way the clients reconnect, and an operation cut off counts as
// interrupted, not as an error.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/soak/soak_client.h"
#include "tests/soak/soak_model.h"
#include "tests/support/process_probe.h"
#include "tests/support/server_process.h"
#include "tests/support/tcp_relay.h"

extern char** environ;

namespace odafs::soak {
namespace {

struct Options {
  int clients = 64;
  int seconds = 600;
  int shared_files = 32;
  int cache_mb = 64;
  int sample_seconds = 5;
  int max_rss_mb = 0;     // 0: cache_mb + kRssSlackMb
  int restart_every = 0;  // seconds between server restarts (SIGKILL, SIGTERM in turn); 0: none
  int cut_every = 0;      // seconds between resets of every client connection (relay); 0: none
  std::string json;
};

// What the server may use beyond its block cache: a thread stack and buffers per
// connection (two per client), the RPC reply buffers, the allocator's slack. Measured
// peaks were well below this (docs/RELIABILITY.md).
constexpr int kRssSlackMb = 192;
constexpr size_t kBlockSize = 8192;  // the server's default, passed explicitly

struct Sample {
  double t = 0;
  long rss_kb = 0;
  int fds = 0, sockets = 0, threads = 0;
  double cpu_s = 0;
};

Sample sample(pid_t pid, double t) {
  Sample s;
  s.t = t;
  s.rss_kb = static_cast<long>(test::rss_kib(pid));
  s.threads = static_cast<int>(test::thread_count(pid));
  size_t sockets = 0;
  s.fds = static_cast<int>(test::open_fds(pid, &sockets));
  s.sockets = static_cast<int>(sockets);
  s.cpu_s = test::cpu_seconds(pid);
  return s;
}

struct Child {
  int id = 0;
  pid_t pid = -1;
  int out = -1;         // its stdout: the report line
  int err = -1;         // its stderr: log lines, passed on with its name and kept in `last`
  std::string text;     // all of stdout
  std::string partial;  // a stderr line not yet ended
  std::deque<std::string> last;  // its last kLastLines stderr lines, for a failure's report
  int status = 0;
  bool done = false;
  bool killed = false;  // still running at the end: counted as failed once, not as died too
};

constexpr size_t kLastLines = 12;

Child spawn_child(const std::string& self, int id, const std::string& url, const char* mode,
                  const Options& o) {
  int p[2], e[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  if (pipe2(e, O_CLOEXEC) != 0) {
    close(p[0]);
    close(p[1]);
    throw std::runtime_error("pipe failed");
  }
  std::vector<std::string> args = {self,
                                   "--child",
                                   std::to_string(id),
                                   "--url",
                                   url,
                                   "--mode",
                                   mode,
                                   "--seconds",
                                   std::to_string(o.seconds),
                                   "--shared-files",
                                   std::to_string(o.shared_files)};
  if (o.restart_every > 0 || o.cut_every > 0) args.emplace_back("--restarts");
  std::vector<char*> argv = odafs::test::argv_of(args);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_adddup2(&fa, e[1], 2);
  Child c;
  c.id = id;
  int rc = posix_spawn(&c.pid, self.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  close(e[1]);
  if (rc != 0) {
    close(p[0]);
    close(e[0]);
    throw std::runtime_error("cannot spawn a soak client");
  }
  c.out = p[0];
  c.err = e[0];
  fcntl(c.out, F_SETFL, O_NONBLOCK);
  fcntl(c.err, F_SETFL, O_NONBLOCK);
  return c;
}

// One stderr line of client c: to our stderr with the client's name (the clients' log lines
// carry none), and into c.last.
void said(Child& c, const std::string& line) {
  std::fprintf(stderr, "client %d (pid %d): %s\n", c.id, c.pid, line.c_str());
  c.last.push_back(line);
  if (c.last.size() > kLastLines) c.last.pop_front();
}

void drain(Child& c) {
  char buf[4096];
  ssize_t n;
  while ((n = read(c.out, buf, sizeof buf)) > 0) c.text.append(buf, static_cast<size_t>(n));
  while ((n = read(c.err, buf, sizeof buf)) > 0) {
    c.partial.append(buf, static_cast<size_t>(n));
    for (size_t eol; (eol = c.partial.find('\n')) != std::string::npos;) {
      said(c, c.partial.substr(0, eol));
      c.partial.erase(0, eol + 1);
    }
  }
}

void close_pipes(Child& c) {
  drain(c);
  if (!c.partial.empty()) said(c, c.partial);
  c.partial.clear();
  close(c.out);
  close(c.err);
}

// A client that did not finish: every thread's stack, from gdb when the machine has it,
// so that a hang says where it waits (the client is killed next).
void dump_stacks(pid_t pid) {
  if (access("/usr/bin/gdb", X_OK) != 0) {
    std::fprintf(stderr, "soak: no /usr/bin/gdb: no stacks of client pid %d\n", pid);
    return;
  }
  std::fflush(stderr);
  std::vector<std::string> args = {
      "/usr/bin/gdb",       "-p",  std::to_string(pid),  "-batch", "-ex",
      "set pagination off", "-ex", "thread apply all bt"};
  std::vector<char*> argv = odafs::test::argv_of(args);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);  // its report to our stderr
  pid_t gdb = -1;
  if (posix_spawn(&gdb, argv[0], &fa, nullptr, argv.data(), environ) == 0) {
    int status = 0;
    waitpid(gdb, &status, 0);
  }
  posix_spawn_file_actions_destroy(&fa);
}

// Checks every shared file as it lies in the export: the server's writes must have left
// whole blocks of one file at their own places.
uint64_t check_export(const std::string& dir, size_t block_size, std::string* first) {
  uint64_t bad = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir + "/shared", ec)) {
    std::string bytes = test::read_local(e.path().string());
    std::string fault = check_file(
        {reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()}, block_size, 0);
    if (!fault.empty()) {
      if (bad++ == 0) *first = e.path().filename().string() + " on disk: " + fault;
    }
  }
  return bad;
}

int run(const Options& o, const std::string& self) {
  test::TempDir dir;
  test::ServerProcess server(dir.path(), {"--cache-mb", std::to_string(o.cache_mb), "--block-size",
                                          std::to_string(kBlockSize)});
  // With cuts, the clients reach the server through the relay (restarts keep its port).
  std::optional<test::TcpRelay> relay;
  if (o.cut_every > 0) relay.emplace(server.port());
  const std::string url =
      relay ? "odafs://127.0.0.1:" + std::to_string(relay->port()) + "/" : server.url("/");
  setenv("ODAFS_SOAK_EXPORT", dir.path().c_str(), 1);
  const int max_rss_mb = o.max_rss_mb > 0 ? o.max_rss_mb : o.cache_mb + kRssSlackMb;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  Sample before = sample(server.pid(), 0);

  static const char* kModes[] = {"ring", "tcp", "rpc"};
  std::vector<Child> children;
  for (int i = 0; i < o.clients; ++i) {
    children.push_back(spawn_child(self, i, url, kModes[i % 3], o));
  }
  std::printf("soak: %d clients for %d s against odafsd pid %d (cache %d MiB)\n", o.clients,
              o.seconds, server.pid(), o.cache_mb);
  std::printf("%8s %10s %6s %8s %8s %8s\n", "t(s)", "rss(MiB)", "fds", "sockets", "threads",
              "cpu(s)");
  std::vector<Sample> samples;
  const double give_up = o.seconds + 120.0;
  double next_sample = o.sample_seconds;
  double next_restart = o.restart_every > 0 ? o.restart_every : give_up + 1;
  double next_cut = o.cut_every > 0 ? o.cut_every : give_up + 1;
  int restarts = 0, cut_rounds = 0;
  uint64_t connections_cut = 0;
  size_t running = children.size();
  while (running > 0 && elapsed() < give_up) {
    std::vector<pollfd> fds;
    for (auto& c : children) {
      if (c.done) continue;
      fds.push_back({c.out, POLLIN, 0});
      fds.push_back({c.err, POLLIN, 0});
    }
    poll(fds.data(), fds.size(), 200);
    for (auto& c : children) {
      if (c.done) continue;
      drain(c);
      if (waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        close_pipes(c);
        c.done = true;
        --running;
      }
    }
    if (elapsed() >= next_restart && elapsed() < o.seconds) {
      // A crash, then a clean stop, in turn; the clients reconnect and reclaim.
      if (restarts % 2 == 0) {
        server.kill_hard();
      } else {
        server.stop();
      }
      server.start_again();
      ++restarts;
      std::printf("%8.0f server restarted (%s), pid %d\n", elapsed(),
                  restarts % 2 == 1 ? "SIGKILL" : "SIGTERM", server.pid());
      next_restart += o.restart_every;
      before = sample(server.pid(), elapsed());  // the CPU figure is the last instance's
    }
    if (relay && elapsed() >= next_cut && elapsed() < o.seconds) {
      connections_cut += relay->reset_all();
      ++cut_rounds;
      std::printf("%8.0f every connection cut (round %d)\n", elapsed(), cut_rounds);
      next_cut += o.cut_every;
    }
    if (elapsed() >= next_sample) {
      Sample s = sample(server.pid(), elapsed());
      samples.push_back(s);
      std::printf("%8.0f %10.1f %6d %8d %8d %8.1f\n", s.t, s.rss_kb / 1024.0, s.fds, s.sockets,
                  s.threads, s.cpu_s);
      std::fflush(stdout);
      next_sample += o.sample_seconds;
    }
  }
  int failures = 0;
  for (auto& c : children) {
    if (!c.done) {
      std::fprintf(stderr, "soak: client %d pid %d still running after %.0f s; its stacks:\n", c.id,
                   c.pid, give_up);
      dump_stacks(c.pid);
      ::kill(c.pid, SIGKILL);
      waitpid(c.pid, &c.status, 0);
      close_pipes(c);
      c.killed = true;
      ++failures;
    }
  }

  // The clients are gone: their connections and rings must be closed (the server closes
  // them in its own time; a leak shows in `after` once 10 s are up).
  Sample after;
  test::eventually(
      [&] {
        after = sample(server.pid(), elapsed());
        return after.sockets <= before.sockets;
      },
      10);

  ClientReport total;
  std::vector<uint64_t> per_second(static_cast<size_t>(o.seconds) + 1, 0);
  int died = 0;
  for (auto& c : children) {
    if (c.killed) continue;
    ClientReport r;
    std::istringstream lines(c.text);
    std::string line;
    bool got = false;
    while (std::getline(lines, line)) got = ClientReport::parse(line, &r) || got;
    if (!got || !WIFEXITED(c.status)) {
      ++died;
      std::string how = WIFSIGNALED(c.status)
                            ? "killed by signal " + std::to_string(WTERMSIG(c.status))
                            : "exited " + std::to_string(WEXITSTATUS(c.status));
      std::fprintf(stderr, "soak: client %d pid %d died (%s, no report); its last words:\n", c.id,
                   c.pid, how.c_str());
      for (const std::string& line : c.last) std::fprintf(stderr, "  %s\n", line.c_str());
      continue;
    }
    total.ops += r.ops;
    total.races += r.races;
    total.interrupted += r.interrupted;
    total.errors += r.errors;
    total.lost += r.lost;
    total.checksum_errors += r.checksum_errors;
    total.bytes_checked += r.bytes_checked;
    if (total.first_problem.empty() && !r.first_problem.empty()) {
      total.first_problem = "client " + std::to_string(r.id) + ": " + r.first_problem;
    }
    for (size_t i = 0; i < r.ops_per_second.size() && i < per_second.size(); ++i) {
      per_second[i] += r.ops_per_second[i];
    }
  }
  std::string disk_problem;
  uint64_t disk_bad = check_export(dir.path(), kBlockSize, &disk_problem);
  int server_status = server.stop();
  bool server_clean = WIFEXITED(server_status) && WEXITSTATUS(server_status) == 0;

  Sample peak;
  for (auto& s : samples) {
    peak.rss_kb = std::max(peak.rss_kb, s.rss_kb);
    peak.fds = std::max(peak.fds, s.fds);
    peak.sockets = std::max(peak.sockets, s.sockets);
    peak.threads = std::max(peak.threads, s.threads);
  }
  double cpu = after.cpu_s - before.cpu_s;
  bool rss_ok = test::kSanitized || peak.rss_kb <= static_cast<long>(max_rss_mb) * 1024;
  bool fds_ok = after.sockets <= before.sockets;

  std::printf("\nops/s over time (10 s windows):");
  for (size_t i = 0; i + 1 < per_second.size(); i += 10) {
    uint64_t sum = 0;
    size_t n = 0;
    for (size_t j = i; j < i + 10 && j + 1 < per_second.size(); ++j, ++n) sum += per_second[j];
    std::printf(" %.0f", n ? static_cast<double>(sum) / static_cast<double>(n) : 0.0);
  }
  std::printf("\n\n%-28s %s\n", "clients", std::to_string(o.clients).c_str());
  std::printf("%-28s %llu (%.0f/s)\n", "operations", static_cast<unsigned long long>(total.ops),
              static_cast<double>(total.ops) / o.seconds);
  std::printf("%-28s %.1f MiB\n", "bytes checked", total.bytes_checked / 1048576.0);
  std::printf("%-28s %llu\n", "races (expected)", static_cast<unsigned long long>(total.races));
  std::printf("%-28s %d\n", "server restarts", restarts);
  std::printf("%-28s %d (%llu connections)\n", "connection cuts", cut_rounds,
              static_cast<unsigned long long>(connections_cut));
  std::printf("%-28s %llu\n", "cut off by a restart or cut",
              static_cast<unsigned long long>(total.interrupted));
  std::printf("%-28s %llu\n", "unexpected errors", static_cast<unsigned long long>(total.errors));
  std::printf("%-28s %llu\n", "kept bytes lost (files)",
              static_cast<unsigned long long>(total.lost));
  std::printf("%-28s %llu\n", "checksum errors",
              static_cast<unsigned long long>(total.checksum_errors));
  std::printf("%-28s %llu\n", "bad files on disk", static_cast<unsigned long long>(disk_bad));
  std::printf("%-28s %d\n", "clients died", died + failures);
  std::printf("%-28s %.1f MiB (bound %d MiB%s)\n", "server RSS max", peak.rss_kb / 1024.0,
              max_rss_mb, test::kSanitized ? ", not enforced under ASan" : "");
  std::printf("%-28s %d (sockets+rings %d; before %d, after %d)\n", "server fds max", peak.fds,
              peak.sockets, before.sockets, after.sockets);
  std::printf("%-28s %d\n", "server threads max", peak.threads);
  std::printf("%-28s %.1f s (%.0f%% of one core)\n", "server CPU", cpu, 100.0 * cpu / elapsed());
  std::printf("%-28s %s\n", "server exit", server_clean ? "clean" : "NOT CLEAN");
  if (!total.first_problem.empty()) std::printf("first problem: %s\n", total.first_problem.c_str());
  if (!disk_problem.empty()) std::printf("first bad file: %s\n", disk_problem.c_str());

  std::ostringstream js;
  js << "{\"clients\":" << o.clients << ",\"seconds\":" << o.seconds << ",\"ops\":" << total.ops
     << ",\"races\":" << total.races << ",\"restarts\":" << restarts
     << ",\"cut_every\":" << o.cut_every << ",\"cuts\":" << cut_rounds
     << ",\"connections_cut\":" << connections_cut << ",\"interrupted\":" << total.interrupted
     << ",\"errors\":" << total.errors << ",\"lost_files\":" << total.lost
     << ",\"checksum_errors\":" << total.checksum_errors << ",\"bad_files_on_disk\":" << disk_bad
     << ",\"clients_died\":" << died + failures << ",\"bytes_checked\":" << total.bytes_checked
     << ",\"server\":{\"rss_max_kb\":" << peak.rss_kb << ",\"rss_bound_kb\":" << max_rss_mb * 1024
     << ",\"fds_max\":" << peak.fds << ",\"sockets_max\":" << peak.sockets
     << ",\"sockets_before\":" << before.sockets << ",\"sockets_after\":" << after.sockets
     << ",\"threads_max\":" << peak.threads << ",\"cpu_s\":" << cpu
     << ",\"clean_exit\":" << (server_clean ? "true" : "false") << "},\"ops_per_second\":[";
  for (size_t i = 0; i + 1 < per_second.size(); ++i) js << (i ? "," : "") << per_second[i];
  js << "],\"samples\":[";
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    js << (i ? "," : "") << "{\"t\":" << s.t << ",\"rss_kb\":" << s.rss_kb << ",\"fds\":" << s.fds
       << ",\"threads\":" << s.threads << ",\"cpu_s\":" << s.cpu_s << "}";
  }
  js << "]}";
  std::printf("JSON %s\n", js.str().c_str());
  if (!o.json.empty()) std::ofstream(o.json) << js.str() << "\n";

  bool ok = total.errors == 0 && total.lost == 0 && total.checksum_errors == 0 && disk_bad == 0 &&
            died == 0 && failures == 0 && server_clean && rss_ok && fds_ok;
  std::printf("soak: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(why != nullptr ? stderr : stdout,
               "odafs_soak: %s\nusage: odafs_soak [--clients N] [--seconds S] [--shared-files N] "
               "[--cache-mb N] [--sample-seconds S] [--max-rss-mb N] [--restart-every S] "
               "[--cut-every S] "
               "[--json FILE]\n",
               why != nullptr ? why : "a soak of checking clients against one odafsd");
  std::exit(why != nullptr ? 2 : 0);
}

int number(const char* flag, const char* text, int lo, int hi) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > hi) {
    usage(
        (std::string(flag) + " wants a number in " + std::to_string(lo) + ".." + std::to_string(hi))
            .c_str());
  }
  return static_cast<int>(v);
}

}  // namespace
}  // namespace odafs::soak

int main(int argc, char** argv) {
  using namespace odafs::soak;
  signal(SIGPIPE, SIG_IGN);
  Options o;
  ClientConfig child;
  bool is_child = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((flag + " needs a value").c_str());
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") usage(nullptr);
    if (flag == "--clients")
      o.clients = number("--clients", value(), 1, 1024);
    else if (flag == "--seconds")
      o.seconds = child.seconds = number("--seconds", value(), 1, 86400);
    else if (flag == "--shared-files")
      o.shared_files = child.shared_files = number("--shared-files", value(), 1, 100);
    else if (flag == "--cache-mb")
      o.cache_mb = number("--cache-mb", value(), 1, 65536);
    else if (flag == "--sample-seconds")
      o.sample_seconds = number("--sample-seconds", value(), 1, 3600);
    else if (flag == "--max-rss-mb")
      o.max_rss_mb = number("--max-rss-mb", value(), 1, 1 << 20);
    else if (flag == "--json")
      o.json = value();
    else if (flag == "--restart-every") {
      o.restart_every = number("--restart-every", value(), 1, 86400);
      child.restarts = true;
    } else if (flag == "--cut-every") {
      o.cut_every = number("--cut-every", value(), 1, 86400);
    } else if (flag == "--restarts")
      child.restarts = true;
    else if (flag == "--child") {
      is_child = true;
      child.id = number("--child", value(), 0, 1 << 20);
    } else if (flag == "--url")
      child.url = value();
    else if (flag == "--mode")
      child.mode = value();
    else
      usage(("unknown option " + flag).c_str());
  }
  if (is_child) {
    child.seed =
        0x5eed0000u + static_cast<uint64_t>(child.id) * 7919u + static_cast<uint64_t>(getpid());
    ClientReport r = run_client(child);
    std::printf("%s\n", r.to_line().c_str());
    return r.errors == 0 && r.checksum_errors == 0 ? 0 : 1;
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) usage("cannot find my own executable");
  self[n] = '\0';
  try {
    return run(o, self);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs_soak: %s\n", e.what());
    return 1;
  }
}
