// odafs-cache-policy: hit ratios of the client cache under LRU and Multi-Queue replacement.
//
//   odafs-cache-policy [--headers H] [--data D] [--block B] [--repeats R]
//                      [--contenders lru,mq,mq-life4,...] [--json FILE]
//
// No server: block reads are replayed against a ClientCache (H headers, D data blocks,
// MountOptions' defaults) the way the read path drives it: the data cache, else a
// reference from the directory (a one-sided read), else an "RPC" that brings a reference;
// the block is then kept. Per workload and contender it reports the share of reads served
// from the data cache, the share served without an RPC (data or one-sided), and the cost
// per read. Workloads, each sized against the pool it stresses:
//
//   loop-data   a loop over 1.1 D blocks, again and again
//   loop-dir    a loop over 1.1 H blocks
//   zipf        Zipf (s = 1) over 4 H blocks
//   hot-scan-data  half the reads uniform over a hot set of D/2 blocks, half a scan of
//               blocks read once
//   hot-scan-dir   the same with a hot set of H/2
//
// The first quarter of each trace warms the cache and is not counted. Each repeat draws
// new traces (its own seed); contenders replay the same trace, in an order that
// alternates between repeats. Ratios and times are the median and the range over the
// repeats. "mq-lifeK" is MQ with a life time of K times each pool's size.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/flags.h"
#include "bench/bench_util.h"
#include "client/client.h"
#include "client/client_cache.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kBlocksPerFile = 4096;

struct Contender {
  std::string name;
  odafs::CachePolicy policy;
  uint64_t life_factor;  // 0: the default (MqTuning)
};

Contender contender_of(const std::string& name) {
  if (name == "lru") return {name, odafs::CachePolicy::kLru, 0};
  if (name == "mq") return {name, odafs::CachePolicy::kMultiQueue, 0};
  if (name.rfind("mq-life", 0) == 0) {
    return {name, odafs::CachePolicy::kMultiQueue, std::stoull(name.substr(7))};
  }
  throw std::invalid_argument("unknown contender " + name + " (lru, mq, mq-lifeK)");
}

struct Workload {
  std::string name;
  std::vector<uint64_t> trace;  // block ids
};

// Zipf over n ids, s = 1: id i (from 0) drawn with weight 1 / (i + 1), ids shuffled.
std::vector<uint64_t> zipf_trace(size_t n, size_t length, std::mt19937_64& rng) {
  std::vector<double> cdf(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) cdf[i] = sum += 1.0 / double(i + 1);
  std::vector<uint64_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<uint64_t> out(length);
  for (uint64_t& id : out) {
    size_t rank = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
    id = ids[std::min(rank, n - 1)];
  }
  return out;
}

std::vector<uint64_t> loop_trace(size_t n, size_t length) {
  std::vector<uint64_t> out(length);
  for (size_t i = 0; i < length; ++i) out[i] = i % n;
  return out;
}

std::vector<uint64_t> hot_scan_trace(size_t hot, size_t length, std::mt19937_64& rng) {
  std::vector<uint64_t> out(length);
  uint64_t next_scan = 1ull << 40;  // scan ids never meet hot ones
  for (uint64_t& id : out) id = rng() % 2 ? rng() % hot : next_scan++;
  return out;
}

std::vector<Workload> workloads(size_t headers, size_t data, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Workload> w;
  const size_t loop_data = data + data / 10, loop_dir = headers + headers / 10;
  w.push_back({"loop-data", loop_trace(loop_data, 12 * loop_data)});
  w.push_back({"loop-dir", loop_trace(loop_dir, 12 * loop_dir)});
  w.push_back({"zipf", zipf_trace(4 * headers, 12 * headers, rng)});
  w.push_back({"hot-scan-data", hot_scan_trace(data / 2, std::max(12 * data, 4 * headers), rng)});
  w.push_back({"hot-scan-dir", hot_scan_trace(headers / 2, 12 * headers, rng)});
  return w;
}

struct Run {
  double data_hit = 0, no_rpc = 0, ns_per_read = 0;
};

Run replay(const Workload& w, const Contender& c, size_t headers, size_t data, uint32_t block) {
  odafs::MqTuning tuning;
  if (c.life_factor != 0) tuning.life_factor = static_cast<uint32_t>(c.life_factor);
  odafs::ClientCache cc(headers, data, block, c.policy, tuning);
  std::vector<char> bytes(block, 'x'), out(block);
  odafs::ordma::Reference ref;
  ref.length = block;
  const size_t warm = w.trace.size() / 4;
  uint64_t data_hits = 0, one_sided = 0;
  Clock::time_point t0;
  for (size_t i = 0; i < w.trace.size(); ++i) {
    if (i == warm) {
      data_hits = one_sided = 0;
      t0 = Clock::now();
    }
    const uint64_t file = 1 + w.trace[i] / kBlocksPerFile, b = w.trace[i] % kBlocksPerFile;
    if (cc.read(file, b, 0, block, out.data())) {
      ++data_hits;
      continue;
    }
    const uint64_t ticket = cc.data_ticket();
    odafs::ordma::Reference found;
    if (cc.find(file, b, &found)) {
      ++one_sided;
    } else {
      cc.insert(file, b, ref);
    }
    cc.store(file, b, bytes.data(), block, ticket);
  }
  const double measured = double(w.trace.size() - warm);
  Run r;
  r.ns_per_read = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / measured;
  r.data_hit = double(data_hits) / measured;
  r.no_rpc = double(data_hits + one_sided) / measured;
  return r;
}

