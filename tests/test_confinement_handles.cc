// Integration: no procedure reaches outside the export, part two: symlinks that lead out
// of it (as directories, as files, as LINK's object) and forged, stale and other-boot
// handles (part one, test_confinement.cc, has the sentinel check and hostile names; the
// World is in tests/support/confinement_world.h).
#include <doctest/doctest.h>

#include "tests/support/confinement_world.h"

using namespace odafs::test::confinement;

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
  Handle d, f, up_file, chain3, e, up_dir;
  REQUIRE(raw.lookup(root, "d", &d) == ODAFS_OK);
  REQUIRE(raw.lookup(root, "f", &f) == ODAFS_OK);
  REQUIRE(raw.lookup(d, "up-file", &up_file) == ODAFS_OK);
  REQUIRE(raw.lookup(d, "chain3", &chain3) == ODAFS_OK);
  REQUIRE(raw.lookup(d, "e", &e) == ODAFS_OK);
  REQUIRE(raw.lookup(e, "up-dir", &up_dir) == ODAFS_OK);
  links.emplace_back("d/up-file", up_file);
  links.emplace_back("d/chain3", chain3);
  links.emplace_back("d/e/up-dir", up_dir);
  struct stat secret;
  REQUIRE(::lstat((w.sentinel + "/secret").c_str(), &secret) == 0);

  for (const auto& [path_key, h] : links) {
    const auto& path = path_key;  // clang 14 lambdas cannot capture a binding
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
    CHECK(raw.link(f, h, "planted") == ODAFS_ERR_NOTDIR);
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
    // So does an owner change (lchown), which root may make to anyone.
    const uint32_t owner = geteuid() == 0 ? 4321 : geteuid();
    CHECK(raw.setattr(h, Raw::Set::kOwner, owner) == ODAFS_OK);
    struct stat own {};
    CHECK(::lstat((w.exp + "/" + path).c_str(), &own) == 0);
    CHECK(own.st_uid == owner);
    // ACCESS answers for the link (all bits), never for what it points at.
    uint32_t granted = 0;
    CHECK(raw.access(h, ODAFS_ACCESS_READ | ODAFS_ACCESS_WRITE, &granted) == ODAFS_OK);
    CHECK(granted == (ODAFS_ACCESS_READ | ODAFS_ACCESS_WRITE));
    // GETATTR describes the link, READLINK gives its text.
    odafs_fattr a{};
    CHECK(raw.getattr(h, &a) == ODAFS_OK);
    CHECK(a.type == ODAFS_LNK);
    CHECK(a.fileid != secret.st_ino);
    CHECK(a.size == fsys::read_symlink(w.exp + "/" + path).string().size());
    CHECK(raw.readlink(h) == ODAFS_OK);
    CHECK(raw.fsstat(h) == ODAFS_OK);
  }
  // LINK of a symlink makes a second name of the link itself (as link(2) does, following
  // nothing): never a name for what it points at, inside or outside the export.
  int n = 0;
  for (const auto& [path_key, h] : links) {
    const auto& path = path_key;  // clang 14 lambdas cannot capture a binding
    CAPTURE(path);
    const std::string name = "hard-" + std::to_string(n++);
    odafs_fattr a{};
    REQUIRE(raw.link(h, root, name, &a) == ODAFS_OK);
    CHECK(a.type == ODAFS_LNK);
    CHECK(a.nlink == 2);
    struct stat made, link;
    REQUIRE(::lstat((w.exp + "/" + name).c_str(), &made) == 0);
    REQUIRE(::lstat((w.exp + "/" + path).c_str(), &link) == 0);
    CHECK(S_ISLNK(made.st_mode));
    CHECK(made.st_ino == link.st_ino);
    CHECK(a.fileid == link.st_ino);
    Handle made_h;
    REQUIRE(raw.lookup(root, name, &made_h) == ODAFS_OK);
    CHECK(raw.read(made_h) == ODAFS_ERR_INVAL);  // still a link, never the file it names
  }
  // At a symlink's name, CREATE and MKDIR find something there and do not follow it.
  for (const auto& [path_key, h] : links) {
    const auto& path = path_key;  // clang 14 lambdas cannot capture a binding
    CAPTURE(path);
    size_t slash = path.rfind('/');
    Handle dir = slash == std::string::npos ? root : (path.rfind("d/e/", 0) == 0 ? e : d);
    std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    CHECK(raw.create(dir, name, ODAFS_CREATE_UNCHECKED) == ODAFS_ERR_EXIST);
    CHECK(raw.create(dir, name, ODAFS_CREATE_GUARDED) == ODAFS_ERR_EXIST);
    CHECK(raw.mkdir(dir, name) == ODAFS_ERR_EXIST);
    CHECK(raw.symlink(dir, name, "x") == ODAFS_ERR_EXIST);
    CHECK(raw.link(f, dir, name) == ODAFS_ERR_EXIST);
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
      {"LINK object", [&](const Handle& h) { return raw.link(h, root, "planted"); }},
      {"LINK dir", [&](const Handle& h) { return raw.link(f, h, "planted"); }},
      {"READDIR", [&](const Handle& h) { return raw.readdir(h); }},
      {"READLINK", [&](const Handle& h) { return raw.readlink(h); }},
      {"READ", [&](const Handle& h) { return raw.read(h); }},
      {"WRITE", [&](const Handle& h) { return raw.write(h); }},
      {"COMMIT", [&](const Handle& h) { return raw.commit(h); }},
      {"GETREFS", [&](const Handle& h) { return raw.getrefs(h); }},
      {"READ_DIRECT", [&](const Handle& h) { return raw.read_direct(h); }},
      {"WRITE_DIRECT", [&](const Handle& h) { return raw.write_direct(h); }},
      {"FSSTAT", [&](const Handle& h) { return raw.fsstat(h); }},
      {"ACCESS", [&](const Handle& h) { return raw.access(h, ODAFS_ACCESS_READ); }},
      {"SETATTR owner", [&](const Handle& h) { return raw.setattr(h, Raw::Set::kOwner, 4321); }},
  };
  for (const auto& [name_key, proc] : procs) {
    const auto& name = name_key;  // clang 14 lambdas cannot capture a binding
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
  CHECK(after.link(f, root, "planted") == ODAFS_ERR_STALE);
  CHECK(after.read(f) == ODAFS_ERR_STALE);
  CHECK_FALSE(fsys::exists(w.exp + "/planted"));
  CHECK_FALSE(fsys::exists(w.exp + "/d/planted"));
  CHECK(read_local(w.exp + "/f") == "inside");
  w.check_untouched();
}
