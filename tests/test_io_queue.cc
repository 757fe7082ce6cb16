// Integration: IoQueue, the completion-queue API, against real odafsd processes. Reads go
// down File::pread's pipeline (cache, one-sided, RPC) and writes keep File::pwrite's
// books; every completion is checked byte for byte.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/client_cache.h"
#include "client/io_queue.h"
#include "client/odafs.h"
#include "ordma/engine.h"
#include "tests/support/client_util.h"
#include "tests/support/io_queue_util.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::Completion;
using odafs::File;
using odafs::IoQueue;
using odafs::ordma::Fault;
using odafs::test::drain;
using odafs::test::errno_of;
using odafs::test::pattern;
using odafs::test::read_local;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

constexpr size_t kBlock = 4096;

uint64_t faults(const Client& c, Fault f) {
  return c.stats().faults[static_cast<size_t>(f)].load();
}

// A snapshot of the read path's counters.
struct Counts {
  uint64_t hits, ordma, rpc, fallbacks;
  explicit Counts(const Client& c)
      : hits(c.stats().cache_hits.load()),
        ordma(c.stats().ordma_reads.load()),
        rpc(c.stats().rpc_reads.load()),
        fallbacks(c.stats().fallbacks.load()) {}
};

}  // namespace

TEST_CASE("hundreds of reads and writes in flight at once, every completion byte for byte") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  const std::string src = pattern(2 << 20, 1);
  write_local(dir / "src", src);
  odafs::MountOptions mo;
  SUBCASE("with the client's data cache") {}
  SUBCASE("without a data cache") { mo.cache_blocks = 0; }
  SUBCASE("RPC only, inline") { mo.read_mode = odafs::ReadMode::kInline; }
  auto fs = Client::mount(server.url(), mo);
  File in = fs->open("src");
  File out = fs->open("dst", O_RDWR | O_CREAT);

  constexpr size_t kReads = 300, kWrites = 200;
  IoQueue q(*fs, kReads + kWrites);
  std::mt19937_64 rng(7);
  struct Read {
    std::string buf;
    uint64_t offset;
  };
  std::vector<Read> reads(kReads);
  std::vector<std::string> writes(kWrites);
  std::vector<uint64_t> write_at(kWrites);
  std::string dst;
  for (size_t i = 0, r = 0, w = 0; i < kReads + kWrites; ++i) {
    if (i % 5 < 3) {  // three reads to two writes, interleaved
      Read& rd = reads[r];
      rd.offset = rng() % src.size();
      rd.buf.assign(1 + rng() % 20000, '\0');  // unaligned; some run past the end
      q.submit_read(in, rd.buf.data(), rd.buf.size(), rd.offset, r);
      ++r;
    } else {
      writes[w] = pattern(1 + rng() % 9000, 1000 + w);
      write_at[w] = dst.size();
      dst += writes[w];
      q.submit_write(out, writes[w].data(), writes[w].size(), write_at[w], kReads + w);
      ++w;
    }
  }
  CHECK(q.outstanding() == kReads + kWrites);
  CHECK(q.ready() == 0);  // a cold file: every read waits on a READ, every write on a WRITE
  CHECK_THROWS_AS(q.submit_read(in, reads[0].buf.data(), 1, 0, 0), odafs::Error);  // full
  CHECK(errno_of([&] { q.submit_read(in, reads[0].buf.data(), 1, 0, 0); }) == EBUSY);

  std::map<uint64_t, Completion> done = drain(q);
  REQUIRE(done.size() == kReads + kWrites);
  for (size_t r = 0; r < kReads; ++r) {
    CAPTURE(r);
    const Completion& c = done[r];
    std::string want = src.substr(reads[r].offset, reads[r].buf.size());
    CHECK(c.error == 0);
    REQUIRE(c.bytes == want.size());
    CHECK(reads[r].buf.substr(0, c.bytes) == want);
  }
  for (size_t w = 0; w < kWrites; ++w) {
    CAPTURE(w);
    CHECK(done[kReads + w].error == 0);
    CHECK(done[kReads + w].bytes == writes[w].size());
  }
  CHECK(fs->stats().rpc_reads.load() > 0);
  CHECK(out.stat().size == dst.size());

  // Read the written file back through the queue (the writes dropped whatever the cache
  // held of it), in 3000-byte pieces, all at once.
  std::string back(dst.size(), '\0');
  IoQueue q2(*fs, (dst.size() + 2999) / 3000);
  for (size_t off = 0, i = 0; off < dst.size(); off += 3000, ++i) {
    q2.submit_read(out, back.data() + off, std::min<size_t>(3000, dst.size() - off), off, i);
  }
  for (auto& [tag, c] : drain(q2)) {
    CHECK(c.error == 0);
    CHECK(c.bytes == std::min<size_t>(3000, dst.size() - tag * 3000));
  }
  CHECK(back == dst);
  out.close();
  CHECK(read_local(dir / "dst") == dst);
}

