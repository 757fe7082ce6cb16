// ClientCache (unit, no server): the contracts every replacement policy keeps (references
// in empty headers, tickets, forget_*, revalidate, drop, clear) and what MQ does that LRU
// does not (a scan of blocks read once leaves blocks read often in place; a block that
// comes back resumes its count).
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/client_cache.h"

using odafs::CachePolicy;
using odafs::ClientCache;
using odafs::ordma::Reference;

namespace {

constexpr uint32_t kBlock = 64;  // block size: small, the bytes only identify the block
const CachePolicy kPolicies[] = {CachePolicy::kLru, CachePolicy::kMultiQueue};

const char* name(CachePolicy p) { return p == CachePolicy::kLru ? "lru" : "mq"; }

// A reference that names (file, block, version), to tell one from another.
Reference ref_for(uint64_t file, uint64_t block, uint32_t version = 0) {
  Reference r;
  r.segment = static_cast<uint32_t>(file * 1000 + block);
  r.generation = version;
  r.length = kBlock;
  return r;
}

// The bytes of (file, block) at a version.
std::string bytes_for(uint64_t file, uint64_t block, uint32_t version = 0) {
  std::string s(kBlock, '\0');
  std::snprintf(s.data(), s.size(), "f%llu b%llu v%u", static_cast<unsigned long long>(file),
                static_cast<unsigned long long>(block), version);
  return s;
}

enum class Served { kData, kOneSided, kRpc };

// One block read the way BlockReader does it with a data cache: the data, else a
// reference (a one-sided read), else an RPC that brings a reference; the block is kept.
Served read_block(ClientCache& c, uint64_t file, uint64_t block) {
  std::string got(kBlock, '\0');
  if (c.read(file, block, 0, kBlock, got.data())) {
    CHECK(got == bytes_for(file, block));
    return Served::kData;
  }
  const uint64_t ticket = c.data_ticket();
  Reference ref;
  Served how = Served::kOneSided;
  if (!c.find(file, block, &ref)) {
    c.insert(file, block, ref_for(file, block));
    how = Served::kRpc;
  } else {
    CHECK(ref.segment == ref_for(file, block).segment);
  }
  std::string b = bytes_for(file, block);
  c.store(file, block, b.data(), kBlock, ticket);
  return how;
}

// Directory only (no data blocks): is the reference there? Uses it if so, else inserts.
bool use_ref(ClientCache& c, uint64_t file, uint64_t block) {
  Reference ref;
  if (c.find(file, block, &ref)) return true;
  c.insert(file, block, ref_for(file, block));
  return false;
}

}  // namespace

TEST_CASE("every policy: data reclaimed leaves its reference in an empty header") {
  for (CachePolicy p : kPolicies) {
    CAPTURE(name(p));
    ClientCache c(16, 4, kBlock, p);
    CHECK(c.policy() == p);
    for (uint64_t b = 0; b < 8; ++b) CHECK(read_block(c, 1, b) == Served::kRpc);
    CHECK(c.size() == 8);
    CHECK(c.data_blocks_used() == 4);
    CHECK(c.data_evictions() == 4);
    CHECK(c.evictions() == 0);
    size_t with_data = 0;
    for (uint64_t b = 0; b < 8; ++b) {
      CHECK(c.contains(1, b));  // every header kept its reference
      with_data += c.has_data(1, b);
    }
    CHECK(with_data == 4);
    // Each block is served without an RPC now: from its data or one-sided.
    for (uint64_t b = 0; b < 8; ++b) CHECK(read_block(c, 1, b) != Served::kRpc);
    CHECK(c.size() == 8);
  }
}

TEST_CASE("every policy: a reclaimed block without a reference loses its header too") {
  for (CachePolicy p : kPolicies) {
    CAPTURE(name(p));
    ClientCache c(16, 2, kBlock, p);
    std::string b = bytes_for(1, 0);
    for (uint64_t blk = 0; blk < 5; ++blk) c.store(1, blk, b.data(), kBlock, c.data_ticket());
    CHECK(c.data_blocks_used() == 2);
    CHECK(c.size() == 2);  // data-only headers went with their data
  }
}

