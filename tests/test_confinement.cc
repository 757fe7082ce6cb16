// Integration: no procedure reaches outside the export. The export sits beside a sentinel
// directory; the export holds symlinks into the sentinel (absolute, "../..", a chain).
// Every namespace procedure (LOOKUP, CREATE, MKDIR, SYMLINK, REMOVE, RMDIR, RENAME on both
// sides, LINK, READDIR, READLINK, SETATTR, GETATTR, and MOUNT), and the data procedures on
// those symlinks, get hostile names ("..", ".", absolute, with '/', with NUL, empty, over-long)
// and forged, stale and other-boot handles, as raw RPC (the client library refuses most of
// this itself). Afterwards nothing in the sentinel was read, created, changed or removed
// (its times are set to the past first, so that even a read would show as a new atime), and
// nothing appeared next to the export.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <ctime>

#include "tests/support/confinement_world.h"

using namespace odafs::test::confinement;

namespace {

// Whether a read shows as a new atime where the tests' temporary directories are made: not
// on a noatime mount. The file's atime is set a day back first, so that relatime updates it
// too. Probed once, when the test cases are registered.
bool reads_update_atime() {
  static const bool yes = [] {
    odafs::test::TempDir d;
    const std::string f = d / "probe";
    odafs::test::write_local(f, "x");
    const timespec past[2] = {{time(nullptr) - 2 * 86400, 0}, {0, UTIME_OMIT}};
    if (utimensat(AT_FDCWD, f.c_str(), past, 0) != 0) return false;
    struct stat before {
    }, after{};
    stat(f.c_str(), &before);
    odafs::test::read_local(f);
    stat(f.c_str(), &after);
    return after.st_atim.tv_sec != before.st_atim.tv_sec;
  }();
  return yes;
}

}  // namespace

TEST_CASE("confinement: the sentinel check sees a read" * doctest::skip(!reads_update_atime()) *
          doctest::description(reads_update_atime()
                                   ? ""
                                   : "needs atime updates: the temporary directory's file system "
                                     "is mounted noatime")) {
  World w;
  CHECK(stat_snapshot(w.paths) == w.stats);
  read_local(w.sentinel + "/sub/inner");
  CHECK(stat_snapshot(w.paths) != w.stats);
}

TEST_CASE("confinement: the sentinel check sees a create and a change") {
  World w;
  CHECK(stat_snapshot(w.paths) == w.stats);
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
  SUBCASE("LINK") {
    for (const std::string& name : hostile_names(w)) {
      CAPTURE(name);
      CHECK(raw.link(f, root, name) == ODAFS_ERR_INVAL);
      CHECK(raw.link(f, d, name) == ODAFS_ERR_INVAL);
    }
    CHECK(raw.link(f, root, long_name) == kGarbage);
    // A new name that is a symlink leading out is taken: linkat never follows it (else
    // "dangling" would make sentinel/created a second name of f).
    for (const char* name : {"abs-dir", "abs-file", "rel-dir", "chain1", "dangling"}) {
      CAPTURE(name);
      CHECK(raw.link(f, root, name) == ODAFS_ERR_EXIST);
    }
    CHECK(raw.link(f, d, "up-file") == ODAFS_ERR_EXIST);
    CHECK(raw.link(f, d, "chain3") == ODAFS_ERR_EXIST);
    // No hard link to a directory (it could make the export's tree a graph, or let a name
    // outlive its place), the export root least of all.
    CHECK(raw.link(root, d, "root-again") == ODAFS_ERR_PERM);
    CHECK(raw.link(d, root, "d-again") == ODAFS_ERR_PERM);
    // What LINK may do, it does, inside the export.
    odafs_fattr a{};
    CHECK(raw.link(f, d, "f2", &a) == ODAFS_OK);
    CHECK(a.nlink == 2);
    CHECK(read_local(w.exp + "/d/f2") == "inside");
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