TEST_CASE("a request longer than max_read or max_write goes as several calls, completes once") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096", "--max-io", "65536"});
  const std::string src = pattern(1 << 20, 2);
  write_local(dir / "src", src);
  odafs::MountOptions mo;
  mo.cache_blocks = 0;
  auto fs = Client::mount(server.url(), mo);
  REQUIRE(fs->limits().max_read == 65536);
  File in = fs->open("src");
  File out = fs->open("dst", O_RDWR | O_CREAT);
  std::string back(src.size() + 100, '\0');
  IoQueue q(*fs, 4);
  uint64_t rpc0 = fs->stats().rpc_reads.load();
  uint64_t writes0 = server_stat(*fs, "calls.WRITE");
  q.submit_read(in, back.data(), back.size(), 0, 1);
  q.submit_write(out, src.data(), src.size(), 0, 2);
  Completion got[4];
  size_t n = q.wait(got, 2, 30000);
  REQUIRE(n == 2);
  CHECK(q.outstanding() == 0);
  for (size_t i = 0; i < n; ++i) {
    CHECK(got[i].error == 0);
    CHECK(got[i].bytes == src.size());
  }
  CHECK(back.substr(0, src.size()) == src);
  CHECK(fs->stats().rpc_reads.load() - rpc0 == 16);  // 64 KiB each; the known size ends it
  CHECK(server_stat(*fs, "calls.WRITE") - writes0 == 16);
  out.close();
  CHECK(read_local(dir / "dst") == src);
}

TEST_CASE("one batch: cache hits, one-sided reads and RPCs, each counted") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  REQUIRE(server.engine_port() != 0);
  constexpr size_t kRegion = 32;  // blocks
  const std::string data = pattern(3 * kRegion * kBlock, 3);
  write_local(dir / "f", data);
  auto fs = Client::mount(server.url());  // data cache on, read mode kOrdma
  File f = fs->open("f");
  // Region A in the data cache (a read brings data and references), region B referenced
  // only (GETREFS: references, no data), region C unknown.
  std::string a(kRegion * kBlock, '\0');
  REQUIRE(f.pread(a.data(), a.size(), 0) == a.size());
  REQUIRE(fs->prefetch_references(f, kRegion * kBlock, kRegion * kBlock) == kRegion);
  const Counts before(*fs);

  IoQueue q(*fs, 3 * kRegion);
  std::vector<std::string> bufs(3 * kRegion, std::string(kBlock, '\0'));
  for (size_t b = 0; b < 3 * kRegion; ++b) {
    q.submit_read(f, bufs[b].data(), kBlock, b * kBlock, b);
  }
  // A came from the cache at submit; B's one-sided reads go together at the next reap.
  CHECK(q.ready() == kRegion);
  CHECK(q.reap(std::span<Completion>()) == 0);
  CHECK(q.ready() >= 2 * kRegion);
  auto done = drain(q);
  for (size_t b = 0; b < 3 * kRegion; ++b) {
    CAPTURE(b);
    CHECK(done[b].error == 0);
    CHECK(done[b].bytes == kBlock);
    CHECK(bufs[b] == data.substr(b * kBlock, kBlock));
  }
  const Counts after(*fs);
  CHECK(after.hits - before.hits == kRegion);
  CHECK(after.ordma - before.ordma == kRegion);
  CHECK(after.rpc - before.rpc == kRegion);
  CHECK(after.fallbacks == before.fallbacks);

  // Now every block is cached: a second batch never leaves the client.
  for (size_t b = 0; b < 3 * kRegion; ++b) {
    q.submit_read(f, bufs[b].data(), kBlock, b * kBlock, b);
  }
  CHECK(q.ready() == 3 * kRegion);
  Completion got[3 * kRegion];
  CHECK(q.reap(got) == 3 * kRegion);
  CHECK(Counts(*fs).rpc == after.rpc);
}

