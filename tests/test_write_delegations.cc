// Write delegations end to end: a real odafsd, a sole writer that keeps its writes across
// closes, and other clients (in this process and in child processes that stop or die)
// whose accesses recall them.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "client/client.h"
#include "tests/support/client_util.h"
#include "tests/support/delegation_holder.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::File;
using odafs::test::holder_process;
using odafs::test::make_file;
using odafs::test::read_all;
using odafs::test::read_local;
using odafs::test::reap;
using odafs::test::seconds_since;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_path;

namespace {

// Opens an existing file to write (OPEN: a write delegation for a sole writer), writes
// text at 0 and closes without fsync.
void write_held(Client& fs, const std::string& path, const std::string& text) {
  File f = fs.open(path, O_RDWR);
  CHECK(f.pwrite(text.data(), text.size(), 0) == text.size());
  f.close();
}

// The child's delegation: a write delegation on path, holding "child bytes" written behind
// and never sent.
void take_write_delegation(Client& fs, const std::string& path) {
  File f = fs.open(path, O_RDWR);
  f.pwrite("child bytes", 11, 0);
  f.close();
}

}  // namespace

TEST_CASE("a sole writer's reopens and closes are local; fsync puts the bytes on the server") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  write_path(*fs, "f", "seed");
  File w = fs->open("f", O_RDWR);
  CHECK(server_stat(*fs, "delegations.granted_write") == 1);
  w.pwrite("0", 1, 0);
  w.close();

  const uint64_t opens = server_stat(*fs, "calls.OPEN");
  const uint64_t commits = server_stat(*fs, "calls.COMMIT");
  const uint64_t writes = server_stat(*fs, "calls.WRITE");
  for (int i = 1; i < 4; ++i) {
    File again = fs->open("f", O_WRONLY);
    const char c = static_cast<char>('0' + i);
    CHECK(again.pwrite(&c, 1, static_cast<uint64_t>(i)) == 1);
    again.close();
  }
  CHECK(fs->stat("f").size == 4);  // the size its own writes made, not the server's
  CHECK(server_stat(*fs, "calls.OPEN") == opens);
  CHECK(server_stat(*fs, "calls.COMMIT") == commits);
  CHECK(server_stat(*fs, "calls.WRITE") == writes);  // still behind, in this client
  CHECK(read_local(dir / "f") == "seed");

  File last = fs->open("f", O_RDONLY);
  CHECK(read_all(last, 64) == "0123");  // this client reads its own writes
  last.fsync();
  CHECK(read_local(dir / "f") == "0123");
  CHECK(server_stat(*fs, "calls.OPEN") == opens);
  CHECK(fs->stats().delegated_opens.load() == 5);  // every open after the CREATE
}

TEST_CASE("an O_APPEND open sends a kept run at its own offset, then appends") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  write_path(*fs, "f", "0123456789");
  write_held(*fs, "f", "AB");  // kept: a run at offset 0
  File app = fs->open("f", O_RDWR | O_APPEND);
  CHECK(app.pwrite("Z", 1, 0) == 1);
  app.fsync();
  CHECK(read_local(dir / "f") == "AB23456789Z");
}

TEST_CASE("another client's open for reading recalls it and reads the holder's latest bytes") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "5000"});
  auto a = Client::mount(server.url());
  auto b = Client::mount(server.url());
  write_path(*a, "f", "old");
  write_held(*a, "f", "latest, never fsynced");
  CHECK(read_local(dir / "f") == "old");

  auto start = std::chrono::steady_clock::now();
  CHECK(read_all(*b, "f", 64) == "latest, never fsynced");
  CHECK(seconds_since(start) < 2.0);  // a answered the recall at once
  CHECK(server_stat(*b, "delegations.recalled") == 1);
  CHECK(server_stat(*b, "delegations.returned") == 1);
  CHECK(server_stat(*b, "delegations.expired") == 0);
  CHECK(read_local(dir / "f") == "latest, never fsynced");  // written back and committed

  // a no longer holds it: its next open asks the server (and recalls b's read one).
  const uint64_t delegated = a->stats().delegated_opens.load();
  File again = a->open("f", O_RDWR);
  CHECK(read_all(again, 64) == "latest, never fsynced");
  CHECK(a->stats().delegated_opens.load() == delegated);
}

TEST_CASE("another client's stat, or read by a handle it had, recalls it and sees the new size") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto a = Client::mount(server.url());
  auto b = Client::mount(server.url());
  make_file(server.url(), "f", "abc");
  const uint64_t granted_write = server_stat(*a, "delegations.granted_write");  // the maker's
  File seen = b->open("f", O_RDONLY);  // before a's delegation: its own handle
  CHECK(read_all(seen, 64) == "abc");
  File w = a->open("f", O_RDWR);  // recalls b's read delegation
  CHECK(server_stat(*a, "delegations.granted_write") == granted_write + 1);
  const std::string grown = "abcdefghijklmnopqrstuvwxyz";
  w.pwrite(grown.data(), grown.size(), 0);  // behind: not sent
  CHECK(read_local(dir / "f") == "abc");

  SUBCASE("stat by path (LOOKUP)") { CHECK(b->stat("f").size == grown.size()); }
  SUBCASE("stat of the open file (GETATTR)") { CHECK(seen.stat().size == grown.size()); }
  SUBCASE("read by its handle (READ)") {
    // The grant revoked b's references to the file's blocks: a one-sided read, which
    // reaches the server's cache without the file server and so cannot recall, faults, and
    // the READ it falls back to recalls.
    CHECK(read_all(seen, 64) == grown);
  }
  SUBCASE("read by its handle, by RPC") {
    b->set_read_mode(odafs::ReadMode::kInline);
    CHECK(read_all(seen, 64) == grown);
  }
  CHECK(server_stat(*b, "delegations.recalled") >= 2);  // b's read one, then a's write one
  CHECK(read_local(dir / "f") == grown);
  // a keeps writing, now without a delegation: its close commits again.
  w.pwrite("Z", 1, 0);
  w.close();
  CHECK(read_local(dir / "f") == "Z" + grown.substr(1));
}

