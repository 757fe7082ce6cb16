// Integration: no procedure reaches outside the export. The export sits beside a sentinel
// directory; the export holds symlinks into the sentinel (absolute, "../..", a chain).
// Every namespace procedure (LOOKUP, CREATE, MKDIR, SYMLINK, REMOVE, RMDIR, RENAME on both
// sides, READDIR, READLINK, SETATTR, GETATTR, and MOUNT), and the data procedures on those
// symlinks, get hostile names ("..", ".", absolute, with '/', with NUL, empty, over-long)
// and forged, stale and other-boot handles, as raw RPC (the client library refuses most of
// this itself). Afterwards nothing in the sentinel was read, created, changed or removed
// (its times are set to the past first, so that even a read would show as a new atime), and
// nothing appeared next to the export.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "proto/odafs_prot.h"
#include "rpc/client_channel.h"
#include "rpc/xdr_util.h"
#include "tests/support/server_process.h"

namespace fsys = std::filesystem;
using odafs::Client;
using odafs::Handle;
using odafs::rpc::RpcError;
using odafs::rpc::to_xdrproc;
using odafs::test::errno_of;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

// Argument bytes built by hand, so that a name may hold anything.
struct Args {
  std::string b;
  Args& fh(const Handle& h) {
    b.append(reinterpret_cast<const char*>(h.data()), h.size());
    return *this;
  }
  Args& u32(uint32_t v) {
    v = htonl(v);
    b.append(reinterpret_cast<const char*>(&v), 4);
    return *this;
  }
  Args& u64(uint64_t v) {
    return u32(static_cast<uint32_t>(v >> 32)).u32(static_cast<uint32_t>(v));
  }
  Args& str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    b += s;
    b.append((4 - s.size() % 4) % 4, '\0');
    return *this;
  }
};

bool_t xdr_args_bytes(XDR* x, Args* a) {
  return xdr_opaque(x, a->b.data(), static_cast<u_int>(a->b.size()));
}

constexpr int kGarbage = -1;  // the server answered GARBAGE_ARGS

// Raw calls on one connection. Each returns the reply's status (or kGarbage).
class Raw {
 public:
  explicit Raw(uint16_t port) : ch_({"127.0.0.1", port}, options()) {}