TEST_CASE("faults inside asynchronous reads fall back to the RPC; the bytes stay right") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  constexpr size_t kBlocks = 32;
  const std::string v1 = pattern(kBlocks * kBlock, 4), v2 = pattern(kBlocks * kBlock, 5);
  write_local(dir / "f", v1);
  odafs::MountOptions mo;
  mo.cache_blocks = 0;  // every read reaches the server or its engine
  auto fs = Client::mount(server.url(), mo);
  File f = fs->open("f");
  std::string warm(v1.size(), '\0');
  REQUIRE(f.pread(warm.data(), warm.size(), 0) == v1.size());  // references to every block
  REQUIRE(fs->directory_size() == kBlocks);
  std::string expect = v1;

  SUBCASE("forged references fault with their reason") {
    odafs::ClientCache* d = fs->cache();
    for (uint64_t block = 0; block < kBlocks; block += 4) {  // 8 of 32
      odafs::ordma::Reference ref;
      REQUIRE(d->find(f.cache_key(), block, &ref));
      ref.capability[3] ^= 1;
      d->insert(f.cache_key(), block, ref);
    }
    const Counts before(*fs);
    uint64_t bad0 = faults(*fs, Fault::kBadCapability);
    IoQueue q(*fs, kBlocks);
    std::vector<std::string> bufs(kBlocks, std::string(kBlock, '\0'));
    for (size_t b = 0; b < kBlocks; ++b) q.submit_read(f, bufs[b].data(), kBlock, b * kBlock, b);
    CHECK(q.ready() == 0);  // one-sided reads wait for the next reap or wait
    CHECK(q.reap(std::span<Completion>()) == 0);
    CHECK(q.ready() >= kBlocks - 8);  // the 8 faulted ones wait on their fallback READs
    auto done = drain(q);
    for (size_t b = 0; b < kBlocks; ++b) {
      CAPTURE(b);
      CHECK(done[b].error == 0);
      CHECK(done[b].bytes == kBlock);
      CHECK(bufs[b] == v1.substr(b * kBlock, kBlock));
    }
    const Counts after(*fs);
    CHECK(after.fallbacks - before.fallbacks == 8);
    CHECK(faults(*fs, Fault::kBadCapability) - bad0 == 8);
    CHECK(after.ordma - before.ordma == kBlocks - 8);
    CHECK(after.rpc - before.rpc == 8);
  }
  SUBCASE("references revoked by another client's truncation and rewrite") {
    auto other = Client::mount(server.url());
    File w = other->open("f", O_RDWR);
    w.truncate(0);
    w.pwrite(v2.data(), v2.size(), 0);
    w.close();
    expect = v2;
    const Counts before(*fs);
    uint64_t stale0 = faults(*fs, Fault::kStaleGeneration) + faults(*fs, Fault::kRevoked);
    IoQueue q(*fs, kBlocks);
    std::vector<std::string> bufs(kBlocks, std::string(kBlock, '\0'));
    for (size_t b = 0; b < kBlocks; ++b) q.submit_read(f, bufs[b].data(), kBlock, b * kBlock, b);
    auto done = drain(q);
    for (size_t b = 0; b < kBlocks; ++b) {
      CAPTURE(b);
      CHECK(done[b].error == 0);
      CHECK(done[b].bytes == kBlock);
      CHECK(bufs[b] == v2.substr(b * kBlock, kBlock));
    }
    const Counts after(*fs);
    CHECK(after.fallbacks - before.fallbacks == kBlocks);
    CHECK(faults(*fs, Fault::kStaleGeneration) + faults(*fs, Fault::kRevoked) - stale0 == kBlocks);
    CHECK(after.rpc - before.rpc == kBlocks);
  }
  // Either way the fallbacks brought fresh references: one read of the whole file, in one
  // request, now goes one-sided block by block.
  const Counts before(*fs);
  IoQueue q(*fs, 1);
  std::string all(expect.size(), '\0');
  q.submit_read(f, all.data(), all.size(), 0, 9);
  Completion c;
  REQUIRE(q.wait(std::span(&c, 1), 1, 30000) == 1);
  CHECK(c.error == 0);
  CHECK(c.bytes == expect.size());
  CHECK(all == expect);
  CHECK(Counts(*fs).ordma - before.ordma == kBlocks);
  CHECK(Counts(*fs).rpc == before.rpc);
}

