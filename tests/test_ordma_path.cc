// Integration: optimistic RDMA through real odafsd processes — references on READ
// replies, one-sided reads through the soft engine, faults and RPC fallback.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "client/client.h"
#include "client/client_cache.h"
#include "ordma/engine.h"
#include "tests/support/client_util.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::File;
using odafs::ordma::Fault;
using odafs::test::pattern;
using odafs::test::read_all;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

uint64_t faults(const Client& c, Fault f) {
  return c.stats().faults[static_cast<size_t>(f)].load();
}

// These tests watch reads reach the server: no client data cache.
odafs::MountOptions remote_only() {
  odafs::MountOptions mo;
  mo.cache_blocks = 0;
  return mo;
}

// The client cache's policies, as a mount URL names them.
const std::pair<std::string, odafs::CachePolicy> kPolicies[] = {
    {"lru", odafs::CachePolicy::kLru}, {"mq", odafs::CachePolicy::kMultiQueue}};

}  // namespace

TEST_CASE("the second pass over a warm file goes one-sided, byte for byte") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  REQUIRE(server.engine_port() != 0);
  std::string data = pattern(1 << 20, 71);
  write_local(dir / "warm", data);
  odafs::MountOptions mo = remote_only();
  std::string transport;
  SUBCASE("over the local ring") {
    mo.same_host_shortcut = true;
    transport = "ring";
  }
  SUBCASE("over TCP") {
    mo.same_host_shortcut = false;
    transport = "tcp";
  }
  auto fs = Client::mount(server.url(), mo);
  CHECK_FALSE(fs->limits().engine.empty());
  File f = fs->open("warm");
  CHECK(read_all(f, data.size()) == data);  // first pass: RPC, brings references
  CHECK(fs->directory_size() == 256);
  CHECK(fs->stats().ordma_reads.load() == 0);
  uint64_t rpc_before = fs->stats().rpc_reads.load();
  std::string back(4096, '\0');
  for (size_t off = 0; off < data.size(); off += 4096) {
    REQUIRE(f.pread(back.data(), 4096, off) == 4096);
    REQUIRE(back == data.substr(off, 4096));
  }
  CHECK(fs->stats().ordma_reads.load() == 256);
  CHECK(fs->stats().rpc_reads.load() == rpc_before);  // no RPC on the second pass
  CHECK(fs->engine_transport() == transport);
  CHECK(server_stat(*fs, "engine.reads") == 256);
  // Unaligned reads across blocks, and past EOF, are right too.
  CHECK(read_all(f, 10000, 4090) == data.substr(4090, 10000));
  CHECK(read_all(f, 100, data.size() - 50) == data.substr(data.size() - 50));
  CHECK(read_all(f, 100, data.size() + 10).empty());
}

TEST_CASE("references fault after eviction and reuse; the fallback returns the right data") {
  TempDir dir;
  // 1 MiB of 4 KiB blocks: reading a 2 MiB file evicts everything read before.
  ServerProcess server(dir.path(), {"--block-size", "4096", "--cache-mb", "1"});
  std::string a = pattern(256 * 1024, 81), b = pattern(2 << 20, 82);
  write_local(dir / "a", a);
  write_local(dir / "b", b);
  auto fs = Client::mount(server.url(), remote_only());
  File fa = fs->open("a");
  File fb = fs->open("b");
  CHECK(read_all(fa, a.size()) == a);  // references to a's blocks
  CHECK(read_all(fb, b.size()) == b);  // reuses every block of the cache
  uint64_t fallbacks = fs->stats().fallbacks.load();
  CHECK(read_all(fa, a.size()) == a);  // stale references: fault, fall back, still right
  uint64_t stale = faults(*fs, Fault::kStaleGeneration) + faults(*fs, Fault::kRevoked);
  CHECK(stale > 0);
  CHECK(fs->stats().fallbacks.load() > fallbacks);
  CHECK(server_stat(*fs, "engine.fault.stale_generation") +
            server_stat(*fs, "engine.fault.revoked") ==
        stale);
  // The fallback brought fresh references: the next pass is one-sided again.
  uint64_t ordma = fs->stats().ordma_reads.load();
  CHECK(read_all(fa, a.size()) == a);
  CHECK(fs->stats().ordma_reads.load() > ordma);
}

