// odafs-postmark: PostMark on libodafs, alone or as a comparison of read paths.
//
//   odafs-postmark --url odafs://HOST:PORT/ [--files N] [--transactions N]
//       [--size-low B] [--size-high B] [--read-block B] [--write-block B]
//       [--bias-read 0..10|-1] [--bias-create 0..10|-1] [--subdirectories N] [--seed N]
//       [--read-modes ordma,rpc_preposted,rpc_inline,direct] [--cache-fractions F,F,...]
//       [--repeat R] [--warmup N] [--verify] [--json FILE] [--write-behind BYTES]
//
// With one read mode and no --cache-fractions it is PostMark: create the pool, run the
// transactions, delete the pool, print PostMark's report. Otherwise it compares: every
// (cache fraction, read mode) pair, interleaved, --repeat times, each with a fresh client
// whose data cache holds that fraction of the pool's blocks (its directory can map all of
// them). Read-only transactions (--bias-create -1 --bias-read 10: the paper's Fig. 6) share
// one pool created once, and each contender first runs --warmup transactions to fill its
// caches; otherwise each contender runs all of PostMark on its own pool. Reports
// transactions/s, the client cache's hit ratio and the server's CPU per transaction
// (STATS), median and spread over the repeats, as a table and JSON.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/flags.h"
#include "bench/bench_util.h"
#include "bench/postmark/postmark.h"

namespace {

using odafs::Client;
using odafs::postmark::Config;
using odafs::postmark::Postmark;

odafs::ReadMode mode_of(const std::string& m) {
  if (m == "rpc_inline") return odafs::ReadMode::kInline;
  if (m == "rpc_preposted") return odafs::ReadMode::kPrePosted;
  if (m == "direct") return odafs::ReadMode::kDirect;
  if (m == "ordma") return odafs::ReadMode::kOrdma;
  throw std::invalid_argument("unknown read mode " + m);
}

struct Run {
  double fraction;
  std::string mode;
  double tps, hit_ratio, server_cpu_us_per_txn;
  uint64_t ordma_reads, rpc_reads, mismatches;
};

std::vector<double> parse_fractions(const std::string& text) {
  std::vector<double> out;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stod(item));
  return out;
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "odafs-postmark: %s (odafs-postmark --help lists the flags)\n", why.c_str());
  std::exit(2);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// What the command line asks.
struct Settings {
  Config cfg;
  std::string url, json;
  std::vector<std::string> modes;
  std::vector<double> fractions;
  size_t repeat = 1, warmup = 0;
  size_t write_behind = odafs::MountOptions{}.write_behind_bytes;
};

Settings parse_settings(int argc, char** argv) {
  Settings s;
  Config& cfg = s.cfg;
  std::string mode_list = "ordma", fraction_list;
  odafs::Flags flags("odafs-postmark", "--url odafs://HOST:PORT/PATH [flags]");
  flags.add("--url", &s.url, "the directory to run in");
  flags.add("--files", &cfg.files, "files in the pool", 1, 100000000);
  flags.add("--transactions", &cfg.transactions, "transactions", 0, 1000000000);
  flags.add("--size-low", &cfg.size_low, "smallest file, bytes", 1, 1ull << 40);
  flags.add("--size-high", &cfg.size_high, "largest file, bytes", 1, 1ull << 40);
  flags.add("--read-block", &cfg.read_block, "bytes per read", 1, 64u << 20);
  flags.add("--write-block", &cfg.write_block, "bytes per write", 1, 64u << 20);
  flags.add("--bias-read", &cfg.bias_read, "reads (vs appends) out of 10; -1: neither", -1, 10);
  flags.add("--bias-create", &cfg.bias_create, "creates (vs deletes) out of 10; -1: neither", -1,
            10);
  flags.add("--subdirectories", &cfg.subdirectories, "subdirectories of the pool", 0, 100000);
  flags.add("--seed", &cfg.seed, "random seed", 0, UINT64_MAX);
  flags.add("--read-modes", &mode_list, "ordma, rpc_preposted, rpc_inline, direct (a list)");
  flags.add("--cache-fractions", &fraction_list,
            "compare client data caches of these fractions of the pool (a list)");
  flags.add("--write-behind", &s.write_behind, "MountOptions::write_behind_bytes", 0, 1u << 30);
  flags.add("--repeat", &s.repeat, "rounds of a comparison", 1, 1000);
  flags.add("--warmup", &s.warmup, "transactions before each contender's measured ones", 0,
            1000000000);
  flags.add("--verify", &cfg.verify, "check every byte read");
  flags.add("--json", &s.json, "write the results there (else stdout)");
  if (!flags.parse(argc, argv).empty()) usage("no arguments besides flags");
  try {
    std::istringstream in(mode_list);
    for (std::string m; std::getline(in, m, ',');) {
      mode_of(m);
      s.modes.push_back(m);
    }
    if (!fraction_list.empty()) s.fractions = parse_fractions(fraction_list);
  } catch (const std::logic_error& e) {
    usage(std::string("bad value: ") + e.what());
  }
  if (s.url.empty()) usage("--url is required");
  if (cfg.size_low == 0 || cfg.size_high < cfg.size_low) usage("need 0 < size-low <= size-high");
  if (cfg.read_block == 0 || cfg.write_block == 0) usage("block sizes must be positive");
  return s;
}

