// odafs-server-throughput: the paper's Fig. 7, server throughput against block size.
//
//   odafs-server-throughput --url odafs://127.0.0.1:PORT/ [--clients 2] [--file-mb 64]
//                           [--request-kb 256] [--rounds 3]
//                           [--mechanisms rpc,ordma,ordma_tcp] [--json FILE]
//
// Client processes (spawned from this binary) each read one file, warm in the server's
// cache, sequentially and twice, in requests of request-kb; read-ahead fills each request:
// all of its blocks (the server's block size, which is the client's cache block) are in
// flight at once (see read_pass). The second pass is measured, all clients starting
// together: bytes over wall time is the server's throughput, and its CPU (STATS
// cpu_us.total) over the bytes is its CPU per MiB. Mechanisms, each on mounts without a
// client data cache (every block leaves the client):
//   rpc        DAFS: a pre-posted READ per block;
//   ordma      ODAFS over the local ring: the first pass brought a reference for every
//              block, so the second reads one-sided;
//   ordma_tcp  the same over the engine's TCP connection (a remote client's transport).
// Each round runs every mechanism once, their order rotating from round to round. Every
// block read is checked (a word per 512 bytes).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/flags.h"
#include "bench/bench_util.h"
#include "client/client.h"
#include "client/io_queue.h"

