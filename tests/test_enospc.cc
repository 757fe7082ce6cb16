// Integration: an export on a file system that fills up. odafsd exports a 1 MiB tmpfs; a
// client fills it until a write fails. The failure must reach the writer as ENOSPC (on the
// RPC and the direct write path), nothing written before may change, the server must keep
// serving everyone, and freeing space must make writes work again.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/support/client_util.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::Error;
using odafs::File;
using odafs::test::pattern;
using odafs::test::read_all;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;

namespace {

constexpr const char* kSize = "size=1m";
constexpr size_t kChunk = 64 * 1024;

// A tmpfs of kSize mounted on `dir` for the guard's life (detached on the way out, so a
// failed check cannot leave it behind).
struct Tmpfs {
  std::string dir;
  bool mounted = false;
  int error = 0;  // mount(2)'s errno when it failed
  explicit Tmpfs(std::string d) : dir(std::move(d)) {
    mkdir(dir.c_str(), 0755);
    mounted = ::mount("odafs-test", dir.c_str(), "tmpfs", 0, kSize) == 0;
    if (!mounted) error = errno;
  }
  ~Tmpfs() {
    if (mounted) umount2(dir.c_str(), MNT_DETACH);
  }
};

// Why this process cannot mount a tmpfs ("" when it can: root, and not in a container that
// forbids it). Decided once, before the tests run, so that the test below is reported as
// skipped, naming the reason (also on stderr: doctest's summary shows only the count).
const char* tmpfs_skip_reason() {
  static const std::string why = [] {
    std::string r;
    if (geteuid() != 0) {
      r = "needs root to mount a tmpfs (euid " + std::to_string(geteuid()) + ")";
    } else {
      TempDir probe;
      Tmpfs t(probe / "m");
      if (!t.mounted) r = std::string("mounting a tmpfs failed: ") + strerror(t.error);
    }
    if (!r.empty()) std::fprintf(stderr, "ENOSPC test skipped: %s\n", r.c_str());
    return r;
  }();
  return why.c_str();
}

// The errno and message of the Error fn throws (0 and "" if it throws none).
std::pair<int, std::string> error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return {e.errno_value(), e.what()};
  }
  return {0, ""};
}

}  // namespace

