// Integration: IoQueue's metadata requests by path (lstat, access, create, unlink, chmod)
// against real odafsd processes: each completes as the synchronous call of the same name
// says, many in flight at once, in any order, with its own error; across a server restart;
// as the caller who submitted it; and through the C API.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/io_queue.h"
#include "client/odafs.h"
#include "rpc/call_credential.h"
#include "tests/support/client_util.h"
#include "tests/support/io_queue_util.h"
#include "tests/support/server_process.h"

using odafs::Attr;
using odafs::Client;
using odafs::Completion;
using odafs::File;
using odafs::IoQueue;
using odafs::test::drain;
using odafs::test::pattern;
using odafs::test::read_local;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

mode_t mode_of(const std::filesystem::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return static_cast<mode_t>(-1);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("metadata by path from the queue: 32 each of create, lstat, access, chmod, unlink") {
  TempDir dir;
  ServerProcess server(dir.path());
  std::filesystem::create_directory(dir / "d");
  auto fs = Client::mount(server.url());
  auto other = Client::mount(server.url());
  fs->lstat("d");  // the directory's handle is cached: each request below makes one call
  constexpr int kFiles = 32;
  IoQueue q(*fs, 2 * kFiles);
  const auto name = [](int i) { return "d/f" + std::to_string(i); };

  std::vector<File> files(kFiles);
  uint64_t creates = server_stat(*fs, "calls.CREATE");
  for (int i = 0; i < kFiles; ++i) q.submit_create(name(i), O_RDWR | O_EXCL, 0644, &files[i], i);
  CHECK(q.outstanding() == kFiles);
  auto done = drain(q);
  REQUIRE(done.size() == kFiles);
  for (int i = 0; i < kFiles; ++i) {
    CHECK(done[i].error == 0);
    CHECK(done[i].bytes == 0);
    REQUIRE(files[i].is_open());
    const std::string text = pattern(100 + i, i);
    files[i].pwrite(text.data(), text.size(), 0);
    files[i].close();
    CHECK(odafs::test::read_all(*other, name(i), 1000) == text);  // recalls what it kept
  }
  CHECK(server_stat(*fs, "calls.CREATE") - creates == kFiles);

  // lstat: the same attributes as the synchronous call; one missing name fails alone.
  std::vector<Attr> attrs(kFiles + 1);
  for (int i = 0; i < kFiles; ++i) q.submit_lstat(name(i), &attrs[i], i);
  q.submit_lstat("d/missing", &attrs[kFiles], kFiles);
  done = drain(q);
  for (int i = 0; i < kFiles; ++i) {
    CHECK(done[i].error == 0);
    CHECK(attrs[i].size == static_cast<uint64_t>(100 + i));
    CHECK(attrs[i].type == odafs::FileType::kRegular);
    CHECK(attrs[i].fileid == fs->lstat(name(i)).fileid);
  }
  CHECK(done[kFiles].error == ENOENT);

  // chmod, then access: what the server grants under the new bits.
  for (int i = 0; i < kFiles; ++i) q.submit_chmod(name(i), i % 2 ? 0400 : 0600, i);
  done = drain(q);
  for (int i = 0; i < kFiles; ++i) {
    CHECK(done[i].error == 0);
    CHECK(mode_of(dir / name(i)) == (i % 2 ? 0400u : 0600u));
  }
  std::vector<int> granted(kFiles, -1);
  for (int i = 0; i < kFiles; ++i) q.submit_access(name(i), R_OK | W_OK, &granted[i], i);
  done = drain(q);
  for (int i = 0; i < kFiles; ++i) {
    CHECK(done[i].error == 0);
    CHECK(granted[i] == fs->access(name(i), R_OK | W_OK));
  }

  // unlink: gone from the export; a second unlink of one, and a directory, fail alone.
  for (int i = 0; i < kFiles; ++i) q.submit_unlink(name(i), i);
  done = drain(q);
  for (int i = 0; i < kFiles; ++i) {
    CHECK(done[i].error == 0);
    CHECK(!std::filesystem::exists(dir / name(i)));
  }
  q.submit_unlink(name(0), 1);
  q.submit_unlink("d", 2);
  q.submit_lstat("d", &attrs[0], 3);
  done = drain(q);
  CHECK(done[1].error == ENOENT);
  CHECK(done[2].error == EISDIR);
  CHECK(done[3].error == 0);
  CHECK(attrs[0].type == odafs::FileType::kDirectory);
}

TEST_CASE("queued creates and lookups go out together: one call each, answered in any order") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  IoQueue q(*fs, 64);
  std::vector<File> files(64);
  const uint64_t lookups = server_stat(*fs, "calls.LOOKUP");
  for (int i = 0; i < 64; ++i)
    q.submit_create("n" + std::to_string(i), O_WRONLY, 0600, &files[i], i);
  // All 64 are out before any is reaped: submit does not wait for replies.
  CHECK(q.outstanding() == 64);
  auto done = drain(q);
  for (auto& [tag, c] : done) CHECK(c.error == 0);
  for (File& f : files) f.close();
  // CREATE brings a delegation: a lookup of a file this client holds one on needs no call.
  std::vector<Attr> attrs(64);
  for (int i = 0; i < 64; ++i) q.submit_lstat("n" + std::to_string(i), &attrs[i], i);
  done = drain(q);
  for (auto& [tag, c] : done) CHECK(c.error == 0);
  CHECK(server_stat(*fs, "calls.LOOKUP") == lookups);
  // Another client's names are looked up, one LOOKUP each.
  for (int i = 0; i < 16; ++i) write_local(dir / ("o" + std::to_string(i)), "x");
  const uint64_t before = server_stat(*fs, "calls.LOOKUP");
  for (int i = 0; i < 16; ++i) q.submit_lstat("o" + std::to_string(i), &attrs[i], i);
  done = drain(q);
  for (auto& [tag, c] : done) CHECK(c.error == 0);
  CHECK(server_stat(*fs, "calls.LOOKUP") - before == 16);
}

