// The store seam (server/store.h): one conformance suite run against both stores, the
// local POSIX one on a temporary directory and the CephFS one on a real one-node cluster
// (tests/support/ceph_cluster.h; skipped, naming the reason, where Ceph cannot run). What
// FileService's procedures will ask of a store: names, bytes, attributes, listings that
// resume, identity by ObjectId, permissions checked as the caller.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "rpc/message_header.h"
#include "rpc/server.h"
#include "server/store.h"
#include "server/store_impl/posix_store.h"
#include "tests/support/ceph_cluster.h"
#include "tests/support/server_process.h"

#if ODAFS_HAVE_CEPHFS
#include "server/store_impl/ceph_store.h"
#endif

namespace {

using odafs::Result;
using odafs::Status;
using odafs::server::AttrChange;
using odafs::server::CallerScope;
using odafs::server::DirVisitor;
using odafs::server::Object;
using odafs::server::Store;
using odafs::server::StoreDirEntry;
using odafs::test::cluster;

template <class T>
T must(Result<T> r, const char* what) {
  INFO(std::string(what) << ": " << r.status().to_string());
  REQUIRE(r.ok());
  return std::move(r).value();
}

void must(const Status& s, const char* what) {
  INFO(std::string(what) << ": " << s.to_string());
  REQUIRE(s.ok());
}

// A fresh directory `name` in the store's root, held.
Object fresh_dir(Store& store, const std::string& name) {
  Object root = must(store.root(), "root");
  must(store.mkdir(root, name.c_str(), 0777), "mkdir");
  struct stat st;
  return must(store.lookup(root, name.c_str(), &st), "lookup of the new directory");
}

struct Names final : DirVisitor {
  std::vector<std::string> names;
  std::vector<mode_t> types;
  size_t stop_after = SIZE_MAX;
  uint64_t resume = 0;
  bool visit(const StoreDirEntry& e) override {
    if (names.size() == stop_after) return false;
    names.emplace_back(e.name);
    types.push_back(e.type);
    resume = e.next_cookie;
    return true;
  }
};

odafs::rpc::CallerCred user(uint32_t uid, uint32_t gid) {
  odafs::rpc::CallerCred c;
  c.auth_sys = true;
  c.uid = uid;
  c.gid = gid;
  c.ngids = 1;
  c.gids[0] = gid;
  return c;
}

// ---- the conformance suite: every check runs on each store ----

// File "f", made in dir d with mode, opened to write; *st its attributes.
Object new_file(Store& store, const Object& d, mode_t mode, struct stat* st) {
  bool created = false;
  bool writable = false;
  Object f = must(store.create(d, "f", mode, true, st, &created, &writable), "create");
  CHECK(created);
  CHECK(writable);
  return f;
}

void names_and_bytes(Store& store, const std::string& top) {
  Object d = fresh_dir(store, top);
  struct stat st;
  bool created = false;
  bool writable = false;
  Object f = new_file(store, d, 0640, &st);
  CHECK(S_ISREG(st.st_mode));
  CHECK((st.st_mode & 07777) == 0640);  // no umask
  CHECK(must(store.write(f, "hello, store", 12, 0), "write") == 12);
  must(store.sync(f, false), "sync");
  char buf[32] = {};
  CHECK(must(store.read(f, buf, sizeof buf, 0), "read") == 12);  // fewer only at the end
  CHECK(std::string(buf, 12) == "hello, store");
  CHECK(must(store.read(f, buf, 4, 7), "read at 7") == 4);
  CHECK(std::string(buf, 4) == "stor");

  // Exclusive on an existing name refuses; unchecked opens the same file.
  CHECK(store.create(d, "f", 0600, true, &st, &created, &writable).errno_value() == EEXIST);
  Object again = must(store.create(d, "f", 0600, false, &st, &created, &writable), "reopen");
  CHECK(!created);
  CHECK(st.st_size == 12);
  CHECK((st.st_mode & 07777) == 0640);  // the existing file's mode stays

  must(store.truncate(again, 5), "truncate");
  must(store.stat_at(d, "f", &st), "stat_at");
  CHECK(st.st_size == 5);
  CHECK(store.stat_at(d, "nothing", &st).errno_value() == ENOENT);

  // A symlink is itself to lookup, and never followed by the store.
  must(store.symlink(d, "l", "f"), "symlink");
  Object l = must(store.lookup(d, "l", &st), "lookup symlink");
  CHECK(S_ISLNK(st.st_mode));
  char target[16];
  CHECK(must(store.readlink(l, target, sizeof target), "readlink") == 1);
  CHECK(target[0] == 'f');
  CHECK(store.create(d, "l", 0600, false, &st, &created, &writable).errno_value() == EEXIST);
  AttrChange chmod_link;
  chmod_link.set_mode = true;
  chmod_link.mode = 0600;
  CHECK(store.set_attributes(l, chmod_link).errno_value() == EOPNOTSUPP);

  // Hard links, rename, removal.
  must(store.link(f, d, "g"), "link");
  must(store.stat(f, &st), "stat");
  CHECK(st.st_nlink == 2);
  must(store.rename(d, "g", d, "h"), "rename");
  must(store.rename(d, "f", d, "h"), "rename onto another link of the same file");
  must(store.stat_at(d, "f", &st), "both links stay");
  CHECK(store.stat_at(d, "g", &st).errno_value() == ENOENT);
  must(store.stat_at(d, "h", &st), "stat_at renamed");
  const ino_t h_ino = st.st_ino;
  must(store.stat_at(d, "f", &st), "stat_at f");
  CHECK(st.st_ino == h_ino);  // one object, two names

  // A FIFO: made, listed, and no file to create over it.
  must(store.mknod(d, "p", S_IFIFO | 0644, 0), "mknod fifo");
  must(store.stat_at(d, "p", &st), "stat fifo");
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(store.create(d, "p", 0600, false, &st, &created, &writable).errno_value() == EEXIST);

  must(store.mkdir(d, "sub", 0755), "mkdir sub");
  Names all;
  bool eof = false;
  must(store.list(d, 0, all, &eof), "list");
  CHECK(eof);
  std::vector<std::string> sorted = all.names;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::string>{"f", "h", "l", "p", "sub"});
  for (size_t i = 0; i < all.names.size(); ++i) {
    if (all.names[i] == "sub") CHECK(S_ISDIR(all.types[i]));
    if (all.names[i] == "l") CHECK(S_ISLNK(all.types[i]));
    if (all.names[i] == "p") CHECK(S_ISFIFO(all.types[i]));
  }