TEST_CASE("reads at and past the end of file") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  const std::string data = pattern(10000, 6);
  write_local(dir / "f", data);
  odafs::MountOptions mo;
  SUBCASE("with the client's data cache") {}
  SUBCASE("without a data cache") { mo.cache_blocks = 0; }
  auto fs = Client::mount(server.url(), mo);
  File f = fs->open("f");
  IoQueue q(*fs, 8);
  char past[100], at_end[100], none[1];
  std::string across(8192, '\0');
  q.submit_read(f, past, sizeof past, 20000, 1);  // known to be past the end: no RPC
  q.submit_read(f, at_end, sizeof at_end, 10000, 2);
  q.submit_read(f, none, 0, 0, 3);
  CHECK(q.ready() == 3);
  q.submit_read(f, across.data(), across.size(), 5000, 4);
  auto done = drain(q);
  CHECK(done[1].bytes == 0);
  CHECK(done[2].bytes == 0);
  CHECK(done[3].bytes == 0);
  CHECK(done[4].bytes == 5000);
  CHECK(across.substr(0, 5000) == data.substr(5000));
  for (auto& [tag, c] : done) CHECK(c.error == 0);

  // The file shrank behind this client's back: the READ finds the new end.
  auto other = Client::mount(server.url());
  other->truncate("f", 3000);
  auto fresh = Client::mount(server.url(), mo);
  File g = fresh->open("f");
  other->truncate("f", 1000);  // after g learned its size
  IoQueue q2(*fresh, 1);
  std::string buf(10000, '\0');
  q2.submit_read(g, buf.data(), buf.size(), 0, 7);
  auto d2 = drain(q2);
  CHECK(d2[7].error == 0);
  CHECK(d2[7].bytes == 1000);
  CHECK(buf.substr(0, 1000) == data.substr(0, 1000));
}

TEST_CASE(
    "stats in flight together: each file's own attributes, and the server reads them at once") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  constexpr size_t kFiles = 16;
  for (size_t i = 0; i < kFiles; ++i)
    write_local(dir / ("f" + std::to_string(i)), pattern(i * 1000 + 7, i));
  auto fs = Client::mount(server.url());
  std::vector<File> files;
  for (size_t i = 0; i < kFiles; ++i) files.push_back(fs->open("f" + std::to_string(i), O_RDWR));
  // Bytes gathered behind and not sent yet count, as File::stat counts them.
  const std::string tail = pattern(100, 99);
  files[3].pwrite(tail.data(), tail.size(), 3 * 1000 + 7);
  // Another client grows a file: the stat asks the server, not what this one knew at open.
  auto other = Client::mount(server.url());
  File grow = other->open("f5", O_WRONLY);
  grow.pwrite("more", 4, 5 * 1000 + 7);
  grow.close();
  File closed = fs->open("f0");
  closed.close();

  const uint64_t before = server_stat(*other, "calls.GETATTR");
  IoQueue q(*fs, 64);
  std::vector<odafs::Attr> attrs(kFiles);
  for (size_t i = 0; i < kFiles; ++i) q.submit_stat(files[i], &attrs[i], i);
  odafs::Attr unused;
  q.submit_stat(closed, &unused, 100);
  auto done = drain(q);
  REQUIRE(done.size() == kFiles + 1);
  CHECK(done[100].error == EBADF);
  for (size_t i = 0; i < kFiles; ++i) {
    CAPTURE(i);
    CHECK(done[i].error == 0);
    CHECK(done[i].bytes == 0);
    uint64_t want = i * 1000 + 7;
    if (i == 3) want += tail.size();
    if (i == 5) want += 4;
    CHECK(attrs[i].size == want);
    CHECK(attrs[i].type == odafs::FileType::kRegular);
  }
  CHECK(server_stat(*other, "calls.GETATTR") - before >= kFiles);
  CHECK(errno_of([&] { q.submit_stat(files[1], nullptr, 1); }) == EINVAL);
}

