// odafs-scale: one point of bench/scale/run.sh's sweep: N client processes running one
// workload against one odafsd for a fixed time, each one operation at a time.
//
//   odafs-scale --url odafs://127.0.0.1:PORT/ --workload W [--clients N] [--seconds S]
//               [--file-mb M] [--threads T]
//
// --threads T runs T threads in each client process, sharing its mount (one connection):
// their calls are in flight together, as a multi-threaded program's are.
// Workloads (every one's operation leaves the client: no client data cache):
//   read_rpc       4 KiB pread at a random block of a file warm in the server's cache, by
//                  a pre-posted READ;
//   read_ring      the same read one-sided, over the local shared-memory ring (a reference
//                  for every block was brought by a warm-up pass);
//   read_tcp       the same one-sided over the engine's TCP connection;
//   getattr        GETATTR of an open file;
//   create_remove  create and close an empty file, then remove it, in a private directory
//                  (one operation: the pair);
//   write_commit   a 4 KiB write and an fsync (WRITE + COMMIT) of a private file.
// Prints one JSON object: ops/s over all clients, and the server's CPU per operation (from
// its STATS cpu_us.total over the measured time).
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "bench/bench_util.h"
#include "client/client.h"

namespace {

const char* const kDataPath = "/odafs-scale.dat";
constexpr size_t kBlock = 4096;

struct Options {
  std::string url, workload;
  size_t clients = 1, file_mb = 16;
  double seconds = 2;
  size_t threads = 1;  // per client process, one operation at a time each
  bool child = false;
};

odafs::MountOptions mount_options(const std::string& workload, size_t blocks) {
  odafs::MountOptions mo;
  mo.read_mode = workload == "read_ring" || workload == "read_tcp" ? odafs::ReadMode::kOrdma
                                                                   : odafs::ReadMode::kPrePosted;
  mo.same_host_shortcut = workload != "read_tcp";
  mo.cache_blocks = 0;
  mo.directory_entries = blocks * 2;
  mo.write_behind_bytes = 0;  // a write is a WRITE
  return mo;
}

// A client process: sets up, prints READY, waits for go, runs for o.seconds, prints
// "DONE ops".
int run_child(const Options& o) {
  const uint64_t file_bytes = static_cast<uint64_t>(o.file_mb) << 20;
  auto c = odafs::Client::mount(o.url, mount_options(o.workload, file_bytes / kBlock));
  const std::string mine = "/odafs-scale-" + std::to_string(getpid());
  std::vector<char> buf(kBlock, 'x');
  std::mt19937_64 rng(static_cast<uint64_t>(getpid()));
  odafs::File f;
  if (o.workload.rfind("read_", 0) == 0 || o.workload == "getattr") {
    f = c->open(kDataPath, O_RDONLY);
    for (uint64_t at = 0; at < file_bytes; at += kBlock) f.pread(buf.data(), kBlock, at);
  } else if (o.workload == "create_remove") {
    c->mkdir(mine, 0755);
  } else if (o.workload == "write_commit") {
    f = c->open(mine, O_RDWR | O_CREAT | O_TRUNC, 0644);
  } else {
    throw odafs::Error(EINVAL, "unknown workload " + o.workload);
  }
  std::printf("READY\n");
  std::fflush(stdout);
  if (!odafs::bench::wait_for_go()) return 1;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.seconds);
  const uint64_t blocks = file_bytes / kBlock;
  std::atomic<uint64_t> total{0};
  std::atomic<bool> failed{false};
  const uint64_t seed = rng();
  // One client's threads share its connection: their calls are in flight together.
  auto run = [&](size_t thread) noexcept {
    std::vector<char> mine_buf(kBlock, 'x');
    std::mt19937_64 r(seed + thread);
    uint64_t ops = 0;
    const std::string prefix = mine + "/t" + std::to_string(thread) + "-";
    try {
      while (std::chrono::steady_clock::now() < end) {
        for (int i = 0; i < 16; ++i, ++ops) {  // the clock read once per 16 operations
          if (o.workload == "getattr") {
            f.stat();
          } else if (o.workload == "create_remove") {
            const std::string name = prefix + std::to_string(ops);
            c->open(name, O_RDWR | O_CREAT | O_EXCL, 0644).close();
            c->unlink(name);
          } else if (o.workload == "write_commit") {
            f.pwrite(mine_buf.data(), kBlock, ((ops % 64) * o.threads + thread) * kBlock);
            f.fsync();
          } else if (f.pread(mine_buf.data(), kBlock, (r() % blocks) * kBlock) != kBlock) {
            throw odafs::Error(EIO, "short read");
          }
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "odafs-scale: client %d thread %zu: %s\n", getpid(), thread, e.what());
      failed = true;
    }
    total += ops;
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < o.threads; ++t) threads.emplace_back(run, t);
  run(0);
  for (auto& t : threads) t.join();
  const uint64_t ops = total.load();
  if (failed) return 1;
  if (o.workload == "create_remove") c->rmdir(mine);
  if (o.workload == "write_commit") {
    f.close();
    c->unlink(mine);
  }
  std::printf("DONE %llu\n", static_cast<unsigned long long>(ops));
  std::fflush(stdout);
  return 0;
}

int run_parent(const Options& o) {
  auto stats = odafs::Client::mount(o.url);
  const uint64_t file_bytes = static_cast<uint64_t>(o.file_mb) << 20;
  try {
    if (stats->stat(kDataPath).size != file_bytes) throw odafs::Error(ENOENT, "resize");
  } catch (const odafs::Error&) {
    odafs::File f = stats->open(kDataPath, O_RDWR | O_CREAT | O_TRUNC, 0644);
    std::vector<char> chunk(1 << 20, 'd');
    for (uint64_t at = 0; at < file_bytes; at += chunk.size())
      f.pwrite(chunk.data(), chunk.size(), at);
    f.close();
  }
  std::vector<odafs::bench::ChildProcess> kids;
  for (size_t i = 0; i < o.clients; ++i) {
    kids.emplace_back(std::vector<std::string>{"--child", "--url", o.url, "--workload", o.workload,
                                               "--seconds", std::to_string(o.seconds), "--file-mb",
                                               std::to_string(o.file_mb)});
  }
  for (auto& k : kids) {
    if (k.read_line().rfind("READY", 0) != 0) throw odafs::Error(EIO, "a client failed to set up");
  }
  const uint64_t cpu0 = odafs::bench::server_cpu_us(*stats)["total"];
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& k : kids) k.go();
  uint64_t ops = 0;
  for (auto& k : kids) {
    unsigned long long n = 0;
    if (std::sscanf(k.read_line().c_str(), "DONE %llu", &n) != 1) {
      throw odafs::Error(EIO, "a client failed");
    }
    ops += n;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t cpu1 = odafs::bench::server_cpu_us(*stats)["total"];
  kids.clear();
  using odafs::bench::rounded;
  const odafs::bench::Json row = {
      {"workload", o.workload},
      {"clients", o.clients},
      {"threads_per_client", o.threads},
      {"ops", ops},
      {"seconds", rounded(secs, 3)},
      {"ops_per_s", rounded(static_cast<double>(ops) / secs, 1)},
      {"server_cpu_us_per_op",
       rounded(ops ? static_cast<double>(cpu1 - cpu0) / static_cast<double>(ops) : 0.0, 2)}};
  std::printf("%s\n", row.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  odafs::Flags flags("odafs-scale", "--url URL --workload W [flags]");
  flags.add("--url", &o.url, "the export (odafs://HOST:PORT/)");
  flags.add("--workload", &o.workload,
            "read_rpc, read_ring, read_tcp, getattr, create_remove or write_commit");
  flags.add("--clients", &o.clients, "client processes", 1, 4096);
  flags.add("--seconds", &o.seconds, "measured time", 0.001, 3600);
  flags.add("--file-mb", &o.file_mb, "size of the file the reads read", 1, 1 << 20);
  flags.add("--threads", &o.threads,
            "threads per client process, sharing its connection (calls in flight together)", 1,
            256);
  flags.add("--child", &o.child, "(internal) run as one client process");
  if (!flags.parse(argc, argv).empty()) {
    std::fprintf(stderr, "odafs-scale: no arguments besides flags\n%s", flags.usage().c_str());
    return 2;
  }
  if (o.url.empty() || o.workload.empty()) {
    std::fprintf(stderr, "odafs-scale: --url and --workload are required\n%s",
                 flags.usage().c_str());
    return 2;
  }
  try {
    return o.child ? run_child(o) : run_parent(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-scale: %s\n", e.what());
    return 1;
  }
}