  // Attributes: mode and times.
  AttrChange change;
  change.set_mode = true;
  change.mode = 0604;
  change.set_times = true;
  change.times[0] = {1000000000, 0};
  change.times[1] = {1000000001, 5};
  must(store.set_attributes(f, change), "set_attributes");
  must(store.stat(f, &st), "stat after set");
  CHECK((st.st_mode & 07777) == 0604);
  CHECK(st.st_mtim.tv_sec == 1000000001);
  CHECK(st.st_atim.tv_sec == 1000000000);

  struct statvfs vfs;
  must(store.statfs(d, &vfs), "statfs");
  CHECK(vfs.f_bsize > 0);  // (a cluster just started may not count its blocks yet)
  CHECK(vfs.f_namemax > 0);

  // A directory that is not empty stays; an empty one goes.
  Object sub_dir = must(store.lookup(d, "sub", &st), "lookup sub");
  must(store.mknod(sub_dir, "q", S_IFIFO | 0600, 0), "mknod in sub");
  CHECK(store.remove(d, "sub", true).errno_value() == ENOTEMPTY);
  CHECK(store.rename(d, "sub", d, "sub").ok());  // onto itself: nothing happens
  CHECK(store.stat_at(d, "sub", &st).ok());
  CHECK(store.stat_at(sub_dir, "q", &st).ok());
  must(store.remove(sub_dir, "q", false), "unlink fifo");
  must(store.remove(d, "sub", true), "rmdir");
  for (const char* n : {"f", "h", "l", "p"}) must(store.remove(d, n, false), n);
  Names none;
  must(store.list(d, 0, none, &eof), "list empty");
  CHECK(none.names.empty());
  CHECK(eof);
}

void listing_resumes(Store& store, const std::string& top) {
  Object d = fresh_dir(store, top);
  std::set<std::string> made;
  for (int i = 0; i < 60; ++i) {
    const std::string name = "entry-" + std::to_string(i);
    must(store.mknod(d, name.c_str(), S_IFIFO | 0600, 0), "mknod");
    made.insert(name);
  }
  // Seven at a time, each listing resumed at the cookie of the last entry taken.
  std::multiset<std::string> seen;
  uint64_t cookie = 0;
  bool eof = false;
  for (int round = 0; round < 100 && !eof; ++round) {
    Names some;
    some.stop_after = 7;
    must(store.list(d, cookie, some, &eof), "list part");
    seen.insert(some.names.begin(), some.names.end());
    if (!some.names.empty()) cookie = some.resume;
  }
  CHECK(eof);
  CHECK(seen.size() == made.size());  // every one once, none twice
  CHECK(std::set<std::string>(seen.begin(), seen.end()) == made);
}

