// Unit: the server's node table and its file handles (server/node_table.h).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "server/node_table.h"
#include "tests/support/server_process.h"

using odafs::Result;
using odafs::Status;
using odafs::server::kBadHandle;
using odafs::server::kHandleSize;
using odafs::server::NodeRef;
using odafs::server::NodeTable;
using odafs::server::OpenNode;
using odafs::server::WireHandle;
using odafs::test::read_local;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

// The node handle h names, or nullptr; *err is the failure's errno (0 on success).
NodeRef resolve(const NodeTable& t, const WireHandle& h, int* err) {
  Result<NodeRef> r = t.resolve(h.data());
  *err = r.errno_value();
  return r ? *r : nullptr;
}

// Opens handle h as the server does: the pinned node, or an empty one with *err set.
OpenNode open_handle(NodeTable& t, const WireHandle& h, int* err) {
  Result<OpenNode> r = t.open(h.data());
  *err = r.errno_value();
  return r ? std::move(r).value() : OpenNode();
}

// Pins node open; the test fails if it cannot be.
OpenNode pin(NodeTable& t, const NodeRef& node) {
  Result<OpenNode> r = t.open(node);
  REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  return std::move(r).value();
}

// Looks name up in dir, with dir pinned open for the call as the server does. nullptr on
// failure, with its errno in *err if err is given.
NodeRef lookup(NodeTable& t, const NodeRef& dir, const char* name, struct stat* st,
               int* err = nullptr) {
  OpenNode d = pin(t, dir);
  Result<NodeRef> r = t.lookup(d, name, st);
  if (err != nullptr) *err = r.errno_value();
  return r ? *r : nullptr;
}

struct stat lstat_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st;
}

const char* error_name(int err) {
  return err == 0 ? "none" : err == kBadHandle ? "kBadHandle" : err == ESTALE ? "ESTALE" : "?";
}

}  // namespace

TEST_CASE("the export root must be a directory") {
  TempDir dir;
  write_local(dir / "file", "x");
  CHECK_THROWS_AS(NodeTable(dir / "missing", 16), std::system_error);
  CHECK_THROWS_AS(NodeTable(dir / "file", 16), std::system_error);
}

TEST_CASE("the root handle resolves to the root") {
  TempDir dir;
  NodeTable t(dir.path(), 64);
  NodeRef root = t.root();
  REQUIRE(root != nullptr);
  CHECK(S_ISDIR(root->type));
  struct stat st = lstat_of(dir.path());
  CHECK(root->ino == st.st_ino);
  CHECK(root->dev == st.st_dev);
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
  NodeTable t(dir.path(), 64);

  struct stat st {};
  NodeRef file = lookup(t, t.root(), "file", &st);
  REQUIRE(file != nullptr);
  CHECK(S_ISREG(file->type));
  CHECK(S_ISREG(st.st_mode));
  CHECK(st.st_size == 8);
  CHECK(file->ino == lstat_of(dir / "file").st_ino);
  CHECK(pin(t, file).writable());  // a file we own opens read-write
  CHECK(file->id != t.root()->id);

  NodeRef sub = lookup(t, t.root(), "sub", &st);
  REQUIRE(sub != nullptr);
  CHECK(S_ISDIR(sub->type));
  NodeRef inner = lookup(t, sub, "inner", &st);
  REQUIRE(inner != nullptr);
  CHECK(inner->ino == lstat_of(dir / "sub/inner").st_ino);

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
  CHECK(::pread(again.fd(), buf, sizeof buf, 0) == 8);
  CHECK(std::string(buf) == "contents");

  int missing = 0;
  CHECK(lookup(t, t.root(), "missing", &st, &missing) == nullptr);
  CHECK(missing == ENOENT);
}

TEST_CASE("flipping any single byte of a valid handle makes it fail") {
  TempDir dir;
  write_local(dir / "file", "x");
  NodeTable t(dir.path(), 64);
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
  NodeTable a(dir.path(), 64);
  NodeTable b(dir.path(), 64);
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
  NodeTable t(dir.path(), 64);
  struct stat st {};
  NodeRef up = lookup(t, t.root(), "..", &st);
  CHECK(up == t.root());
  CHECK(st.st_ino == t.root()->ino);
  CHECK(t.size() == 1);
}

