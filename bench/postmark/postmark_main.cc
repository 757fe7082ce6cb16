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

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::string url, json;
  std::vector<std::string> modes = {"ordma"};
  std::vector<double> fractions;
  size_t repeat = 1, warmup = 0;
  size_t write_behind = odafs::MountOptions{}.write_behind_bytes;
  std::string mode_list = "ordma", fraction_list;
  odafs::Flags flags("odafs-postmark", "--url odafs://HOST:PORT/PATH [flags]");
  flags.add("--url", &url, "the directory to run in");
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
  flags.add("--write-behind", &write_behind, "MountOptions::write_behind_bytes", 0, 1u << 30);
  flags.add("--repeat", &repeat, "rounds of a comparison", 1, 1000);
  flags.add("--warmup", &warmup, "transactions before each contender's measured ones", 0,
            1000000000);
  flags.add("--verify", &cfg.verify, "check every byte read");
  flags.add("--json", &json, "write the results there (else stdout)");
  if (!flags.parse(argc, argv).empty()) usage("no arguments besides flags");
  try {
    modes.clear();
    std::istringstream in(mode_list);
    for (std::string m; std::getline(in, m, ',');) {
      mode_of(m);
      modes.push_back(m);
    }
    if (!fraction_list.empty()) fractions = parse_fractions(fraction_list);
  } catch (const std::logic_error& e) {
    usage(std::string("bad value: ") + e.what());
  }
  if (url.empty()) usage("--url is required");
  if (cfg.size_low == 0 || cfg.size_high < cfg.size_low) usage("need 0 < size-low <= size-high");
  if (cfg.read_block == 0 || cfg.write_block == 0) usage("block sizes must be positive");

  try {
    auto setup = Client::mount(url);
    const uint32_t bs = setup->limits().block_size;
    if (fractions.empty() && modes.size() == 1 && repeat == 1) {
      // Plain PostMark.
      odafs::MountOptions o;
      o.read_mode = mode_of(modes[0]);
      o.write_behind_bytes = write_behind;
      auto fs = Client::mount(url, o);
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
      std::ostringstream js;
      js << "{\"read_mode\":\"" << modes[0] << "\",\"transactions\":" << cfg.transactions
         << ",\"transactions_s\":" << c.transactions_s
         << ",\"tps\":" << (c.transactions_s > 0 ? cfg.transactions / c.transactions_s : 0)
         << ",\"created\":" << c.created << ",\"read\":" << c.read << ",\"appended\":" << c.appended
         << ",\"deleted\":" << c.deleted << ",\"bytes_read\":" << c.bytes_read
         << ",\"bytes_written\":" << c.bytes_written << ",\"hit_ratio\":" << hit
         << ",\"server_cpu_us_per_txn\":" << double(cpu1 - cpu0) / double(cfg.transactions)
         << ",\"ordma_reads\":" << st.ordma_reads << ",\"rpc_reads\":" << st.rpc_reads
         << ",\"mismatches\":" << c.mismatches << "}\n";
      odafs::bench::emit_json(js.str(), json);
      return c.mismatches == 0 ? 0 : 1;
    }

    // A comparison.
    if (fractions.empty()) fractions = {1.0};
    const bool shared_pool = cfg.bias_create == -1;
    Postmark pool(*setup, cfg, bs);
    if (shared_pool) pool.create_pool();
    const uint64_t pool_blocks = shared_pool ? pool.pool_blocks() : 0;
    std::vector<Run> runs;
    uint64_t mismatches = 0;
    for (size_t r = 0; r < repeat; ++r) {
      for (double frac : fractions) {
        for (const std::string& mode : modes) {
          odafs::MountOptions o;
          o.read_mode = mode_of(mode);
          o.write_behind_bytes = write_behind;
          uint64_t blocks = shared_pool ? pool_blocks : cfg.files * (cfg.size_high / bs + 1);
          o.cache_blocks = static_cast<size_t>(frac * static_cast<double>(blocks));
          o.directory_entries = std::max<size_t>(2 * blocks, 1024);
          auto fs = Client::mount(url, o);
          Postmark pm(*fs, cfg, bs);
          if (shared_pool) {
            pm.adopt_pool(pool);
            pm.transactions(warmup);
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
          Run run{frac,
                  mode,
                  c.transactions_s > 0 ? cfg.transactions / c.transactions_s : 0,
                  c.blocks_touched ? double(fs->stats().cache_hits - hits0) / c.blocks_touched : 0,
                  double(cpu1 - cpu0) / double(cfg.transactions),
                  fs->stats().ordma_reads - ordma0,
                  fs->stats().rpc_reads - rpc0,
                  c.mismatches};
          mismatches += c.mismatches;
          runs.push_back(run);
          std::fprintf(stderr,
                       "postmark: round %zu/%zu, cache %.0f%%, %-13s %8.0f txn/s, hit %.2f, "
                       "server %.1f us/txn\n",
                       r + 1, repeat, frac * 100, mode.c_str(), run.tps, run.hit_ratio,
                       run.server_cpu_us_per_txn);
        }
      }
    }
    if (shared_pool) pool.delete_pool();

    std::printf("\n%-8s %-14s %10s %18s %8s %14s\n", "cache", "read mode", "txn/s", "(min..max)",
                "hit", "server us/txn");
    std::ostringstream js;
    js << "{\"config\":{\"files\":" << cfg.files << ",\"transactions\":" << cfg.transactions
       << ",\"size_low\":" << cfg.size_low << ",\"size_high\":" << cfg.size_high
       << ",\"read_block\":" << cfg.read_block << ",\"bias_read\":" << cfg.bias_read
       << ",\"bias_create\":" << cfg.bias_create << ",\"block_size\":" << bs
       << ",\"pool_blocks\":" << pool_blocks << ",\"repeat\":" << repeat << ",\"warmup\":" << warmup
       << "},\"results\":[";
    bool first = true;
    for (double frac : fractions) {
      for (const std::string& mode : modes) {
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
        js << (first ? "" : ",") << "{\"cache_fraction\":" << frac << ",\"read_mode\":\"" << mode
           << "\",\"tps\":" << median(tps) << ",\"tps_min\":" << *lo << ",\"tps_max\":" << *hi
           << ",\"hit_ratio\":" << median(hit) << ",\"server_cpu_us_per_txn\":" << median(cpu)
           << "}";
        first = false;
      }
    }
    js << "]}\n";
    odafs::bench::emit_json(js.str(), json);
    return mismatches == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-postmark: %s\n", e.what());
    return 1;
  }
}
