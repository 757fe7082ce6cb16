// Who the server acts as, through the library: setuid/setgid bits a change of a file takes
// away (the server changes files as root, whose kernel would keep them), and per-call
// AUTH_SYS credentials (rpc::CallAs) that let one client serve several users, each checked
// by a server run with --auth-sys.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>

#include "client/client.h"
#include "rpc/call_credential.h"
#include "tests/support/client_util.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::File;
using odafs::MountOptions;
using odafs::test::read_local;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

mode_t mode_of(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return static_cast<mode_t>(-1);
  return st.st_mode & 07777;
}

template <class Fn>
int errno_of(Fn&& fn) {
  try {
    fn();
  } catch (const odafs::Error& e) {
    return e.errno_value();
  }
  return 0;
}

// An AUTH_SYS identity with no supplementary groups.
odafs::rpc::CallerCred caller(uint32_t uid, uint32_t gid) {
  odafs::rpc::CallerCred id;
  id.auth_sys = true;
  id.uid = uid;
  id.gid = gid;
  return id;
}

}  // namespace

TEST_CASE("WRITE, WRITE_DIRECT and SETATTR of the size drop setuid, and setgid with g+x") {
  TempDir dir;
  // Acting as itself, the server takes every caller for an unprivileged one (it cannot
  // tell who they are), and its kernel, root's, would keep the bits.
  ServerProcess server(dir.path(), {"--identity", "server"});
  for (bool direct : {false, true}) {
    CAPTURE(direct);
    MountOptions o;
    o.direct_writes = direct;
    auto fs = Client::mount(server.url(), o);
    const std::string name = direct ? "direct" : "rpc";
    const std::string local = dir / name;
    write_local(local, "0123456789");
    REQUIRE(chmod(local.c_str(), 06755) == 0);
    File f = fs->open(name, O_RDWR);
    f.pwrite("ab", 2, 0);
    f.fsync();  // the WRITE has reached the server (small writes may wait behind)
    CHECK(mode_of(local) == 0755);
    CHECK(f.stat().mode == 0755);  // the WRITE's reply and GETATTR agree
    if (direct) CHECK(fs->stats().direct_writes.load() > 0);
    // Setgid without group-execute (mandatory locking) stays.
    REQUIRE(chmod(local.c_str(), 02745) == 0);
    f.pwrite("cd", 2, 2);
    f.fsync();
    CHECK(mode_of(local) == 02745);
    // A truncation through the file and by path.
    REQUIRE(chmod(local.c_str(), 04700) == 0);
    f.truncate(3);
    CHECK(mode_of(local) == 0700);
    REQUIRE(chmod(local.c_str(), 06750) == 0);
    fs->truncate(name, 1);
    CHECK(mode_of(local) == 0750);
    // Reading and a chmod that sets them keep them.
    fs->chmod(name, 06755);
    char b[4];
    CHECK(f.pread(b, sizeof b, 0) == 1);
    CHECK(mode_of(local) == 06755);
    f.close();
    CHECK(read_local(local) == "a");
  }
}

TEST_CASE("--identity server: a CallAs caller may open what the server lets everyone open") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--identity", "server"});
  write_local(dir / "private", "the server's own");
  REQUIRE(chmod((dir / "private").c_str(), 0600) == 0);
  auto fs = Client::mount(server.url());
  const odafs::rpc::CallCredential other(caller(getuid() + 1000, getgid() + 1000), "test");
  odafs::rpc::CallAs as(other);
  // The mode bits say no, so the open asks the server, which acts as itself: yes.
  File f = fs->open("private");
  char b[32];
  CHECK(f.pread(b, sizeof b, 0) == 16);
}

