// odafs-micro: the paper's Table 3, side by side in one run.
//
//   odafs-micro --url odafs://127.0.0.1:PORT/ [--file-mb M] [--block B] [--passes-ms MS]
//               [--inflight 1,2,4,...] [--json FILE]
//
// A file warm in the server cache is read sequentially in B-byte blocks (default 4 KiB),
// twice, by each mechanism: RPC inline, RPC pre-posted, direct (the server's engine
// writes into the client's buffer, then the RPC reply completes the call), ORDMA. The client's data
// cache holds a quarter of the file, so with LRU every read of the second pass misses in it; its
// headers are enough to map the whole file, so the directory holds a reference for every block (the
// first pass brought them) and ORDMA reads go one-sided. The second pass is measured: mean / p50 /
// p99 latency and the server's CPU per read (STATS cpu_us.*: all server threads, and split into the
// RPC pool and the engine).
//
// Then, for each N in --inflight, N client threads (one read in flight each, all on one
// mount, no client data cache) read for a fixed time per mechanism: ops/s.
#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "bench/bench_util.h"
#include "client/client.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Latency {
  std::string mechanism;
  std::string transport;  // how one-sided reads travelled: ring, tcp or none
  double mean_us = 0, p50_us = 0, p99_us = 0;
  double cpu_total = 0, cpu_rpc = 0, cpu_engine = 0;  // server µs per read
  uint64_t ordma_reads = 0, rpc_reads = 0;            // direct reads count as rpc_reads here
};

struct Rate {
  std::string mechanism;
  size_t inflight;
  double ops_per_s, server_cpu_us_per_op;
};

odafs::ReadMode mode_of(const std::string& m) {
  if (m == "rpc_inline") return odafs::ReadMode::kInline;
  if (m == "rpc_preposted") return odafs::ReadMode::kPrePosted;
  if (m == "direct") return odafs::ReadMode::kDirect;
  return odafs::ReadMode::kOrdma;
}

// ordma reaches the engine the way a client on its host does by default (local rings);
// ordma_tcp forces the engine's TCP transport, as a client on another host would use.
const std::vector<std::string> kMechanisms = {"rpc_inline", "rpc_preposted", "direct", "ordma_tcp",
                                              "ordma"};

// The file every mechanism reads: file_bytes of random bytes at path.
void write_file(const std::string& url, const std::string& path, size_t file_bytes) {
  auto c = odafs::Client::mount(url);
  odafs::File f = c->open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  std::vector<char> data(1 << 20);
  std::mt19937_64 rng(3);
  for (auto& ch : data) ch = static_cast<char>(rng());
  for (size_t off = 0; off < file_bytes; off += data.size()) {
    f.pwrite(data.data(), data.size(), off);
  }
  f.close();
}

// Each mechanism's second pass over the file, one read at a time.
std::vector<Latency> measure_latency(const std::string& url, const std::string& path, size_t blocks,
                                     size_t block) {
  std::vector<Latency> lat;
  for (const std::string& m : kMechanisms) {
    odafs::MountOptions mo;
    mo.read_mode = mode_of(m);
    mo.same_host_shortcut = m == "ordma";  // direct I/O moves its data over TCP either way
    mo.directory_entries = blocks * 2;     // headers for the whole file
    mo.cache_blocks = blocks / 4;          // data for a quarter of it
    auto c = odafs::Client::mount(url, mo);
    odafs::File f = c->open(path, O_RDONLY);
    std::vector<char> buf(block);
    for (size_t i = 0; i < blocks; ++i) f.pread(buf.data(), block, i * block);  // pass 1
    std::vector<double> us(blocks);
    uint64_t o0 = c->stats().ordma_reads, r0 = c->stats().rpc_reads;
    uint64_t d0 = c->stats().direct_reads;
    auto cpu0 = odafs::bench::server_cpu_us(*c);
    for (size_t i = 0; i < blocks; ++i) {  // pass 2, measured
      auto t0 = Clock::now();
      if (f.pread(buf.data(), block, i * block) != block) throw odafs::Error(EIO, "short");
      us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    }
    auto cpu1 = odafs::bench::server_cpu_us(*c);
    Latency l;
    l.mechanism = m;
    l.transport = c->engine_transport();
    double sum = 0;
    for (double v : us) sum += v;
    std::sort(us.begin(), us.end());
    l.mean_us = sum / blocks;
    l.p50_us = us[blocks / 2];
    l.p99_us = us[std::min(blocks - 1, blocks * 99 / 100)];
    l.cpu_total = double(cpu1["total"] - cpu0["total"]) / blocks;
    l.cpu_rpc = double(cpu1["rpc"] - cpu0["rpc"]) / blocks;
    l.cpu_engine = double(cpu1["engine"] - cpu0["engine"]) / blocks;
    l.ordma_reads = c->stats().ordma_reads - o0;
    l.rpc_reads = c->stats().rpc_reads - r0 + c->stats().direct_reads - d0;
    lat.push_back(l);
    std::fprintf(stderr, "%s: second pass done\n", m.c_str());
  }

  return lat;
}