TEST_CASE("truncation and rewrite revoke references; readers see the new bytes") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  auto fs = Client::mount(server.url(), remote_only());
  File f = fs->open("t", O_RDWR | O_CREAT);
  std::string v1 = pattern(40000, 91), v2 = pattern(30000, 92);
  f.pwrite(v1.data(), v1.size(), 0);
  CHECK(read_all(f, 50000) == v1);
  CHECK(read_all(f, 50000) == v1);  // one-sided
  f.truncate(0);
  f.pwrite(v2.data(), v2.size(), 0);
  CHECK(read_all(f, 50000) == v2);
  CHECK(read_all(f, 50000) == v2);
}

TEST_CASE("every forged reference faults with its reason and the fallback recovers") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  std::string data = pattern(64 * 1024, 101);
  write_local(dir / "f", data);
  auto fs = Client::mount(server.url(), remote_only());
  File f = fs->open("f");
  CHECK(read_all(f, data.size()) == data);
  uint64_t id = f.cache_key();
  odafs::ClientCache* d = fs->cache();
  REQUIRE(d != nullptr);
  struct Case {
    const char* name;
    Fault expect;
    void (*tamper)(odafs::ordma::Reference&);
  };
  const Case cases[] = {
      {"flipped capability", Fault::kBadCapability,
       [](odafs::ordma::Reference& r) { r.capability[3] ^= 1; }},
      {"altered segment", Fault::kBadCapability,
       [](odafs::ordma::Reference& r) { r.segment += 1; }},
      {"truncated capability", Fault::kBadCapability,
       [](odafs::ordma::Reference& r) { std::memset(r.capability.data() + 8, 0, 8); }},
      {"other session", Fault::kWrongSession, [](odafs::ordma::Reference& r) { r.session ^= 1; }},
      {"old generation", Fault::kBadCapability,
       [](odafs::ordma::Reference& r) { r.generation -= 1; }},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    CAPTURE(cases[i].name);
    uint64_t block = i;
    odafs::ordma::Reference ref;
    REQUIRE(d->find(id, block, &ref));
    cases[i].tamper(ref);
    d->insert(id, block, ref);
    uint64_t before = faults(*fs, cases[i].expect);
    CHECK(read_all(f, 4096, block * 4096) == data.substr(block * 4096, 4096));
    CHECK(faults(*fs, cases[i].expect) == before + 1);
  }
}

TEST_CASE("a block rewritten by RPC while others read it one-sided is never torn") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096", "--threads", "2"});
  write_local(dir / "hot", std::string(4096, 'a'));
  std::atomic<bool> stop{false};
  std::atomic<long> torn{0}, reads{0}, one_sided{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      auto fs = Client::mount(server.url(), remote_only());
      File f = fs->open("hot");
      std::string buf(4096, '\0');
      while (!stop) {
        REQUIRE(f.pread(buf.data(), 4096, 0) == 4096);
        bool uniform = buf.find_first_not_of(buf[0]) == std::string::npos;
        if (!uniform) ++torn;
        ++reads;
      }
      one_sided += static_cast<long>(fs->stats().ordma_reads.load());
    });
  }
  auto writer = Client::mount(server.url(), remote_only());
  File w = writer->open("hot", O_RDWR);
  for (int v = 0; v < 400 || reads < 400; ++v) {
    std::string block(4096, static_cast<char>('a' + v % 26));
    w.pwrite(block.data(), block.size(), 0);
  }
  stop = true;
  for (auto& t : readers) t.join();
  CHECK(torn == 0);
  CHECK(one_sided > 0);
}

TEST_CASE("--no-ordma serves RPC only, with the same results") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--no-ordma"});
  CHECK(server.engine_port() == 0);
  std::string data = pattern(100000, 111);
  write_local(dir / "x", data);
  auto fs = Client::mount(server.url(), remote_only());
  CHECK(fs->limits().engine.empty());
  File f = fs->open("x");
  CHECK(read_all(f, data.size()) == data);
  CHECK(read_all(f, data.size()) == data);
  CHECK(fs->directory_size() == 0);
  CHECK(fs->stats().ordma_reads.load() == 0);
  CHECK(fs->prefetch_references(f, 0, data.size()) == 0);
}

TEST_CASE("GETREFS builds the directory eagerly; the first pass is then one-sided") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "8192"});
  std::string data = pattern(512 * 1024, 121);
  write_local(dir / "e", data);
  auto fs = Client::mount(server.url(), remote_only());
  File f = fs->open("e");
  CHECK(fs->prefetch_references(f, 0, data.size()) == 64);
  CHECK(fs->directory_size() == 64);
  uint64_t rpc = fs->stats().rpc_reads.load();
  CHECK(read_all(f, data.size()) == data);
  CHECK(fs->stats().rpc_reads.load() == rpc);
  CHECK(fs->stats().ordma_reads.load() == 64);
}