TEST_CASE("errors come with their own completions and disturb no other request") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  const std::string data = pattern(256 * 1024, 7);
  write_local(dir / "good", data);
  write_local(dir / "gone", data);
  write_local(dir / "ro", data);
  auto fs = Client::mount(server.url());
  File good = fs->open("good");
  File gone = fs->open("gone", O_RDWR);
  fs->unlink("gone");  // its handle is stale now, and stays so
  File ro = fs->open("ro");
  File wo = fs->open("wo", O_WRONLY | O_CREAT);
  File closed = fs->open("ro");
  closed.close();
  File w = fs->open("w", O_RDWR | O_CREAT);

  IoQueue q(*fs, 256);
  constexpr uint64_t kGoneRead = 1000, kGoneWrite = 1001, kRoWrite = 1002, kWoRead = 1003,
                     kClosedRead = 1004, kWriteBase = 2000;
  std::vector<std::string> bufs(100, std::string(5000, '\0'));
  const std::string patch = pattern(5000, 8);
  char scratch[16];
  for (size_t i = 0; i < 100; ++i) {
    q.submit_read(good, bufs[i].data(), 5000, i * 2500, i);
    q.submit_write(w, patch.data(), patch.size(), i * patch.size(), kWriteBase + i);
    if (i == 10) q.submit_read(gone, scratch, sizeof scratch, 0, kGoneRead);
    if (i == 20) q.submit_write(gone, scratch, sizeof scratch, 0, kGoneWrite);
    if (i == 30) q.submit_write(ro, scratch, sizeof scratch, 0, kRoWrite);
    if (i == 40) q.submit_read(wo, scratch, sizeof scratch, 0, kWoRead);
    if (i == 50) q.submit_read(closed, scratch, sizeof scratch, 0, kClosedRead);
  }
  auto done = drain(q);
  REQUIRE(done.size() == 205);
  CHECK(done[kGoneRead].error == ESTALE);
  CHECK(done[kGoneWrite].error == ESTALE);
  CHECK(done[kRoWrite].error == EBADF);
  CHECK(done[kWoRead].error == EBADF);
  CHECK(done[kClosedRead].error == EBADF);
  for (size_t i = 0; i < 100; ++i) {
    CAPTURE(i);
    CHECK(done[i].error == 0);
    CHECK(done[i].bytes == 5000);
    CHECK(bufs[i] == data.substr(i * 2500, 5000));
    CHECK(done[kWriteBase + i].error == 0);
    CHECK(done[kWriteBase + i].bytes == patch.size());
  }
  w.close();
  std::string want;
  for (int i = 0; i < 100; ++i) want += patch;
  CHECK(read_local(dir / "w") == want);

  // Misuse throws, and leaves the queue as it was.
  IoQueue small(*fs, 2);
  small.submit_read(good, scratch, 8, 0, 1);
  small.submit_read(good, scratch + 8, 8, 8, 2);
  CHECK(errno_of([&] { small.submit_read(good, scratch, 8, 0, 3); }) == EBUSY);
  CHECK(errno_of([&] { small.submit_write(w, scratch, 8, 0, 3); }) == EBUSY);
  Completion one[1];
  CHECK(errno_of([&] { small.wait(one, 2, 0); }) == EINVAL);
  auto d2 = drain(small);
  CHECK(d2.size() == 2);
  CHECK(std::memcmp(scratch, data.data(), 16) == 0);
  CHECK(errno_of([&] { small.submit_read(good, nullptr, 8, 0, 3); }) == EINVAL);
  auto other = Client::mount(server.url());
  File theirs = other->open("good");
  CHECK(errno_of([&] { small.submit_read(theirs, scratch, 8, 0, 3); }) == EINVAL);
  CHECK(small.outstanding() == 0);
  CHECK(errno_of([&] { IoQueue bad(*fs, 0); }) == EINVAL);
}