void acts_as_the_caller(Store& store, const std::string& top) {
  Object d = fresh_dir(store, top);
  AttrChange open_dir;
  open_dir.set_mode = true;
  open_dir.mode = 0777;
  must(store.set_attributes(d, open_dir), "chmod 0777");
  must(store.mkdir(d, "private", 0700), "mkdir private");
  struct stat st;
  bool created = false;
  bool writable = false;
  Object secret = must(store.create(d, "secret", 0600, true, &st, &created, &writable), "secret");
  must(store.write(secret, "root's", 6, 0), "write secret");
  CHECK(store.access(secret, R_OK | W_OK) == (R_OK | W_OK));  // as the server

  const odafs::rpc::CallerCred alice = user(4242, 4242);
  {
    CallerScope as(store, &alice, true);
    Object priv = must(store.lookup(d, "private", &st), "lookup private");  // d is 0777
    CHECK(store.stat_at(priv, "x", &st).errno_value() == EACCES);           // no search permission
    CHECK(store.mkdir(priv, "x", 0700).errno_value() == EACCES);
    Object root_file = must(store.lookup(d, "secret", &st), "lookup secret");
    CHECK(store.open(root_file, O_RDONLY).errno_value() == EACCES);
    CHECK(store.access(root_file, R_OK | W_OK) == 0);
    Object mine = must(store.create(d, "alice", 0600, true, &st, &created, &writable), "create");
    CHECK(st.st_uid == 4242u);
    CHECK(st.st_gid == 4242u);
    CHECK(store.access(mine, R_OK | W_OK | X_OK) == (R_OK | W_OK));
    // The existing file of another, not writable by her: opened read-only... or not at all.
    CHECK(store.create(d, "secret", 0600, false, &st, &created, &writable).errno_value() == EACCES);
    AttrChange chown_to_root;
    chown_to_root.set_owner = true;
    chown_to_root.uid = 0;
    CHECK(store.set_attributes(mine, chown_to_root).errno_value() == EPERM);
  }
  // The scope is over: the server again.
  must(store.stat_at(d, "alice", &st), "stat as the server");
  Object priv = must(store.lookup(d, "private", &st), "lookup private as the server");
  must(store.mkdir(priv, "x", 0700), "mkdir as the server");

  const odafs::rpc::CallerCred nobody{};  // AUTH_NONE
  CHECK(CallerScope(store, &nobody, true).refused() == AUTH_TOOWEAK);
}

void find_by_identity(Store& store, const std::string& top, bool finds) {
  Object d = fresh_dir(store, top);
  struct stat st;
  bool created = false;
  bool writable = false;
  Object f = must(store.create(d, "f", 0644, true, &st, &created, &writable), "create");
  must(store.write(f, "found", 5, 0), "write");
  const odafs::server::ObjectId id = store.id_of(st);
  struct stat again;
  Store::Access access;
  Result<Object> found = store.find(id, &again, &access);
  CHECK(store.finds_by_id() == finds);
  if (!finds) {
    CHECK(found.errno_value() == ENOTSUP);
    return;
  }
  Object same = must(std::move(found), "find");
  CHECK(again.st_ino == st.st_ino);
  CHECK(store.id_of(again) == id);
  CHECK(access.readable);
  char buf[8];
  CHECK(must(store.read(same, buf, sizeof buf, 0), "read found") == 5);
  // Writable in place when it was opened for reading only (CephFS opens so).
  must(store.reopen_in_place(same, true, &access), "reopen in place");
  CHECK(access.writable);
  CHECK(must(store.write(same, "FOUND", 5, 0), "write found") == 5);
  CHECK(must(store.read(same, buf, sizeof buf, 0), "read again") == 5);
  CHECK(std::string(buf, 5) == "FOUND");
  // Gone: a removed file is no longer found.
  f = Object();
  same = Object();
  must(store.remove(d, "f", false), "unlink");
  CHECK(store.find(id, &again, &access).errno_value() == ESTALE);
}

