// Unit: the node table's open descriptors (server/node_table.h): a bounded cache of open
// files, nodes reopened by the path they were last reached by (and found STALE when that
// no longer leads to them), pins that eviction never closes, make_writable. Handles and
// lookup are in test_node_table.cc.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "server/node_table.h"
#include "tests/support/node_table_util.h"
#include "tests/support/server_process.h"

using odafs::Status;
using odafs::server::kBadHandle;
using odafs::server::NodeRef;
using odafs::server::NodeTable;
using odafs::server::OpenNode;
using odafs::server::WireHandle;
using odafs::test::fd_of;
using odafs::test::LocalNodeTable;
using odafs::test::lookup;
using odafs::test::lstat_of;
using odafs::test::open_handle;
using odafs::test::pin;
using odafs::test::read_local;
using odafs::test::resolve;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

// Descriptors this process has open right now (the listing's own included, every time).
size_t fds_in_process() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Pins each handle in turn: touches nodes so that older descriptors get evicted.
void churn(NodeTable& t, const std::vector<WireHandle>& handles) {
  for (const WireHandle& h : handles) {
    int err = kBadHandle;
    REQUIRE(open_handle(t, h, &err));
  }
}

std::vector<WireHandle> make_fillers(NodeTable& t, const TempDir& dir, int count) {
  std::vector<WireHandle> out;
  for (int i = 0; i < count; ++i) {
    std::string name = "filler" + std::to_string(i);
    write_local(dir / name, "");
    struct stat st {};
    NodeRef n = lookup(t, t.root(), name.c_str(), &st);
    REQUIRE(n != nullptr);
    out.push_back(t.handle_of(*n));
  }
  return out;
}