struct Summary {
  double median, min, max;
};

Summary summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {median, v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  size_t headers = odafs::MountOptions{}.directory_entries;
  size_t data = odafs::MountOptions{}.cache_blocks;
  uint32_t block = 4096;
  size_t repeats = 5;
  std::string json_path, contender_list = "lru,mq";
  odafs::Flags flags("odafs-cache-policy", "[flags]");
  flags.add("--headers", &headers, "directory entries (references)", 1, 1u << 30);
  flags.add("--data", &data, "data blocks (at most --headers)", 1, 1u << 30);
  flags.add("--block", &block, "block size", 1, 16u << 20);
  flags.add("--repeats", &repeats, "repeats of each trace", 1, 1000);
  flags.add("--contenders", &contender_list, "lru, mq, mq-lifeK (a list)");
  flags.add("--json", &json_path, "write the results there (else stdout)");
  if (!flags.parse(argc, argv).empty()) headers = 0;  // reported below
  if (headers == 0 || data == 0 || data > headers || block == 0 || repeats == 0) {
    std::fprintf(stderr,
                 "usage: odafs-cache-policy [--headers H] [--data D <= H] [--block B] "
                 "[--repeats R] [--contenders lru,mq,mq-lifeK] [--json FILE]\n");
    return 2;
  }
  try {
    std::vector<Contender> contenders;
    for (size_t pos = 0; pos < contender_list.size();) {
      size_t comma = contender_list.find(',', pos);
      if (comma == std::string::npos) comma = contender_list.size();
      contenders.push_back(contender_of(contender_list.substr(pos, comma - pos)));
      pos = comma + 1;
    }
    // results[workload][contender]: one Run per repeat.
    std::vector<std::string> names;
    std::map<std::string, std::map<std::string, std::vector<Run>>> results;
    for (size_t r = 0; r < repeats; ++r) {
      for (const Workload& w : workloads(headers, data, 1000 + r)) {
        if (r == 0) names.push_back(w.name);
        for (size_t k = 0; k < contenders.size(); ++k) {
          // Alternate the order between repeats, so neither always runs on a warm CPU.
          const Contender& c = contenders[r % 2 ? contenders.size() - 1 - k : k];
          results[w.name][c.name].push_back(replay(w, c, headers, data, block));
        }
        std::fprintf(stderr, "repeat %zu: %s done\n", r + 1, w.name.c_str());
      }
    }

    std::printf("client cache: %zu headers, %zu data blocks of %u bytes; %zu repeats\n", headers,
                data, block, repeats);
    std::printf("%-14s %-10s %22s %22s %22s\n", "workload", "policy", "data hit % (range)",
                "no RPC % (range)", "ns/read (range)");
    odafs::bench::Json json = {{"headers", headers},
                               {"data_blocks", data},
                               {"block_bytes", block},
                               {"repeats", repeats},
                               {"results", odafs::bench::Json::array()}};
    for (const std::string& w : names) {
      for (const Contender& c : contenders) {
        const std::vector<Run>& runs = results[w][c.name];
        std::vector<double> dh, nr, ns;
        for (const Run& run : runs) {
          dh.push_back(100 * run.data_hit);
          nr.push_back(100 * run.no_rpc);
          ns.push_back(run.ns_per_read);
        }
        Summary d = summarize(dh), n = summarize(nr), t = summarize(ns);
        char cell[3][64];
        std::snprintf(cell[0], sizeof cell[0], "%.1f (%.1f-%.1f)", d.median, d.min, d.max);
        std::snprintf(cell[1], sizeof cell[1], "%.1f (%.1f-%.1f)", n.median, n.min, n.max);
        std::snprintf(cell[2], sizeof cell[2], "%.0f (%.0f-%.0f)", t.median, t.min, t.max);
        std::printf("%-14s %-10s %22s %22s %22s\n", w.c_str(), c.name.c_str(), cell[0], cell[1],
                    cell[2]);
        auto summary = [](const Summary& x, int decimals) {
          using odafs::bench::rounded;
          return odafs::bench::Json{{"median", rounded(x.median, decimals)},
                                    {"min", rounded(x.min, decimals)},
                                    {"max", rounded(x.max, decimals)}};
        };
        json["results"].push_back({{"workload", w},
                                   {"policy", c.name},
                                   {"data_hit_pct", summary(d, 2)},
                                   {"no_rpc_pct", summary(n, 2)},
                                   {"ns_per_read", summary(t, 1)}});
      }
    }
    odafs::bench::emit_json(json, json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-cache-policy: %s\n", e.what());
    return 1;
  }
  return 0;
}