TEST_CASE("symlinks: lstat takes the link itself; access, chmod and create follow it") {
  TempDir dir;
  ServerProcess server(dir.path());
  write_local(dir / "target", "t");
  REQUIRE(::chmod((dir / "target").c_str(), 0644) == 0);
  std::filesystem::create_symlink("target", dir / "link");
  std::filesystem::create_symlink("absent", dir / "dangling");
  auto fs = Client::mount(server.url());
  IoQueue q(*fs, 8);
  Attr a{};
  int granted = -1;
  File made;
  File none;
  q.submit_lstat("link", &a, 1);
  q.submit_access("link", R_OK, &granted, 2);
  q.submit_chmod("link", 0600, 3);
  q.submit_create("link", O_WRONLY, 0640, &made, 4);
  q.submit_create("dangling", O_WRONLY, 0640, &none, 5);
  auto done = drain(q);
  CHECK(done[1].error == 0);
  CHECK(a.type == odafs::FileType::kSymlink);
  CHECK(done[2].error == 0);
  CHECK(granted == R_OK);
  CHECK(done[3].error == 0);
  CHECK(mode_of(dir / "target") == 0600);
  // open(O_CREAT) of a link's name opens its target, as Client::open does...
  CHECK(done[4].error == 0);
  REQUIRE(made.is_open());
  CHECK(made.attributes_at_open().fileid == fs->stat("target").fileid);
  made.close();
  // ...and fails as it does where the link leads nowhere.
  CHECK(done[5].error == odafs::test::errno_of([&] { fs->open("dangling", O_WRONLY | O_CREAT); }));
  CHECK(done[5].error != 0);
}

TEST_CASE("each queued request goes as its submitter's credential (CallAs), whoever reaps" *
          doctest::skip(geteuid() != 0) *
          doctest::description("needs root: the server acts as another uid")) {
  TempDir dir;
  ServerProcess server(dir.path(), {"--auth-sys"});
  REQUIRE(::chmod(dir.path().c_str(), 01777) == 0);  // sticky: only owners remove names
  write_local(dir / "roots", "root's");
  REQUIRE(::chmod((dir / "roots").c_str(), 0644) == 0);
  auto fs = Client::mount(server.url());  // this process is root
  odafs::rpc::CallerCred id;
  id.auth_sys = true;
  id.uid = 65534;
  id.gid = 65534;
  IoQueue q(*fs, 8);
  int granted = -1;
  File mine;
  {
    const odafs::rpc::CallCredential nobody(id, "test");
    const odafs::rpc::CallAs as(nobody);
    // Each needs a LOOKUP first: the later call (SETATTR, ACCESS, REMOVE) starts in the
    // reap below, outside this scope, and must still go as nobody.
    q.submit_chmod("roots", 0666, 1);
    q.submit_access("roots", R_OK | W_OK, &granted, 2);
    q.submit_unlink("roots", 3);
    q.submit_create("nobodys", O_WRONLY | O_EXCL, 0600, &mine, 4);
  }
  auto done = drain(q);  // as root
  CHECK(done[1].error == EPERM);
  CHECK(mode_of(dir / "roots") == 0644);
  CHECK(done[2].error == 0);
  CHECK(granted == R_OK);
  CHECK(done[3].error == EPERM);  // root's file in a sticky directory
  CHECK(std::filesystem::exists(dir / "roots"));
  CHECK(done[4].error == 0);
  struct stat st {};
  REQUIRE(::stat((dir / "nobodys").c_str(), &st) == 0);
  CHECK(st.st_uid == 65534);
  mine.close();
}