  int lookup(const Handle& dir, const std::string& name, Handle* fh = nullptr,
             odafs_fattr* attr = nullptr) {
    return dirop(ODAFSPROC_LOOKUP, Args().fh(dir).str(name), fh, attr);
  }
  int create(const Handle& dir, const std::string& name, uint32_t how = ODAFS_CREATE_GUARDED) {
    return dirop(ODAFSPROC_CREATE, Args().fh(dir).str(name).u32(0644).u32(how));
  }
  int mkdir(const Handle& dir, const std::string& name) {
    return dirop(ODAFSPROC_MKDIR, Args().fh(dir).str(name).u32(0755));
  }
  int symlink(const Handle& dir, const std::string& name, const std::string& target) {
    return dirop(ODAFSPROC_SYMLINK, Args().fh(dir).str(name).str(target));
  }
  int remove(const Handle& dir, const std::string& name) {
    return bare(ODAFSPROC_REMOVE, Args().fh(dir).str(name));
  }
  int rmdir(const Handle& dir, const std::string& name) {
    return bare(ODAFSPROC_RMDIR, Args().fh(dir).str(name));
  }
  int rename(const Handle& from, const std::string& from_name, const Handle& to,
             const std::string& to_name) {
    return bare(ODAFSPROC_RENAME, Args().fh(from).str(from_name).fh(to).str(to_name));
  }
  int readdir(const Handle& dir, std::set<std::string>* names = nullptr) {
    readdir_res res{};
    int st = call(ODAFSPROC_READDIR, Args().fh(dir).u64(0).u32(64 * 1024),
                  to_xdrproc(xdr_readdir_res), &res);
    if (st == ODAFS_OK && names != nullptr) {
      for (u_int i = 0; i < res.readdir_res_u.ok.entries.entries_len; ++i) {
        names->insert(res.readdir_res_u.ok.entries.entries_val[i].name);
      }
    }
    xdr_free(to_xdrproc(xdr_readdir_res), reinterpret_cast<char*>(&res));
    return st;
  }
  int readlink(const Handle& fh, std::string* target = nullptr) {
    readlink_res res{};
    int st = call(ODAFSPROC_READLINK, Args().fh(fh), to_xdrproc(xdr_readlink_res), &res);
    if (st == ODAFS_OK && target != nullptr) *target = res.readlink_res_u.target;
    xdr_free(to_xdrproc(xdr_readlink_res), reinterpret_cast<char*>(&res));
    return st;
  }
  int getattr(const Handle& fh, odafs_fattr* attr = nullptr) {
    attr_res res{};
    int st = call(ODAFSPROC_GETATTR, Args().fh(fh), to_xdrproc(xdr_attr_res), &res);
    if (st == ODAFS_OK && attr != nullptr) *attr = res.attr_res_u.attr;
    return st;
  }
  enum class Set { kMode, kSize, kServerTimes, kClientTimes };
  int setattr(const Handle& fh, Set what) {
    Args a;
    a.fh(fh);
    if (what == Set::kMode)
      a.u32(1).u32(0777);
    else
      a.u32(0);
    if (what == Set::kSize)
      a.u32(1).u64(0);
    else
      a.u32(0);
    for (int i = 0; i < 2; ++i) {
      if (what == Set::kServerTimes) {
        a.u32(ODAFS_TIME_SERVER);
      } else if (what == Set::kClientTimes) {
        a.u32(ODAFS_TIME_CLIENT).u64(1700000000).u32(0);
      } else {
        a.u32(ODAFS_TIME_DONT_CHANGE);
      }
    }
    attr_res res{};
    return call(ODAFSPROC_SETATTR, a, to_xdrproc(xdr_attr_res), &res);
  }
  int read(const Handle& fh) {
    read_res res{};
    int st =
        call(ODAFSPROC_READ, Args().fh(fh).u64(0).u32(4096).u64(0), to_xdrproc(xdr_read_res), &res);
    xdr_free(to_xdrproc(xdr_read_res), reinterpret_cast<char*>(&res));
    return st;
  }
  int write(const Handle& fh) {
    write_res res{};
    return call(ODAFSPROC_WRITE, Args().fh(fh).u64(0).u32(ODAFS_FILE_SYNC).str("pwned"),
                to_xdrproc(xdr_write_res), &res);
  }
  int commit(const Handle& fh) {
    commit_res res{};
    return call(ODAFSPROC_COMMIT, Args().fh(fh).u64(0).u32(0), to_xdrproc(xdr_commit_res), &res);
  }
  int getrefs(const Handle& fh) {
    getrefs_res res{};
    int st = call(ODAFSPROC_GETREFS, Args().fh(fh).u64(0).u32(4096).u64(1),
                  to_xdrproc(xdr_getrefs_res), &res);
    xdr_free(to_xdrproc(xdr_getrefs_res), reinterpret_cast<char*>(&res));
    return st;
  }
  int read_direct(const Handle& fh) {
    read_direct_res res{};
    return call(ODAFSPROC_READ_DIRECT, Args().fh(fh).u64(0).u32(4096).u64(1).u32(1).u32(0).u32(7),
                to_xdrproc(xdr_read_direct_res), &res);
  }
  int write_direct(const Handle& fh) {
    write_res res{};
    return call(ODAFSPROC_WRITE_DIRECT,
                Args().fh(fh).u64(0).u32(ODAFS_FILE_SYNC).u32(5).u64(1).u32(1).u32(0).u32(7),
                to_xdrproc(xdr_write_res), &res);
  }
  int fsstat(const Handle& fh) {
    fsstat_res res{};
    return call(ODAFSPROC_FSSTAT, Args().fh(fh), to_xdrproc(xdr_fsstat_res), &res);
  }
  int mount(const std::string& path, Handle* root = nullptr) {
    mount_res res{};
    int st = call(ODAFSPROC_MOUNT, Args().str(path), to_xdrproc(xdr_mount_res), &res);
    if (st == ODAFS_OK && root != nullptr) std::memcpy(root->data(), res.mount_res_u.ok.root, 40);
    xdr_free(to_xdrproc(xdr_mount_res), reinterpret_cast<char*>(&res));
    return st;
  }

