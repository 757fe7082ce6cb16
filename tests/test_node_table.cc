// Unit: the server's node table and its file handles (server/node_table.h): handles,
// lookup, the bound on nodes, removal. Open descriptors (their bounded cache, reopening,
// making them writable) are in test_node_table_fds.cc.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "server/node_table.h"
#include "tests/support/node_table_util.h"
#include "tests/support/server_process.h"

using odafs::server::kBadHandle;
using odafs::server::kHandleSize;
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
using odafs::test::resolve;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

const char* error_name(int err) {
  return err == 0 ? "none" : err == kBadHandle ? "kBadHandle" : err == ESTALE ? "ESTALE" : "?";
}

}  // namespace

TEST_CASE("the export root must be a directory") {
  TempDir dir;
  write_local(dir / "file", "x");
  CHECK_THROWS_AS(LocalNodeTable(dir / "missing", 16), std::system_error);
  CHECK_THROWS_AS(LocalNodeTable(dir / "file", 16), std::system_error);
}

TEST_CASE("the root handle resolves to the root") {
  TempDir dir;
  LocalNodeTable t(dir.path(), 64);
  NodeRef root = t.root();
  REQUIRE(root != nullptr);
  CHECK(S_ISDIR(root->type));
  struct stat st = lstat_of(dir.path());
  CHECK(root->key.ino == st.st_ino);
  CHECK(root->key.space == st.st_dev);
  CHECK(t.size() == 1);

  WireHandle h = t.handle_of(*root);
  static_assert(sizeof h == kHandleSize);
  int err = kBadHandle;
  NodeRef back = resolve(t, h, &err);
  CHECK(err == 0);
  CHECK(back == root);
  // Deterministic: the same node always gets the same handle.
  CHECK(t.handle_of(*root) == h);
}

TEST_CASE("handle_of and resolve round trip for looked-up objects") {
  TempDir dir;
  write_local(dir / "file", "contents");
  REQUIRE(::mkdir((dir / "sub").c_str(), 0755) == 0);
  write_local(dir / "sub/inner", "inner");
  LocalNodeTable t(dir.path(), 64);

  struct stat st {};
  NodeRef file = lookup(t, t.root(), "file", &st);
  REQUIRE(file != nullptr);
  CHECK(S_ISREG(file->type));
  CHECK(S_ISREG(st.st_mode));
  CHECK(st.st_size == 8);
  CHECK(file->key.ino == lstat_of(dir / "file").st_ino);
  CHECK(pin(t, file).writable());  // a file we own opens read-write
  CHECK(file->id != t.root()->id);

  NodeRef sub = lookup(t, t.root(), "sub", &st);
  REQUIRE(sub != nullptr);
  CHECK(S_ISDIR(sub->type));
  NodeRef inner = lookup(t, sub, "inner", &st);
  REQUIRE(inner != nullptr);
  CHECK(inner->key.ino == lstat_of(dir / "sub/inner").st_ino);

  for (const NodeRef& n : {file, sub, inner}) {
    int err = kBadHandle;
    NodeRef back = resolve(t, t.handle_of(*n), &err);
    CHECK(err == 0);
    CHECK(back == n);
  }
  // Distinct objects, distinct handles; a second lookup finds the same node.
  CHECK(t.handle_of(*file) != t.handle_of(*inner));
  CHECK(lookup(t, t.root(), "file", &st) == file);
  CHECK(lookup(t, t.root(), ".", &st) == t.root());
  CHECK(lookup(t, sub, "..", &st) == t.root());
  CHECK(lookup(t, sub, ".", &st) == sub);
  CHECK(t.size() == 4);

  // While its descriptor is open, the node is the object itself, whatever happens to its
  // name.
  REQUIRE(::rename((dir / "file").c_str(), (dir / "renamed").c_str()) == 0);
  int err = kBadHandle;
  OpenNode again = open_handle(t, t.handle_of(*file), &err);
  REQUIRE(again);
  CHECK(again.node() == file);
  char buf[16] = {};
  CHECK(::pread(fd_of(again), buf, sizeof buf, 0) == 8);
  CHECK(std::string(buf) == "contents");

  int missing = 0;
  CHECK(lookup(t, t.root(), "missing", &st, &missing) == nullptr);
  CHECK(missing == ENOENT);
}

TEST_CASE("flipping any single byte of a valid handle makes it fail") {
  TempDir dir;
  write_local(dir / "file", "x");
  LocalNodeTable t(dir.path(), 64);
  struct stat st {};
  NodeRef file = lookup(t, t.root(), "file", &st);
  REQUIRE(file != nullptr);

  for (const NodeRef& n : {t.root(), file}) {
    const WireHandle good = t.handle_of(*n);
    for (size_t i = 0; i < kHandleSize; ++i) {
      for (unsigned char mask : {0x01, 0x80, 0xff}) {
        CAPTURE(i);
        CAPTURE(static_cast<int>(mask));
        WireHandle h = good;
        h[i] ^= mask;
        int err = 0;
        NodeRef r = resolve(t, h, &err);
        CHECK(r == nullptr);
        INFO("error: ", error_name(err));
        CHECK((err == kBadHandle || err == ESTALE));
      }
    }
  }

  WireHandle zero{};
  int err = 0;
  CHECK(resolve(t, zero, &err) == nullptr);
  CHECK(err == kBadHandle);
}