TEST_CASE("per-call credentials (CallAs) under --auth-sys: access, ownership, delegations" *
          doctest::skip(geteuid() != 0) *
          doctest::description("needs root: the server acts as another uid")) {
  TempDir dir;
  ServerProcess server(dir.path(), {"--auth-sys"});
  REQUIRE(chmod(dir.path().c_str(), 0777) == 0);
  write_local(dir / "secret", "root only");
  REQUIRE(chmod((dir / "secret").c_str(), 0600) == 0);
  auto fs = Client::mount(server.url());  // this process is root: its own calls are root's
  const odafs::rpc::CallCredential nobody(caller(65534, 65534), "test");
  const odafs::rpc::CallCredential root(caller(0, 0), "test");
  {
    // Root opens it for reading: the OPEN brings a read delegation, so the next open of
    // the same caller needs no call...
    File f = fs->open("secret");
    f.close();
    uint64_t delegated = fs->stats().delegated_opens.load();
    fs->open("secret").close();
    CHECK(fs->stats().delegated_opens.load() == delegated + 1);
    // ...but another caller's open checks that caller's access, delegation or not.
    odafs::rpc::CallAs as(nobody);
    CHECK(errno_of([&] { fs->open("secret"); }) == EACCES);
    CHECK(errno_of([&] { fs->open("secret", O_RDWR); }) == EACCES);
    CHECK(odafs::rpc::CallAs::current() == &nobody);
  }
  CHECK(odafs::rpc::CallAs::current() == nullptr);
  {
    odafs::rpc::CallAs as(nobody);
    File mine = fs->open("mine", O_CREAT | O_EXCL | O_RDWR, 0640);
    mine.pwrite("x", 1, 0);
    mine.close();
    CHECK(errno_of([&] { fs->chmod("secret", 0666); }) == EPERM);
    {
      // Scopes nest: the innermost wins, and the outer one is back after it.
      odafs::rpc::CallAs inner(root);
      CHECK(fs->stat("secret").mode == 0600);
      File f = fs->open("secret");
      char b[16];
      CHECK(f.pread(b, sizeof b, 0) == 9);
    }
    CHECK(errno_of([&] { fs->open("secret"); }) == EACCES);
  }
  struct stat st {};
  REQUIRE(stat((dir / "mine").c_str(), &st) == 0);
  CHECK(st.st_uid == 65534);
  CHECK(st.st_gid == 65534);
  // Setuid bits: a write as root (privileged, like a CAP_FSETID writer) keeps them; as
  // another caller drops them.
  write_local(dir / "suid", "x");
  REQUIRE(chmod((dir / "suid").c_str(), 06777) == 0);
  {
    odafs::rpc::CallAs as(root);
    File f = fs->open("suid", O_WRONLY);
    f.pwrite("y", 1, 0);
    f.close();
  }
  CHECK(mode_of(dir / "suid") == 06777);
  {
    odafs::rpc::CallAs as(nobody);
    File f = fs->open("suid", O_WRONLY);
    f.pwrite("z", 1, 0);
    f.close();
  }
  CHECK(mode_of(dir / "suid") == 0777);
  CHECK(read_local(dir / "suid") == "z");
}

TEST_CASE("a caller's first write delegation: the recovery record is written as the server" *
          doctest::skip(geteuid() != 0) *
          doctest::description("needs root: the server acts as another uid")) {
  TempDir dir;
  ServerProcess server(dir.path(), {"--auth-sys"});  // --state-dir: a private directory
  REQUIRE(chmod(dir.path().c_str(), 0777) == 0);
  auto fs = Client::mount(server.url());
  const odafs::rpc::CallCredential nobody(caller(65534, 65534), "test");
  {
    // This client's first delegation comes to a call made as 65534, who may not write the
    // record: the server writes it as itself, and the CREATE gets its write delegation.
    odafs::rpc::CallAs as(nobody);
    File f = fs->open("first", O_CREAT | O_EXCL | O_RDWR, 0644);
    f.pwrite("x", 1, 0);
    f.close();
    CHECK(server_stat(*fs, "recovery.record_writes") >= 1);
    CHECK(server_stat(*fs, "delegations.granted_write") >= 1);
    // And the call after it still runs as 65534, not as the server.
    CHECK(errno_of([&] { fs->chmod("/", 0700); }) == EPERM);
  }
}

