// odafs-ioqueue: reads/s from one thread with N reads in flight through an IoQueue,
// ORDMA against RPC, interleaved and repeated.
//
//   odafs-ioqueue --url odafs://127.0.0.1:PORT/ [--seconds S] [--inflight 1,4,16,64]
//                 [--rounds R] [--block B] [--file-mb M] [--mechanisms rpc,ordma,ordma_tcp]
//                 [--json FILE]
//
// A file warm in the server's cache is read in B-byte blocks at random block offsets by
// one thread that keeps N reads submitted (IoQueue::submit_read; wait for one completion,
// submit the next), for S seconds per point. Mechanisms, each on its own mount with no
// client data cache (every read leaves the client):
//   rpc        ReadMode::kPrePosted: every read is a pipelined READ;
//   ordma      ReadMode::kOrdma over the local ring: the directory holds a reference for
//              every block (a first pass brought them), so every read is one-sided;
//   ordma_tcp  the same over the engine's TCP connection (a remote client's path).
// Each round runs every (mechanism, N) once, the mechanisms' order rotating from round to
// round, so slow drifts of the machine spread over all of them. Reported per point: the
// median of the rounds' reads/s with min..max, mean latency (N / rate, Little's law), the
// server's CPU per read (its STATS cpu_us.total) and how the reads went (client
// counters). Every completion is checked: no error, B bytes, the right bytes.
#include "client/io_queue.h"

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/flags.h"
#include "bench/bench_util.h"
#include "client/client.h"

