// Unit: the server's block cache (cache/block_cache.h).
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/block_cache.h"

using odafs::Result;
using odafs::Status;
using odafs::cache::Block;
using odafs::cache::BlockCache;
using odafs::cache::BlockKey;

namespace {

constexpr uint32_t kBlock = 4096;

BlockCache::Options options(size_t blocks) {
  BlockCache::Options o;
  o.capacity_bytes = blocks * kBlock;
  o.block_size = kBlock;
  return o;
}

unsigned char pattern_byte(const BlockKey& key, size_t i, unsigned version = 0) {
  return static_cast<unsigned char>(key.file * 31 + key.index * 7 + version * 13 + i);
}

// A fill function for `key` that counts its calls, writes `version`'s pattern into the whole
// block (so bytes past the returned count are not zero) and returns `result`, or fails
// with `error` when that is set.
struct Filler {
  BlockKey key;
  size_t result = kBlock;
  unsigned version = 0;
  int calls = 0;
  int error = 0;

  BlockCache::FillFn fn() {
    return [this](std::byte* dst, size_t len) -> Result<size_t> {
      ++calls;
      for (size_t i = 0; i < len; ++i) dst[i] = std::byte{pattern_byte(key, i, version)};
      if (error != 0) return Status(error, "test fill");
      return result;
    };
  }
};

// True when pin holds `len` bytes of key's pattern starting at `from`.
bool holds_pattern(const BlockCache::ReadPin& pin, const BlockKey& key, size_t from, size_t len,
                   unsigned version = 0) {
  for (size_t i = from; i < from + len; ++i) {
    if (pin.data()[i] != std::byte{pattern_byte(key, i, version)}) return false;
  }
  return true;
}

// Records the keys the evict hook saw, in order.
struct EvictLog {
  std::mutex mu;
  std::vector<BlockKey> keys;
  void attach(BlockCache& cache) {
    cache.set_evict_hook([this](const Block& b) {
      std::lock_guard lock(mu);
      keys.push_back(b.key);
    });
  }
};

// Reads key through a fresh Filler and releases the pin; returns the fill call count.
int read_once(BlockCache& cache, const BlockKey& key, uint32_t need = kBlock) {
  Filler f{key};
  BlockCache::ReadPin pin;
  REQUIRE(cache.read(key, need, f.fn(), &pin).ok());
  REQUIRE_FALSE(pin.bypass());
  CHECK(holds_pattern(pin, key, 0, pin.valid()));
  return f.calls;
}

}  // namespace

TEST_CASE("bad block sizes are refused") {
  BlockCache::Options o;
  o.capacity_bytes = 1 << 20;
  for (uint32_t bs : {0u, 2048u, 6000u, 131072u}) {
    CAPTURE(bs);
    o.block_size = bs;
    CHECK_THROWS_AS(BlockCache{o}, std::invalid_argument);
  }
  o.block_size = 4096;
  o.capacity_bytes = 0;  // rounded up to the minimum of 4 blocks
  BlockCache c(o);
  CHECK(c.block_count() == 4);
  CHECK(c.arena_bytes() == 4 * 4096u);
}

TEST_CASE("miss then hit; the fill function runs once per miss") {
  BlockCache cache(options(8));
  CHECK(cache.block_count() == 8);
  BlockKey key{1, 0};
  Filler f{key};
  {
    BlockCache::ReadPin pin;
    REQUIRE(cache.read(key, kBlock, f.fn(), &pin).ok());
    REQUIRE_FALSE(pin.bypass());
    CHECK(f.calls == 1);
    CHECK(pin.valid() == kBlock);
    CHECK(holds_pattern(pin, key, 0, kBlock));
    CHECK(cache.stats().misses == 1);
    CHECK(cache.stats().hits == 0);
  }
  {
    BlockCache::ReadPin pin;
    REQUIRE(cache.read(key, kBlock, f.fn(), &pin).ok());
    CHECK(f.calls == 1);
    CHECK(pin.valid() == kBlock);
    CHECK(holds_pattern(pin, key, 0, kBlock));
    CHECK(cache.stats().misses == 1);
    CHECK(cache.stats().hits == 1);
  }
  // Another file's block with the same index is a different block.
  CHECK(read_once(cache, BlockKey{2, 0}) == 1);
  CHECK(cache.stats().misses == 2);
  CHECK(read_once(cache, BlockKey{1, 1}) == 1);
  CHECK(cache.stats().misses == 3);
  CHECK(read_once(cache, key) == 0);
  CHECK(cache.stats().hits == 2);
  CHECK(cache.stats().evictions == 0);
}

