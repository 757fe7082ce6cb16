// Integration: Berkeley DB 5.3 on libodafs through its I/O hooks (bench/bdb), against real
// odafsd processes: the Fig. 5 join on every read mechanism with every record checked,
// read-ahead serving BDB's page reads, a transactional put/commit/reopen that loses
// nothing, and a server that stops answering surfacing as a BDB error.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/bdb/bdb_odafs.h"
#include "bench/bdb/prefetch.h"
#include "bench/bdb/workload.h"
#include "client/client.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::bdb::Database;
using odafs::bdb::Hooks;
using odafs::bdb::Prefetcher;
using odafs::test::ServerProcess;
using odafs::test::TempDir;

namespace {

constexpr uint32_t kRecords = 60;

// The hooks routed to a client of `server` for the scope of the object.
struct Hooked {
  std::unique_ptr<Client> client;
  std::string root;
  Hooked(const ServerProcess& server, odafs::MountOptions mo = {}) {
    mo.timeout_ms = 3000;
    client = Client::mount(server.url(), mo);
    root = Hooks::install(client.get());
  }
  ~Hooked() { Hooks::uninstall(); }
  std::string home(const std::string& dir = "/db") const { return root + dir; }
};

Database::Options opts(const std::string& home, bool create) {
  Database::Options o;
  o.home = home;
  o.create = create;
  o.cache_bytes = 1u << 20;  // smaller than the database: pages come from the server
  return o;
}

// Every record's first `len` bytes as the loader wrote them.
void check_record(uint32_t recno, const std::vector<char>& got, size_t len) {
  std::vector<char> want(odafs::bdb::kRecordBytes);
  odafs::bdb::fill_record(recno, want.data());
  CHECK(std::memcmp(got.data(), want.data(), len) == 0);
}

}  // namespace

TEST_CASE("the Fig. 5 join over the hooks: every key found, every record whole, each mechanism") {
  TempDir exp;
  ServerProcess server(exp.path());
  {
    Hooked h(server);
    h.client->mkdir("/db");
    Database db(opts(h.home(), /*create=*/true));
    db.load(1, kRecords);
    db.sync();
  }
  struct Mechanism {
    const char* name;
    odafs::ReadMode mode;
    bool same_host_shortcut;
  };
  const Mechanism mechanisms[] = {{"inline", odafs::ReadMode::kInline, true},
                                  {"preposted", odafs::ReadMode::kPrePosted, true},
                                  {"direct", odafs::ReadMode::kDirect, false},
                                  {"ordma_ring", odafs::ReadMode::kOrdma, true},
                                  {"ordma_tcp", odafs::ReadMode::kOrdma, false}};
  for (const Mechanism& m : mechanisms) {
    CAPTURE(m.name);
    odafs::MountOptions mo;
    mo.read_mode = m.mode;
    mo.same_host_shortcut = m.same_host_shortcut;
    mo.cache_blocks = 0;
    Hooked h(server, mo);
    std::string primary = std::string("/db/") + Database::kPrimaryFile;
    Prefetcher prefetch(*h.client, primary, 8, odafs::bdb::kPageSize);
    Hooks::attach_prefetcher(primary, &prefetch);
    Hooks::Counters before = Hooks::counters();
    {
      Database db(opts(h.home(), /*create=*/false));
      std::vector<char> buf(odafs::bdb::kRecordBytes);
      uint32_t found = 0;
      for (uint32_t a = 0; a < odafs::bdb::kA; ++a) {
        for (uint32_t b = 0; b < odafs::bdb::kB; ++b) {
          std::vector<uint32_t> keys = db.join(a, b);
          std::vector<uint32_t> want;
          for (uint32_t r = 1; r <= kRecords; ++r) {
            if (odafs::bdb::attr_a(r) == a && odafs::bdb::attr_b(r) == b) want.push_back(r);
          }
          CHECK(keys == want);
          std::vector<uint64_t> offsets;
          for (uint32_t r : keys) offsets.push_back(Database::page_offset(r));
          prefetch.plan(offsets);
          for (uint32_t r : keys) {
            REQUIRE(db.get(r, buf.data(), buf.size()) == buf.size());
            check_record(r, buf, buf.size());
            ++found;
          }
        }
      }
      CHECK(found == kRecords);
      // A partial copy takes the record's first bytes only.
      std::vector<char> small(100, 0);
      CHECK(db.get(7, small.data(), small.size()) == small.size());
      check_record(7, small, small.size());
      CHECK(db.get(kRecords + 1, small.data(), small.size()) == 0);
    }
    Hooks::attach_prefetcher(primary, nullptr);
    // Every record's page came from the read-ahead: the page numbers it pre-computed are
    // the ones BDB reads.
    CHECK(prefetch.served() == kRecords);
    CHECK(prefetch.failed() == 0);
    CHECK(Hooks::counters().prefetched - before.prefetched == kRecords);
  }
}

TEST_CASE("transactions through the hooks: committed puts survive a reopen, aborted ones vanish") {
  TempDir exp;
  ServerProcess server(exp.path());
  Hooked h(server);
  h.client->mkdir("/txn");
  Database::Options o = opts(h.home("/txn"), true);
  o.transactional = true;
  {
    Database db(o);
    db.load(1, 5);        // a transaction per record, committed
    db.put_and_abort(6);  // rolled back
    db.sync();            // checkpoint: durable on the server
    std::vector<char> buf(odafs::bdb::kRecordBytes);
    CHECK(db.get(6, buf.data(), buf.size()) == 0);
  }
  {
    Database db(o);
    std::vector<char> buf(odafs::bdb::kRecordBytes);
    for (uint32_t r = 1; r <= 5; ++r) {
      REQUIRE(db.get(r, buf.data(), buf.size()) == buf.size());
      check_record(r, buf, buf.size());
    }
    CHECK(db.get(6, buf.data(), buf.size()) == 0);
    db.load(6, 2);
  }  // closed without a checkpoint: close flushes
  // A fresh client (no cache of this one's) and a fresh environment see it all.
  Hooks::uninstall();
  Hooked again(server);
  Database db(opts(again.home("/txn"), false));
  std::vector<char> buf(odafs::bdb::kRecordBytes);
  REQUIRE(db.get(7, buf.data(), buf.size()) == buf.size());
  check_record(7, buf, buf.size());
  CHECK(db.join(1, 1) == std::vector<uint32_t>{1, 7});
}

TEST_CASE("a stopped server surfaces as a BDB error, not a crash") {
  TempDir exp;
  ServerProcess server(exp.path());
  {
    Hooked h(server);
    h.client->mkdir("/db");
    Database db(opts(h.home(), true));
    db.load(1, 4);
    db.sync();
  }
  odafs::MountOptions mo;
  mo.cache_blocks = 0;
  Hooked h(server, mo);
  Database db(opts(h.home(), false));
  server.kill_hard();
  std::vector<char> buf(odafs::bdb::kRecordBytes);
  int code = 0;
  try {
    db.get(3, buf.data(), buf.size());
  } catch (const odafs::bdb::DbError& e) {
    code = e.code();
  }
  CHECK(code != 0);
  // Opening anew fails the same way.
  code = 0;
  try {
    Database again(opts(h.home(), false));
  } catch (const odafs::bdb::DbError& e) {
    code = e.code();
  }
  CHECK(code != 0);
}