TEST_CASE("reads from the holder do not recall, and read delegations do not conflict") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto a = Client::mount(server.url());
  auto b = Client::mount(server.url());
  auto c = Client::mount(server.url());
  make_file(server.url(), "f", "shared");
  CHECK(read_all(*b, "f", 64) == "shared");
  CHECK(read_all(*c, "f", 64) == "shared");  // two read delegations at once
  CHECK(server_stat(*a, "delegations.recalled") == 0);
  File w = a->open("f", O_RDWR);  // both recalled; another holds one: a gets none
  CHECK(server_stat(*a, "delegations.recalled") == 2);
  CHECK(a->stat("f").size == 6);
  CHECK(server_stat(*a, "delegations.recalled") == 2);  // a's own stat
}

TEST_CASE("a write-delegation holder that stops answering loses it after the lease") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "1000"});
  pid_t holder =
      holder_process(server.url(), "f", [](Client& c) { take_write_delegation(c, "f"); });
  REQUIRE(odafs::test::stop_child(holder));
  auto b = Client::mount(server.url());
  auto start = std::chrono::steady_clock::now();
  // The holder's bytes never reached the server: b reads what the server has.
  CHECK(read_all(*b, "f", 64) == "before");
  double waited = seconds_since(start);
  CHECK(waited >= 0.9);  // the recall went unanswered: the open waited out the lease
  CHECK(waited < 10.0);
  CHECK(server_stat(*b, "delegations.expired") == 1);
  reap(holder);
  CHECK(read_local(dir / "f") == "before");
}

TEST_CASE("a write-delegation holder that dies gives it up at once") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "30000"});
  pid_t holder =
      holder_process(server.url(), "f", [](Client& c) { take_write_delegation(c, "f"); });
  reap(holder);
  auto b = Client::mount(server.url());
  auto start = std::chrono::steady_clock::now();
  CHECK(read_all(*b, "f", 64) == "before");  // never fsynced: gone with the process
  CHECK(seconds_since(start) < 5.0);         // far below the 30 s lease
  CHECK(server_stat(*b, "delegations.expired") == 0);
  CHECK(server_stat(*b, "delegations.dropped") >= 1);
}

TEST_CASE("a server restart under a write delegation never leaves wrong data") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto a = Client::mount(server.url());
  write_path(*a, "f", "old bytes");
  const std::string text = "new bytes, longer";

  SUBCASE("the file still open: fsync writes them or fails") {
    File w = a->open("f", O_RDWR);
    CHECK(server_stat(*a, "delegations.granted_write") == 1);
    w.pwrite(text.data(), text.size(), 0);
    server.restart();
    bool synced = false;
    try {
      w.fsync();
      synced = true;
    } catch (const odafs::Error& e) {
      MESSAGE("fsync after the restart: " << e.what());
    }
    if (synced) CHECK(read_local(dir / "f") == text);
    const std::string now = read_local(dir / "f");
    CHECK((now == text || now == "old bytes"));
  }
  SUBCASE("the file closed: the kept bytes are lost (logged), never mixed") {
    write_held(*a, "f", text);
    server.restart();
    CHECK(read_all(*a, "f", 64) == "old bytes");  // re-mounts; the old mount logged them lost
    CHECK(read_local(dir / "f") == "old bytes");
  }
}

TEST_CASE("unmounting writes back and returns what a write delegation kept") {
  TempDir dir;
  ServerProcess server(dir.path());
  {
    auto a = Client::mount(server.url());
    write_path(*a, "f", "old");
    write_held(*a, "f", "kept until the unmount");
    CHECK(read_local(dir / "f") == "old");
  }
  CHECK(read_local(dir / "f") == "kept until the unmount");
  auto b = Client::mount(server.url());
  CHECK(server_stat(*b, "delegations.held") == 0);
  CHECK(server_stat(*b, "delegations.returned") == 1);
}

TEST_CASE("this client's truncate, rename and remove keep or give back its written bytes") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto a = Client::mount(server.url());
  write_path(*a, "f", "old");
  write_held(*a, "f", "renamed with me");
  a->rename("f", "g");
  CHECK(read_all(*a, "g", 64) == "renamed with me");
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (read_local(dir / "g") != "renamed with me" && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(read_local(dir / "g") == "renamed with me");  // written back by the give-back
  // Removing its only link: the kept bytes go with the file, never sent.
  write_held(*a, "g", "removed");
  const uint64_t writes = server_stat(*a, "calls.WRITE");
  const uint64_t commits = server_stat(*a, "calls.COMMIT");
  a->unlink("g");
  CHECK(odafs::test::errno_of([&] { a->open("g", O_RDONLY); }) == ENOENT);
  CHECK(server_stat(*a, "calls.WRITE") == writes);
  CHECK(server_stat(*a, "calls.COMMIT") == commits);
  // A remove that fails keeps them: written back, then the error.
  a->mkdir("d");
  write_path(*a, "d/h", "old");
  write_held(*a, "d/h", "kept through a failed rmdir");
  CHECK(odafs::test::errno_of([&] { a->rmdir("d/h"); }) == ENOTDIR);
  CHECK(read_local(dir / "d/h") == "kept through a failed rmdir");
}