// Plain PostMark with the one read mode: its report, and a JSON line. The exit status.
int run_plain(const Settings& s, uint32_t bs) {
  const Config& cfg = s.cfg;
  odafs::MountOptions o;
  o.read_mode = mode_of(s.modes[0]);
  o.write_behind_bytes = s.write_behind;
  auto fs = Client::mount(s.url, o);
  Postmark pm(*fs, cfg, bs);
  auto cpu0 = odafs::bench::server_cpu_us(*fs)["total"];
  pm.create_pool();
  pm.transactions(cfg.transactions);
  auto cpu1 = odafs::bench::server_cpu_us(*fs)["total"];
  pm.delete_pool();
  std::printf("%s", pm.report().c_str());
  const auto& c = pm.counts();
  const auto& st = fs->stats();
  double hit = c.blocks_touched ? double(st.cache_hits) / double(c.blocks_touched) : 0;
  const odafs::bench::Json js = {
      {"read_mode", s.modes[0]},
      {"transactions", cfg.transactions},
      {"transactions_s", c.transactions_s},
      {"tps", c.transactions_s > 0 ? cfg.transactions / c.transactions_s : 0},
      {"created", c.created},
      {"read", c.read},
      {"appended", c.appended},
      {"deleted", c.deleted},
      {"bytes_read", c.bytes_read},
      {"bytes_written", c.bytes_written},
      {"hit_ratio", hit},
      {"server_cpu_us_per_txn", double(cpu1 - cpu0) / double(cfg.transactions)},
      {"ordma_reads", st.ordma_reads.load()},
      {"rpc_reads", st.rpc_reads.load()},
      {"mismatches", c.mismatches}};
  odafs::bench::emit_json(js, s.json);
  return c.mismatches == 0 ? 0 : 1;
}

// One contender of a comparison: a fresh client whose data cache holds `frac` of the pool
// (`pool_blocks`, 0: each contender's own pool), running the transactions.
Run run_contender(const Settings& s, uint32_t bs, double frac, const std::string& mode,
                  Postmark* shared_pool, uint64_t pool_blocks) {
  const Config& cfg = s.cfg;
  odafs::MountOptions o;
  o.read_mode = mode_of(mode);
  o.write_behind_bytes = s.write_behind;
  uint64_t blocks = shared_pool ? pool_blocks : cfg.files * (cfg.size_high / bs + 1);
  o.cache_blocks = static_cast<size_t>(frac * static_cast<double>(blocks));
  o.directory_entries = std::max<size_t>(2 * blocks, 1024);
  auto fs = Client::mount(s.url, o);
  Postmark pm(*fs, cfg, bs);
  if (shared_pool) {
    pm.adopt_pool(*shared_pool);
    pm.transactions(s.warmup);
  } else {
    pm.create_pool();
  }
  const uint64_t hits0 = fs->stats().cache_hits, ordma0 = fs->stats().ordma_reads,
                 rpc0 = fs->stats().rpc_reads;
  pm.reset_counts();
  auto cpu0 = odafs::bench::server_cpu_us(*fs)["total"];
  pm.transactions(cfg.transactions);
  auto cpu1 = odafs::bench::server_cpu_us(*fs)["total"];
  if (!shared_pool) pm.delete_pool();
  const auto& c = pm.counts();
  return Run{frac,
             mode,
             c.transactions_s > 0 ? cfg.transactions / c.transactions_s : 0,
             c.blocks_touched ? double(fs->stats().cache_hits - hits0) / c.blocks_touched : 0,
             double(cpu1 - cpu0) / double(cfg.transactions),
             fs->stats().ordma_reads - ordma0,
             fs->stats().rpc_reads - rpc0,
             c.mismatches};
}

