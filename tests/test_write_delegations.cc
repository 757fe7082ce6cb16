// Write delegations end to end: a real odafsd, a sole writer that keeps its writes across
// closes, and other clients (in this process and in child processes that stop or die)
// whose accesses recall them.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>

#include "client/client.h"
#include "tests/support/client_util.h"
#include "tests/support/delegation_holder.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::File;
using odafs::test::eventually;
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

// The export's file at path once it holds `want`, or after 5 s what it holds then: for
// bytes written back by a thread of the client's own.
std::string local_once(const std::filesystem::path& path, const std::string& want) {
  eventually([&] { return read_local(path) == want; });
  return read_local(path);
}

// The child's delegation: a write delegation on path, holding "child bytes" written behind
// and never sent.
void take_write_delegation(Client& fs, const std::string& path) {
  File f = fs.open(path, O_RDWR);
  f.pwrite("child bytes", 11, 0);
  f.close();
}

// A child process holding a write delegation on "f" with "child bytes" kept unsent,
// stopped (SIGSTOP) so that it answers no recall.
pid_t stopped_write_holder(const ServerProcess& server) {
  pid_t holder =
      holder_process(server.url(), "f", [](Client& c) { take_write_delegation(c, "f"); });
  REQUIRE(odafs::test::stop_child(holder));
  return holder;
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

TEST_CASE("a delegated file stays in a full node table: lookups of 200 other names evict it not") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--max-nodes", "16", "--lease-ms", "5000"});
  for (int i = 0; i < 200; ++i) odafs::test::write_local(dir / ("n" + std::to_string(i)), "x");
  auto a = Client::mount(server.url());
  auto b = Client::mount(server.url());
  auto c = Client::mount(server.url());
  write_path(*a, "f", "old");
  write_held(*a, "f", "a's bytes, kept");  // a holds a write delegation and the bytes
  CHECK(read_local(dir / "f") == "old");
  for (int i = 0; i < 200; ++i) c->stat("n" + std::to_string(i));  // fills the table
  CHECK(server_stat(*c, "nodes.live") <= 17);  // the others were evicted (a bound, kept)
  // b's open recalls a's delegation (a's handle still names f): b reads a's bytes, and gets
  // no second write delegation while a held one.
  File fb = b->open("f", O_RDWR);
  CHECK(read_all(fb, 64) == "a's bytes, kept");
  CHECK(server_stat(*b, "delegations.recalled") == 1);
  CHECK(server_stat(*b, "delegations.expired") == 0);
  CHECK(read_local(dir / "f") == "a's bytes, kept");
  fb.close();
  // Every DELEGRETURN found its entry: nothing is held for a, and a reads on.
  CHECK(read_all(*a, "f", 64) == "a's bytes, kept");
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
  pid_t holder = stopped_write_holder(server);
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

TEST_CASE("a holder stopped past its lease never overwrites a write committed after it") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "1000"});
  pid_t holder = stopped_write_holder(server);
  {
    auto b = Client::mount(server.url());
    write_path(*b, "f", "BBBB, committed");  // waits out the lease, then writes
    File f = b->open("f", O_RDWR);
    f.fsync();
  }
  CHECK(read_local(dir / "f") == "BBBB, committed");
  auto c = Client::mount(server.url());
  const uint64_t returns = server_stat(*c, "calls.DELEGRETURN");
  // The holder resumes: its recall is waiting for it, and it writes back what it kept.
  kill(holder, SIGCONT);
  // Its write-back, refused:
  CHECK(eventually([&] { return server_stat(*c, "delegations.refused_revoked") >= 1; }));
  // Then its DELEGRETURN, the last it sends for the delegation (after the write-back,
  // whatever became of it): the file is as it will stay.
  CHECK(eventually([&] { return server_stat(*c, "calls.DELEGRETURN") > returns; }));
  CHECK(read_local(dir / "f").substr(0, 15) == "BBBB, committed");
  reap(holder);
  CHECK(read_local(dir / "f").substr(0, 15) == "BBBB, committed");
}