TEST_CASE("lookup of a symlink returns the link itself, never its target") {
  TempDir dir;
  REQUIRE(::symlink("/etc", (dir / "etc_link").c_str()) == 0);
  REQUIRE(::symlink("/etc/passwd", (dir / "file_link").c_str()) == 0);
  REQUIRE(::symlink("nowhere", (dir / "dangling").c_str()) == 0);
  NodeTable t(dir.path(), 64);
  struct stat etc {};
  REQUIRE(::stat("/etc", &etc) == 0);

  for (const char* name : {"etc_link", "file_link", "dangling"}) {
    CAPTURE(name);
    struct stat st {};
    NodeRef link = lookup(t, t.root(), name, &st);
    REQUIRE(link != nullptr);
    CHECK(link->type == S_IFLNK);
    CHECK(S_ISLNK(st.st_mode));
    CHECK(link->ino == lstat_of(dir / name).st_ino);
    OpenNode pinned = pin(t, link);
    REQUIRE(pinned);
    CHECK_FALSE(pinned.writable());
    struct stat by_fd {};
    REQUIRE(::fstat(pinned.fd(), &by_fd) == 0);
    CHECK(S_ISLNK(by_fd.st_mode));
    int err = kBadHandle;
    CHECK(resolve(t, t.handle_of(*link), &err) == link);
  }

  // Nothing can be looked up "inside" the link: it does not lead to /etc.
  struct stat st {};
  NodeRef link = lookup(t, t.root(), "etc_link", &st);
  REQUIRE(link != nullptr);
  CHECK(link->ino != etc.st_ino);
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
  NodeTable t(dir.path(), 64);
  struct stat st {};
  NodeRef f = lookup(t, t.root(), "f", &st);
  REQUIRE(f != nullptr);
  const WireHandle h = t.handle_of(*f);
  int err = kBadHandle;

  CHECK(t.forget_if_unlinked(f->dev, f->ino) == 0);  // still linked
  CHECK(resolve(t, h, &err) == f);

  // Another link keeps it alive.
  REQUIRE(::link((dir / "f").c_str(), (dir / "g").c_str()) == 0);
  REQUIRE(::unlink((dir / "f").c_str()) == 0);
  CHECK(t.forget_if_unlinked(f->dev, f->ino) == 0);
  CHECK(resolve(t, h, &err) == f);
  CHECK(err == 0);

  REQUIRE(::unlink((dir / "g").c_str()) == 0);
  size_t before = t.size();
  CHECK(t.forget_if_unlinked(f->dev, f->ino) == f->id);
  CHECK(t.size() == before - 1);
  CHECK(resolve(t, h, &err) == nullptr);
  CHECK(err == ESTALE);
  CHECK(t.forget_if_unlinked(f->dev, f->ino) == 0);  // already gone

  // The slot is reused by the next object; the old handle stays stale.
  write_local(dir / "new", "n");
  NodeRef n = lookup(t, t.root(), "new", &st);
  REQUIRE(n != nullptr);
  CHECK(n->id != f->id);
  CHECK(resolve(t, h, &err) == nullptr);
  CHECK(err == ESTALE);
  CHECK(resolve(t, t.handle_of(*n), &err) == n);

  // Unknown inodes are left alone.
  CHECK(t.forget_if_unlinked(f->dev, 0) == 0);
}