TEST_CASE("a pin moved into another pin keeps the block; reusing a pin releases it") {
  BlockCache cache(options(4));
  BlockKey a{1, 0}, b{1, 1};
  Filler fa{a}, fb{b};
  BlockCache::ReadPin pin;
  REQUIRE(cache.read(a, kBlock, fa.fn(), &pin).ok());
  BlockCache::ReadPin moved(std::move(pin));
  CHECK(pin.bypass());
  REQUIRE_FALSE(moved.bypass());
  CHECK(holds_pattern(moved, a, 0, kBlock));
  // Reading another key into the same pin drops the hold on the first.
  REQUIRE(cache.read(b, kBlock, fb.fn(), &moved).ok());
  CHECK(holds_pattern(moved, b, 0, kBlock));
}

TEST_CASE("eviction when full calls the evict hook in LRU order") {
  BlockCache cache(options(4));
  EvictLog log;
  log.attach(cache);
  for (uint64_t i = 0; i < 4; ++i) CHECK(read_once(cache, BlockKey{7, i}) == 1);
  CHECK(log.keys.empty());
  CHECK(cache.stats().evictions == 0);

  CHECK(read_once(cache, BlockKey{7, 0}) == 0);  // 0 becomes most recently used
  CHECK(read_once(cache, BlockKey{7, 4}) == 1);
  CHECK(read_once(cache, BlockKey{7, 5}) == 1);
  REQUIRE(log.keys.size() == 2);
  CHECK(log.keys[0] == BlockKey{7, 1});
  CHECK(log.keys[1] == BlockKey{7, 2});
  CHECK(cache.stats().evictions == 2);

  // LRU now: 3, 0, 4, 5.
  CHECK(read_once(cache, BlockKey{7, 1}) == 1);
  REQUIRE(log.keys.size() == 3);
  CHECK(log.keys[2] == BlockKey{7, 3});
  CHECK(read_once(cache, BlockKey{7, 0}) == 0);
  CHECK(read_once(cache, BlockKey{7, 4}) == 0);
  CHECK(read_once(cache, BlockKey{7, 5}) == 0);
  CHECK(read_once(cache, BlockKey{7, 2}) == 1);  // evicts 1, the least recently used
  REQUIRE(log.keys.size() == 4);
  CHECK(log.keys[3] == BlockKey{7, 1});
  CHECK(cache.stats().evictions == 4);
}

TEST_CASE("a pinned block is never evicted; all blocks pinned means bypass") {
  BlockCache cache(options(4));
  EvictLog log;
  log.attach(cache);

  SUBCASE("one pinned block survives heavy churn") {
    BlockKey held{1, 0};
    Filler f{held};
    BlockCache::ReadPin pin;
    REQUIRE(cache.read(held, kBlock, f.fn(), &pin).ok());
    for (uint64_t i = 1; i <= 40; ++i) read_once(cache, BlockKey{1, i});
    CHECK(cache.stats().evictions >= 30);
    for (const BlockKey& k : log.keys) CHECK_FALSE(k == held);
    CHECK(holds_pattern(pin, held, 0, kBlock));
    pin = BlockCache::ReadPin();
    CHECK(read_once(cache, held) == 0);  // still cached
  }

  SUBCASE("every block pinned") {
    std::vector<BlockCache::ReadPin> pins(4);
    std::vector<Filler> fillers;
    for (uint64_t i = 0; i < 4; ++i) fillers.push_back(Filler{BlockKey{2, i}});
    for (size_t i = 0; i < 4; ++i) {
      REQUIRE(cache.read(fillers[i].key, kBlock, fillers[i].fn(), &pins[i]).ok());
      REQUIRE_FALSE(pins[i].bypass());
    }
    Filler extra{BlockKey{2, 100}};
    BlockCache::ReadPin pin;
    REQUIRE(cache.read(extra.key, kBlock, extra.fn(), &pin).ok());
    CHECK(pin.bypass());
    CHECK(extra.calls == 0);
    CHECK(cache.stats().bypasses == 1);
    CHECK(log.keys.empty());
    for (size_t i = 0; i < 4; ++i) CHECK(holds_pattern(pins[i], fillers[i].key, 0, kBlock));

    // Unpinning one frees exactly that block for reuse.
    pins[2] = BlockCache::ReadPin();
    REQUIRE(cache.read(extra.key, kBlock, extra.fn(), &pin).ok());
    REQUIRE_FALSE(pin.bypass());
    CHECK(extra.calls == 1);
    REQUIRE(log.keys.size() == 1);
    CHECK(log.keys[0] == BlockKey{2, 2});
    for (size_t i : {0, 1, 3}) CHECK(holds_pattern(pins[i], fillers[i].key, 0, kBlock));
  }
}

