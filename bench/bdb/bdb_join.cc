// odafs-bdb: the ODAFS paper's Fig. 5, Berkeley DB performing asynchronous I/O.
//
// Loads a database of 60 KiB records on the server (--load N), then, for each copy size and
// each read mechanism, runs the equality joins that cover every record: each join's keys
// give the pages to read, which the application prefetches (a window of 64 KiB reads in
// flight through libodafs's IoQueue), then it gets each record through BDB, copying the
// first `copy` bytes from BDB's cache into its own buffer. Reports application throughput
// (record bytes per second) and client CPU per record (the whole process: BDB,
// libodafs and its threads; for the mount, odafs-mount's CPU too), and server CPU per
// record. Mechanisms interleave within each repetition; medians and spread over --reps.
//
// Mechanisms: inline, preposted, direct, ordma_ring, ordma_tcp (libodafs through BDB's
// I/O hooks), and mount (BDB's own I/O on an odafs-mount of the same server; read-ahead by
// posix_fadvise(WILLNEED), which FUSE turns into asynchronous READs): --mount-dir, and
// --mount-pid for its CPU.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bdb/bdb_odafs.h"
#include "bench/bdb/prefetch.h"
#include "bench/bdb/workload.h"
#include "bench/bench_util.h"
#include "client/client.h"