namespace {

const char* const kPath = "/odafs-fig7.dat";

// The word at byte offset `at` (a multiple of 8) of the file.
uint64_t word_at(uint64_t at) { return at * 0x9e3779b97f4a7c15ULL ^ 0x5a5a5a5a5a5a5a5aULL; }

struct Options {
  std::string url, json_path, mechanism;
  size_t clients = 2, file_mb = 64, request_kb = 256, rounds = 3;
  std::vector<std::string> mechanisms = {"rpc", "ordma", "ordma_tcp"};
};

odafs::MountOptions mount_options(const std::string& mechanism, size_t blocks) {
  odafs::MountOptions mo;
  mo.read_mode = mechanism == "rpc" ? odafs::ReadMode::kPrePosted : odafs::ReadMode::kOrdma;
  mo.same_host_shortcut = mechanism != "ordma_tcp";
  mo.cache_blocks = 0;                // every block leaves the client
  mo.directory_entries = blocks * 2;  // references for the whole file
  return mo;
}

// One sequential pass over the file; returns the bytes read. Throws on a wrong byte.
// per_block: one IoQueue request per block (DAFS: a READ each, all in flight); otherwise
// one request for the whole span, whose blocks the read path reads one-sided all at once
// (EngineClient::read_many): block-sized transfers in flight together either way.
uint64_t read_pass(odafs::Client& c, odafs::File& f, uint64_t file_bytes, size_t block,
                   size_t request, bool per_block, std::vector<char>& buf) {
  const size_t per_request = request / block;
  odafs::IoQueue q(c, per_request);
  std::vector<odafs::Completion> got(per_request);
  uint64_t total = 0;
  for (uint64_t at = 0; at < file_bytes; at += request) {
    const size_t n = std::min<uint64_t>(per_request, (file_bytes - at + block - 1) / block);
    const size_t unit = per_block ? block : n * block;
    const size_t units = per_block ? n : 1;
    for (size_t i = 0; i < units; ++i)
      q.submit_read(f, buf.data() + i * unit, unit, at + i * unit, i);
    for (size_t left = units; left > 0;) {
      size_t k = q.wait(std::span(got.data(), got.size()), 1, -1);
      for (size_t j = 0; j < k; ++j) {
        const odafs::Completion& cp = got[j];
        if (cp.error != 0 || cp.bytes != unit)
          throw odafs::Error(cp.error ? cp.error : EIO, "read");
        const uint64_t off = at + cp.user_tag * unit;
        for (size_t w = 0; w < unit; w += 512) {
          uint64_t v;
          std::memcpy(&v, buf.data() + cp.user_tag * unit + w, 8);
          if (v != word_at(off + w)) throw odafs::Error(EIO, "a block came back wrong");
        }
        total += cp.bytes;
      }
      left -= k;
    }
  }
  return total;
}

// A client process: pass 1, "READY", waits for a byte on stdin, pass 2, "DONE bytes secs".
int run_child(const Options& o) {
  auto probe = odafs::Client::mount(o.url);
  const size_t block = probe->limits().block_size;
  probe.reset();
  const uint64_t file_bytes = static_cast<uint64_t>(o.file_mb) << 20;
  auto c = odafs::Client::mount(o.url, mount_options(o.mechanism, file_bytes / block));
  odafs::File f = c->open(kPath, O_RDONLY);
  std::vector<char> buf(o.request_kb << 10);
  const bool per_block = o.mechanism == "rpc";
  read_pass(*c, f, file_bytes, block, buf.size(), per_block, buf);
  std::printf("READY\n");
  std::fflush(stdout);
  if (!odafs::bench::wait_for_go()) return 1;
  const uint64_t ordma0 = c->stats().ordma_reads, rpc0 = c->stats().rpc_reads;
  auto t0 = std::chrono::steady_clock::now();
  uint64_t bytes = read_pass(*c, f, file_bytes, block, buf.size(), per_block, buf);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("DONE %llu %.6f %llu %llu\n", static_cast<unsigned long long>(bytes), secs,
              static_cast<unsigned long long>(c->stats().ordma_reads - ordma0),
              static_cast<unsigned long long>(c->stats().rpc_reads - rpc0));
  std::fflush(stdout);
  return 0;
}

struct Sample {
  double mib_per_s = 0, cpu_us_per_mib = 0, one_sided_share = 0;
};

Sample measure(const Options& o, odafs::Client& stats, const std::string& mechanism) {
  std::vector<odafs::bench::ChildProcess> kids;
  for (size_t i = 0; i < o.clients; ++i) {
    kids.emplace_back(std::vector<std::string>{"--child", "--url", o.url, "--mechanism", mechanism,
                                               "--file-mb", std::to_string(o.file_mb),
                                               "--request-kb", std::to_string(o.request_kb)});
  }
  for (auto& k : kids) {
    if (k.read_line().rfind("READY", 0) != 0) throw odafs::Error(EIO, "a client failed pass 1");
  }
  const uint64_t cpu0 = odafs::bench::server_cpu_us(stats)["total"];
  auto t0 = std::chrono::steady_clock::now();
  for (auto& k : kids) k.go();
  uint64_t bytes = 0, ordma = 0, rpc = 0;
  for (auto& k : kids) {
    unsigned long long b = 0, od = 0, rp = 0;
    double secs = 0;
    if (std::sscanf(k.read_line().c_str(), "DONE %llu %lf %llu %llu", &b, &secs, &od, &rp) != 4) {
      throw odafs::Error(EIO, "a client failed pass 2");
    }
    bytes += b;
    ordma += od;
    rpc += rp;
  }
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t cpu1 = odafs::bench::server_cpu_us(stats)["total"];
  kids.clear();
  double mib = static_cast<double>(bytes) / (1 << 20);
  Sample s;
  s.mib_per_s = mib / elapsed;
  s.cpu_us_per_mib = static_cast<double>(cpu1 - cpu0) / mib;
  s.one_sided_share =
      ordma + rpc ? static_cast<double>(ordma) / static_cast<double>(ordma + rpc) : 0;
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool child = false;
  std::string mechanisms = "rpc,ordma,ordma_tcp";
  odafs::Flags flags("odafs-server-throughput", "--url URL [flags]");
  flags.add("--url", &o.url, "the export (odafs://HOST:PORT/)");
  flags.add("--clients", &o.clients, "client processes", 1, 4096);
  flags.add("--file-mb", &o.file_mb, "file per client", 1, 1 << 20);
  flags.add("--request-kb", &o.request_kb, "bytes per request (all its blocks in flight)", 1,
            1 << 20);
  flags.add("--rounds", &o.rounds, "rounds (mechanisms rotate)", 1, 1000);
  flags.add("--mechanisms", &mechanisms, "rpc, ordma, ordma_tcp (a list)");
  flags.add("--json", &o.json_path, "write the results there (else stdout)");
  flags.add("--child", &child, "(internal) run as one client process");
  flags.add("--mechanism", &o.mechanism, "(internal) the child's mechanism");
  if (!flags.parse(argc, argv).empty()) {
    std::fprintf(stderr, "odafs-server-throughput: no arguments besides flags\n");
    return 2;
  }
  o.mechanisms.clear();
  for (size_t p = 0; p <= mechanisms.size();) {
    size_t comma = std::min(mechanisms.find(',', p), mechanisms.size());
    if (comma > p) o.mechanisms.push_back(mechanisms.substr(p, comma - p));
    p = comma + 1;
  }
  try {
    if (child) return run_child(o);
    if (o.url.empty() || o.clients == 0 || o.rounds == 0 || o.mechanisms.empty()) {
      std::fprintf(stderr, "odafs-server-throughput: --url is required\n");
      return 2;
    }
    auto c = odafs::Client::mount(o.url);
    const size_t block = c->limits().block_size;
    if ((o.request_kb << 10) % block != 0) throw odafs::Error(EINVAL, "request not whole blocks");
    const uint64_t file_bytes = static_cast<uint64_t>(o.file_mb) << 20;
    {
      odafs::File f = c->open(kPath, O_RDWR | O_CREAT | O_TRUNC, 0644);
      std::vector<char> chunk(1 << 20);
      for (uint64_t at = 0; at < file_bytes; at += chunk.size()) {
        for (size_t w = 0; w < chunk.size(); w += 8) {
          uint64_t v = word_at(at + w);
          std::memcpy(chunk.data() + w, &v, 8);
        }
        f.pwrite(chunk.data(), chunk.size(), at);
      }
      f.close();
    }
    std::map<std::string, std::vector<Sample>> samples;
    for (size_t r = 0; r < o.rounds; ++r) {
      for (size_t k = 0; k < o.mechanisms.size(); ++k) {
        const std::string& m = o.mechanisms[(k + r) % o.mechanisms.size()];
        Sample s = measure(o, *c, m);
        samples[m].push_back(s);
        std::fprintf(stderr, "round %zu, %zu-byte blocks, %-9s %8.1f MiB/s, server %.0f us/MiB\n",
                     r + 1, block, m.c_str(), s.mib_per_s, s.cpu_us_per_mib);
      }
    }
    c->unlink(kPath);

    std::printf("%-10s %7s %10s %20s %14s %10s\n", "mechanism", "block", "MiB/s", "min..max",
                "srv_us/MiB", "one-sided");
    odafs::bench::Json json = odafs::bench::Json::array();
    for (const std::string& m : o.mechanisms) {
      using odafs::bench::rounded;
      std::vector<double> tput, cpu;
      for (const Sample& s : samples[m]) {
        tput.push_back(s.mib_per_s);
        cpu.push_back(s.cpu_us_per_mib);
      }
      auto [lo, hi] = std::minmax_element(tput.begin(), tput.end());
      double share = samples[m].back().one_sided_share;
      char range[64];
      std::snprintf(range, sizeof range, "%.1f..%.1f", *lo, *hi);
      std::printf("%-10s %7zu %10.1f %20s %14.0f %9.0f%%\n", m.c_str(), block, median(tput), range,
                  median(cpu), share * 100);
      json.push_back({{"mechanism", m},
                      {"block_bytes", block},
                      {"clients", o.clients},
                      {"request_bytes", o.request_kb << 10},
                      {"file_bytes", file_bytes},
                      {"rounds", o.rounds},
                      {"mib_per_s_median", rounded(median(tput), 1)},
                      {"mib_per_s_min", rounded(*lo, 1)},
                      {"mib_per_s_max", rounded(*hi, 1)},
                      {"server_cpu_us_per_mib", rounded(median(cpu), 1)},
                      {"one_sided_share", rounded(share, 3)}});
    }
    odafs::bench::emit_json(json, o.json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-server-throughput: %s\n", e.what());
    return 1;
  }
  return 0;
}