TEST_CASE("after a server restart the client drops old references and recovers") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  std::string data = pattern(64 * 1024, 131);
  write_local(dir / "r", data);
  auto fs = Client::mount(server.url(), remote_only());
  File f = fs->open("r");
  CHECK(read_all(f, data.size()) == data);
  odafs::ordma::Reference old;
  REQUIRE(fs->cache()->find(f.cache_key(), 0, &old));
  uint64_t old_session = old.session;
  server.restart();
  CHECK(read_all(f, data.size()) == data);  // reconnects, re-mounts, new session
  CHECK(read_all(f, data.size()) == data);
  odafs::ordma::Reference fresh;
  REQUIRE(fs->cache()->find(f.cache_key(), 0, &fresh));
  CHECK(fresh.session != old_session);
  // And an old reference presented to the new engine (on the client's new session) faults.
  fs->cache()->insert(f.cache_key(), 0, old);
  uint64_t before = faults(*fs, Fault::kWrongSession) + faults(*fs, Fault::kBadCapability);
  CHECK(read_all(f, 4096) == data.substr(0, 4096));
  CHECK(faults(*fs, Fault::kWrongSession) + faults(*fs, Fault::kBadCapability) == before + 1);
}

TEST_CASE("client cache: hits stay local; empty headers keep references for one-sided misses") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  std::string data = pattern(64 * 4096, 141);
  write_local(dir / "c", data);
  for (const auto& [url_option_key, policy] : kPolicies) {
    const auto& url_option = url_option_key;  // clang 14 lambdas cannot capture a binding
    CAPTURE(url_option);
    odafs::MountOptions mo;
    mo.cache_blocks = 8;  // 8 data blocks, 1024 headers: headers outnumber data
    mo.directory_entries = 1024;
    auto fs = Client::mount(server.url("/?cache_policy=" + url_option), mo);
    CHECK(fs->cache()->policy() == policy);
    File f = fs->open("c");
    CHECK(read_all(f, data.size()) == data);
    CHECK(fs->cache()->data_blocks_used() == 8);
    CHECK(fs->directory_size() == 64);  // 56 empty headers still hold their references
    // The last 8 blocks are cached: local hits, nothing leaves the client.
    uint64_t ordma = fs->stats().ordma_reads, rpc = fs->stats().rpc_reads;
    CHECK(read_all(f, 8 * 4096, 56 * 4096) == data.substr(56 * 4096));
    CHECK(fs->stats().cache_hits.load() == 8);
    CHECK(fs->stats().ordma_reads.load() == ordma);
    CHECK(fs->stats().rpc_reads.load() == rpc);
    // The first blocks lost their data but not their references: one-sided, no RPC.
    CHECK(read_all(f, 8 * 4096) == data.substr(0, 8 * 4096));
    CHECK(fs->stats().ordma_reads.load() == ordma + 8);
    CHECK(fs->stats().rpc_reads.load() == rpc);
  }
}

TEST_CASE("client cache: close-to-open sees other clients' writes; own writes invalidate") {
  for (const auto& [url_option_key, policy] : kPolicies) {
    const auto& url_option = url_option_key;  // clang 14 lambdas cannot capture a binding
    CAPTURE(url_option);
    TempDir dir;
    ServerProcess server(dir.path(), {"--block-size", "4096"});
    std::string v1 = pattern(20000, 151), v2 = pattern(20000, 152);
    write_local(dir / "s", v1);
    odafs::MountOptions mo;
    mo.cache_policy = policy;
    auto reader = Client::mount(server.url(), mo);
    auto writer = Client::mount(server.url());
    {
      File f = reader->open("s");
      CHECK(read_all(f, 20000) == v1);
      CHECK(read_all(f, 20000) == v1);
      CHECK(reader->stats().cache_hits.load() > 0);
    }
    {
      File w = writer->open("s", O_RDWR);
      w.pwrite(v2.data(), v2.size(), 0);
      w.close();
    }
    {
      File f = reader->open("s");  // revalidates: the attributes changed
      CHECK(read_all(f, 20000) == v2);
      std::string patch = "PATCHED";
      File rw = reader->open("s", O_RDWR);
      rw.pwrite(patch.data(), patch.size(), 5000);
      std::string expect = v2;
      expect.replace(5000, patch.size(), patch);
      CHECK(read_all(f, 20000) == expect);  // own write dropped the cached block
      rw.truncate(100);
      CHECK(read_all(f, 20000) == expect.substr(0, 100));
    }
  }
}