TEST_CASE("a server that stops answering: the requests in flight time out, nothing hangs") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  const std::string data = pattern(64 * 1024, 9);
  write_local(dir / "f", data);
  odafs::MountOptions mo;
  mo.timeout_ms = 500;
  mo.read_mode = odafs::ReadMode::kPrePosted;  // RPC only: no engine to wait for
  auto fs = Client::mount(server.url(), mo);
  File f = fs->open("f");
  REQUIRE(odafs::test::stop_child(server.pid()));
  IoQueue q(*fs, 16);
  std::vector<std::string> bufs(16, std::string(kBlock, '\0'));
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < 16; ++i) q.submit_read(f, bufs[i].data(), kBlock, i * kBlock, i);
  Completion got[16];
  CHECK(q.wait(got, 1, 100) == 0);  // the wait's own timeout
  size_t n = q.wait(got, 16, -1);   // the calls' timeouts end it
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  kill(server.pid(), SIGCONT);
  CHECK(n == 16);
  for (size_t i = 0; i < n; ++i) CHECK(got[i].error == ETIMEDOUT);
  CHECK(waited >= 0.4);
  CHECK(waited < 5);
  // The server answers again: so does the queue.
  q.submit_read(f, bufs[0].data(), kBlock, 0, 99);
  n = q.wait(got, 1, 30000);
  REQUIRE(n == 1);
  CHECK(got[0].error == 0);
  CHECK(bufs[0] == data.substr(0, kBlock));
}

TEST_CASE("unstable writes from the queue are sent again after a crash, and go on after it") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--simulate-crashes", "--block-size", "4096"});
  auto fs = Client::mount(server.url());
  File f = fs->open("f", O_RDWR | O_CREAT);
  constexpr size_t kWrites = 64, kLen = 3000;
  std::string want;
  std::vector<std::string> pieces(2 * kWrites);
  IoQueue q(*fs, kWrites);
  for (size_t i = 0; i < kWrites; ++i) {
    pieces[i] = pattern(kLen, 100 + i);
    want += pieces[i];
    q.submit_write(f, pieces[i].data(), kLen, i * kLen, i);
  }
  for (auto& [tag, c] : drain(q)) {
    CHECK(c.error == 0);
    CHECK(c.bytes == kLen);
  }
  int status = server.signal_and_reap(SIGUSR1);  // a power loss: unstable data is gone
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 86);
  server.start_again();
  CHECK(read_local(dir / "f").empty());
  // The queue's next writes find the file again under the new instance...
  for (size_t i = kWrites; i < 2 * kWrites; ++i) {
    pieces[i] = pattern(kLen, 100 + i);
    want += pieces[i];
    q.submit_write(f, pieces[i].data(), kLen, i * kLen, i);
  }
  for (auto& [tag_key, c] : drain(q)) {
    const auto& tag = tag_key;  // clang 14 lambdas cannot capture a binding
    CAPTURE(tag);
    CHECK(c.error == 0);
    CHECK(c.bytes == kLen);
  }
  // ... and the COMMIT sees the new verifier: every write is sent again, stable.
  CHECK_NOTHROW(f.fsync());
  CHECK(read_local(dir / "f") == want);
  std::string back(want.size(), '\0');
  q.submit_read(f, back.data(), back.size(), 0, 1);
  auto d = drain(q);
  CHECK(d[1].bytes == want.size());
  CHECK(back == want);
}