TEST_CASE("requests by path across a server restart: the idempotent ones start over") {
  TempDir dir;
  ServerProcess server(dir.path());
  std::filesystem::create_directory(dir / "d");
  write_local(dir / "d/kept", pattern(4321, 1));
  auto fs = Client::mount(server.url());
  CHECK(fs->lstat("d/kept").size == 4321);  // "d" is in the directory cache now
  const int status = server.signal_and_reap(SIGKILL);
  REQUIRE(WIFSIGNALED(status));
  server.start_again();
  // The cached handle of "d" is stale after the restart: the requests meet ESTALE, start
  // over with the cache emptied, and find everything again.
  IoQueue q(*fs, 4);
  Attr a{};
  int granted = -1;
  File made;
  q.submit_lstat("d/kept", &a, 1);
  q.submit_access("d/kept", R_OK, &granted, 2);
  q.submit_create("d/new", O_WRONLY | O_EXCL, 0644, &made, 3);
  auto done = drain(q);
  CHECK(done[1].error == 0);
  CHECK(a.size == 4321);
  CHECK(done[2].error == 0);
  CHECK(granted == R_OK);
  CHECK(done[3].error == 0);
  made.close();
  CHECK(std::filesystem::exists(dir / "d/new"));
}

TEST_CASE("an unlink of a file another client holds a write delegation on waits for its return") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto holder = Client::mount(server.url());
  {
    File f = holder->open("held", O_WRONLY | O_CREAT, 0644);
    f.pwrite("kept", 4, 0);
    f.close();  // kept by the holder under its write delegation
  }
  auto fs = Client::mount(server.url());
  IoQueue q(*fs, 2);
  const uint64_t recalls = server_stat(*fs, "delegations.recalled");
  q.submit_unlink("held", 7);
  auto done = drain(q);
  CHECK(done[7].error == 0);
  CHECK(!std::filesystem::exists(dir / "held"));
  CHECK(server_stat(*fs, "delegations.recalled") > recalls);
}

TEST_CASE("the C API's metadata requests") {
  TempDir dir;
  ServerProcess server(dir.path());
  odafs_client* c = odafs_mount(server.url().c_str());
  REQUIRE(c != nullptr);
  odafs_ioq* q = odafs_ioq_create(c, 4);
  REQUIRE(q != nullptr);
  odafs_file* made = reinterpret_cast<odafs_file*>(1);
  odafs_file* refused = reinterpret_cast<odafs_file*>(1);
  CHECK(odafs_ioq_submit_create(q, "/a", O_RDWR | O_EXCL, 0640, &made, 10) == 0);
  CHECK(odafs_ioq_submit_create(q, "/no/such/dir/b", O_RDWR, 0640, &refused, 11) == 0);
  odafs_completion got[4];
  int n = 0;
  while (n < 2) {
    const ssize_t k = odafs_ioq_wait(q, got + n, 4 - n, 1, 30000);
    REQUIRE(k > 0);
    n += static_cast<int>(k);
  }
  for (int i = 0; i < 2; ++i) {
    if (got[i].user_tag == 10) CHECK(got[i].error == 0);
    if (got[i].user_tag == 11) CHECK(got[i].error == ENOENT);
  }
  CHECK(refused == nullptr);
  REQUIRE(made != nullptr);
  REQUIRE(made != reinterpret_cast<odafs_file*>(1));
  CHECK(odafs_pwrite(made, "hello", 5, 0) == 5);
  struct stat by_file {
  }, by_path{};
  int granted = -1;
  CHECK(odafs_ioq_submit_stat(q, made, &by_file, 20) == 0);
  CHECK(odafs_ioq_submit_lstat(q, "/a", &by_path, 21) == 0);
  CHECK(odafs_ioq_submit_access(q, "/a", R_OK | W_OK, &granted, 22) == 0);
  CHECK(odafs_ioq_submit_chmod(q, "/a", 0600, 23) == 0);
  CHECK(odafs::test::failed_with(odafs_ioq_submit_unlink(q, "/a", 24) == -1) == EBUSY);
  CHECK(odafs_ioq_wait(q, got, 4, 4, 30000) == 4);
  for (const odafs_completion& g : got) {
    CHECK(g.error == 0);
    CHECK(g.user_tag >= 20);
    CHECK(g.user_tag <= 23);
  }
  CHECK(by_file.st_size == 5);
  CHECK(S_ISREG(by_path.st_mode));
  CHECK(by_path.st_ino == by_file.st_ino);
  CHECK(granted == (R_OK | W_OK));
  CHECK(mode_of(dir / "a") == 0600);
  CHECK(odafs_close(made) == 0);
  CHECK(odafs_ioq_submit_unlink(q, "/a", 30) == 0);
  CHECK(odafs_ioq_wait(q, got, 4, 1, 30000) == 1);
  CHECK(got[0].user_tag == 30);
  CHECK(got[0].error == 0);
  CHECK(!std::filesystem::exists(dir / "a"));
  CHECK(odafs::test::failed_with(odafs_ioq_submit_lstat(q, nullptr, &by_path, 0) == -1) == EINVAL);
  // A create never reaped: the queue frees its file.
  CHECK(odafs_ioq_submit_create(q, "/c", O_WRONLY, 0600, &made, 40) == 0);
  odafs_ioq_destroy(q);
  odafs_unmount(c);
}