namespace {

using odafs::bdb::Database;
using odafs::bdb::Hooks;

struct Args {
  std::string url;
  uint32_t load = 0;
  uint32_t records = 0;  // in the database; 0: --load's
  std::vector<size_t> copies = {1, 1024, 4096, 16384, 32768, 61440};
  std::vector<std::string> mechanisms = {"inline", "preposted", "direct", "ordma_ring",
                                         "ordma_tcp"};
  std::string mount_dir;
  int mount_pid = 0;
  size_t window = 16;
  size_t reps = 3;
  size_t cache_mb = 4;
  std::string json;
};

struct Sample {
  double seconds = 0;
  uint64_t records = 0;
  double client_cpu_us = 0;
  double server_cpu_us = 0;
};

double process_cpu_us() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// utime + stime of another process, in µs (0 for none).
double other_cpu_us(int pid) {
  return pid > 0 ? static_cast<double>(odafs::bench::process_cpu_us(pid)) : 0;
}

odafs::MountOptions options_of(const std::string& m) {
  odafs::MountOptions mo;
  mo.cache_blocks = 0;  // BDB has its own cache: every page read leaves the client
  mo.same_host_shortcut = m != "ordma_tcp" && m != "direct";
  if (m == "inline") mo.read_mode = odafs::ReadMode::kInline;
  if (m == "preposted") mo.read_mode = odafs::ReadMode::kPrePosted;
  if (m == "direct") mo.read_mode = odafs::ReadMode::kDirect;
  if (m == "ordma_ring" || m == "ordma_tcp") mo.read_mode = odafs::ReadMode::kOrdma;
  return mo;
}

// The joins covering every record, each followed by its records' reads. `before_reads`
// is told each join's keys (to plan the read-ahead); `advance` each record read.
template <class Plan, class Advance>
uint64_t run_joins(Database& db, size_t copy, std::vector<char>& buf, Plan&& plan,
                   Advance&& advance) {
  uint64_t n = 0;
  for (uint32_t a = 0; a < odafs::bdb::kA; ++a) {
    for (uint32_t b = 0; b < odafs::bdb::kB; ++b) {
      std::vector<uint32_t> keys = db.join(a, b);
      plan(keys);
      for (size_t i = 0; i < keys.size(); ++i) {
        advance(keys, i);
        if (db.get(keys[i], buf.data(), copy) != copy) {
          throw odafs::Error(EIO, "record " + std::to_string(keys[i]) + " missing");
        }
        ++n;
      }
    }
  }
  return n;
}

Sample run_hooked(const Args& args, odafs::Client* client, size_t copy, odafs::Client& stats) {
  std::string root = Hooks::install(client);
  std::string primary = std::string("/db/") + Database::kPrimaryFile;
  Sample s;
  {
    odafs::bdb::Prefetcher prefetch(*client, primary, args.window, odafs::bdb::kPageSize);
    Hooks::attach_prefetcher(primary, &prefetch);
    Database::Options o;
    o.home = root + "/db";
    o.cache_bytes = args.cache_mb << 20;
    Database db(o);
    std::vector<char> buf(odafs::bdb::kRecordBytes);
    std::vector<uint64_t> offsets;
    uint64_t server0 = odafs::bench::server_cpu_us(stats)["total"];
    double cpu0 = process_cpu_us();
    auto t0 = std::chrono::steady_clock::now();
    s.records = run_joins(
        db, copy, buf,
        [&](const std::vector<uint32_t>& keys) {
          offsets.clear();
          for (uint32_t r : keys) offsets.push_back(Database::page_offset(r));
          prefetch.plan(offsets);
        },
        [](const std::vector<uint32_t>&, size_t) {});
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.client_cpu_us = process_cpu_us() - cpu0;
    s.server_cpu_us = static_cast<double>(odafs::bench::server_cpu_us(stats)["total"] - server0);
    Hooks::attach_prefetcher(primary, nullptr);
  }
  Hooks::uninstall();
  return s;
}

Sample run_mount(const Args& args, size_t copy, odafs::Client& stats) {
  std::string home = args.mount_dir + "/db";
  Sample s;
  std::string primary = home + "/" + Database::kPrimaryFile;
  int fd = ::open(primary.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw odafs::Error(errno, "open " + primary);
  // The kernel's page cache would serve the file from the last run: every page comes
  // from the server through odafs-mount, as every page of the other mechanisms does.
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  Database::Options o;
  o.home = home;
  o.cache_bytes = args.cache_mb << 20;
  Database db(o);
  std::vector<char> buf(odafs::bdb::kRecordBytes);
  auto advise = [&](uint32_t recno) {
    posix_fadvise(fd, static_cast<off_t>(Database::page_offset(recno)), odafs::bdb::kPageSize,
                  POSIX_FADV_WILLNEED);
  };
  uint64_t server0 = odafs::bench::server_cpu_us(stats)["total"];
  double cpu0 = process_cpu_us() + other_cpu_us(args.mount_pid);
  auto t0 = std::chrono::steady_clock::now();
  s.records = run_joins(
      db, copy, buf,
      [&](const std::vector<uint32_t>& keys) {
        for (size_t i = 0; i < std::min(args.window, keys.size()); ++i) advise(keys[i]);
      },
      [&](const std::vector<uint32_t>& keys, size_t i) {
        if (i + args.window < keys.size()) advise(keys[i + args.window]);
      });
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.client_cpu_us = process_cpu_us() + other_cpu_us(args.mount_pid) - cpu0;
  s.server_cpu_us = static_cast<double>(odafs::bench::server_cpu_us(stats)["total"] - server0);
  ::close(fd);
  return s;
}

void load(const Args& args) {
  auto client = odafs::Client::mount(args.url);
  try {
    client->mkdir("/db");
  } catch (const odafs::Error& e) {
    if (e.errno_value() != EEXIST) throw;
  }
  std::string root = Hooks::install(client.get());
  {
    Database::Options o;
    o.home = root + "/db";
    o.create = true;
    o.cache_bytes = args.cache_mb << 20;
    Database db(o);
    auto t0 = std::chrono::steady_clock::now();
    db.load(1, args.load);
    db.sync();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "loaded %u records of %u bytes in %.1f s\n", args.load,
                 odafs::bdb::kRecordBytes, secs);
  }
  Hooks::uninstall();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int usage(FILE* out = stderr, int status = 2) {
  std::fprintf(out,
               "usage: odafs-bdb --url URL [--load N] [--copies 1,1024,...] [--mechanisms "
               "inline,preposted,direct,ordma_ring,ordma_tcp,mount]\n"
               "                 [--mount-dir DIR --mount-pid PID] [--window 16] [--reps 3] "
               "[--cache-mb 4] [--json FILE]\n");
  return status;
}

// Fills *args from the command line: 0 when it may run, -1 after --help (exit 0), else
// the exit status (usage said why).
int parse_args(int argc, char** argv, Args* out) {
  Args& args = *out;
  std::string mechs;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--help" || a == "-h") return usage(stdout, 0) == 0 ? -1 : 2;
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--url") {
        args.url = next();
      } else if (a == "--load") {
        args.load = static_cast<uint32_t>(std::stoul(next()));
      } else if (a == "--copies") {
        args.copies = odafs::bench::parse_list(next());
      } else if (a == "--mechanisms") {
        mechs = next();
      } else if (a == "--mount-dir") {
        args.mount_dir = next();
      } else if (a == "--mount-pid") {
        args.mount_pid = std::stoi(next());
      } else if (a == "--window") {
        args.window = std::stoul(next());
      } else if (a == "--reps") {
        args.reps = std::stoul(next());
      } else if (a == "--cache-mb") {
        args.cache_mb = std::stoul(next());
      } else if (a == "--json") {
        args.json = next();
      } else {
        return usage();
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-bdb: %s\n", e.what());
    return usage();
  }
  if (args.url.empty()) return usage();
  if (!mechs.empty()) {
    args.mechanisms.clear();
    std::stringstream ss(mechs);
    for (std::string m; std::getline(ss, m, ',');) args.mechanisms.push_back(m);
  }
  for (const std::string& m : args.mechanisms) {
    if (m == "mount" && args.mount_dir.empty()) {
      std::fprintf(stderr, "odafs-bdb: mechanism mount needs --mount-dir\n");
      return 2;
    }
    if (m != "mount" && m != "inline" && m != "preposted" && m != "direct" && m != "ordma_ring" &&
        m != "ordma_tcp") {
      std::fprintf(stderr, "odafs-bdb: unknown mechanism %s\n", m.c_str());
      return 2;
    }
  }
  return 0;
}

using Samples = std::map<std::pair<std::string, size_t>, std::vector<Sample>>;

// The table of medians and spreads, and the JSON of every (mechanism, copy) point.
odafs::bench::Json report(const Args& args, Samples& samples) {
  using odafs::bench::rounded;
  std::printf("%-10s %8s %10s %22s %16s %16s\n", "mechanism", "copy", "records", "MB/s (min-max)",
              "client_us/rec", "server_us/rec");
  odafs::bench::Json json = odafs::bench::Json::array();
  for (const std::string& m : args.mechanisms) {
    for (size_t copy : args.copies) {
      const std::vector<Sample>& v = samples[{m, copy}];
      std::vector<double> mbps, client, server;
      for (const Sample& s : v) {
        mbps.push_back(s.records * odafs::bdb::kRecordBytes / s.seconds / 1e6);
        client.push_back(s.client_cpu_us / s.records);
        server.push_back(s.server_cpu_us / s.records);
      }
      auto [lo, hi] = std::minmax_element(mbps.begin(), mbps.end());
      std::printf("%-10s %8zu %10llu %10.1f (%5.0f-%5.0f) %16.1f %16.1f\n", m.c_str(), copy,
                  static_cast<unsigned long long>(v.front().records), median(mbps), *lo, *hi,
                  median(client), median(server));
      json.push_back({{"mechanism", m},
                      {"copy_bytes", copy},
                      {"records", v.front().records},
                      {"reps", v.size()},
                      {"mb_per_s_median", rounded(median(mbps), 1)},
                      {"mb_per_s_min", rounded(*lo, 1)},
                      {"mb_per_s_max", rounded(*hi, 1)},
                      {"client_us_per_record", rounded(median(client), 1)},
                      {"server_us_per_record", rounded(median(server), 1)}});
    }
  }
  return json;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (int rc = parse_args(argc, argv, &args); rc != 0) return rc < 0 ? 0 : rc;
  try {
    if (args.load > 0) load(args);
    auto stats = odafs::Client::mount(args.url);
    // One client per mechanism for the whole run, warmed by a first pass: its directory
    // then holds references to every page, as the paper's clients do once warm.
    std::map<std::string, std::unique_ptr<odafs::Client>> clients;
    auto run = [&](const std::string& m, size_t copy) {
      if (m == "mount") return run_mount(args, copy, *stats);
      auto& c = clients[m];
      if (!c) c = odafs::Client::mount(args.url, options_of(m));
      return run_hooked(args, c.get(), copy, *stats);
    };
    for (const std::string& m : args.mechanisms) run(m, 1);
    Samples samples;
    for (size_t rep = 0; rep < args.reps; ++rep) {
      for (size_t copy : args.copies) {
        for (const std::string& m : args.mechanisms) {
          Sample s = run(m, copy);
          samples[{m, copy}].push_back(s);
          std::fprintf(stderr, "rep %zu copy %6zu %-10s %8.1f MB/s\n", rep + 1, copy, m.c_str(),
                       s.records * odafs::bdb::kRecordBytes / s.seconds / 1e6);
        }
      }
    }
    odafs::bench::emit_json(report(args, samples), args.json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-bdb: %s\n", e.what());
    return 1;
  }
  return 0;
}