// Space held for writes to come (a write delegation's space_limit): where the store
// reserves, the blocks are allocated past the end without changing the size, and released
// they are free again with the bytes, size and modification time as they were.
void reserves_space(Store& store, const std::string& top) {
  Object d = fresh_dir(store, top);
  struct stat st;
  Object f = new_file(store, d, 0644, &st);
  CHECK(must(store.write(f, "kept", 4, 0), "write") == 4);
  if (!store.reserves_space()) {
    CHECK(store.reserve_space(f, 4, 1 << 20).errno_value() == EOPNOTSUPP);
    CHECK(store.release_space(f).ok());
    return;
  }
  struct stat before;
  must(store.stat(f, &before), "stat");
  Status reserved = store.reserve_space(f, 4, 1 << 20);
  if (reserved.errno_value() == EOPNOTSUPP) {
    MESSAGE("the file system under the temporary directory has no fallocate: not checked");
    return;
  }
  must(reserved, "reserve_space");
  must(store.stat(f, &st), "stat");
  CHECK(st.st_size == 4);
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 >= (1u << 20));
  must(store.release_space(f), "release_space");
  must(store.stat(f, &st), "stat");
  CHECK(st.st_size == 4);
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 <= 64 * 1024);
  CHECK(st.st_mtim.tv_sec == before.st_mtim.tv_sec);
  CHECK(st.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
  char buf[8] = {};
  CHECK(must(store.read(f, buf, sizeof buf, 0), "read") == 4);
  CHECK(std::string(buf, 4) == "kept");
  must(store.release_space(f), "release_space with nothing reserved");
}

bool is_root() { return geteuid() == 0; }

}  // namespace

TEST_CASE("posix store: names, bytes, attributes, listings, identity") {
  odafs::test::TempDir dir;
  auto store = must(odafs::server::PosixStore::open_export(dir.path()), "open_export");
  names_and_bytes(*store, "names");
  listing_resumes(*store, "listing");
  find_by_identity(*store, "find", false);
  reserves_space(*store, "space");
  CHECK(odafs::server::PosixStore::open_export(dir.path() + "/none").errno_value() == ENOENT);
}

TEST_CASE("posix store: acts as the caller" * doctest::skip(!is_root()) *
          doctest::description("needs root: the POSIX store acts as callers with setfsuid")) {
  odafs::test::TempDir dir;
  chmod(dir.path().c_str(), 0755);
  auto store = must(odafs::server::PosixStore::open_export(dir.path()), "open_export");
  acts_as_the_caller(*store, "caller");
}

#if ODAFS_HAVE_CEPHFS

namespace {

// A top directory of its own in the shared cluster, for one run of the suite.
std::string unique_top(const char* what) {
  return std::string(what) + "-" + std::to_string(getpid());
}

bool no_cluster() { return !cluster().why_not.empty(); }
const char* skip_reason() { return no_cluster() ? cluster().why_not.c_str() : ""; }

std::unique_ptr<odafs::server::CephStore> ceph_store() {
  odafs::server::CephStore::Options options;
  options.conf = cluster().conf;
  return must(odafs::server::CephStore::connect(options), "connect");
}

}  // namespace

TEST_CASE("cephfs store: names, bytes, attributes, listings, identity" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto store = ceph_store();
  names_and_bytes(*store, unique_top("names"));
  listing_resumes(*store, unique_top("listing"));
  find_by_identity(*store, unique_top("find"), true);
  reserves_space(*store, unique_top("space"));       // it cannot: EOPNOTSUPP
  acts_as_the_caller(*store, unique_top("caller"));  // UserPerm: no privilege needed
}

TEST_CASE("cephfs store: two gateways see one namespace and find each other's objects" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto a = ceph_store();
  auto b = ceph_store();
  const std::string top = unique_top("shared");
  Object da = fresh_dir(*a, top);
  struct stat st;
  bool created = false;
  bool writable = false;
  Object fa = must(a->create(da, "f", 0644, true, &st, &created, &writable), "create on a");
  must(a->write(fa, "through a", 9, 0), "write on a");
  must(a->sync(fa, false), "sync on a");
  fa = Object();  // closed: b's read sees what a wrote

  // b reaches the file by the identity a's stat gave: what a portable handle carries.
  Store::Access access;
  Object readable = must(b->find(a->id_of(st), &st, &access), "find on b");
  char buf[16] = {};
  CHECK(must(b->read(readable, buf, sizeof buf, 0), "read on b") == 9);
  CHECK(std::string(buf, 9) == "through a");

  // And by name.
  Object root_b = must(b->root(), "root on b");
  Object db = must(b->lookup(root_b, top.c_str(), &st), "lookup dir on b");
  must(b->stat_at(db, "f", &st), "stat_at on b");
  CHECK(st.st_size == 9);
}
#else
TEST_CASE("cephfs store" * doctest::skip(true) *
          doctest::description("needs libcephfs-dev (bash scripts/deps.sh libcephfs-dev), "
                               "not found at build")) {}
#endif