TEST_CASE("stats from the queue across a server restart: the file found again, a removed one not") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  write_local(dir / "kept", pattern(12345, 1));
  write_local(dir / "gone", pattern(100, 2));
  auto fs = Client::mount(server.url());
  File kept = fs->open("kept");
  File gone = fs->open("gone");
  int status = server.signal_and_reap(SIGKILL);
  REQUIRE(WIFSIGNALED(status));
  std::filesystem::remove(dir / "gone");  // while the server is down: its handle stays stale
  server.start_again();
  IoQueue q(*fs, 4);
  odafs::Attr a{}, b{};
  q.submit_stat(kept, &a, 1);
  q.submit_stat(gone, &b, 2);
  auto done = drain(q);
  CHECK(done[1].error == 0);
  CHECK(a.size == 12345);
  // As File::stat: after a restart the file is looked for by its path, which is gone.
  CHECK(done[2].error == ENOENT);
  CHECK(errno_of([&] { gone.stat(); }) == ENOENT);
  // And the handle found again serves the next one at once.
  q.submit_stat(kept, &a, 3);
  CHECK(drain(q)[3].error == 0);
}

TEST_CASE("the C API's queue") {
  TempDir dir;
  ServerProcess server(dir.path());
  odafs_client* c = odafs_mount(server.url().c_str());
  REQUIRE(c != nullptr);
  odafs_file* f = odafs_open(c, "/x", O_RDWR | O_CREAT, 0644);
  REQUIRE(f != nullptr);
  CHECK(odafs::test::failed_with(odafs_ioq_create(c, 0) == nullptr) == EINVAL);
  odafs_ioq* q = odafs_ioq_create(c, 8);
  REQUIRE(q != nullptr);
  std::vector<std::string> pieces;
  for (int i = 0; i < 8; ++i) pieces.push_back(pattern(1000, 50 + i));
  for (int i = 0; i < 8; ++i) {
    CHECK(odafs_ioq_submit_write(q, f, pieces[i].data(), 1000, i * 1000, 100 + i) == 0);
  }
  CHECK(odafs::test::failed_with(odafs_ioq_submit_write(q, f, "x", 1, 0, 0) == -1) == EBUSY);
  odafs_completion got[8];
  CHECK(odafs::test::failed_with(odafs_ioq_wait(q, got, 4, 5, -1) == -1) == EINVAL);
  size_t total = 0;
  while (total < 8) {
    ssize_t n = odafs_ioq_wait(q, got, 8, 1, 30000);
    REQUIRE(n > 0);
    for (ssize_t i = 0; i < n; ++i) {
      CHECK(got[i].error == 0);
      CHECK(got[i].bytes == 1000);
      CHECK(got[i].user_tag >= 100);
      CHECK(got[i].user_tag < 108);
    }
    total += static_cast<size_t>(n);
  }
  std::vector<std::string> back(8, std::string(1000, '\0'));
  for (int i = 0; i < 8; ++i) {
    CHECK(odafs_ioq_submit_read(q, f, back[i].data(), 1000, i * 1000, i) == 0);
  }
  CHECK(odafs_ioq_wait(q, got, 8, 8, 30000) == 8);
  for (int i = 0; i < 8; ++i) {
    CHECK(got[i].error == 0);
    CHECK(back[got[i].user_tag] == pieces[got[i].user_tag]);
  }
  CHECK(odafs_ioq_reap(q, got, 8) == 0);
  CHECK(odafs::test::failed_with(odafs_ioq_submit_read(q, f, back[0].data(), 1, -1, 0) == -1) ==
        EINVAL);
  CHECK(odafs::test::failed_with(odafs_ioq_submit_read(q, nullptr, nullptr, 1, 0, 0) == -1) ==
        EINVAL);
  odafs_ioq_destroy(q);
  CHECK(odafs_close(f) == 0);
  odafs_unmount(c);
}