TEST_CASE("update changes cached bytes and zero-fills a gap past the valid end") {
  BlockCache cache(options(4));
  BlockKey key{3, 1};

  SUBCASE("overwrite inside the valid bytes") {
    CHECK(read_once(cache, key) == 1);
    cache.update(key, 100, "hello", 5);
    Filler f{key};
    BlockCache::ReadPin pin;
    REQUIRE(cache.read(key, kBlock, f.fn(), &pin).ok());
    CHECK(f.calls == 0);
    CHECK(pin.valid() == kBlock);
    CHECK(std::memcmp(pin.data() + 100, "hello", 5) == 0);
    CHECK(holds_pattern(pin, key, 0, 100));
    CHECK(holds_pattern(pin, key, 105, kBlock - 105));
  }

  SUBCASE("extend a short block, zero-filling the gap") {
    Filler f{key, 50};  // EOF after 50 bytes; the fill leaves non-zero bytes past them
    {
      BlockCache::ReadPin pin;
      REQUIRE(cache.read(key, 1, f.fn(), &pin).ok());
      CHECK(pin.valid() == 50);
    }
    cache.update(key, 200, "xyz", 3);
    BlockCache::ReadPin pin;
    REQUIRE(cache.read(key, 203, f.fn(), &pin).ok());
    CHECK(f.calls == 1);  // served from the cache: the update made it long enough
    CHECK(pin.valid() == 203);
    CHECK(holds_pattern(pin, key, 0, 50));
    for (size_t i = 50; i < 200; ++i) {
      CAPTURE(i);
      REQUIRE(pin.data()[i] == std::byte{0});
    }
    CHECK(std::memcmp(pin.data() + 200, "xyz", 3) == 0);
  }

  SUBCASE("append right at the valid end, up to the block end") {
    Filler f{key, 10};
    {
      BlockCache::ReadPin pin;
      REQUIRE(cache.read(key, 1, f.fn(), &pin).ok());
    }
    std::string tail(kBlock - 10, 'T');
    cache.update(key, 10, tail.data(), tail.size());
    BlockCache::ReadPin pin;
    REQUIRE(cache.read(key, kBlock, f.fn(), &pin).ok());
    CHECK(f.calls == 1);
    CHECK(pin.valid() == kBlock);
    CHECK(holds_pattern(pin, key, 0, 10));
    CHECK(std::memcmp(pin.data() + 10, tail.data(), tail.size()) == 0);
  }
}

TEST_CASE("update of an uncached key does nothing") {
  BlockCache cache(options(4));
  BlockKey key{4, 0};
  std::string junk(kBlock, 'J');
  cache.update(key, 0, junk.data(), junk.size());
  CHECK(cache.stats().hits == 0);
  Filler f{key};
  BlockCache::ReadPin pin;
  REQUIRE(cache.read(key, kBlock, f.fn(), &pin).ok());
  CHECK(f.calls == 1);
  CHECK(cache.stats().misses == 1);
  CHECK(holds_pattern(pin, key, 0, kBlock));

  // Nor does it resurrect an evicted block.
  pin = BlockCache::ReadPin();
  for (uint64_t i = 1; i <= 4; ++i) read_once(cache, BlockKey{4, i});
  cache.update(key, 0, junk.data(), junk.size());
  CHECK(read_once(cache, key) == 1);
}