 private:
  static odafs::rpc::Channel::Options options() {
    odafs::rpc::Channel::Options o;
    o.program = ODAFS_PROGRAM;
    o.version = ODAFS_V1;
    o.timeout_ms = 10000;
    return o;
  }
  template <class Res>
  int call(uint32_t proc, Args args, xdrproc_t xres, Res* res) {
    bool_t (*enc)(XDR*, Args*) = xdr_args_bytes;
    try {
      ch_.call(proc, to_xdrproc(enc), &args, xres, res);
    } catch (const RpcError& e) {
      if (e.kind() == RpcError::Kind::kGarbageArgs) return kGarbage;
      throw;
    }
    int status;
    std::memcpy(&status, res, sizeof status);  // every result starts with its status
    return status;
  }
  int dirop(uint32_t proc, Args args, Handle* fh = nullptr, odafs_fattr* attr = nullptr) {
    dirop_res res{};
    int st = call(proc, std::move(args), to_xdrproc(xdr_dirop_res), &res);
    if (st == ODAFS_OK && fh != nullptr) std::memcpy(fh->data(), res.dirop_res_u.ok.fh, 40);
    if (st == ODAFS_OK && attr != nullptr) *attr = res.dirop_res_u.ok.attr;
    return st;
  }
  int bare(uint32_t proc, Args args) {
    stat_res res{};
    return call(proc, std::move(args), to_xdrproc(xdr_stat_res), &res);
  }
  odafs::rpc::Channel ch_;
};

// The paths under dir (and dir itself).
std::vector<std::string> paths_under(const std::string& dir) {
  std::vector<std::string> all = {dir};
  for (auto it = fsys::recursive_directory_iterator(dir); it != fsys::end(it); ++it) {
    all.push_back(it->path());
  }
  return all;
}

// Everything lstat says of each path, and symlink targets, without reading a byte of any
// file or directory (a read would change an atime). An entry created in or removed from a
// directory changes its times, so listing the paths once beforehand is enough.
std::map<std::string, std::string> stat_snapshot(const std::vector<std::string>& paths) {
  std::map<std::string, std::string> snap;
  for (const std::string& p : paths) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) {
      snap[p] = "gone";
      continue;
    }
    std::ostringstream s;
    s << st.st_ino << " " << std::oct << st.st_mode << std::dec << " " << st.st_nlink << " "
      << st.st_size << " " << st.st_atim.tv_sec << "." << st.st_atim.tv_nsec << " "
      << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec << " " << st.st_ctim.tv_sec << "."
      << st.st_ctim.tv_nsec;
    if (S_ISLNK(st.st_mode)) s << " -> " << fsys::read_symlink(p).string();
    snap[p] = s.str();
  }
  return snap;
}

std::map<std::string, std::string> content_snapshot(const std::string& dir) {
  std::map<std::string, std::string> snap;
  for (auto it = fsys::recursive_directory_iterator(dir); it != fsys::end(it); ++it) {
    if (it->is_regular_file() && !it->is_symlink()) snap[it->path()] = read_local(it->path());
  }
  return snap;
}

// Sets atime and mtime of every path to a moment long past: the file system (relatime)
// then updates an atime on any read, so a read shows in stat_snapshot.
void age(std::vector<std::string> paths) {
  timespec past[2] = {{1000000000, 0}, {1000000000, 0}};
  std::sort(paths.rbegin(), paths.rend());  // children before their directories
  for (const std::string& p : paths) {
    REQUIRE(::utimensat(AT_FDCWD, p.c_str(), past, AT_SYMLINK_NOFOLLOW) == 0);
  }
}

// The layout: base/export is exported; base/sentinel must stay untouched.
struct World {
  TempDir base;
  std::string exp = base / "export";
  std::string sentinel = base / "sentinel";
  std::vector<std::string> paths;
  std::map<std::string, std::string> contents, stats, beside;