std::string pread_all(int fd) {
  char buf[256];
  ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  REQUIRE(n >= 0);
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

TEST_CASE("make_writable on a file opened read-only") {
  TempDir dir;
  write_local(dir / "ro", "original");
  REQUIRE(::chmod((dir / "ro").c_str(), 0444) == 0);
  REQUIRE(::mkdir((dir / "sub").c_str(), 0755) == 0);
  LocalNodeTable t(dir.path(), 64);
  struct stat st {};
  NodeRef node_ref = lookup(t, t.root(), "ro", &st);
  REQUIRE(node_ref != nullptr);
  OpenNode node = pin(t, node_ref);
  REQUIRE(node);
  const int fd_number = fd_of(node);
  const WireHandle h = t.handle_of(*node);
  // Root may open a 0444 file read-write; others get it read-only.
  CHECK(node.writable() == ((::fcntl(fd_of(node), F_GETFL) & O_ACCMODE) == O_RDWR));

  Status made = t.make_writable(node);
  bool ok = made.ok();
  int saved = made.errno_value();
  CHECK(node.writable() == ok);
  int mode = ::fcntl(fd_of(node), F_GETFL) & O_ACCMODE;
  if (ok) {
    CHECK(mode == O_RDWR);
  } else {
    CHECK(saved == EACCES);
    CHECK(mode == O_RDONLY);
  }
  CHECK(fd_of(node) == fd_number);
  char buf[8];
  CHECK(::pread(fd_of(node), buf, sizeof buf, 0) == 8);  // readable either way

  // Once the mode allows it, make_writable succeeds for anyone, in place.
  REQUIRE(::chmod((dir / "ro").c_str(), 0644) == 0);
  REQUIRE(t.make_writable(node).ok());
  CHECK(node.writable());
  CHECK(fd_of(node) == fd_number);
  CHECK((::fcntl(fd_of(node), F_GETFL) & O_ACCMODE) == O_RDWR);
  CHECK(::pwrite(fd_of(node), "CHANGED!", 8, 0) == 8);
  CHECK(read_local(dir / "ro") == "CHANGED!");
  int err = kBadHandle;
  CHECK(resolve(t, h, &err) == node.node());
  CHECK(t.make_writable(node).ok());  // idempotent

  // Directories are never made writable.
  NodeRef sub_ref = lookup(t, t.root(), "sub", &st);
  REQUIRE(sub_ref != nullptr);
  OpenNode sub = pin(t, sub_ref);
  REQUIRE(sub);
  CHECK(t.make_writable(sub).errno_value() == EISDIR);
  CHECK_FALSE(sub.writable());
}

TEST_CASE("descriptors are a bounded cache: 200 handles work with 8 open files") {
  TempDir dir;
  REQUIRE(::mkdir((dir / "d").c_str(), 0755) == 0);
  REQUIRE(::mkdir((dir / "d/e").c_str(), 0755) == 0);
  LocalNodeTable t(dir.path(), 65536, 8);
  REQUIRE(t.max_open_files() == 8);
  REQUIRE(t.open_files() == 1);              // the root
  const size_t baseline = fds_in_process();  // the root's descriptor included
  auto check_bounded = [&] {
    CHECK(t.open_files() <= 8);
    CHECK(fds_in_process() - baseline + 1 <= 8);
  };

  struct stat st {};
  NodeRef d = lookup(t, t.root(), "d", &st);
  REQUIRE(d != nullptr);
  NodeRef e = lookup(t, d, "e", &st);
  REQUIRE(e != nullptr);

  // Half the files made as CREATE does (adopt), half found as LOOKUP does, at three depths.
  constexpr int kFiles = 200;
  std::vector<WireHandle> handles;
  std::vector<std::string> paths;
  for (int i = 0; i < kFiles; ++i) {
    CAPTURE(i);
    const NodeRef& parent = i % 3 == 0 ? t.root() : i % 3 == 1 ? d : e;
    std::string name = "f" + std::to_string(i);
    std::string path = (i % 3 == 0   ? dir.path()
                        : i % 3 == 1 ? dir / "d"
                                     : dir / "d/e") +
                       "/" + name;
    NodeRef n;
    if (i % 2 == 0) {
      OpenNode p = pin(t, parent);
      REQUIRE(p);
      int fd = ::openat(fd_of(p), name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
      REQUIRE(fd >= 0);
      struct stat created {};
      REQUIRE(::fstat(fd, &created) == 0);
      n = t.adopt(p, name.c_str(), odafs::server::Object(t.store.get(), static_cast<uintptr_t>(fd)),
                  created, odafs::server::Store::Access{true, true});
    } else {
      write_local(path, "");
      n = lookup(t, parent, name.c_str(), &st);
    }
    REQUIRE(n != nullptr);
    handles.push_back(t.handle_of(*n));
    paths.push_back(path);
    check_bounded();
  }
  CHECK(t.size() == kFiles + 3);  // every node stays: root, d, e and the files

  // Every handle still reaches its own file, for writing and for reading.
  for (int i = 0; i < kFiles; ++i) {
    CAPTURE(i);
    int err = kBadHandle;
    OpenNode n = open_handle(t, handles[i], &err);
    REQUIRE(n);
    CHECK(err == 0);
    std::string text = "file " + std::to_string(i);
    REQUIRE(::pwrite(fd_of(n), text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()));
    n.reset();
    check_bounded();
  }
  for (int i = kFiles - 1; i >= 0; --i) {
    CAPTURE(i);
    CHECK(read_local(paths[i]) == "file " + std::to_string(i));
    int err = kBadHandle;
    OpenNode n = open_handle(t, handles[i], &err);
    REQUIRE(n);
    CHECK(pread_all(fd_of(n)) == "file " + std::to_string(i));
    n.reset();
    check_bounded();
  }
  CHECK(t.reopens() >= kFiles);

  // ".." of a directory whose parent's descriptor was evicted.
  CHECK(lookup(t, e, "..", &st) == d);
  check_bounded();

  SUBCASE("pinned descriptors are never closed; the bound returns once they go") {
    std::vector<OpenNode> held;
    for (int i = 0; i < 12; ++i) {
      int err = kBadHandle;
      held.push_back(open_handle(t, handles[i], &err));
      REQUIRE(held.back());
    }
    CHECK(t.open_files() >= 13);
    churn(t, std::vector<WireHandle>(handles.begin() + 50, handles.end()));
    for (int i = 0; i < 12; ++i) {
      CAPTURE(i);
      struct stat by_fd {};
      REQUIRE(::fstat(fd_of(held[i]), &by_fd) == 0);  // still open, still this file
      CHECK(by_fd.st_ino == lstat_of(paths[i]).st_ino);
      CHECK(pread_all(fd_of(held[i])) == "file " + std::to_string(i));
    }
    held.clear();
    churn(t, std::vector<WireHandle>(handles.begin() + 100, handles.begin() + 101));
    check_bounded();
  }
}

TEST_CASE("a handle whose descriptor was evicted follows renames made through the table") {
  TempDir dir;
  REQUIRE(::mkdir((dir / "a").c_str(), 0755) == 0);
  REQUIRE(::mkdir((dir / "b").c_str(), 0755) == 0);
  write_local(dir / "a/x", "payload");
  LocalNodeTable t(dir.path(), 65536, 4);
  struct stat st {};
  NodeRef a = lookup(t, t.root(), "a", &st);
  NodeRef b = lookup(t, t.root(), "b", &st);
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  NodeRef x = lookup(t, a, "x", &st);
  REQUIRE(x != nullptr);
  const WireHandle hx = t.handle_of(*x);
  const std::vector<WireHandle> fillers = make_fillers(t, dir, 8);

  // As RENAME does: rename in the pinned directories, then tell the table.
  auto rename_through_table = [&](const NodeRef& from, const char* from_name, const NodeRef& to,
                                  const char* to_name) {
    OpenNode f = pin(t, from);
    OpenNode d = pin(t, to);
    REQUIRE(f);
    REQUIRE(d);
    REQUIRE(::renameat(fd_of(f), from_name, fd_of(d), to_name) == 0);
    struct stat moved {};
    REQUIRE(::fstatat(fd_of(d), to_name, &moved, AT_SYMLINK_NOFOLLOW) == 0);
    t.renamed(d, to_name, t.key_of(moved));
  };
  // Opens hx after evicting every other descriptor; checks it had to be reopened.
  auto open_x_evicted = [&](int* err) {
    churn(t, fillers);
    uint64_t before = t.reopens();
    OpenNode n = open_handle(t, hx, err);
    if (n) CHECK(t.reopens() == before + 1);
    return n;
  };

  rename_through_table(a, "x", b, "y");
  int err = kBadHandle;
  OpenNode n = open_x_evicted(&err);
  REQUIRE(n);
  CHECK(n.node() == x);
  CHECK(pread_all(fd_of(n)) == "payload");
  CHECK(lstat_of(dir / "b/y").st_ino == x->key.ino);
  n.reset();

  // Renaming the directory keeps the path below it: the file is found under the new name
  // with both descriptors evicted.
  rename_through_table(t.root(), "b", t.root(), "c");
  n = open_x_evicted(&err);
  REQUIRE(n);
  CHECK(pread_all(fd_of(n)) == "payload");
  REQUIRE(::pwrite(fd_of(n), "PAY", 3, 0) == 3);
  CHECK(read_local(dir / "c/y") == "PAYload");
  n.reset();

  // Renamed behind the table's back: the recorded name leads nowhere, so STALE; a lookup
  // by the new name brings the same handle back.
  REQUIRE(::rename((dir / "c/y").c_str(), (dir / "c/z").c_str()) == 0);
  n = open_x_evicted(&err);
  CHECK_FALSE(n);
  CHECK(err == ESTALE);
  CHECK(lookup(t, b, "z", &st) == x);
  n = open_handle(t, hx, &err);
  REQUIRE(n);
  CHECK(pread_all(fd_of(n)) == "PAYload");
}

TEST_CASE("an object removed and replaced behind the table's back is STALE, not the newcomer") {
  TempDir dir;
  write_local(dir / "victim", "old");
  LocalNodeTable t(dir.path(), 65536, 4);
  struct stat st {};
  NodeRef v = lookup(t, t.root(), "victim", &st);
  REQUIRE(v != nullptr);
  const WireHandle hv = t.handle_of(*v);
  const std::vector<WireHandle> fillers = make_fillers(t, dir, 8);
  churn(t, fillers);  // v's descriptor is evicted

  // On ext4 the new file usually gets the old inode number back: only the kernel file
  // handle (the inode's generation) tells them apart.
  REQUIRE(::unlink((dir / "victim").c_str()) == 0);
  write_local(dir / "victim", "new");
  INFO("inode number reused: ", lstat_of(dir / "victim").st_ino == v->key.ino);
  int err = kBadHandle;
  OpenNode o = open_handle(t, hv, &err);
  CHECK_FALSE(o);
  CHECK(err == ESTALE);
  CHECK(read_local(dir / "victim") == "new");

  // Looking the name up finds the newcomer as a new node with its own handle; the old
  // handle stays stale.
  NodeRef n = lookup(t, t.root(), "victim", &st);
  REQUIRE(n != nullptr);
  CHECK(n != v);
  CHECK(t.handle_of(*n) != hv);
  o = open_handle(t, hv, &err);
  CHECK_FALSE(o);
  CHECK(err == ESTALE);
  o = open_handle(t, t.handle_of(*n), &err);
  REQUIRE(o);
  CHECK(pread_all(fd_of(o)) == "new");
  o.reset();

  // Removed by the server (REMOVE) while its descriptor is evicted: forget_if_unlinked
  // believes the caller's link count.
  churn(t, fillers);
  REQUIRE(::unlink((dir / "victim").c_str()) == 0);
  CHECK(t.forget_if_unlinked(n->key, 0) == n->id);
  o = open_handle(t, t.handle_of(*n), &err);
  CHECK_FALSE(o);
  CHECK(err == ESTALE);
}

TEST_CASE("threads opening handles at once never see another file's descriptor") {
  // Eviction must never close a descriptor a thread has pinned: the kernel would reuse its
  // number for the next open, and the thread would read another file's bytes.
  TempDir dir;
  constexpr int kFiles = 64;
  for (int i = 0; i < kFiles; ++i) write_local(dir / ("f" + std::to_string(i)), std::to_string(i));
  LocalNodeTable t(dir.path(), 65536, 6);
  std::vector<WireHandle> handles;
  for (int i = 0; i < kFiles; ++i) {
    struct stat st {};
    NodeRef n = lookup(t, t.root(), ("f" + std::to_string(i)).c_str(), &st);
    REQUIRE(n != nullptr);
    handles.push_back(t.handle_of(*n));
  }
  std::atomic<int> wrong{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      uint32_t x = 12345u + static_cast<uint32_t>(k);
      for (int round = 0; round < 2000; ++round) {
        x = x * 1103515245u + 12345u;
        int i = static_cast<int>((x >> 8) % kFiles);
        int err = kBadHandle;
        OpenNode n = open_handle(t, handles[i], &err);
        if (!n) {
          ++failed;
          continue;
        }
        char buf[16];
        ssize_t got = ::pread(fd_of(n), buf, sizeof buf, 0);
        if (got < 0 || std::string(buf, static_cast<size_t>(got)) != std::to_string(i)) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failed.load() == 0);
  CHECK(wrong.load() == 0);
  CHECK(t.open_files() <= 6);
  CHECK(t.reopens() > 0);
}