// The index by file: a whole-file or wide drop takes exactly the file's blocks in range,
// however the files' blocks interleave in the cache.
TEST_CASE("invalidate of a wide range drops exactly the file's blocks in it") {
  BlockCache cache(options(64));
  EvictLog log;
  log.attach(cache);
  for (uint64_t i = 0; i < 20; ++i) {
    for (uint64_t file = 1; file <= 3; ++file) read_once(cache, BlockKey{file, i});
  }
  cache.invalidate(2, 0, UINT64_MAX);
  CHECK(log.keys.size() == 20);
  for (const BlockKey& k : log.keys) CHECK(k.file == 2);
  log.keys.clear();
  cache.invalidate(3, 5, 1000);  // wider than the lookups, narrower than the file's index
  CHECK(log.keys.size() == 15);
  for (const BlockKey& k : log.keys) CHECK((k.file == 3 && k.index >= 5));
  for (uint64_t i = 0; i < 20; ++i) {
    CAPTURE(i);
    CHECK(read_once(cache, BlockKey{1, i}) == 0);  // untouched
    CHECK(read_once(cache, BlockKey{3, i}) == (i >= 5 ? 1 : 0));
  }
  // A dropped block is the first reused: file 2's twenty went to file 3's refills, so
  // nothing of file 1 was evicted.
  for (uint64_t i = 0; i < 20; ++i) CHECK(read_once(cache, BlockKey{1, i}) == 0);
}

TEST_CASE("invalidate drops blocks so the next read refills") {
  BlockCache cache(options(8));
  EvictLog log;
  log.attach(cache);
  for (uint64_t i = 0; i < 3; ++i) read_once(cache, BlockKey{5, i});
  read_once(cache, BlockKey{6, 0});

  cache.invalidate(5, 0, 1);
  REQUIRE(log.keys.size() == 2);
  CHECK(((log.keys[0] == BlockKey{5, 0} && log.keys[1] == BlockKey{5, 1}) ||
         (log.keys[0] == BlockKey{5, 1} && log.keys[1] == BlockKey{5, 0})));
  CHECK(read_once(cache, BlockKey{5, 0}) == 1);
  CHECK(read_once(cache, BlockKey{5, 1}) == 1);
  CHECK(read_once(cache, BlockKey{5, 2}) == 0);
  CHECK(read_once(cache, BlockKey{6, 0}) == 0);

  SUBCASE("to the end of the file (a range wider than the cache)") {
    log.keys.clear();
    cache.invalidate(5, 1, UINT64_MAX);
    CHECK(log.keys.size() == 2);  // 1 and 2; 0 and file 6 stay
    for (const BlockKey& k : log.keys) CHECK((k.file == 5 && k.index >= 1));
    CHECK(read_once(cache, BlockKey{5, 0}) == 0);
    CHECK(read_once(cache, BlockKey{5, 1}) == 1);
    CHECK(read_once(cache, BlockKey{5, 2}) == 1);
    CHECK(read_once(cache, BlockKey{6, 0}) == 0);
  }

  SUBCASE("a range ending at the largest index") {
    log.keys.clear();
    cache.invalidate(5, UINT64_MAX - 1, UINT64_MAX);  // nothing cached there
    CHECK(log.keys.empty());
    CHECK(read_once(cache, BlockKey{5, 2}) == 0);
  }

  SUBCASE("a pinned block keeps its bytes for the holder; new readers refill") {
    BlockKey key{5, 2};
    Filler old_fill{key};
    BlockCache::ReadPin held;
    REQUIRE(cache.read(key, kBlock, old_fill.fn(), &held).ok());
    CHECK(old_fill.calls == 0);
    cache.invalidate(5, 2, 2);
    Filler new_fill{key, kBlock, 1};
    BlockCache::ReadPin fresh;
    REQUIRE(cache.read(key, kBlock, new_fill.fn(), &fresh).ok());
    CHECK(new_fill.calls == 1);
    CHECK(holds_pattern(fresh, key, 0, kBlock, 1));
    CHECK(holds_pattern(held, key, 0, kBlock, 0));
  }
}