  World() {
    REQUIRE(::mkdir(exp.c_str(), 0755) == 0);
    REQUIRE(::mkdir(sentinel.c_str(), 0755) == 0);
    REQUIRE(::mkdir((sentinel + "/sub").c_str(), 0755) == 0);
    write_local(sentinel + "/secret", "outside data");
    write_local(sentinel + "/sub/inner", "more outside data");
    // Inside the export: a file, a directory, and symlinks that lead out.
    write_local(exp + "/f", "inside");
    REQUIRE(::mkdir((exp + "/d").c_str(), 0755) == 0);
    REQUIRE(::mkdir((exp + "/d/e").c_str(), 0755) == 0);
    link(sentinel, "abs-dir");                   // absolute, to the sentinel directory
    link(sentinel + "/secret", "abs-file");      // absolute, to a file outside
    link("../sentinel", "rel-dir");              // relative, "..", out of the export
    link("../../sentinel/secret", "d/up-file");  // "../.." from a subdirectory
    link("../../../sentinel", "d/e/up-dir");
    link("chain2", "chain1");  // a chain that ends outside
    link("d/chain3", "chain2");
    link("../../sentinel/sub", "d/chain3");
    link(sentinel + "/created", "dangling");  // outside, not existing yet
    contents = content_snapshot(sentinel);
    paths = paths_under(sentinel);
    age(paths);
    stats = stat_snapshot(paths);
    beside = listing(base.path());
  }
  void link(const std::string& target, const std::string& name) {
    REQUIRE(::symlink(target.c_str(), (exp + "/" + name).c_str()) == 0);
  }
  static std::map<std::string, std::string> listing(const std::string& dir) {
    std::map<std::string, std::string> l;
    for (auto& e : fsys::directory_iterator(dir)) l[e.path().filename()] = "";
    return l;
  }
  // Nothing in the sentinel was read, created, changed or removed; nothing appeared
  // beside the export.
  void check_untouched() {
    auto now = stat_snapshot(paths);
    for (auto& [path, before] : stats) {
      CHECK_MESSAGE(now[path] == before, path);
    }
    CHECK(content_snapshot(sentinel) == contents);  // reads: last
    CHECK(listing(base.path()) == beside);
  }
};

const char kNul[] = "f\0/../../sentinel";

// Names no procedure may take as a new or existing entry's name.
std::vector<std::string> hostile_names(const World& w) {
  return {"..",
          ".",
          "",
          "/",
          w.sentinel,
          w.sentinel + "/secret",
          "../sentinel",
          "../sentinel/secret",
          "d/../../sentinel",
          "abs-dir/secret",
          "chain1/inner",
          std::string(kNul, sizeof kNul - 1),
          std::string("\0", 1),
          std::string("new\0", 4)};
}

}  // namespace

TEST_CASE("confinement: the sentinel check sees a read, a create and a change") {
  World w;
  CHECK(stat_snapshot(w.paths) == w.stats);
  read_local(w.sentinel + "/sub/inner");
  if (stat_snapshot(w.paths) == w.stats) {
    // A noatime mount: reads leave no trace, the other checks still hold.
    MESSAGE("reads do not change atimes on " << w.base.path() << ": reads go unseen");
  }
  World w2;
  write_local(w2.sentinel + "/sub/new", "x");
  CHECK(stat_snapshot(w2.paths) != w2.stats);
  World w3;
  REQUIRE(::chmod((w3.sentinel + "/secret").c_str(), 0600) == 0);
  CHECK(stat_snapshot(w3.paths) != w3.stats);
}