TEST_CASE("ACCESS and owner changes under --auth-sys: judged as the caller, groups included" *
          doctest::skip(geteuid() != 0) *
          doctest::description("needs root: the server acts as another uid")) {
  TempDir dir;
  ServerProcess server(dir.path(), {"--auth-sys"});
  REQUIRE(chmod(dir.path().c_str(), 0755) == 0);  // anyone may look names up
  constexpr uint32_t kNobody = 65534;
  constexpr uint32_t kTeam = 4242;
  write_local(dir / "team", "t");
  REQUIRE(chown((dir / "team").c_str(), 0, kTeam) == 0);
  REQUIRE(chmod((dir / "team").c_str(), 0640) == 0);
  REQUIRE(mkdir((dir / "d").c_str(), 0700) == 0);
  auto fs = Client::mount(server.url());
  odafs::rpc::CallerCred in_team = caller(kNobody, kNobody);
  in_team.ngids = 1;
  in_team.gids[0] = kTeam;
  const odafs::rpc::CallCredential nobody(caller(kNobody, kNobody), "test");
  const odafs::rpc::CallCredential member(in_team, "test");
  // Root has all of it (this process's own calls); search permission only where an x bit is.
  CHECK(fs->access("team", R_OK | W_OK | X_OK) == (R_OK | W_OK));
  CHECK(fs->access("d", R_OK | W_OK | X_OK) == (R_OK | W_OK | X_OK));
  {
    odafs::rpc::CallAs as(nobody);
    CHECK(fs->access("team", R_OK | W_OK) == 0);
    CHECK(fs->access("d", X_OK) == 0);
    CHECK(errno_of([&] { fs->access("missing", R_OK); }) == ENOENT);
  }
  {
    odafs::rpc::CallAs as(member);
    CHECK(fs->access("team", R_OK | W_OK) == R_OK);  // the part it has
    File f = fs->open("team");
    char b[4];
    CHECK(f.pread(b, sizeof b, 0) == 1);
    CHECK(errno_of([&] { fs->open("team", O_WRONLY); }) == EACCES);
  }
  // Owner changes: root may; the owner may pick a group of its own, nothing else.
  fs->chown("team", kNobody, static_cast<gid_t>(-1));
  struct stat st {};
  REQUIRE(stat((dir / "team").c_str(), &st) == 0);
  CHECK(st.st_uid == kNobody);
  CHECK(st.st_gid == kTeam);
  CHECK(fs->stat("team").uid == kNobody);
  {
    odafs::rpc::CallAs as(nobody);
    CHECK(errno_of([&] { fs->chown("team", 0, static_cast<gid_t>(-1)); }) == EPERM);
    fs->chown("team", static_cast<uid_t>(-1), kNobody);  // its primary group
    CHECK(errno_of([&] { fs->chown("team", static_cast<uid_t>(-1), kTeam); }) == EPERM);
  }
  REQUIRE(stat((dir / "team").c_str(), &st) == 0);
  CHECK(st.st_gid == kNobody);
  {
    odafs::rpc::CallAs as(member);
    fs->chown("team", static_cast<uid_t>(-1), kTeam);
  }
  REQUIRE(stat((dir / "team").c_str(), &st) == 0);
  CHECK(st.st_uid == kNobody);
  CHECK(st.st_gid == kTeam);
}

TEST_CASE(
    "an unprivileged caller across a server restart: its mode-0 file written through its "
    "open file, its FIFO, no device node, and no owner's rights for another user" *
    doctest::skip(geteuid() != 0) *
    doctest::description("needs root: the server acts as another uid")) {
  TempDir dir;
  ServerProcess server(dir.path(), {"--auth-sys"});
  REQUIRE(chmod(dir.path().c_str(), 0777) == 0);
  MountOptions patient;
  patient.reconnect_window_ms = 10000;
  auto fs = Client::mount(server.url(), patient);
  const odafs::rpc::CallCredential nobody(caller(65534, 65534), "test");
  const odafs::rpc::CallCredential bob(caller(1002, 1002), "test");
  File f;
  {
    odafs::rpc::CallAs as(nobody);
    f = fs->open("zero", O_RDWR | O_CREAT | O_EXCL, 0);
    CHECK(f.pwrite("before", 6, 0) == 6);
    f.fsync();
    fs->mknod("fifo", S_IFIFO | 0600);
    // The loopback default allows devices, but not to this caller (CAP_MKNOD).
    CHECK(odafs::test::errno_of([&] { fs->mknod("null", S_IFCHR | 0666, makedev(1, 3)); }) ==
          EPERM);
  }
  server.restart();
  {
    odafs::rpc::CallAs as(nobody);
    CHECK(f.pwrite("after!", 6, 6) == 6);  // the owner's open file writes on
    f.fsync();
    f.close();
    CHECK(fs->lstat("fifo").type == odafs::FileType::kFifo);
    CHECK(odafs::test::errno_of([&] { fs->open("zero", O_RDONLY); }) == EACCES);  // by mode
  }
  {
    odafs::rpc::CallAs as(bob);
    CHECK(odafs::test::errno_of([&] { fs->open("zero", O_WRONLY); }) == EACCES);
    CHECK(odafs::test::errno_of([&] { fs->truncate("zero", 0); }) == EACCES);  // not its owner
  }
  CHECK(read_local(dir / "zero") == "beforeafter!");
  struct stat st {};
  REQUIRE(lstat((dir / "fifo").c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(st.st_uid == 65534u);
}