TEST_CASE("every policy: when every header is in use one goes, with its data") {
  for (CachePolicy p : kPolicies) {
    CAPTURE(name(p));
    ClientCache c(4, 4, kBlock, p);
    for (uint64_t b = 0; b < 4; ++b) read_block(c, 1, b);
    CHECK(c.size() == 4);
    CHECK(c.data_blocks_used() == 4);
    read_block(c, 2, 0);
    CHECK(c.size() == 4);
    CHECK(c.evictions() == 1);
    CHECK(c.data_blocks_used() == 4);  // the evicted header's slot went to the new block
    size_t mapped = 0;
    for (uint64_t b = 0; b < 4; ++b) mapped += c.contains(1, b);
    CHECK(mapped == 3);
    CHECK(c.has_data(2, 0));
  }
}

TEST_CASE("every policy: a ticket taken before a forget stores nothing") {
  for (CachePolicy p : kPolicies) {
    CAPTURE(name(p));
    ClientCache c(8, 4, kBlock, p);
    std::string old_bytes = bytes_for(7, 0);
    uint64_t ticket = c.data_ticket();  // a reader starts fetching block 0 of file 7
    c.forget_data(7, 0, 0);             // meanwhile this client's write to it completes
    c.store(7, 0, old_bytes.data(), kBlock, ticket);
    CHECK_FALSE(c.has_data(7, 0));
    ticket = c.data_ticket();
    c.forget_file_data(9);  // the ticket is cache-wide: other files' changes void it too
    c.store(7, 0, old_bytes.data(), kBlock, ticket);
    CHECK_FALSE(c.has_data(7, 0));
    struct timespec t1 {
      1, 0
    }, t2{2, 0};
    c.revalidate(7, t1, t1, 10);  // first sight: nothing to drop, ticket stays
    ticket = c.data_ticket();
    c.revalidate(7, t1, t1, 10);  // unchanged
    c.store(7, 0, old_bytes.data(), kBlock, ticket);
    CHECK(c.has_data(7, 0));
    ticket = c.data_ticket();
    c.revalidate(7, t2, t2, 10);  // changed: drops file 7's data and voids tickets
    CHECK_FALSE(c.has_data(7, 0));
    c.store(7, 0, old_bytes.data(), kBlock, ticket);
    CHECK_FALSE(c.has_data(7, 0));
    c.store(7, 0, old_bytes.data(), kBlock, c.data_ticket());
    CHECK(c.has_data(7, 0));
  }
}

TEST_CASE("every policy: forget_* drop data and keep references; drop keeps data") {
  for (CachePolicy p : kPolicies) {
    CAPTURE(name(p));
    for (bool wide : {false, true}) {
      CAPTURE(wide);
      ClientCache c(32, 8, kBlock, p);
      for (uint64_t b = 0; b < 4; ++b) read_block(c, 1, b);  // with references
      for (uint64_t b = 0; b < 4; ++b) {                     // data only
        std::string d = bytes_for(2, b);
        c.store(2, b, d.data(), kBlock, c.data_ticket());
      }
      c.store(3, 0, bytes_for(3, 0).data(), kBlock, c.data_ticket());
      CHECK(c.size() == 9);
      CHECK(c.data_blocks_used() == 8);
      if (wide) {  // more blocks than data slots: the walk over the slots
        c.forget_file_data(1);
        c.forget_file_data(2);
      } else {  // block by block
        c.forget_data(1, 0, 3);
        c.forget_data(2, 1, 3);
      }
      for (uint64_t b = 0; b < 4; ++b) {
        CHECK(c.contains(1, b));
        CHECK_FALSE(c.has_data(1, b));
      }
      CHECK(c.has_data(2, 0) == !wide);
      for (uint64_t b = 1; b < 4; ++b) CHECK_FALSE(c.has_data(2, b));
      CHECK(c.has_data(3, 0));
      CHECK(c.size() == (wide ? 5u : 6u));  // data-only headers went
      CHECK(c.data_blocks_used() == (wide ? 1u : 2u));

      // drop forgets a reference (a fault) but keeps the block's data.
      read_block(c, 1, 0);  // one-sided, data again
      REQUIRE(c.has_data(1, 0));
      c.drop(1, 0);
      CHECK_FALSE(c.contains(1, 0));
      CHECK(c.has_data(1, 0));
      CHECK(read_block(c, 1, 0) == Served::kData);
      c.drop(1, 1);  // no data: the header goes
      CHECK_FALSE(c.contains(1, 1));
      CHECK(c.size() == (wide ? 4u : 5u));

      c.clear();
      CHECK(c.size() == 0);
      CHECK(c.data_blocks_used() == 0);
      CHECK(read_block(c, 1, 2) == Served::kRpc);
    }
  }
}

