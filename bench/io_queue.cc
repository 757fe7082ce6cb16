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

}  // namespace

int main(int argc, char** argv) {
  std::string url, json_path;
  double seconds = 1;
  size_t block = 4096, file_mb = 8, rounds = 5;
  std::vector<size_t> inflight = {1, 4, 16, 64};
  std::vector<std::string> mechanisms = {"rpc", "ordma"};
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
  mechanisms = odafs::bench::parse_words(mechanism_list);
  if (url.empty() || block == 0 || inflight.empty() || rounds == 0 || mechanisms.empty()) {
    std::fprintf(stderr, "odafs-ioqueue: --url is required (--help lists the flags)\n");
    return 2;
  }
  try {
    const std::string path = "/odafs-ioqueue.dat";
    const size_t file_bytes = file_mb << 20, blocks = file_bytes / block;
    std::vector<char> data(file_bytes);
    {
      std::mt19937_64 rng(11);
      for (auto& ch : data) ch = static_cast<char>(rng());
      auto c = odafs::Client::mount(url);
      odafs::File f = c->open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
      for (size_t off = 0; off < file_bytes; off += 1 << 20) {
        f.pwrite(data.data() + off, std::min<size_t>(1 << 20, file_bytes - off), off);
      }
      f.close();
    }

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
      for (size_t off = 0; off < file_bytes; off += buf.size())
        f.pread(buf.data(), buf.size(), off);
    }

    const size_t max_n = *std::max_element(inflight.begin(), inflight.end());
    std::vector<std::vector<char>> bufs(max_n, std::vector<char>(block));
    std::vector<uint64_t> at(max_n);
    std::vector<odafs::Completion> got(max_n);
    std::map<std::pair<std::string, size_t>, Point> points;
    std::mt19937_64 rng(5);
    for (size_t round = 0; round < rounds; ++round) {
      for (size_t k = 0; k < mechanisms.size(); ++k) {
        const std::string& m = mechanisms[(k + round) % mechanisms.size()];
        odafs::Client& c = *clients[m];
        odafs::File& file = files.find(m)->second;
        for (size_t n : inflight) {
          odafs::IoQueue q(c, n);
          auto submit = [&](size_t slot) {
            at[slot] = (rng() % blocks) * block;
            q.submit_read(file, bufs[slot].data(), block, at[slot], slot);
          };
          const uint64_t o0 = c.stats().ordma_reads, r0 = c.stats().rpc_reads;
          const uint64_t cpu0 = odafs::bench::server_cpu_us(c)["total"];
          auto t0 = std::chrono::steady_clock::now();
          auto deadline = t0 + std::chrono::duration<double>(seconds);
          uint64_t done = 0;
          for (size_t s = 0; s < n; ++s) submit(s);
          bool more = true;
          while (q.outstanding() > 0) {
            size_t k2 = q.wait(std::span(got.data(), n), 1, -1);
            for (size_t i = 0; i < k2; ++i) {
              const odafs::Completion& cp = got[i];
              const size_t slot = cp.user_tag;
              if (cp.error != 0 || cp.bytes != block ||
                  std::memcmp(bufs[slot].data(), data.data() + at[slot], block) != 0) {
                throw odafs::Error(cp.error ? cp.error : EIO, "read came back wrong");
              }
              ++done;
              if (more) submit(slot);
            }
            more = more && std::chrono::steady_clock::now() < deadline;
          }
          double elapsed =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          const uint64_t cpu1 = odafs::bench::server_cpu_us(c)["total"];
          Point& p = points[{m, n}];
          p.mechanism = m;
          p.inflight = n;
          p.ops_per_s.push_back(done / elapsed);
          p.cpu_us.push_back(static_cast<double>(cpu1 - cpu0) / done);
          p.ordma_reads += c.stats().ordma_reads - o0;
          p.rpc_reads += c.stats().rpc_reads - r0;
          p.reads += done;
          std::fprintf(stderr, "round %zu %s inflight=%zu: %.0f reads/s\n", round + 1, m.c_str(), n,
                       done / elapsed);
        }
      }
    }
    for (auto& [name, f] : files) f.close();
    clients.begin()->second->unlink(path);

    std::printf("%-10s %9s %12s %22s %9s %12s %10s\n", "mechanism", "inflight", "reads/s",
                "min..max", "mean_us", "srv_cpu_us", "one-sided");
    std::string json = "[\n";
    size_t row = 0;
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
        std::string each;
        for (size_t i = 0; i < p.ops_per_s.size(); ++i) {
          char v[32];
          std::snprintf(v, sizeof v, "%s%.1f", i ? ", " : "", p.ops_per_s[i]);
          each += v;
        }
        char line[768];
        std::snprintf(line, sizeof line,
                      "  {\"mechanism\": \"%s\", \"block_bytes\": %zu, \"inflight\": %zu, "
                      "\"rounds\": %zu, \"seconds\": %.2f, \"ops_per_s_median\": %.1f, "
                      "\"ops_per_s_min\": %.1f, \"ops_per_s_max\": %.1f, "
                      "\"ops_per_s\": [%s], \"mean_us\": %.2f, "
                      "\"server_cpu_us_per_op\": %.2f, \"ordma_reads\": %llu, "
                      "\"rpc_reads\": %llu, \"reads\": %llu}%s\n",
                      m.c_str(), block, n, rounds, seconds, med, *lo, *hi, each.c_str(),
                      n / med * 1e6, cpu, static_cast<unsigned long long>(p.ordma_reads),
                      static_cast<unsigned long long>(p.rpc_reads),
                      static_cast<unsigned long long>(p.reads),
                      ++row < mechanisms.size() * inflight.size() ? "," : "");
        json += line;
      }
    }
    json += "]\n";
    odafs::bench::emit_json(json, json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-ioqueue: %s\n", e.what());
    return 1;
  }
  return 0;
}
