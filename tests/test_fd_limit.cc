// Integration: a server short of descriptors (RLIMIT_NOFILE 64) keeps serving however many
// files clients create; the node table's descriptors are a bounded cache
// (server/node_table.h). Before that, creates failed with EIO from about the 49th file
// and nothing recovered, `ls /` included.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::File;
using odafs::test::pattern;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;

TEST_CASE("a server limited to 64 descriptors serves 500 files") {
  TempDir dir;
  ServerProcess server(dir.path(), {}, 0, /*nofile=*/64);
  auto fs = Client::mount(server.url());

  constexpr int kFiles = 500;
  auto name = [](int i) { return "/f" + std::to_string(i); };
  auto data = [](int i) { return pattern(100 + static_cast<size_t>(i), static_cast<uint64_t>(i)); };
  constexpr int kKeptOpen = 40;  // their handles are used again at the end
  std::vector<File> kept;
  for (int i = 0; i < kFiles; ++i) {
    CAPTURE(i);
    File f = fs->open(name(i), O_RDWR | O_CREAT | O_EXCL, 0644);
    std::string d = data(i);
    REQUIRE(f.pwrite(d.data(), d.size(), 0) == d.size());
    std::string back(d.size(), '\0');
    REQUIRE(f.pread(back.data(), back.size(), 0) == d.size());
    REQUIRE(back == d);
    f.fsync();
    if (i < kKeptOpen) {
      kept.push_back(std::move(f));
    } else {
      f.close();
    }
  }

  std::set<std::string> names;
  for (const auto& e : fs->readdir("/")) names.insert(e.name);
  CHECK(names.size() == kFiles);

  // Every file again, oldest first: their descriptors were evicted long ago.
  for (int i = 0; i < kFiles; i += 7) {
    CAPTURE(i);
    CHECK(read_local(dir.path() + name(i)) == data(i));
    File f = fs->open(name(i), O_RDWR);
    std::string d = data(i);
    std::string back(d.size(), '\0');
    REQUIRE(f.pread(back.data(), back.size(), 0) == d.size());
    CHECK(back == d);
    REQUIRE(f.pwrite("rewritten", 9, 0) == 9);
    f.fsync();  // a sole writer's close keeps its bytes (a write delegation): fsync sends them
    f.close();
    CHECK(read_local(dir.path() + name(i)).substr(0, 9) == "rewritten");
  }

  // The first handles, unused since: the server reopens their files by handle.
  for (int i = 0; i < kKeptOpen; ++i) {
    CAPTURE(i);
    std::string d = "kept " + std::to_string(i);
    REQUIRE(kept[i].pwrite(d.data(), d.size(), 0) == d.size());
    CHECK(kept[i].stat().size == data(i).size());
    kept[i].close();
    CHECK(read_local(dir.path() + name(i)).substr(0, d.size()) == d);
  }

  std::map<std::string, uint64_t> stats;
  for (auto& [k, v] : fs->server_stats()) stats[k] = v;
  CHECK(stats["nodes.max_open_fds"] == 32);  // half of RLIMIT_NOFILE
  CHECK(stats["nodes.open_fds"] <= stats["nodes.max_open_fds"]);
  CHECK(stats["nodes.live"] >= kFiles);
  CHECK(stats["nodes.reopens"] > 0);
}