TEST_CASE("a handle from another node table instance does not resolve") {
  TempDir dir;
  write_local(dir / "file", "x");
  LocalNodeTable a(dir.path(), 64);
  LocalNodeTable b(dir.path(), 64);
  struct stat st {};
  NodeRef fa = lookup(a, a.root(), "file", &st);
  NodeRef fb = lookup(b, b.root(), "file", &st);
  REQUIRE(fa != nullptr);
  REQUIRE(fb != nullptr);

  for (const auto& [from, to, node] :
       {std::tuple<NodeTable*, NodeTable*, NodeRef>{&a, &b, a.root()},
        std::tuple<NodeTable*, NodeTable*, NodeRef>{&a, &b, fa},
        std::tuple<NodeTable*, NodeTable*, NodeRef>{&b, &a, b.root()},
        std::tuple<NodeTable*, NodeTable*, NodeRef>{&b, &a, fb}}) {
    int err = 0;
    CHECK(resolve(*to, from->handle_of(*node), &err) == nullptr);
    CHECK((err == ESTALE || err == kBadHandle));
  }

  // Same slot, generation and inode, but minted under another key: forged, not accepted
  // even when the instance field is made to match.
  WireHandle forged = a.handle_of(*fa);
  uint32_t inst = b.instance();
  for (int i = 0; i < 4; ++i) forged[4 + i] = static_cast<unsigned char>(inst >> (24 - 8 * i));
  int err = 0;
  CHECK(resolve(b, forged, &err) == nullptr);
  CHECK(err == kBadHandle);
}

TEST_CASE("lookup of .. at the root stays at the root") {
  TempDir dir;
  LocalNodeTable t(dir.path(), 64);
  struct stat st {};
  NodeRef up = lookup(t, t.root(), "..", &st);
  CHECK(up == t.root());
  CHECK(st.st_ino == t.root()->key.ino);
  CHECK(t.size() == 1);
}

TEST_CASE("lookup of a symlink returns the link itself, never its target") {
  TempDir dir;
  REQUIRE(::symlink("/etc", (dir / "etc_link").c_str()) == 0);
  REQUIRE(::symlink("/etc/passwd", (dir / "file_link").c_str()) == 0);
  REQUIRE(::symlink("nowhere", (dir / "dangling").c_str()) == 0);
  LocalNodeTable t(dir.path(), 64);
  struct stat etc {};
  REQUIRE(::stat("/etc", &etc) == 0);

  for (const char* name : {"etc_link", "file_link", "dangling"}) {
    CAPTURE(name);
    struct stat st {};
    NodeRef link = lookup(t, t.root(), name, &st);
    REQUIRE(link != nullptr);
    CHECK(link->type == S_IFLNK);
    CHECK(S_ISLNK(st.st_mode));
    CHECK(link->key.ino == lstat_of(dir / name).st_ino);
    OpenNode pinned = pin(t, link);
    REQUIRE(pinned);
    CHECK_FALSE(pinned.writable());
    struct stat by_fd {};
    REQUIRE(::fstat(fd_of(pinned), &by_fd) == 0);
    CHECK(S_ISLNK(by_fd.st_mode));
    int err = kBadHandle;
    CHECK(resolve(t, t.handle_of(*link), &err) == link);
  }

  // Nothing can be looked up "inside" the link: it does not lead to /etc.
  struct stat st {};
  NodeRef link = lookup(t, t.root(), "etc_link", &st);
  REQUIRE(link != nullptr);
  CHECK(link->key.ino != etc.st_ino);
  int inside = 0;
  CHECK(lookup(t, link, "passwd", &st, &inside) == nullptr);
  CHECK(inside == ENOTDIR);
}

TEST_CASE("valid_name") {
  CHECK_FALSE(NodeTable::valid_name(""));
  CHECK_FALSE(NodeTable::valid_name("."));
  CHECK_FALSE(NodeTable::valid_name(".."));
  CHECK_FALSE(NodeTable::valid_name("a/b"));
  CHECK_FALSE(NodeTable::valid_name("/"));
  CHECK_FALSE(NodeTable::valid_name("a/"));
  CHECK_FALSE(NodeTable::valid_name(std::string(256, 'n').c_str()));
  CHECK_FALSE(NodeTable::valid_name(std::string(1000, 'n').c_str()));

  CHECK(NodeTable::valid_name("a"));
  CHECK(NodeTable::valid_name("file.txt"));
  CHECK(NodeTable::valid_name("..."));
  CHECK(NodeTable::valid_name(".hidden"));
  CHECK(NodeTable::valid_name("..x"));
  CHECK(NodeTable::valid_name("with space"));
  CHECK(NodeTable::valid_name("\xc3\xa9t\xc3\xa9"));
  CHECK(NodeTable::valid_name(std::string(255, 'n').c_str()));
}