TEST_CASE("confinement: hostile names in every namespace procedure") {
  World w;
  ServerProcess server(w.exp);
  auto fs = Client::mount(server.url());
  Raw raw(server.port());
  const Handle root = fs->root();
  Handle d, f;
  REQUIRE(raw.lookup(root, "d", &d) == ODAFS_OK);
  REQUIRE(raw.lookup(root, "f", &f) == ODAFS_OK);
  const std::string long_name(ODAFS_MAXNAMLEN + 1, 'n');

  SUBCASE("LOOKUP") {
    Handle h;
    // "." is the directory, ".." its parent, and ".." of the export root the root itself.
    CHECK(raw.lookup(root, ".", &h) == ODAFS_OK);
    CHECK(h == root);
    CHECK(raw.lookup(root, "..", &h) == ODAFS_OK);
    CHECK(h == root);
    CHECK(raw.lookup(d, "..", &h) == ODAFS_OK);
    CHECK(h == root);
    Handle e;
    REQUIRE(raw.lookup(d, "e", &e) == ODAFS_OK);
    CHECK(raw.lookup(e, "..", &h) == ODAFS_OK);
    CHECK(h == d);
    for (const std::string& name : hostile_names(w)) {
      if (name == "." || name == "..") continue;
      CAPTURE(name);
      CHECK(raw.lookup(root, name) == ODAFS_ERR_INVAL);
    }
    CHECK(raw.lookup(root, long_name) == kGarbage);
    CHECK(raw.lookup(root, "secret") == ODAFS_ERR_NOENT);
  }
  SUBCASE("CREATE") {
    for (const std::string& name : hostile_names(w)) {
      CAPTURE(name);
      for (uint32_t how : {ODAFS_CREATE_UNCHECKED, ODAFS_CREATE_GUARDED, ODAFS_CREATE_EXCLUSIVE}) {
        CHECK(raw.create(root, name, how) == ODAFS_ERR_INVAL);
        CHECK(raw.create(d, name, how) == ODAFS_ERR_INVAL);
      }
    }
    CHECK(raw.create(root, long_name) == kGarbage);
  }
  SUBCASE("MKDIR") {
    for (const std::string& name : hostile_names(w)) {
      CAPTURE(name);
      CHECK(raw.mkdir(root, name) == ODAFS_ERR_INVAL);
      CHECK(raw.mkdir(d, name) == ODAFS_ERR_INVAL);
    }
    CHECK(raw.mkdir(root, long_name) == kGarbage);
  }
  SUBCASE("SYMLINK") {
    for (const std::string& name : hostile_names(w)) {
      CAPTURE(name);
      CHECK(raw.symlink(root, name, "target") == ODAFS_ERR_INVAL);
    }
    CHECK(raw.symlink(root, long_name, "target") == kGarbage);
    // A target holding a NUL byte, an empty one, and one over 4096 bytes.
    CHECK(raw.symlink(root, "l1", std::string("x\0/../..", 8)) == ODAFS_ERR_INVAL);
    CHECK(raw.symlink(root, "l2", "") == ODAFS_ERR_INVAL);
    CHECK(raw.symlink(root, "l3", std::string(ODAFS_MAXPATHLEN + 1, 'x')) == kGarbage);
    // Targets that lead out are stored as given and never followed by the server.
    Handle l;
    CHECK(raw.symlink(root, "l4", w.sentinel + "/secret") == ODAFS_OK);
    CHECK(raw.symlink(root, "l5", "../sentinel/secret") == ODAFS_OK);
    REQUIRE(raw.lookup(root, "l4", &l) == ODAFS_OK);
    CHECK(raw.read(l) == ODAFS_ERR_INVAL);
    CHECK(raw.write(l) == ODAFS_ERR_INVAL);
    std::string target;
    CHECK(raw.readlink(l, &target) == ODAFS_OK);
    CHECK(target == w.sentinel + "/secret");
    CHECK(fsys::is_symlink(w.exp + "/l4"));
  }
  SUBCASE("REMOVE and RMDIR") {
    for (const std::string& name : hostile_names(w)) {
      CAPTURE(name);
      CHECK(raw.remove(root, name) == ODAFS_ERR_INVAL);
      CHECK(raw.rmdir(root, name) == ODAFS_ERR_INVAL);
      CHECK(raw.rmdir(d, name) == ODAFS_ERR_INVAL);
    }
    CHECK(raw.remove(root, long_name) == kGarbage);
    CHECK(raw.rmdir(root, long_name) == kGarbage);
    // A symlink to a directory outside is not a directory: RMDIR refuses it, REMOVE
    // removes the link and never its target.
    CHECK(raw.rmdir(root, "abs-dir") == ODAFS_ERR_NOTDIR);
    CHECK(raw.rmdir(root, "rel-dir") == ODAFS_ERR_NOTDIR);
    CHECK(raw.rmdir(root, "chain1") == ODAFS_ERR_NOTDIR);
    CHECK(raw.remove(root, "abs-file") == ODAFS_OK);
    CHECK(raw.remove(root, "abs-dir") == ODAFS_OK);
    CHECK(raw.remove(d, "up-file") == ODAFS_OK);
    CHECK(raw.remove(root, "chain1") == ODAFS_OK);
    CHECK_FALSE(fsys::exists(fsys::symlink_status(w.exp + "/abs-file")));
  }
  SUBCASE("RENAME, either side") {
    for (const std::string& name : hostile_names(w)) {
      CAPTURE(name);
      CHECK(raw.rename(root, name, root, "g") == ODAFS_ERR_INVAL);
      CHECK(raw.rename(root, "f", root, name) == ODAFS_ERR_INVAL);
      CHECK(raw.rename(root, "f", d, name) == ODAFS_ERR_INVAL);
      CHECK(raw.rename(d, name, root, "g") == ODAFS_ERR_INVAL);
    }
    CHECK(raw.rename(root, long_name, root, "g") == kGarbage);
    CHECK(raw.rename(root, "f", root, long_name) == kGarbage);
    // A link is moved, or replaced, as itself.
    CHECK(raw.rename(root, "abs-dir", d, "moved-link") == ODAFS_OK);
    CHECK(fsys::is_symlink(w.exp + "/d/moved-link"));
    CHECK(raw.rename(root, "f", root, "rel-dir") == ODAFS_OK);
    CHECK(read_local(w.exp + "/rel-dir") == "inside");
    CHECK(raw.rename(root, "rel-dir", root, "f") == ODAFS_OK);
    // A directory cannot go beneath itself.
    CHECK(raw.rename(root, "d", d, "loop") == ODAFS_ERR_INVAL);
  }
  SUBCASE("READDIR lists the export only") {
    std::set<std::string> names;
    CHECK(raw.readdir(root, &names) == ODAFS_OK);
    CHECK(names == std::set<std::string>{"f", "d", "abs-dir", "abs-file", "rel-dir", "chain1",
                                         "chain2", "dangling"});
    names.clear();
    CHECK(raw.readdir(d, &names) == ODAFS_OK);
    CHECK(names == std::set<std::string>{"e", "up-file", "chain3"});
  }
  SUBCASE("MOUNT paths stay inside") {
    Handle h;
    CHECK(raw.mount("/", &h) == ODAFS_OK);
    CHECK(h == root);
    CHECK(raw.mount("/d/..", &h) == ODAFS_ERR_INVAL);
    CHECK(raw.mount("..") == ODAFS_ERR_INVAL);
    CHECK(raw.mount("/../sentinel") == ODAFS_ERR_INVAL);
    CHECK(raw.mount(w.sentinel) == ODAFS_ERR_NOENT);   // an absolute path is inside the export
    CHECK(raw.mount("/abs-dir") == ODAFS_ERR_NOTDIR);  // a symlink is not followed
    CHECK(raw.mount("/rel-dir/sub") == ODAFS_ERR_NOTDIR);
    CHECK(raw.mount("/chain1") == ODAFS_ERR_NOTDIR);
    CHECK(raw.mount("/d/e/up-dir") == ODAFS_ERR_NOTDIR);
    CHECK(raw.mount(std::string("/d\0/../..", 9)) == ODAFS_ERR_INVAL);
    CHECK(raw.mount("") == ODAFS_ERR_INVAL);
    CHECK(raw.mount(std::string(ODAFS_MAXPATHLEN + 1, 'a')) == kGarbage);
  }
  SUBCASE("the client library refuses a NUL inside a name or path") {
    CHECK(errno_of([&] { fs->open(std::string("f\0x", 3)); }) == EINVAL);
    CHECK(errno_of([&] { fs->mkdir(std::string("/new\0", 5)); }) == EINVAL);
    CHECK(errno_of([&] { fs->symlink(std::string("a\0b", 3), "/l"); }) == EINVAL);
    CHECK(errno_of([&] { fs->lookup(root, std::string("f\0", 2)); }) == EINVAL);
  }
  w.check_untouched();
  CHECK(server.running());
}