namespace {

struct Point {
  std::string mechanism;
  size_t inflight = 0;
  std::vector<double> ops_per_s;  // one per round
  std::vector<double> cpu_us;     // server CPU per read, one per round
  uint64_t ordma_reads = 0, rpc_reads = 0, reads = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// file_bytes of random bytes at path; returns them, to check what reads bring.
std::vector<char> write_file(const std::string& url, const std::string& path, size_t file_bytes) {
  std::vector<char> data(file_bytes);
  std::mt19937_64 rng(11);
  for (auto& ch : data) ch = static_cast<char>(rng());
  auto c = odafs::Client::mount(url);
  odafs::File f = c->open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  for (size_t off = 0; off < file_bytes; off += 1 << 20) {
    f.pwrite(data.data() + off, std::min<size_t>(1 << 20, file_bytes - off), off);
  }
  f.close();
  return data;
}

// What one point's reads need: the file's bytes to check against, and per slot a buffer
// and the offset it read.
struct Sweep {
  const std::vector<char>& data;
  size_t block, blocks;
  double seconds;
  std::vector<std::vector<char>> bufs;
  std::vector<uint64_t> at;
  std::vector<odafs::Completion> got;
  std::mt19937_64 rng{5};
};

// n random reads kept in flight on one IoQueue for s.seconds, each checked: one round of
// point p.
void measure_point(Sweep& s, odafs::Client& c, odafs::File& file, size_t n, Point& p) {
  odafs::IoQueue q(c, n);
  auto submit = [&](size_t slot) {
    s.at[slot] = (s.rng() % s.blocks) * s.block;
    q.submit_read(file, s.bufs[slot].data(), s.block, s.at[slot], slot);
  };
  const uint64_t o0 = c.stats().ordma_reads, r0 = c.stats().rpc_reads;
  const uint64_t cpu0 = odafs::bench::server_cpu_us(c)["total"];
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + std::chrono::duration<double>(s.seconds);
  uint64_t done = 0;
  for (size_t slot = 0; slot < n; ++slot) submit(slot);
  bool more = true;
  while (q.outstanding() > 0) {
    size_t k = q.wait(std::span(s.got.data(), n), 1, -1);
    for (size_t i = 0; i < k; ++i) {
      const odafs::Completion& cp = s.got[i];
      const size_t slot = cp.user_tag;
      if (cp.error != 0 || cp.bytes != s.block ||
          std::memcmp(s.bufs[slot].data(), s.data.data() + s.at[slot], s.block) != 0) {
        throw odafs::Error(cp.error ? cp.error : EIO, "read came back wrong");
      }
      ++done;
      if (more) submit(slot);
    }
    more = more && std::chrono::steady_clock::now() < deadline;
  }
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t cpu1 = odafs::bench::server_cpu_us(c)["total"];
  p.inflight = n;
  p.ops_per_s.push_back(done / elapsed);
  p.cpu_us.push_back(static_cast<double>(cpu1 - cpu0) / done);
  p.ordma_reads += c.stats().ordma_reads - o0;
  p.rpc_reads += c.stats().rpc_reads - r0;
  p.reads += done;
}

// The table of medians and spreads, and the JSON of every point.
odafs::bench::Json report(const std::vector<std::string>& mechanisms,
                          const std::vector<size_t>& inflight,
                          std::map<std::pair<std::string, size_t>, Point>& points, size_t block,
                          size_t rounds, double seconds) {
  using odafs::bench::rounded;
  std::printf("%-10s %9s %12s %22s %9s %12s %10s\n", "mechanism", "inflight", "reads/s", "min..max",
              "mean_us", "srv_cpu_us", "one-sided");
  odafs::bench::Json json = odafs::bench::Json::array();
  for (const std::string& m : mechanisms) {
    for (size_t n : inflight) {
      const Point& p = points[{m, n}];
      auto [lo, hi] = std::minmax_element(p.ops_per_s.begin(), p.ops_per_s.end());
      double med = median(p.ops_per_s), cpu = median(p.cpu_us);
      double share = p.reads ? static_cast<double>(p.ordma_reads) / p.reads : 0;
      char range[64];
      std::snprintf(range, sizeof range, "%.0f..%.0f", *lo, *hi);
      std::printf("%-10s %9zu %12.0f %22s %9.1f %12.2f %9.0f%%\n", m.c_str(), n, med, range,
                  n / med * 1e6, cpu, share * 100);
      odafs::bench::Json each = odafs::bench::Json::array();
      for (double v : p.ops_per_s) each.push_back(rounded(v, 1));
      json.push_back({{"mechanism", m},
                      {"block_bytes", block},
                      {"inflight", n},
                      {"rounds", rounds},
                      {"seconds", rounded(seconds, 2)},
                      {"ops_per_s_median", rounded(med, 1)},
                      {"ops_per_s_min", rounded(*lo, 1)},
                      {"ops_per_s_max", rounded(*hi, 1)},
                      {"ops_per_s", each},
                      {"mean_us", rounded(n / med * 1e6, 2)},
                      {"server_cpu_us_per_op", rounded(cpu, 2)},
                      {"ordma_reads", p.ordma_reads},
                      {"rpc_reads", p.rpc_reads},
                      {"reads", p.reads}});
    }
  }
  return json;
}

}  // namespace

int main(int argc, char** argv) {
  std::string url, json_path;
  double seconds = 1;
  size_t block = 4096, file_mb = 8, rounds = 5;
  std::vector<size_t> inflight = {1, 4, 16, 64};
  std::string mechanism_list = "rpc,ordma";
  odafs::Flags flags("odafs-ioqueue", "--url URL [flags]");
  flags.add("--url", &url, "the export (odafs://HOST:PORT/)");
  flags.add("--seconds", &seconds, "seconds per point", 0.001, 3600);
  flags.add("--inflight", &inflight, "reads in flight, a list", 1, 4096);
  flags.add("--rounds", &rounds, "rounds", 1, 1000);
  flags.add("--block", &block, "bytes per read", 1, 16 << 20);
  flags.add("--file-mb", &file_mb, "file size", 1, 1 << 20);
  flags.add("--mechanisms", &mechanism_list, "rpc, ordma (a list)");
  flags.add("--json", &json_path, "write the results there (else stdout)");
  if (!flags.parse(argc, argv).empty()) url.clear();  // reported below
  const std::vector<std::string> mechanisms = odafs::bench::parse_words(mechanism_list);
  if (url.empty() || block == 0 || inflight.empty() || rounds == 0 || mechanisms.empty()) {
    std::fprintf(stderr, "odafs-ioqueue: --url is required (--help lists the flags)\n");
    return 2;
  }
  try {
    const std::string path = "/odafs-ioqueue.dat";
    const size_t file_bytes = file_mb << 20, blocks = file_bytes / block;
    const std::vector<char> data = write_file(url, path, file_bytes);
    std::map<std::string, std::unique_ptr<odafs::Client>> clients;
    std::map<std::string, odafs::File> files;
    for (const std::string& m : mechanisms) {
      odafs::MountOptions mo;
      mo.read_mode = m == "rpc" ? odafs::ReadMode::kPrePosted : odafs::ReadMode::kOrdma;
      mo.same_host_shortcut = m != "ordma_tcp";
      mo.cache_blocks = 0;                // every read leaves the client
      mo.directory_entries = blocks * 2;  // references for the whole file
      clients[m] = odafs::Client::mount(url, mo);
      odafs::File& f = files.emplace(m, clients[m]->open(path, O_RDONLY)).first->second;
      std::vector<char> buf(1 << 20);  // warm: the server's cache, and the references
      for (size_t off = 0; off < file_bytes; off += buf.size()) {
        f.pread(buf.data(), buf.size(), off);
      }
    }
    const size_t max_n = *std::max_element(inflight.begin(), inflight.end());
    Sweep sweep{data,
                block,
                blocks,
                seconds,
                std::vector<std::vector<char>>(max_n, std::vector<char>(block)),
                std::vector<uint64_t>(max_n),
                std::vector<odafs::Completion>(max_n)};
    std::map<std::pair<std::string, size_t>, Point> points;
    for (size_t round = 0; round < rounds; ++round) {
      for (size_t k = 0; k < mechanisms.size(); ++k) {
        const std::string& m = mechanisms[(k + round) % mechanisms.size()];
        for (size_t n : inflight) {
          Point& p = points[{m, n}];
          p.mechanism = m;
          measure_point(sweep, *clients[m], files.find(m)->second, n, p);
          std::fprintf(stderr, "round %zu %s inflight=%zu: %.0f reads/s\n", round + 1, m.c_str(), n,
                       p.ops_per_s.back());
        }
      }
    }
    for (auto& [name, f] : files) f.close();
    clients.begin()->second->unlink(path);
    odafs::bench::emit_json(report(mechanisms, inflight, points, block, rounds, seconds),
                            json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-ioqueue: %s\n", e.what());
    return 1;
  }
  return 0;
}