TEST_CASE("forget_if_unlinked") {
  TempDir dir;
  write_local(dir / "f", "data");
  LocalNodeTable t(dir.path(), 64);
  struct stat st {};
  NodeRef f = lookup(t, t.root(), "f", &st);
  REQUIRE(f != nullptr);
  const WireHandle h = t.handle_of(*f);
  int err = kBadHandle;

  CHECK(t.forget_if_unlinked(f->key) == 0);  // still linked
  CHECK(resolve(t, h, &err) == f);

  // Another link keeps it alive.
  REQUIRE(::link((dir / "f").c_str(), (dir / "g").c_str()) == 0);
  REQUIRE(::unlink((dir / "f").c_str()) == 0);
  CHECK(t.forget_if_unlinked(f->key) == 0);
  CHECK(resolve(t, h, &err) == f);
  CHECK(err == 0);

  REQUIRE(::unlink((dir / "g").c_str()) == 0);
  size_t before = t.size();
  CHECK(t.forget_if_unlinked(f->key) == f->id);
  CHECK(t.size() == before - 1);
  CHECK(resolve(t, h, &err) == nullptr);
  CHECK(err == ESTALE);
  CHECK(t.forget_if_unlinked(f->key) == 0);  // already gone

  // The slot is reused by the next object; the old handle stays stale.
  write_local(dir / "new", "n");
  NodeRef n = lookup(t, t.root(), "new", &st);
  REQUIRE(n != nullptr);
  CHECK(n->id != f->id);
  CHECK(resolve(t, h, &err) == nullptr);
  CHECK(err == ESTALE);
  CHECK(resolve(t, t.handle_of(*n), &err) == n);

  // Unknown inodes are left alone.
  CHECK(t.forget_if_unlinked(odafs::server::ObjectId{0, f->key.space}) == 0);
}

TEST_CASE("the table stays bounded and evicted handles are stale") {
  TempDir dir;
  constexpr int kFiles = 100;
  for (int i = 0; i < kFiles; ++i) write_local(dir / ("f" + std::to_string(i)), "x");
  LocalNodeTable t(dir.path(), 16);
  const WireHandle root_handle = t.handle_of(*t.root());

  std::vector<WireHandle> handles;
  std::vector<ino_t> inodes;
  for (int i = 0; i < kFiles; ++i) {
    struct stat st {};
    NodeRef n = lookup(t, t.root(), ("f" + std::to_string(i)).c_str(), &st);
    REQUIRE(n != nullptr);
    handles.push_back(t.handle_of(*n));
    inodes.push_back(n->key.ino);
    CHECK(t.size() <= 17);
  }
  CHECK(t.size() <= 17);

  int live = 0, stale = 0;
  for (int i = 0; i < kFiles; ++i) {
    int err = kBadHandle;
    NodeRef n = resolve(t, handles[i], &err);
    if (n != nullptr) {
      CHECK(err == 0);
      CHECK(n->key.ino == inodes[i]);  // never another object that took the slot
      ++live;
    } else {
      CAPTURE(i);
      CHECK(err == ESTALE);
      ++stale;
    }
  }
  CHECK(live <= 16);
  CHECK(stale >= kFiles - 16);

  int err = kBadHandle;
  CHECK(resolve(t, root_handle, &err) == t.root());  // the root is never evicted

  // An evicted object can be looked up again and gets a fresh, working handle.
  struct stat st {};
  NodeRef again = lookup(t, t.root(), "f0", &st);
  REQUIRE(again != nullptr);
  CHECK(resolve(t, t.handle_of(*again), &err) == again);

  SUBCASE("nodes in use are not evicted") {
    std::vector<NodeRef> held;
    for (int i = 0; i < 30; ++i) {
      NodeRef n = lookup(t, t.root(), ("f" + std::to_string(i)).c_str(), &st);
      REQUIRE(n != nullptr);
      held.push_back(n);
    }
    for (const NodeRef& n : held) {
      CHECK(resolve(t, t.handle_of(*n), &err) == n);
    }
    CHECK(t.size() >= 31);  // the root and 30 held nodes: past the bound for now
    held.clear();
    again.reset();
    // Once released, unused nodes beyond the bound are closed again.
    for (int i = 30; i < kFiles; ++i) {
      REQUIRE(lookup(t, t.root(), ("f" + std::to_string(i)).c_str(), &st) != nullptr);
    }
    CHECK(t.size() <= 17);
  }
}