TEST_CASE("a write-delegation holder that dies costs a reader one lease, no more") {
  // The server cannot tell a client that died from one whose connection was cut and that
  // will come back to write back (test_reconnect): the holder's write delegation outlives
  // its connection, and a reader's recall, which cannot reach it, expires a lease later.
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "2000"});
  pid_t holder =
      holder_process(server.url(), "f", [](Client& c) { take_write_delegation(c, "f"); });
  reap(holder);
  auto b = Client::mount(server.url());
  auto start = std::chrono::steady_clock::now();
  CHECK(read_all(*b, "f", 64) == "before");  // never fsynced: gone with the process
  const double waited = seconds_since(start);
  CHECK(waited > 1.5);
  CHECK(waited < 6.0);
  CHECK(server_stat(*b, "delegations.expired") == 1);
}

TEST_CASE("a server restart under a write delegation never leaves wrong data") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto a = Client::mount(server.url());
  write_path(*a, "f", "old bytes");
  const std::string text = "new bytes, longer";

  SUBCASE("the file still open: the kept bytes are reclaimed, and fsync succeeds") {
    File w = a->open("f", O_RDWR);
    CHECK(server_stat(*a, "delegations.granted_write") == 1);
    w.pwrite(text.data(), text.size(), 0);
    server.restart();
    // A stop leaves the recovery record naming this client. The client notices the broken
    // connection by itself, re-mounts, and writes the open file's unsent bytes back in the
    // grace period, which its RECLAIM_COMPLETE then ends: the bytes are home before any
    // call of the file's.
    auto other = Client::mount(server.url());
    CHECK(eventually([&] { return server_stat(*other, "recovery.in_grace") == 0; }, 10));
    CHECK(server_stat(*other, "recovery.reclaimed") >= 1);
    CHECK(read_local(dir / "f") == text);
    CHECK(odafs::test::errno_of([&] { w.fsync(); }) == 0);
    CHECK(read_local(dir / "f") == text);
  }
  SUBCASE("the file closed: the kept bytes are reclaimed (test_restart_reclaim has more)") {
    write_held(*a, "f", text);
    server.restart();
    CHECK(read_all(*a, "f", 64) == text);  // re-mounts, writing them back first
    CHECK(read_local(dir / "f") == text);
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
  CHECK(local_once(dir / "g", "renamed with me") == "renamed with me");  // by the give-back
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

namespace {

// The server's call counters this suite watches, by name.
std::map<std::string, uint64_t> calls(Client& fs) {
  std::map<std::string, uint64_t> out;
  for (const char* name : {"CREATE", "REMOVE", "OPEN", "LOOKUP", "GETATTR", "READ", "WRITE",
                           "COMMIT", "DELEGRETURN", "SETATTR"}) {
    out[name] = server_stat(fs, std::string("calls.") + name);
  }
  return out;
}

}  // namespace

TEST_CASE("a file its creator writes, reads back, appends to, stats and removes costs two calls") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  const std::string data = odafs::test::pattern(5000, 1);
  const auto before = calls(*fs);
  {
    File f = fs->open("f", O_RDWR | O_CREAT | O_TRUNC, 0644);  // CREATE: a write delegation
    CHECK(f.pwrite(data.data(), data.size(), 0) == data.size());
    f.close();  // kept: nothing sent
  }
  CHECK(read_local(dir / "f").empty());
  CHECK(read_all(*fs, "f", 8192) == data);  // from the run the delegation kept
  {
    File a = fs->open("f", O_WRONLY | O_APPEND);
    File b = fs->open("f", O_WRONLY | O_APPEND);
    // Appends at the end this client knows (it is the only writer), in the order made.
    CHECK(a.pwrite("<a>", 3, 0) == 3);
    CHECK(b.pwrite("<b>", 3, 0) == 3);
    CHECK(a.pwrite("<A>", 3, 0) == 3);
  }
  CHECK(fs->stat("f").size == data.size() + 9);  // by path: from the delegation
  CHECK(read_all(*fs, "f", 8192) == data + "<a><b><A>");
  fs->unlink("f");
  auto after = calls(*fs);
  CHECK(odafs::test::errno_of([&] { fs->open("f", O_RDONLY); }) == ENOENT);
  CHECK(after["CREATE"] == before.at("CREATE") + 1);
  CHECK(after["REMOVE"] == before.at("REMOVE") + 1);
  after["CREATE"] = before.at("CREATE");
  after["REMOVE"] = before.at("REMOVE");
  for (const auto& [name_key, count] : before) {  // no OPEN, READ, WRITE, COMMIT, GETATTR...
    const auto& name = name_key;                  // clang 14 lambdas cannot capture a binding
    CAPTURE(name);
    CHECK(after[name] == count);
  }
  CHECK(server_stat(*fs, "delegations.held") == 0);  // gone with the file
}