TEST_CASE("confinement: symlinks that lead out are objects, never ways out") {
  World w;
  ServerProcess server(w.exp);
  auto fs = Client::mount(server.url());
  Raw raw(server.port());
  const Handle root = fs->root();
  std::vector<std::pair<std::string, Handle>> links;
  for (const char* path : {"abs-dir", "abs-file", "rel-dir", "chain1", "chain2", "dangling"}) {
    Handle h;
    odafs_fattr a{};
    REQUIRE(raw.lookup(root, path, &h, &a) == ODAFS_OK);
    CHECK(a.type == ODAFS_LNK);  // the link itself, whatever it points at
    links.emplace_back(path, h);
  }
  Handle d, up_file, chain3, e, up_dir;
  REQUIRE(raw.lookup(root, "d", &d) == ODAFS_OK);
  REQUIRE(raw.lookup(d, "up-file", &up_file) == ODAFS_OK);
  REQUIRE(raw.lookup(d, "chain3", &chain3) == ODAFS_OK);
  REQUIRE(raw.lookup(d, "e", &e) == ODAFS_OK);
  REQUIRE(raw.lookup(e, "up-dir", &up_dir) == ODAFS_OK);
  links.emplace_back("d/up-file", up_file);
  links.emplace_back("d/chain3", chain3);
  links.emplace_back("d/e/up-dir", up_dir);
  struct stat secret;
  REQUIRE(::lstat((w.sentinel + "/secret").c_str(), &secret) == 0);

  for (const auto& [path, h] : links) {
    CAPTURE(path);
    // As a directory: every directory procedure refuses it.
    CHECK(raw.lookup(h, "secret") == ODAFS_ERR_NOTDIR);
    CHECK(raw.lookup(h, "..") == ODAFS_ERR_NOTDIR);
    CHECK(raw.create(h, "new") == ODAFS_ERR_NOTDIR);
    CHECK(raw.create(h, "secret", ODAFS_CREATE_UNCHECKED) == ODAFS_ERR_NOTDIR);
    CHECK(raw.mkdir(h, "new") == ODAFS_ERR_NOTDIR);
    CHECK(raw.symlink(h, "new", "x") == ODAFS_ERR_NOTDIR);
    CHECK(raw.remove(h, "secret") == ODAFS_ERR_NOTDIR);
    CHECK(raw.rmdir(h, "sub") == ODAFS_ERR_NOTDIR);
    CHECK(raw.rename(h, "secret", root, "stolen") == ODAFS_ERR_NOTDIR);
    CHECK(raw.rename(root, "f", h, "planted") == ODAFS_ERR_NOTDIR);
    CHECK(raw.readdir(h) == ODAFS_ERR_NOTDIR);
    // As a file: no data moves, no attribute of the target changes.
    CHECK(raw.read(h) == ODAFS_ERR_INVAL);
    CHECK(raw.write(h) == ODAFS_ERR_INVAL);
    CHECK(raw.commit(h) == ODAFS_ERR_INVAL);
    CHECK(raw.getrefs(h) == ODAFS_ERR_INVAL);
    CHECK(raw.read_direct(h) == ODAFS_ERR_INVAL);
    CHECK(raw.write_direct(h) == ODAFS_ERR_INVAL);
    CHECK(raw.setattr(h, Raw::Set::kMode) == ODAFS_ERR_NOTSUPP);
    CHECK(raw.setattr(h, Raw::Set::kSize) == ODAFS_ERR_INVAL);
    // Times apply to the link itself (utimensat never follows it).
    CHECK(raw.setattr(h, Raw::Set::kServerTimes) == ODAFS_OK);
    CHECK(raw.setattr(h, Raw::Set::kClientTimes) == ODAFS_OK);
    // GETATTR describes the link, READLINK gives its text.
    odafs_fattr a{};
    CHECK(raw.getattr(h, &a) == ODAFS_OK);
    CHECK(a.type == ODAFS_LNK);
    CHECK(a.fileid != secret.st_ino);
    CHECK(a.size == fsys::read_symlink(w.exp + "/" + path).string().size());
    CHECK(raw.readlink(h) == ODAFS_OK);
    CHECK(raw.fsstat(h) == ODAFS_OK);
  }
  // At a symlink's name, CREATE and MKDIR find something there and do not follow it.
  for (const auto& [path, h] : links) {
    CAPTURE(path);
    size_t slash = path.rfind('/');
    Handle dir = slash == std::string::npos ? root : (path.rfind("d/e/", 0) == 0 ? e : d);
    std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    CHECK(raw.create(dir, name, ODAFS_CREATE_UNCHECKED) == ODAFS_ERR_EXIST);
    CHECK(raw.create(dir, name, ODAFS_CREATE_GUARDED) == ODAFS_ERR_EXIST);
    CHECK(raw.mkdir(dir, name) == ODAFS_ERR_EXIST);
    CHECK(raw.symlink(dir, name, "x") == ODAFS_ERR_EXIST);
  }
  // The client library follows symlinks itself, within the export: none leads out.
  for (const char* path : {"abs-file", "abs-dir/secret", "rel-dir/secret", "chain1/inner",
                           "d/up-file", "d/e/up-dir/secret"}) {
    CAPTURE(path);
    int err = errno_of([&] { fs->open(path); });
    CHECK((err == ENOENT || err == ELOOP));
  }
  CHECK(errno_of([&] { fs->open("dangling", O_CREAT | O_RDWR); }) != 0);
  CHECK(errno_of([&] { fs->mkdir("abs-dir/sub2"); }) == ENOENT);
  w.check_untouched();
}

