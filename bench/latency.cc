// odafs-latency: round-trip latency of the RPC read paths on a warm file.
//
//   odafs-latency --url odafs://127.0.0.1:PORT/ [--iters N] [--file-mb M]
//                 [--blocks B1,B2,...] [--json FILE]
//
// Measures, one after another over one connection, single-threaded:
//   null       the NULL procedure (transport + dispatch, no file system)
//   rpc_inline     READ of B bytes, reply copied out of the receive buffer
//   rpc_preposted  READ of B bytes, payload received straight into the caller's buffer
// for each block size B (default 4096).
// For each: mean / p50 / p99 latency in microseconds and the server's CPU microseconds
// per operation (from its per-thread accounting, STATS cpu_us.total). Prints a table, and
// JSON (to stdout, or to --json FILE).
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/flags.h"
#include "bench/bench_util.h"
#include "client/client.h"

namespace {

struct Result {
  std::string mechanism;
  size_t block = 0;
  double mean_us = 0, p50_us = 0, p99_us = 0, server_cpu_us_per_op = 0;
  size_t ops = 0;
};

Result measure(odafs::Client& c, const std::string& name, size_t iters,
               const std::function<void(size_t)>& op) {
  std::vector<double> lat(iters);
  for (size_t i = 0; i < std::min<size_t>(iters / 10 + 1, 1000); ++i) op(i);  // warm up
  uint64_t cpu0 = odafs::bench::server_cpu_us(c)["total"];
  for (size_t i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    op(i);
    lat[i] =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  uint64_t cpu1 = odafs::bench::server_cpu_us(c)["total"];
  Result r;
  r.mechanism = name;
  r.ops = iters;
  double sum = 0;
  for (double v : lat) sum += v;
  std::sort(lat.begin(), lat.end());
  r.mean_us = sum / static_cast<double>(iters);
  r.p50_us = lat[iters / 2];
  r.p99_us = lat[std::min(iters - 1, iters * 99 / 100)];
  // The STATS call itself costs a little server CPU; it is one call against `iters`.
  r.server_cpu_us_per_op = static_cast<double>(cpu1 - cpu0) / static_cast<double>(iters);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string url, json_path;
  size_t iters = 20000, file_mb = 4;
  std::vector<size_t> block_sizes = {4096};
  odafs::Flags flags("odafs-latency", "--url URL [flags]");
  flags.add("--url", &url, "the export (odafs://HOST:PORT/)");
  flags.add("--iters", &iters, "reads per mechanism and block size", 1, 1u << 30);
  flags.add("--file-mb", &file_mb, "file size", 1, 1 << 20);
  flags.add("--blocks", &block_sizes, "block sizes, a list", 1, 16777216);
  flags.add("--json", &json_path, "write the results there (else stdout)");
  if (!flags.parse(argc, argv).empty()) url.clear();  // reported below
  if (url.empty() || iters == 0 || block_sizes.empty() ||
      std::count(block_sizes.begin(), block_sizes.end(), 0u) != 0) {
    std::fprintf(stderr, "odafs-latency: --url is required (--help lists the flags)\n");
    return 2;
  }
  try {
    odafs::MountOptions mo;
    mo.cache_blocks = 0;  // every read goes to the server: this measures the RPC paths
    auto client = odafs::Client::mount(url, mo);
    const std::string path = "/odafs-latency.dat";
    const size_t file_bytes = file_mb << 20;
    {
      odafs::File f = client->open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
      std::vector<char> data(1 << 20);
      std::mt19937_64 rng(42);
      for (auto& ch : data) ch = static_cast<char>(rng());
      for (size_t off = 0; off < file_bytes; off += data.size()) {
        f.pwrite(data.data(), std::min(data.size(), file_bytes - off), off);
      }
      f.close();
    }
    odafs::File f = client->open(path, O_RDONLY);
    std::vector<Result> results;
    results.push_back(measure(*client, "null", iters, [&](size_t) { client->ping(); }));
    for (size_t block : block_sizes) {
      std::vector<char> buf(block);
      const size_t blocks = std::max<size_t>(file_bytes / block, 1);
      for (size_t i = 0; i < blocks; ++i) f.pread(buf.data(), block, i * block);  // warm
      auto read_op = [&](size_t i) {
        if (f.pread(buf.data(), block, (i % blocks) * block) != block) {
          throw odafs::Error(EIO, "short read: is the file smaller than the block?");
        }
      };
      client->set_read_mode(odafs::ReadMode::kInline);
      results.push_back(measure(*client, "rpc_inline", iters, read_op));
      results.back().block = block;
      client->set_read_mode(odafs::ReadMode::kPrePosted);
      results.push_back(measure(*client, "rpc_preposted", iters, read_op));
      results.back().block = block;
    }
    f.close();
    client->unlink(path);

    std::printf("%-14s %8s %10s %10s %10s %18s\n", "mechanism", "bytes", "mean_us", "p50_us",
                "p99_us", "server_cpu_us/op");
    for (const Result& r : results) {
      std::printf("%-14s %8zu %10.1f %10.1f %10.1f %18.1f\n", r.mechanism.c_str(), r.block,
                  r.mean_us, r.p50_us, r.p99_us, r.server_cpu_us_per_op);
    }
    odafs::bench::Json json = odafs::bench::Json::array();
    for (const Result& r : results) {
      using odafs::bench::rounded;
      json.push_back({{"mechanism", r.mechanism},
                      {"block_bytes", r.block},
                      {"ops", r.ops},
                      {"mean_us", rounded(r.mean_us, 2)},
                      {"p50_us", rounded(r.p50_us, 2)},
                      {"p99_us", rounded(r.p99_us, 2)},
                      {"server_cpu_us_per_op", rounded(r.server_cpu_us_per_op, 2)}});
    }
    odafs::bench::emit_json(json, json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-latency: %s\n", e.what());
    return 1;
  }
  return 0;
}
