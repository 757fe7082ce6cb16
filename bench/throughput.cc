// odafs-throughput: READ operations per second with N reads in flight on one connection.
//
//   odafs-throughput --url odafs://127.0.0.1:PORT/ [--seconds S] [--inflight 1,2,4,...]
//                    [--block B] [--file-mb M] [--json FILE]
//
// For each RPC read mechanism (inline, pre-posted) and each N, keeps exactly N READs of B
// bytes in flight (a ring of AsyncReads: collect the oldest, start the next) over a file
// warm in the server's cache, for S seconds. Reports ops/s, mean latency (N / throughput,
// Little's law) and server CPU microseconds per read (server's own STATS cpu_us.total).
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/flags.h"
#include "bench/bench_util.h"
#include "client/client.h"

namespace {

struct Row {
  std::string mechanism;
  size_t inflight;
  double ops_per_s, mean_us, server_cpu_us_per_op;
};

}  // namespace

int main(int argc, char** argv) {
  std::string url, json_path;
  double seconds = 2;
  size_t block = 4096, file_mb = 8;
  std::vector<size_t> inflight = {1, 2, 4, 8, 16, 32, 64};
  odafs::Flags flags("odafs-throughput", "--url URL [flags]");
  flags.add("--url", &url, "the export (odafs://HOST:PORT/)");
  flags.add("--seconds", &seconds, "seconds per point", 0.001, 3600);
  flags.add("--inflight", &inflight, "reads in flight, a list", 1, 4096);
  flags.add("--block", &block, "bytes per read", 1, 16 << 20);
  flags.add("--file-mb", &file_mb, "file size", 1, 1 << 20);
  flags.add("--json", &json_path, "write the results there (else stdout)");
  if (!flags.parse(argc, argv).empty()) url.clear();  // reported below
  if (url.empty() || block == 0 || inflight.empty()) {
    std::fprintf(stderr, "odafs-throughput: --url is required (--help lists the flags)\n");
    return 2;
  }
  try {
    auto client = odafs::Client::mount(url);
    const std::string path = "/odafs-throughput.dat";
    const size_t file_bytes = file_mb << 20;
    {
      odafs::File f = client->open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
      std::vector<char> data(1 << 20);
      std::mt19937_64 rng(7);
      for (auto& ch : data) ch = static_cast<char>(rng());
      for (size_t off = 0; off < file_bytes; off += data.size())
        f.pwrite(data.data(), data.size(), off);
      f.close();
    }
    odafs::File f = client->open(path, O_RDONLY);
    const size_t blocks = file_bytes / block;
    size_t max_n = *std::max_element(inflight.begin(), inflight.end());
    std::vector<std::vector<char>> bufs(max_n, std::vector<char>(block));
    std::vector<odafs::AsyncRead> ops(max_n);
    for (size_t i = 0; i < blocks; ++i) f.pread(bufs[0].data(), block, i * block);  // warm

    std::vector<Row> rows;
    for (auto mode : {odafs::ReadMode::kInline, odafs::ReadMode::kPrePosted}) {
      client->set_read_mode(mode);
      const char* name = mode == odafs::ReadMode::kInline ? "rpc_inline" : "rpc_preposted";
      for (size_t n : inflight) {
        size_t next = 0, done = 0;
        auto start = [&](size_t slot) {
          client->start_read(ops[slot], f.handle(), bufs[slot].data(), block,
                             (next++ % blocks) * block);
        };
        uint64_t cpu0 = odafs::bench::server_cpu_us(*client)["total"];
        auto t0 = std::chrono::steady_clock::now();
        auto deadline = t0 + std::chrono::duration<double>(seconds);
        for (size_t s = 0; s < n; ++s) start(s);
        for (size_t slot = 0;; slot = (slot + 1) % n) {
          if (client->finish_read(ops[slot]) != block) throw odafs::Error(EIO, "short read");
          ++done;
          if (std::chrono::steady_clock::now() < deadline) {
            start(slot);
          } else if (std::none_of(ops.begin(), ops.begin() + n,
                                  [](const odafs::AsyncRead& o) { return o.in_flight(); })) {
            break;
          }
        }
        double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        uint64_t cpu1 = odafs::bench::server_cpu_us(*client)["total"];
        Row r{name, n, done / elapsed, n / (done / elapsed) * 1e6,
              static_cast<double>(cpu1 - cpu0) / done};
        rows.push_back(r);
        std::fprintf(stderr, "%s inflight=%zu: %.0f ops/s\n", name, n, r.ops_per_s);
      }
    }
    f.close();
    client->unlink(path);

    std::printf("%-14s %9s %12s %10s %18s\n", "mechanism", "inflight", "ops_per_s", "mean_us",
                "server_cpu_us/op");
    odafs::bench::Json json = odafs::bench::Json::array();
    for (const Row& r : rows) {
      using odafs::bench::rounded;
      std::printf("%-14s %9zu %12.0f %10.1f %18.1f\n", r.mechanism.c_str(), r.inflight, r.ops_per_s,
                  r.mean_us, r.server_cpu_us_per_op);
      json.push_back({{"mechanism", r.mechanism},
                      {"block_bytes", block},
                      {"inflight", r.inflight},
                      {"ops_per_s", rounded(r.ops_per_s, 1)},
                      {"mean_us", rounded(r.mean_us, 2)},
                      {"server_cpu_us_per_op", rounded(r.server_cpu_us_per_op, 2)}});
    }
    odafs::bench::emit_json(json, json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-throughput: %s\n", e.what());
    return 1;
  }
  return 0;
}