// The unit side of this (tickets under each policy) is in test_client_cache.cc.
TEST_CASE("client cache: bytes fetched before this client's write are never cached after it") {
  // A writer and a reader sharing one mount. Once the writer stops, the reader must see its
  // last write, whatever it cached on the way.
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  write_local(dir / "race", std::string(4096, 'a'));
  for (const auto& [url_option_key, policy] : kPolicies) {
    const auto& url_option = url_option_key;  // clang 14 lambdas cannot capture a binding
    CAPTURE(url_option);
    odafs::MountOptions mo;
    mo.cache_policy = policy;
    auto fs = Client::mount(server.url(), mo);
    File w = fs->open("race", O_RDWR);
    File r = fs->open("race");
    std::atomic<bool> stop{false};
    std::thread reader([&] {
      while (!stop) read_all(r, 4096);
    });
    std::string last;
    for (int v = 0; v < 400; ++v) {
      last.assign(4096, static_cast<char>('a' + v % 26));
      w.pwrite(last.data(), last.size(), 0);
    }
    stop = true;
    reader.join();
    CHECK(read_all(r, 4096) == last);
  }
}

TEST_CASE("direct reads: the server's engine writes into the caller's buffer") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096", "--max-io", "65536"});
  std::string data = pattern(300000, 161);
  write_local(dir / "d", data);
  odafs::MountOptions mo = remote_only();
  mo.read_mode = odafs::ReadMode::kDirect;
  auto fs = Client::mount(server.url(), mo);
  File f = fs->open("d");
  CHECK(read_all(f, data.size() + 100) == data);  // spans 5 READ_DIRECT calls, short at EOF
  for (uint64_t off : {0ul, 1ul, 4095ul, 4096ul, 123457ul}) {
    CAPTURE(off);
    CHECK(read_all(f, 70000, off) == data.substr(off, 70000));
  }
  CHECK(read_all(f, 10, data.size()).empty());
  CHECK(fs->stats().direct_reads.load() >= 6);
  CHECK(fs->stats().rpc_reads.load() == 0);
  CHECK(server_stat(*fs, "engine.pushes") == fs->stats().direct_reads.load());
  CHECK(server_stat(*fs, "calls.READ_DIRECT") == fs->stats().direct_reads.load());
}

TEST_CASE("direct reads fall back to RPC when the server has no engine") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--no-ordma"});
  std::string data = pattern(50000, 171);
  write_local(dir / "d", data);
  odafs::MountOptions mo = remote_only();
  mo.read_mode = odafs::ReadMode::kDirect;
  auto fs = Client::mount(server.url(), mo);
  File f = fs->open("d");
  CHECK(read_all(f, data.size()) == data);
  CHECK(fs->stats().direct_reads.load() == 0);
  CHECK(fs->stats().rpc_reads.load() > 0);
}

TEST_CASE("direct writes: the server's engine pulls from the caller's buffer") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096", "--max-io", "65536"});
  odafs::MountOptions mo = remote_only();
  mo.direct_writes = true;
  auto fs = Client::mount(server.url(), mo);
  std::string data = pattern(200000, 181);
  {
    File f = fs->open("w", O_RDWR | O_CREAT);
    CHECK(f.pwrite(data.data(), data.size(), 0) == data.size());  // 4 WRITE_DIRECT calls
    std::string patch = pattern(5000, 182);
    CHECK(f.pwrite(patch.data(), patch.size(), 4093) == patch.size());
    data.replace(4093, patch.size(), patch);
    f.close();
  }
  CHECK(odafs::test::read_local(dir / "w") == data);
  CHECK(fs->stats().direct_writes.load() == 5);
  CHECK(server_stat(*fs, "engine.pulls") == 5);
  CHECK(server_stat(*fs, "calls.WRITE") == 0);
  File f = fs->open("w");
  CHECK(read_all(f, data.size()) == data);  // the server cache saw the writes too
  // A failure on the server's side cancels the transfer; the caller gets the error.
  File gone = fs->open("w", O_RDWR);
  fs->unlink("w");
  char b[16] = {};
  // (ESTALE: an open file whose file was removed never looks its name up again.)
  CHECK(odafs::test::errno_of([&] { gone.pwrite(b, sizeof b, 0); }) == ESTALE);
  CHECK(fs->stats().direct_writes.load() == 5);
}