// Each mechanism's reads per second with n threads reading at once, for each n.
std::vector<Rate> measure_rates(const std::string& url, const std::string& path, size_t blocks,
                                size_t block, const std::vector<size_t>& inflight, int rate_ms) {
  std::vector<Rate> rates;
  for (const std::string& m : kMechanisms) {
    odafs::MountOptions mo;
    mo.read_mode = mode_of(m);
    mo.same_host_shortcut = m == "ordma";  // direct I/O moves its data over TCP either way
    mo.directory_entries = blocks * 2;
    mo.cache_blocks = 0;  // every read leaves the client: the sweep measures mechanisms
    auto c = odafs::Client::mount(url, mo);
    odafs::File f = c->open(path, O_RDONLY);
    std::vector<char> warm(block);
    for (size_t i = 0; i < blocks; ++i) f.pread(warm.data(), block, i * block);
    for (size_t n : inflight) {
      std::atomic<uint64_t> ops{0};
      std::atomic<bool> stop{false};
      auto cpu0 = odafs::bench::server_cpu_us(*c);
      auto t0 = Clock::now();
      std::vector<std::thread> threads;
      for (size_t t = 0; t < n; ++t) {
        threads.emplace_back([&, t] {
          std::vector<char> buf(block);
          for (size_t i = t * 7919; !stop.load(std::memory_order_relaxed); ++i) {
            f.pread(buf.data(), block, (i % blocks) * block);
            ops.fetch_add(1, std::memory_order_relaxed);
          }
        });
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(rate_ms));
      stop = true;
      for (auto& t : threads) t.join();
      double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      auto cpu1 = odafs::bench::server_cpu_us(*c);
      rates.push_back({m, n, ops / secs, double(cpu1["total"] - cpu0["total"]) / ops});
      std::fprintf(stderr, "%s inflight=%zu: %.0f ops/s\n", m.c_str(), n, ops / secs);
    }
    f.close();
  }
  return rates;
}

void print_tables(const std::vector<Latency>& lat, const std::vector<Rate>& rates, size_t blocks,
                  size_t block) {
  std::printf("second pass, %zu reads of %zu bytes, one thread\n", blocks, block);
  std::printf("%-14s %9s %9s %9s %12s %10s %13s %8s %8s  %s\n", "mechanism", "mean_us", "p50_us",
              "p99_us", "srv_cpu_us", "rpc_cpu", "engine_cpu", "ordma", "rpc", "engine_via");
  for (const Latency& l : lat) {
    std::printf("%-14s %9.1f %9.1f %9.1f %12.2f %10.2f %13.2f %8llu %8llu  %s\n",
                l.mechanism.c_str(), l.mean_us, l.p50_us, l.p99_us, l.cpu_total, l.cpu_rpc,
                l.cpu_engine, static_cast<unsigned long long>(l.ordma_reads),
                static_cast<unsigned long long>(l.rpc_reads), l.transport.c_str());
  }
  const Latency& pre = lat[1];
  for (size_t i = 3; i < lat.size(); ++i) {
    std::printf("%s vs rpc_preposted: latency %.2fx, server CPU per read %.2fx\n",
                lat[i].mechanism.c_str(), lat[i].mean_us / pre.mean_us,
                lat[i].cpu_total / pre.cpu_total);
  }
  std::printf("\n%-14s %9s %12s %14s\n", "mechanism", "inflight", "ops_per_s", "srv_cpu_us/op");
  for (const Rate& r : rates) {
    std::printf("%-14s %9zu %12.0f %14.2f\n", r.mechanism.c_str(), r.inflight, r.ops_per_s,
                r.server_cpu_us_per_op);
  }
}