TEST_CASE("a fill error fails the read with its Status and leaves nothing cached") {
  BlockCache cache(options(4));
  BlockKey key{8, 3};
  Filler bad{key};
  bad.error = EIO;
  BlockCache::ReadPin pin;
  Status read = cache.read(key, kBlock, bad.fn(), &pin);
  CHECK(read.errno_value() == EIO);
  CHECK(read.message() == "test fill");
  CHECK(bad.calls == 1);
  CHECK(pin.bypass());
  CHECK(cache.stats().fill_errors == 1);

  // Nothing cached: an update is ignored and the next read fills again.
  std::string junk(kBlock, 'J');
  cache.update(key, 0, junk.data(), junk.size());
  Filler good{key};
  REQUIRE(cache.read(key, kBlock, good.fn(), &pin).ok());
  CHECK(good.calls == 1);
  CHECK(cache.stats().hits == 0);
  CHECK(cache.stats().misses == 2);
  CHECK(holds_pattern(pin, key, 0, kBlock));
  pin = BlockCache::ReadPin();

  SUBCASE("a failed refill of a short block drops it") {
    BlockKey k2{8, 4};
    Filler shorter{k2, 100};
    REQUIRE(cache.read(k2, 1, shorter.fn(), &pin).ok());
    pin = BlockCache::ReadPin();
    Filler fails{k2};
    fails.error = ENOSPC;
    CHECK(cache.read(k2, 200, fails.fn(), &pin).errno_value() == ENOSPC);
    CHECK(fails.calls == 1);
    Filler again{k2, 100};
    REQUIRE(cache.read(k2, 1, again.fn(), &pin).ok());
    CHECK(again.calls == 1);  // the old 100 bytes were not kept
  }

  SUBCASE("the failed block is reusable: the cache still holds 4 blocks") {
    for (uint64_t i = 10; i < 14; ++i) read_once(cache, BlockKey{8, i});
    for (uint64_t i = 10; i < 14; ++i) CHECK(read_once(cache, BlockKey{8, i}) == 0);
  }
}

TEST_CASE("a short fill (EOF), then a read needing more bytes refills") {
  BlockCache cache(options(4));
  BlockKey key{9, 0};
  BlockCache::ReadPin pin;

  Filler f{key, 100};
  REQUIRE(cache.read(key, 50, f.fn(), &pin).ok());
  CHECK(pin.valid() == 100);
  CHECK(f.calls == 1);
  pin = BlockCache::ReadPin();

  REQUIRE(cache.read(key, 100, f.fn(), &pin).ok());  // enough already
  CHECK(f.calls == 1);
  CHECK(cache.stats().hits == 1);
  pin = BlockCache::ReadPin();

  f.result = 300;  // the file grew
  REQUIRE(cache.read(key, 200, f.fn(), &pin).ok());
  CHECK(f.calls == 2);
  CHECK(pin.valid() == 300);
  CHECK(holds_pattern(pin, key, 0, 300));
  pin = BlockCache::ReadPin();

  // At EOF a read asking for the whole block gets what the file has.
  REQUIRE(cache.read(key, kBlock, f.fn(), &pin).ok());
  CHECK(f.calls == 3);
  CHECK(pin.valid() == 300);
  CHECK(cache.stats().misses == 1);
}