TEST_CASE("direct writes past the server's cap go by RPC; the data is the same") {
  TempDir dir;
  std::vector<std::string> flags = {"--block-size", "4096", "--threads", "2"};
  size_t cap = 1;
  SUBCASE("direct writes turned off") {
    flags.insert(flags.end(), {"--max-direct-writes", "0"});
    cap = 0;
  }
  SUBCASE("many writers, one place") { flags.insert(flags.end(), {"--max-direct-writes", "1"}); }
  ServerProcess server(dir.path(), flags);
  odafs::MountOptions mo = remote_only();
  mo.direct_writes = true;
  auto fs = Client::mount(server.url(), mo);
  constexpr int kWriters = 6, kRounds = 30;
  {
    File f = fs->open("many", O_RDWR | O_CREAT);
    // The engine connects on first use, and writes racing the connect go by RPC (they are
    // not refused): one write first, so every writer below finds it connected.
    std::string first = pattern(4096, 999);
    CHECK(f.pwrite(first.data(), first.size(), 0) == 4096);
    std::vector<std::thread> writers;
    for (int t = 0; t < kWriters; ++t) {
      writers.emplace_back([&, t] {
        for (int round = 0; round < kRounds; ++round) {
          std::string block = pattern(4096, static_cast<uint64_t>(1000 * t + round));
          CHECK(f.pwrite(block.data(), block.size(), uint64_t(t) * 4096) == 4096);
        }
      });
    }
    for (auto& w : writers) w.join();
    f.close();
  }
  std::string expect;
  for (int t = 0; t < kWriters; ++t) {
    expect += pattern(4096, static_cast<uint64_t>(1000 * t + kRounds - 1));
  }
  CHECK(odafs::test::read_local(dir / "many") == expect);
  uint64_t direct = fs->stats().direct_writes.load();
  uint64_t refused = server_stat(*fs, "direct_writes.refused_busy");
  CHECK(direct + refused == kWriters * kRounds + 1);
  CHECK(server_stat(*fs, "calls.WRITE") == refused);
  CHECK(server_stat(*fs, "engine.pulls") == direct);
  if (cap == 0) {
    CHECK(direct == 0);
  } else {
    CHECK(direct > 0);
  }
}

TEST_CASE("direct writes fall back to RPC without an engine") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--no-ordma"});
  odafs::MountOptions mo = remote_only();
  mo.direct_writes = true;
  auto fs = Client::mount(server.url(), mo);
  std::string data = pattern(30000, 191);
  File f = fs->open("x", O_RDWR | O_CREAT);
  f.pwrite(data.data(), data.size(), 0);
  f.close();
  CHECK(odafs::test::read_local(dir / "x") == data);
  CHECK(fs->stats().direct_writes.load() == 0);
}

TEST_CASE("a whole-file read from the cache or one-sided needs no READ to find the end") {
  // The last block is partial: without the size known at open, the client asked the
  // server for the bytes after it, one READ per whole-file read, even on a cache hit.
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  const std::string bytes = pattern(5000, 11);
  write_local(dir / "f", bytes);
  auto cached = Client::mount(server.url());  // data cache
  odafs::MountOptions refs_only = remote_only();
  refs_only.cache_blocks = 0;  // the directory alone: blocks come one-sided
  auto one_sided = Client::mount(server.url(), refs_only);
  for (Client* fs : {cached.get(), one_sided.get()}) {
    {
      File f = fs->open("f");  // the first read brings data and references
      CHECK(read_all(f, 8192) == bytes);
    }
    const uint64_t rpc_before = fs->stats().rpc_reads;
    File f = fs->open("f");
    CHECK(read_all(f, 8192) == bytes);
    CHECK(fs->stats().rpc_reads == rpc_before);
  }
  CHECK(one_sided->stats().ordma_reads >= 2);

  // The known size follows the file: another client appends; a new open sees it, and so
  // does an open File after stat().
  File held = cached->open("f");
  auto writer = Client::mount(server.url());
  const std::string more = pattern(3000, 12);
  {
    File w = writer->open("f", O_RDWR);
    w.pwrite(more.data(), more.size(), bytes.size());
  }
  File reopened = cached->open("f");
  CHECK(read_all(reopened, 16384) == bytes + more);
  CHECK(held.stat().size == bytes.size() + more.size());
  CHECK(read_all(held, 16384) == bytes + more);
}
