// PostMark (bench/postmark) as a correctness test: every byte read back is checked against
// what the driver wrote, through each read path, while files are created, appended and
// deleted under it.
#include <doctest/doctest.h>

#include "bench/postmark/postmark.h"
#include "client/client.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::postmark::Config;
using odafs::postmark::Postmark;
using odafs::test::ServerProcess;
using odafs::test::TempDir;

TEST_CASE("PostMark reads back exactly what it wrote, through every read path") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  Config cfg;
  cfg.files = 60;
  cfg.transactions = 300;
  cfg.size_low = 100;
  cfg.size_high = 20000;  // up to five blocks, most ending in a partial one
  cfg.read_block = 3000;  // not a multiple of the block size
  cfg.write_block = 1000;
  cfg.verify = true;
  for (auto mode : {odafs::ReadMode::kOrdma, odafs::ReadMode::kPrePosted, odafs::ReadMode::kInline,
                    odafs::ReadMode::kDirect}) {
    CAPTURE(static_cast<int>(mode));
    odafs::MountOptions o;
    o.read_mode = mode;
    o.cache_blocks = 32;  // smaller than the pool: blocks are evicted and fetched again
    auto fs = Client::mount(server.url(), o);
    Postmark pm(*fs, cfg, fs->limits().block_size);
    pm.create_pool();
    pm.transactions(cfg.transactions);
    pm.delete_pool();
    const auto& c = pm.counts();
    CHECK(c.mismatches == 0);
    CHECK(c.read > 50);
    CHECK(c.appended > 50);
    CHECK(c.created == cfg.files + (c.created - c.created_alone));
    CHECK(c.deleted == c.created);
    CHECK(fs->readdir("pm").empty());
  }
}

TEST_CASE("read-only PostMark on a shared pool: fresh clients see the pool byte for byte") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  Config cfg;
  cfg.files = 100;
  cfg.transactions = 400;
  cfg.size_low = 1024;
  cfg.size_high = 7168;
  cfg.read_block = 4096;
  cfg.bias_read = 10;
  cfg.bias_create = -1;
  cfg.verify = true;
  auto setup = Client::mount(server.url());
  Postmark pool(*setup, cfg, 4096);
  pool.create_pool();
  for (double fraction : {0.25, 1.0}) {
    odafs::MountOptions o;
    o.cache_blocks = static_cast<size_t>(fraction * static_cast<double>(pool.pool_blocks()));
    auto fs = Client::mount(server.url(), o);
    Postmark pm(*fs, cfg, 4096);
    pm.adopt_pool(pool);
    pm.transactions(cfg.transactions);  // warms the caches
    pm.reset_counts();
    const uint64_t hits0 = fs->stats().cache_hits;
    pm.transactions(cfg.transactions);
    CHECK(pm.counts().mismatches == 0);
    CHECK(pm.counts().read == cfg.transactions);
    double hit = double(fs->stats().cache_hits - hits0) / double(pm.counts().blocks_touched);
    CAPTURE(fraction);
    // Uniform access over the pool: the hit ratio follows the cache's share of it.
    CHECK(hit > fraction - 0.15);
    CHECK(hit < fraction + 0.15);
  }
  pool.delete_pool();
}