TEST_CASE("confinement: forged, stale and other-boot handles in every procedure") {
  World w;
  ServerProcess server(w.exp);
  auto fs = Client::mount(server.url());
  Raw raw(server.port());
  const Handle root = fs->root();
  Handle d, f, gone;
  REQUIRE(raw.lookup(root, "d", &d) == ODAFS_OK);
  REQUIRE(raw.lookup(root, "f", &f) == ODAFS_OK);
  REQUIRE(raw.create(root, "gone") == ODAFS_OK);
  REQUIRE(raw.lookup(root, "gone", &gone) == ODAFS_OK);
  REQUIRE(raw.remove(root, "gone") == ODAFS_OK);

  // A handle naming the sentinel's file: a real handle with its inode put in, MAC unfixed.
  struct stat secret;
  REQUIRE(::lstat((w.sentinel + "/secret").c_str(), &secret) == 0);
  Handle outside = f;
  uint64_t ino = secret.st_ino;
  for (int i = 0; i < 8; ++i) outside[16 + i] = static_cast<uint8_t>(ino >> (56 - 8 * i));
  Handle forged = d;
  forged[39] ^= 0x55;  // the MAC
  Handle other_boot = d;
  other_boot[5] ^= 1;  // the server instance
  Handle zero{};
  Handle slot = d;
  slot[11] ^= 1;  // another node slot, MAC unfixed

  // Every procedure taking a handle, as one function each: the status it answers.
  std::vector<std::pair<const char*, std::function<int(const Handle&)>>> procs = {
      {"GETATTR", [&](const Handle& h) { return raw.getattr(h); }},
      {"SETATTR mode", [&](const Handle& h) { return raw.setattr(h, Raw::Set::kMode); }},
      {"SETATTR size", [&](const Handle& h) { return raw.setattr(h, Raw::Set::kSize); }},
      {"SETATTR times", [&](const Handle& h) { return raw.setattr(h, Raw::Set::kServerTimes); }},
      {"LOOKUP", [&](const Handle& h) { return raw.lookup(h, "secret"); }},
      {"LOOKUP ..", [&](const Handle& h) { return raw.lookup(h, ".."); }},
      {"CREATE", [&](const Handle& h) { return raw.create(h, "planted"); }},
      {"MKDIR", [&](const Handle& h) { return raw.mkdir(h, "planted"); }},
      {"SYMLINK", [&](const Handle& h) { return raw.symlink(h, "planted", "x"); }},
      {"REMOVE", [&](const Handle& h) { return raw.remove(h, "secret"); }},
      {"RMDIR", [&](const Handle& h) { return raw.rmdir(h, "sub"); }},
      {"RENAME from", [&](const Handle& h) { return raw.rename(h, "secret", root, "stolen"); }},
      {"RENAME to", [&](const Handle& h) { return raw.rename(root, "f", h, "planted"); }},
      {"READDIR", [&](const Handle& h) { return raw.readdir(h); }},
      {"READLINK", [&](const Handle& h) { return raw.readlink(h); }},
      {"READ", [&](const Handle& h) { return raw.read(h); }},
      {"WRITE", [&](const Handle& h) { return raw.write(h); }},
      {"COMMIT", [&](const Handle& h) { return raw.commit(h); }},
      {"GETREFS", [&](const Handle& h) { return raw.getrefs(h); }},
      {"READ_DIRECT", [&](const Handle& h) { return raw.read_direct(h); }},
      {"WRITE_DIRECT", [&](const Handle& h) { return raw.write_direct(h); }},
      {"FSSTAT", [&](const Handle& h) { return raw.fsstat(h); }},
  };
  for (const auto& [name, proc] : procs) {
    CAPTURE(name);
    CHECK(proc(forged) == ODAFS_ERR_BADHANDLE);
    CHECK(proc(zero) == ODAFS_ERR_BADHANDLE);
    CHECK(proc(outside) == ODAFS_ERR_BADHANDLE);
    CHECK(proc(slot) == ODAFS_ERR_BADHANDLE);
    CHECK(proc(other_boot) == ODAFS_ERR_STALE);
    CHECK(proc(gone) == ODAFS_ERR_STALE);
  }
  // Handles of the last boot, after a restart.
  server.restart();
  Raw after(server.port());
  CHECK(after.getattr(d) == ODAFS_ERR_STALE);
  CHECK(after.lookup(root, "f") == ODAFS_ERR_STALE);
  CHECK(after.create(d, "planted") == ODAFS_ERR_STALE);
  CHECK(after.rename(root, "f", root, "g") == ODAFS_ERR_STALE);
  CHECK(after.read(f) == ODAFS_ERR_STALE);
  CHECK_FALSE(fsys::exists(w.exp + "/planted"));
  CHECK_FALSE(fsys::exists(w.exp + "/d/planted"));
  CHECK(read_local(w.exp + "/f") == "inside");
  w.check_untouched();
}