TEST_CASE("the table stays bounded and evicted handles are stale") {
  TempDir dir;
  constexpr int kFiles = 100;
  for (int i = 0; i < kFiles; ++i) write_local(dir / ("f" + std::to_string(i)), "x");
  NodeTable t(dir.path(), 16);
  const WireHandle root_handle = t.handle_of(*t.root());

  std::vector<WireHandle> handles;
  std::vector<ino_t> inodes;
  for (int i = 0; i < kFiles; ++i) {
    struct stat st {};
    NodeRef n = lookup(t, t.root(), ("f" + std::to_string(i)).c_str(), &st);
    REQUIRE(n != nullptr);
    handles.push_back(t.handle_of(*n));
    inodes.push_back(n->ino);
    CHECK(t.size() <= 17);
  }
  CHECK(t.size() <= 17);

  int live = 0, stale = 0;
  for (int i = 0; i < kFiles; ++i) {
    int err = kBadHandle;
    NodeRef n = resolve(t, handles[i], &err);
    if (n != nullptr) {
      CHECK(err == 0);
      CHECK(n->ino == inodes[i]);  // never another object that took the slot
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

TEST_CASE("make_writable on a file opened read-only") {
  TempDir dir;
  write_local(dir / "ro", "original");
  REQUIRE(::chmod((dir / "ro").c_str(), 0444) == 0);
  REQUIRE(::mkdir((dir / "sub").c_str(), 0755) == 0);
  NodeTable t(dir.path(), 64);
  struct stat st {};
  NodeRef node_ref = lookup(t, t.root(), "ro", &st);
  REQUIRE(node_ref != nullptr);
  OpenNode node = pin(t, node_ref);
  REQUIRE(node);
  const int fd_number = node.fd();
  const WireHandle h = t.handle_of(*node);
  // Root may open a 0444 file read-write; others get it read-only.
  CHECK(node.writable() == ((::fcntl(node.fd(), F_GETFL) & O_ACCMODE) == O_RDWR));

  Status made = t.make_writable(node);
  bool ok = made.ok();
  int saved = made.errno_value();
  CHECK(node.writable() == ok);
  int mode = ::fcntl(node.fd(), F_GETFL) & O_ACCMODE;
  if (ok) {
    CHECK(mode == O_RDWR);
  } else {
    CHECK(saved == EACCES);
    CHECK(mode == O_RDONLY);
  }
  CHECK(node.fd() == fd_number);
  char buf[8];
  CHECK(::pread(node.fd(), buf, sizeof buf, 0) == 8);  // readable either way

  // Once the mode allows it, make_writable succeeds for anyone, in place.
  REQUIRE(::chmod((dir / "ro").c_str(), 0644) == 0);
  REQUIRE(t.make_writable(node).ok());
  CHECK(node.writable());
  CHECK(node.fd() == fd_number);
  CHECK((::fcntl(node.fd(), F_GETFL) & O_ACCMODE) == O_RDWR);
  CHECK(::pwrite(node.fd(), "CHANGED!", 8, 0) == 8);
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

TEST_CASE("descriptors are a bounded cache: 200 handles work with 8 open files") {
  TempDir dir;
  REQUIRE(::mkdir((dir / "d").c_str(), 0755) == 0);
  REQUIRE(::mkdir((dir / "d/e").c_str(), 0755) == 0);
  NodeTable t(dir.path(), 65536, 8);
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
      int fd = ::openat(p.fd(), name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
      REQUIRE(fd >= 0);
      struct stat created {};
      REQUIRE(::fstat(fd, &created) == 0);
      n = t.adopt(p, name.c_str(), fd, created, true);
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
    REQUIRE(::pwrite(n.fd(), text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()));
    n.reset();
    check_bounded();
  }
  for (int i = kFiles - 1; i >= 0; --i) {
    CAPTURE(i);
    CHECK(read_local(paths[i]) == "file " + std::to_string(i));
    int err = kBadHandle;
    OpenNode n = open_handle(t, handles[i], &err);
    REQUIRE(n);
    CHECK(pread_all(n.fd()) == "file " + std::to_string(i));
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
      REQUIRE(::fstat(held[i].fd(), &by_fd) == 0);  // still open, still this file
      CHECK(by_fd.st_ino == lstat_of(paths[i]).st_ino);
      CHECK(pread_all(held[i].fd()) == "file " + std::to_string(i));
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
  NodeTable t(dir.path(), 65536, 4);
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
    REQUIRE(::renameat(f.fd(), from_name, d.fd(), to_name) == 0);
    struct stat moved {};
    REQUIRE(::fstatat(d.fd(), to_name, &moved, AT_SYMLINK_NOFOLLOW) == 0);
    t.renamed(d, to_name, moved.st_dev, moved.st_ino);
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
  CHECK(pread_all(n.fd()) == "payload");
  CHECK(lstat_of(dir / "b/y").st_ino == x->ino);
  n.reset();

  // Renaming the directory keeps the path below it: the file is found under the new name
  // with both descriptors evicted.
  rename_through_table(t.root(), "b", t.root(), "c");
  n = open_x_evicted(&err);
  REQUIRE(n);
  CHECK(pread_all(n.fd()) == "payload");
  REQUIRE(::pwrite(n.fd(), "PAY", 3, 0) == 3);
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
  CHECK(pread_all(n.fd()) == "PAYload");
}

TEST_CASE("an object removed and replaced behind the table's back is STALE, not the newcomer") {
  TempDir dir;
  write_local(dir / "victim", "old");
  NodeTable t(dir.path(), 65536, 4);
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
  INFO("inode number reused: ", lstat_of(dir / "victim").st_ino == v->ino);
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
  CHECK(pread_all(o.fd()) == "new");
  o.reset();

  // Removed by the server (REMOVE) while its descriptor is evicted: forget_if_unlinked
  // believes the caller's link count.
  churn(t, fillers);
  REQUIRE(::unlink((dir / "victim").c_str()) == 0);
  CHECK(t.forget_if_unlinked(n->dev, n->ino, 0) == n->id);
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
  NodeTable t(dir.path(), 65536, 6);
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
        ssize_t got = ::pread(n.fd(), buf, sizeof buf, 0);
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