TEST_CASE(
    "a full export: ENOSPC reaches the writer, nothing written before changes, the server "
    "keeps serving, and freed space makes writes work again" *
    doctest::skip(*tmpfs_skip_reason() != '\0') * doctest::description(tmpfs_skip_reason())) {
  TempDir dir;
  Tmpfs fs_guard(dir / "export");
  REQUIRE(fs_guard.mounted);
  const std::string root = fs_guard.dir;
  ServerProcess server(root);

  // Files written (and closed: committed) before the file system fills, of sizes that end
  // mid-block and mid-page, one in a subdirectory.
  std::map<std::string, std::string> before = {{"a", pattern(100000, 1)},
                                               {"b", pattern(4097, 2)},
                                               {"c", pattern(1, 3)},
                                               {"d/e", pattern(3 * kChunk + 17, 4)}};
  auto writer = Client::mount(server.url());
  writer->mkdir("d");
  for (const auto& [name, bytes] : before) {
    File f = writer->open(name, O_RDWR | O_CREAT | O_EXCL, 0644);
    REQUIRE(f.pwrite(bytes.data(), bytes.size(), 0) == bytes.size());
    f.close();
    // On the disk at the close: the server promised no room for a write delegation to
    // keep bytes past it (open_ok.space_limit), so the close sent them.
    CHECK(odafs::test::read_local(root + "/" + name) == bytes);
  }

  // Fill: 64 KiB chunks until one fails. 1 MiB holds fewer than 16 of them beside the rest.
  File fill = writer->open("fill", O_RDWR | O_CREAT, 0644);
  std::string acked;  // every byte of "fill" a write acknowledged
  std::pair<int, std::string> failure{0, ""};
  for (int i = 0; i < 32 && failure.first == 0; ++i) {
    std::string chunk = pattern(kChunk, 100 + static_cast<uint64_t>(i));
    failure = error_of([&] { fill.pwrite(chunk.data(), chunk.size(), acked.size()); });
    if (failure.first == 0) acked += chunk;
  }
  REQUIRE_MESSAGE(failure.first == ENOSPC, failure.second);
  CHECK(failure.second.find(strerror(ENOSPC)) != std::string::npos);  // a clear message
  CHECK(acked.size() >= kChunk);  // it filled up by the writes, not before them
  INFO("filled after ", acked.size(), " bytes of fill");

  // Full stays full: another write by the same client, a new file by it, and a direct write
  // (the engine pulls the bytes, the server writes them) by another all fail the same way.
  std::string more = pattern(kChunk, 999);
  CHECK(odafs::test::errno_of([&] { fill.pwrite(more.data(), more.size(), acked.size()); }) ==
        ENOSPC);
  odafs::MountOptions direct;
  direct.direct_writes = true;
  auto other = Client::mount(server.url(), direct);
  CHECK(odafs::test::errno_of([&] {
          File g = other->open("g", O_RDWR | O_CREAT, 0644);
          g.pwrite(more.data(), more.size(), 0);
        }) == ENOSPC);
  CHECK_NOTHROW(fill.close());  // COMMIT of what was acknowledged

  // Nothing written before changed: through another client (not the writer's cache) and on
  // the export's disk; "fill" holds every acknowledged byte, and the server shows what the
  // disk holds (no bytes of a failed write kept in its cache as if written).
  auto reader = Client::mount(server.url());
  for (const auto& [name_key, bytes] : before) {
    const auto& name = name_key;  // clang 14 lambdas cannot capture a binding
    CAPTURE(name);
    CHECK(read_all(*reader, name, bytes.size() + 1) == bytes);
    CHECK(read_local(root + "/" + name) == bytes);
    CHECK(reader->stat(name).size == bytes.size());
  }
  const std::string on_disk = read_local(root + "/fill");
  REQUIRE(on_disk.size() >= acked.size());
  CHECK(on_disk.compare(0, acked.size(), acked) == 0);
  CHECK(read_all(*reader, "fill", on_disk.size() + 1) == on_disk);

  // The server keeps serving: its writer, a reader, and a client that mounts now.
  CHECK_NOTHROW(writer->ping());
  CHECK(writer->stat("a").size == before["a"].size());
  CHECK(read_all(*writer, "d/e", before["d/e"].size()) == before["d/e"]);
  auto late = Client::mount(server.url());
  std::set<std::string> names;
  for (const auto& e : late->readdir("/")) names.insert(e.name);
  CHECK(names.count("a") == 1);
  CHECK(names.count("fill") == 1);
  CHECK(read_all(*late, "b", before["b"].size()) == before["b"]);
  const uint64_t free_when_full = late->statfs().avail_bytes;
  CHECK(free_when_full < kChunk);

  // Space freed makes writes work again, for the writer and the others, and what they
  // write reads back.
  writer->unlink("a");
  writer->unlink("fill");
  CHECK(late->statfs().avail_bytes >= free_when_full + acked.size());
  std::string after = pattern(2 * kChunk, 7);
  {
    File f = writer->open("after", O_RDWR | O_CREAT | O_EXCL, 0644);
    CHECK(f.pwrite(after.data(), after.size(), 0) == after.size());
    f.close();
    File g = other->open("g", O_RDWR | O_CREAT, 0644);
    CHECK(g.pwrite(more.data(), more.size(), 0) == more.size());
    g.close();
  }
  CHECK(read_all(*late, "after", after.size() + 1) == after);
  CHECK(read_local(root + "/after") == after);
  CHECK(read_all(*late, "g", more.size() + 1) == more);
  for (const char* kept : {"b", "c", "d/e"}) {
    CHECK(read_local(root + "/" + kept) == before[kept]);
  }
}