TEST_CASE("concurrent readers never see a torn block while whole blocks are updated") {
  constexpr uint64_t kFile = 11;
  constexpr uint64_t kKeys = 12;  // more keys than blocks: evictions and refills happen too
  constexpr unsigned kRounds = 250;
  constexpr int kReaders = 4;
  BlockCache cache(options(8));  // more blocks than concurrent pins: no bypass possible
  std::atomic<uint64_t> evictions{0};
  cache.set_evict_hook([&](const Block&) { evictions.fetch_add(1); });

  // The "file": version[k] is the content of block k (every byte equal to it).
  std::vector<std::atomic<unsigned>> version(kKeys);
  for (auto& v : version) v.store(0);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> torn{0}, backwards{0}, failures{0}, reads{0};

  auto reader = [&](int id) {
    std::vector<unsigned> last_seen(kKeys, 0);
    BlockCache::ReadPin pin;
    uint64_t n = 0;
    for (uint64_t i = id; !done.load() || n < 2000; ++i, ++n) {
      uint64_t k = (i * 7 + id) % kKeys;
      BlockKey key{kFile, k};
      auto fill = [&](std::byte* dst, size_t len) -> Result<size_t> {
        std::memset(dst, static_cast<int>(version[k].load()), len);
        return len;
      };
      if (!cache.read(key, kBlock, fill, &pin).ok() || pin.bypass()) {
        failures.fetch_add(1);
        continue;
      }
      const std::byte* d = pin.data();
      std::byte first = d[0];
      bool uniform = pin.valid() == kBlock;
      for (size_t j = 1; j < kBlock && uniform; ++j) uniform = d[j] == first;
      if (!uniform) torn.fetch_add(1);
      unsigned seen = static_cast<unsigned>(first);
      if (seen < last_seen[k]) backwards.fetch_add(1);
      last_seen[k] = seen;
    }
    reads.fetch_add(n);
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < kReaders; ++i) threads.emplace_back(reader, i);
  std::thread writer([&] {
    std::vector<char> buf(kBlock);
    for (unsigned round = 1; round <= kRounds; ++round) {
      for (uint64_t k = 0; k < kKeys; ++k) {
        version[k].store(round);  // write the file, then the cache (write-through)
        std::memset(buf.data(), static_cast<int>(round), buf.size());
        cache.update(BlockKey{kFile, k}, 0, buf.data(), buf.size());
      }
    }
    done.store(true);
  });
  writer.join();
  for (auto& t : threads) t.join();

  CHECK(torn.load() == 0);
  CHECK(backwards.load() == 0);
  CHECK(failures.load() == 0);
  CHECK(cache.stats().bypasses == 0);
  CHECK(reads.load() >= kReaders * 2000u);
  CHECK(evictions.load() > 0);

  // Afterwards every cached block holds the final version.
  for (uint64_t k = 0; k < kKeys; ++k) {
    BlockCache::ReadPin pin;
    auto fill = [&](std::byte* dst, size_t len) -> Result<size_t> {
      std::memset(dst, static_cast<int>(version[k].load()), len);
      return len;
    };
    REQUIRE(cache.read(BlockKey{kFile, k}, kBlock, fill, &pin).ok());
    CHECK(static_cast<unsigned>(pin.data()[0]) == kRounds);
    CHECK(static_cast<unsigned>(pin.data()[kBlock - 1]) == kRounds);
  }
}

TEST_CASE("a pin notices when its block is dropped; the evict hook sees the drop first") {
  BlockCache cache(BlockCache::Options{4 * 4096, 4096});
  std::vector<uint32_t> revoked;
  cache.set_evict_hook([&](const Block& b) { revoked.push_back(b.segment); });
  auto fill = [](std::byte* dst, size_t len) -> Result<size_t> {
    std::memset(dst, 7, len);
    return len;
  };
  BlockCache::ReadPin pin;
  REQUIRE(cache.read(BlockKey{1, 0}, 4096, fill, &pin).ok());
  CHECK(pin.still_mapped());
  uint32_t seg = pin.segment();
  cache.invalidate(1, 0, 0);  // truncation while a reader holds the block
  CHECK_FALSE(pin.still_mapped());
  REQUIRE(revoked.size() == 1);
  CHECK(revoked[0] == seg);
  CHECK(static_cast<int>(pin.data()[0]) == 7);  // the holder still reads its bytes
  BlockCache::ReadPin again;
  REQUIRE(cache.read(BlockKey{1, 0}, 4096, fill, &again).ok());
  CHECK(again.still_mapped());
  CHECK(again.segment() != seg);  // the dropped block stays pinned: another one is used
}