// Random reads, writes (forget_data), faults (drop), re-opens (revalidate) and prefetch
// (insert) against a model: a read never returns bytes older than the last forget of its
// block, a reference found is the last one inserted, and the pools stay within bounds.
TEST_CASE("every policy: random operations never serve a forgotten block or reference") {
  for (CachePolicy p : kPolicies) {
    CAPTURE(name(p));
    ClientCache c(24, 8, kBlock, p, odafs::MqTuning{4, 2});
    std::mt19937 rng(11);
    std::map<std::pair<uint64_t, uint64_t>, uint32_t> version;  // current contents
    std::map<std::pair<uint64_t, uint64_t>, uint32_t> ref_version;
    uint32_t next_version = 1;
    struct timespec t {
      1, 0
    };
    for (uint64_t file = 0; file < 3; ++file) c.revalidate(file, t, t, 0);  // opened
    for (int op = 0; op < 20000; ++op) {
      uint64_t file = rng() % 3, block = rng() % 20;
      if (rng() % 3 == 0) block %= 4;  // some blocks are hot
      auto key = std::make_pair(file, block);
      switch (rng() % 10) {
        case 0: {  // this client writes the block: new contents, cached copy dropped
          version[key] = next_version++;
          c.forget_data(file, block, block);
          break;
        }
        case 1:
          c.drop(file, block);
          ref_version.erase(key);
          break;
        case 2: {  // another client wrote the file; this one re-opens it
          ++t.tv_sec;
          for (uint64_t b = 0; b < 20; ++b) version[{file, b}] = next_version++;
          c.revalidate(file, t, t, 0);
          c.revalidate(file, t, t, 0);  // unchanged: no drop
          break;
        }
        case 3: {
          uint32_t v = next_version++;
          c.insert(file, block, ref_for(file, block, v));
          ref_version[key] = v;
          break;
        }
        default: {  // a read
          std::string got(kBlock, '\0');
          const std::string want = bytes_for(file, block, version[key]);
          if (c.read(file, block, 0, kBlock, got.data())) {
            REQUIRE(got == want);
            break;
          }
          const uint64_t ticket = c.data_ticket();
          const uint32_t fetched = version[key];  // what the fetch brings
          Reference ref;
          if (c.find(file, block, &ref)) {
            REQUIRE(ref_version.count(key));
            REQUIRE(ref.generation == ref_version[key]);
          } else {
            uint32_t v = next_version++;
            c.insert(file, block, ref_for(file, block, v));
            ref_version[key] = v;
          }
          if (rng() % 4 == 0) {  // a write lands while the fetch is under way
            version[key] = next_version++;
            c.forget_data(file, block, block);
          }
          c.store(file, block, bytes_for(file, block, fetched).data(), kBlock, ticket);
          break;
        }
      }
      // Bytes fetched before a write are stored with a void ticket, which store refuses:
      // what the cache holds is the block's current contents.
      std::string got(kBlock, '\0');
      if (c.read(file, block, 0, kBlock, got.data())) {
        REQUIRE(got == bytes_for(file, block, version[key]));
      }
      // References dropped or never inserted are not found.
      Reference ref;
      if (c.find(file, block, &ref)) {
        REQUIRE(ref_version.count(key));
        CHECK(ref.generation == ref_version[key]);
      }
      REQUIRE(c.size() <= c.capacity());
      REQUIRE(c.data_blocks_used() <= c.data_capacity());
    }
  }
}