TEST_CASE("another client sees what the creator kept; appends after a recall land at the end") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto a = Client::mount(server.url());
  auto b = Client::mount(server.url());
  {
    File f = a->open("log", O_WRONLY | O_CREAT, 0644);
    f.pwrite("first;", 6, 0);
  }
  CHECK(read_all(*b, "log", 64) == "first;");  // recalls a's: written back first
  {
    File f = a->open("log", O_WRONLY | O_APPEND);  // recalls b's read delegation
    f.pwrite("second;", 7, 0);
  }
  {
    File f = b->open("log", O_WRONLY | O_APPEND);  // recalls a's again
    f.pwrite("third;", 6, 0);
  }
  {
    File f = a->open("log", O_WRONLY | O_APPEND);
    f.pwrite("fourth;", 7, 0);
    f.fsync();
  }
  CHECK(read_local(dir / "log") == "first;second;third;fourth;");
  CHECK(read_all(*b, "log", 64) == "first;second;third;fourth;");
  CHECK(server_stat(*b, "delegations.expired") == 0);
}

TEST_CASE("kept bytes reach the server by age, and past the byte bound at the close") {
  TempDir dir;
  ServerProcess server(dir.path());
  SUBCASE("by age: written back, the delegation kept") {
    odafs::MountOptions o;
    o.delegated_write_back_ms = 200;
    auto fs = Client::mount(server.url(), o);
    {
      File f = fs->open("aged", O_WRONLY | O_CREAT, 0644);
      f.pwrite("aged bytes", 10, 0);
    }
    CHECK(read_local(dir / "aged").empty());
    CHECK(local_once(dir / "aged", "aged bytes") == "aged bytes");
    CHECK(server_stat(*fs, "delegations.held") == 1);
    CHECK(server_stat(*fs, "delegations.returned") == 0);
    const uint64_t opens = server_stat(*fs, "calls.OPEN");
    write_held(*fs, "aged", "AGED");  // still delegated: a local open, kept again
    CHECK(server_stat(*fs, "calls.OPEN") == opens);
    CHECK(local_once(dir / "aged", "AGED bytes") == "AGED bytes");
  }
  SUBCASE("by bytes: a close past the bound sends its own") {
    odafs::MountOptions o;
    o.delegated_bytes = 4096;
    auto fs = Client::mount(server.url(), o);
    const std::string small = odafs::test::pattern(3000, 2), large = odafs::test::pattern(6000, 3);
    write_path(*fs, "small", small);
    CHECK(read_local(dir / "small").empty());  // kept: 3000 of 4096
    write_path(*fs, "large", large);
    CHECK(read_local(dir / "large") == large);  // would pass the bound: sent at the close
    write_path(*fs, "more", small);
    CHECK(read_local(dir / "more") == small);          // 3000 + 3000 would pass it too
    CHECK(server_stat(*fs, "delegations.held") == 3);  // the delegations all stay
  }
}

TEST_CASE("a file whose write delegation was recalled is served without delegations for a while") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto a = Client::mount(server.url());
  auto b = Client::mount(server.url());
  write_path(*a, "f", "a's");             // CREATE: a write delegation, the bytes kept
  CHECK(read_all(*b, "f", 64) == "a's");  // recalls it: written back first
  CHECK(server_stat(*b, "delegations.recalled") == 1);
  CHECK(server_stat(*b, "delegations.cooled") >= 1);  // b's OPEN was granted none
  // Neither takes turns holding it now: a's write goes to the server at its close, and
  // b's next read asks the server (no delegation to recall, no write-back to wait for).
  write_held(*a, "f", "A's");
  CHECK(read_local(dir / "f") == "A's");
  CHECK(read_all(*b, "f", 64) == "A's");
  CHECK(server_stat(*b, "delegations.recalled") == 1);
}