// The comparison's table (medians and spreads) and its JSON.
void report_comparison(const Settings& s, const std::vector<Run>& runs, uint32_t bs,
                       uint64_t pool_blocks) {
  const Config& cfg = s.cfg;
  std::printf("\n%-8s %-14s %10s %18s %8s %14s\n", "cache", "read mode", "txn/s", "(min..max)",
              "hit", "server us/txn");
  odafs::bench::Json js = {{"config",
                            {{"files", cfg.files},
                             {"transactions", cfg.transactions},
                             {"size_low", cfg.size_low},
                             {"size_high", cfg.size_high},
                             {"read_block", cfg.read_block},
                             {"bias_read", cfg.bias_read},
                             {"bias_create", cfg.bias_create},
                             {"block_size", bs},
                             {"pool_blocks", pool_blocks},
                             {"repeat", s.repeat},
                             {"warmup", s.warmup}}},
                           {"results", odafs::bench::Json::array()}};
  for (double frac : s.fractions) {
    for (const std::string& mode : s.modes) {
      std::vector<double> tps, hit, cpu;
      for (const Run& r : runs) {
        if (r.fraction == frac && r.mode == mode) {
          tps.push_back(r.tps);
          hit.push_back(r.hit_ratio);
          cpu.push_back(r.server_cpu_us_per_txn);
        }
      }
      auto [lo, hi] = std::minmax_element(tps.begin(), tps.end());
      std::printf("%6.0f%%  %-14s %10.0f %8.0f..%-8.0f %8.2f %14.1f\n", frac * 100, mode.c_str(),
                  median(tps), *lo, *hi, median(hit), median(cpu));
      js["results"].push_back({{"cache_fraction", frac},
                               {"read_mode", mode},
                               {"tps", median(tps)},
                               {"tps_min", *lo},
                               {"tps_max", *hi},
                               {"hit_ratio", median(hit)},
                               {"server_cpu_us_per_txn", median(cpu)}});
    }
  }
  odafs::bench::emit_json(js, s.json);
}

// Every (cache fraction, read mode) pair, interleaved, --repeat times. The exit status.
int run_comparison(Settings& s, Client& setup, uint32_t bs) {
  if (s.fractions.empty()) s.fractions = {1.0};
  const bool shared = s.cfg.bias_create == -1;
  Postmark pool(setup, s.cfg, bs);
  if (shared) pool.create_pool();
  const uint64_t pool_blocks = shared ? pool.pool_blocks() : 0;
  std::vector<Run> runs;
  uint64_t mismatches = 0;
  for (size_t r = 0; r < s.repeat; ++r) {
    for (double frac : s.fractions) {
      for (const std::string& mode : s.modes) {
        Run run = run_contender(s, bs, frac, mode, shared ? &pool : nullptr, pool_blocks);
        mismatches += run.mismatches;
        runs.push_back(run);
        std::fprintf(stderr,
                     "postmark: round %zu/%zu, cache %.0f%%, %-13s %8.0f txn/s, hit %.2f, "
                     "server %.1f us/txn\n",
                     r + 1, s.repeat, frac * 100, mode.c_str(), run.tps, run.hit_ratio,
                     run.server_cpu_us_per_txn);
      }
    }
  }
  if (shared) pool.delete_pool();
  report_comparison(s, runs, bs, pool_blocks);
  return mismatches == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s = parse_settings(argc, argv);
  try {
    auto setup = Client::mount(s.url);
    const uint32_t bs = setup->limits().block_size;
    if (s.fractions.empty() && s.modes.size() == 1 && s.repeat == 1) return run_plain(s, bs);
    return run_comparison(s, *setup, bs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-postmark: %s\n", e.what());
    return 1;
  }
}