TEST_CASE("MQ keeps blocks read often over a scan of blocks read once; LRU loses them") {
  for (CachePolicy p : kPolicies) {
    CAPTURE(name(p));
    // Data: 8 blocks; the hot 4 are read 8 times each, then 16 blocks are read once.
    ClientCache c(64, 8, kBlock, p);
    for (int pass = 0; pass < 8; ++pass) {
      for (uint64_t b = 0; b < 4; ++b) read_block(c, 1, b);
    }
    for (uint64_t b = 0; b < 16; ++b) CHECK(read_block(c, 2, b) == Served::kRpc);
    size_t hot_kept = 0;
    for (uint64_t b = 0; b < 4; ++b) hot_kept += c.has_data(1, b);
    CHECK(hot_kept == (p == CachePolicy::kMultiQueue ? 4u : 0u));

    // The directory alone: 8 headers, no data; 4 hot references, then 16 used once.
    ClientCache d(8, 0, kBlock, p);
    for (int pass = 0; pass < 8; ++pass) {
      for (uint64_t b = 0; b < 4; ++b) use_ref(d, 1, b);
    }
    for (uint64_t b = 0; b < 16; ++b) CHECK_FALSE(use_ref(d, 2, b));
    size_t refs_kept = 0;
    for (uint64_t b = 0; b < 4; ++b) refs_kept += d.contains(1, b);
    CHECK(refs_kept == (p == CachePolicy::kMultiQueue ? 4u : 0u));
  }
}

TEST_CASE("MQ: a block given up and read again resumes its count") {
  // Data only, 4 slots. Block A is read 8 times, then its data is dropped (a write).
  // Read again, it comes back in a high queue and outlives a scan; a block B read once
  // just before the scan does not.
  ClientCache c(64, 4, kBlock, CachePolicy::kMultiQueue, odafs::MqTuning{8, 16});
  for (int i = 0; i < 8; ++i) read_block(c, 1, 0);
  c.forget_file_data(1);
  CHECK_FALSE(c.has_data(1, 0));
  read_block(c, 1, 0);  // back
  read_block(c, 3, 0);  // B
  for (uint64_t b = 0; b < 8; ++b) read_block(c, 2, b);
  CHECK(c.has_data(1, 0));
  CHECK_FALSE(c.has_data(3, 0));

  // Without the history (clear() forgets it) the same block starts from one use again.
  ClientCache d(64, 4, kBlock, CachePolicy::kMultiQueue, odafs::MqTuning{8, 16});
  for (int i = 0; i < 8; ++i) read_block(d, 1, 0);
  d.clear();
  read_block(d, 1, 0);
  for (uint64_t b = 0; b < 8; ++b) read_block(d, 2, b);
  CHECK_FALSE(d.has_data(1, 0));
}

TEST_CASE("MQ: blocks hot long ago move down and go once the life time runs out") {
  // Life time 4 uses (the data pool's size): the hot blocks fall one queue per 4 uses
  // without them, so a scan long enough (3 queues down, then through the lowest) pushes
  // them out after all.
  ClientCache c(64, 4, kBlock, CachePolicy::kMultiQueue, odafs::MqTuning{8, 1});
  for (int pass = 0; pass < 8; ++pass) {
    for (uint64_t b = 0; b < 2; ++b) read_block(c, 1, b);
  }
  for (uint64_t b = 0; b < 4; ++b) read_block(c, 2, b);
  CHECK(c.has_data(1, 0));
  CHECK(c.has_data(1, 1));
  for (uint64_t b = 4; b < 40; ++b) read_block(c, 2, b);
  CHECK_FALSE(c.has_data(1, 0));
  CHECK_FALSE(c.has_data(1, 1));
}

TEST_CASE("every policy: finding or refreshing a reference is a use; contains() is not") {
  for (CachePolicy p : kPolicies) {
    CAPTURE(name(p));
    ClientCache c(4, 0, kBlock, p);
    for (uint64_t b = 0; b < 4; ++b) c.insert(1, b, ref_for(1, b));
    c.insert(1, 0, ref_for(1, 0, 1));  // a fresh reference after a fault
    Reference r;
    CHECK(c.find(1, 1, &r));
    CHECK(c.contains(1, 2));
    c.insert(2, 0, ref_for(2, 0));  // block 2 was used least recently (and least often)
    CHECK(c.evictions() == 1);
    CHECK_FALSE(c.contains(1, 2));
    CHECK(c.contains(1, 0));
    CHECK(c.contains(1, 1));
    CHECK(c.contains(1, 3));
    REQUIRE(c.find(1, 0, &r));
    CHECK(r.generation == 1);
  }
}