odafs::bench::Json to_json(const std::vector<Latency>& lat, const std::vector<Rate>& rates,
                           size_t blocks, size_t block) {
  using odafs::bench::rounded;
  odafs::bench::Json json = {{"block_bytes", block}, {"reads_per_pass", blocks}};
  json["latency"] = odafs::bench::Json::array();
  for (const Latency& l : lat) {
    json["latency"].push_back({{"mechanism", l.mechanism},
                               {"engine_via", l.transport},
                               {"mean_us", rounded(l.mean_us, 2)},
                               {"p50_us", rounded(l.p50_us, 2)},
                               {"p99_us", rounded(l.p99_us, 2)},
                               {"server_cpu_us_per_op", rounded(l.cpu_total, 3)},
                               {"server_cpu_us_per_op_rpc", rounded(l.cpu_rpc, 3)},
                               {"server_cpu_us_per_op_engine", rounded(l.cpu_engine, 3)},
                               {"ordma_reads", l.ordma_reads},
                               {"rpc_reads", l.rpc_reads}});
  }
  json["throughput"] = odafs::bench::Json::array();
  for (const Rate& r : rates) {
    json["throughput"].push_back({{"mechanism", r.mechanism},
                                  {"inflight", r.inflight},
                                  {"ops_per_s", rounded(r.ops_per_s, 1)},
                                  {"server_cpu_us_per_op", rounded(r.server_cpu_us_per_op, 3)}});
  }
  return json;
}

}  // namespace

int main(int argc, char** argv) {
  std::string url, json_path;
  size_t file_mb = 8, block = 4096;
  int rate_ms = 1500;
  std::vector<size_t> inflight = {1, 2, 4, 8, 16, 32, 64};
  odafs::Flags flags("odafs-micro", "--url URL [flags]");
  flags.add("--url", &url, "the export (odafs://HOST:PORT/)");
  flags.add("--file-mb", &file_mb, "file size", 1, 1 << 20);
  flags.add("--block", &block, "bytes per read", 1, 16 << 20);
  flags.add("--rate-ms", &rate_ms, "ms per throughput point", 1, 3600000);
  flags.add("--inflight", &inflight, "reads in flight, a list", 1, 4096);
  flags.add("--json", &json_path, "write the results there (else stdout)");
  if (!flags.parse(argc, argv).empty() || url.empty()) {
    std::fprintf(stderr, "odafs-micro: --url is required, and nothing besides flags\n%s",
                 flags.usage().c_str());
    return 2;
  }
  try {
    const std::string path = "/odafs-micro.dat";
    const size_t file_bytes = file_mb << 20, blocks = file_bytes / block;
    write_file(url, path, file_bytes);
    std::vector<Latency> lat = measure_latency(url, path, blocks, block);
    std::vector<Rate> rates = measure_rates(url, path, blocks, block, inflight, rate_ms);
    odafs::Client::mount(url)->unlink(path);
    print_tables(lat, rates, blocks, block);
    odafs::bench::emit_json(to_json(lat, rates, blocks, block), json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-micro: %s\n", e.what());
    return 1;
  }
  return 0;
}
