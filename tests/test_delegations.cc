// Open delegations end to end: a real odafsd, clients in this process and in child
// processes that stop or die while they hold one.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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
using odafs::test::reap;
using odafs::test::seconds_since;
using odafs::test::server_stat;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_path;

namespace {

// The child's delegation: a read-only open and a read.
void take_read_delegation(Client& fs, const std::string& path) {
  File f = fs.open(path, O_RDONLY);
  char buf[16];
  f.pread(buf, sizeof buf, 0);
}

}  // namespace

TEST_CASE("a read delegation serves later opens without a call") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  make_file(server.url(), "f", "hello");
  // The maker's (a write delegation from its CREATE, given back at its unmount).
  const uint64_t granted = server_stat(*fs, "delegations.granted");
  const uint64_t granted_write = server_stat(*fs, "delegations.granted_write");
  const uint64_t returned = server_stat(*fs, "delegations.returned");
  CHECK(read_all(*fs, "f", 64) == "hello");
  const uint64_t opens = server_stat(*fs, "calls.OPEN");
  for (int i = 0; i < 5; ++i) CHECK(read_all(*fs, "f", 64) == "hello");
  CHECK(server_stat(*fs, "calls.OPEN") == opens);
  CHECK(fs->stats().delegated_opens.load() == 5);
  CHECK(server_stat(*fs, "delegations.granted") == granted + 1);

  SUBCASE("this client's own changes void its own delegation") {
    write_path(*fs, "f", "hello, world");
    CHECK(read_all(*fs, "f", 64) == "hello, world");
    fs->truncate("f", 2);
    CHECK(read_all(*fs, "f", 64) == "he");
    fs->rename("f", "g");
    CHECK(odafs::test::errno_of([&] { fs->open("f", O_RDONLY); }) == ENOENT);
    CHECK(read_all(*fs, "g", 64) == "he");
    fs->unlink("g");
    CHECK(odafs::test::errno_of([&] { fs->open("g", O_RDONLY); }) == ENOENT);
    // What the client forgot it gave back, and the removed file took the rest along: the
    // server holds nothing for it (its table would otherwise grow for as long as the
    // client stays connected).
    CHECK(server_stat(*fs, "delegations.held") == 0);
  }
  SUBCASE("opening to write makes it a write delegation; a chmod gives it back") {
    File w = fs->open("f", O_RDWR);
    CHECK(server_stat(*fs, "delegations.granted_write") == granted_write + 1);
    w.pwrite("H", 1, 0);  // this client's own write keeps it
    CHECK(server_stat(*fs, "delegations.held") == 1);
    fs->chmod("f", 0600);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (server_stat(*fs, "delegations.held") != 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(server_stat(*fs, "delegations.held") == 0);
    CHECK(server_stat(*fs, "delegations.returned") == returned + 1);
  }
}

TEST_CASE("another client's write recalls the delegation; the holder then reads the new bytes") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "5000"});
  auto a = Client::mount(server.url());
  auto b = Client::mount(server.url());
  make_file(server.url(), "f", "old bytes");
  const uint64_t returned = server_stat(*b, "delegations.returned");  // the maker's
  File held = a->open("f", O_RDONLY);
  CHECK(read_all(held, 64) == "old bytes");  // cached by a
  CHECK(read_all(*a, "f", 64) == "old bytes");
  CHECK(a->stats().delegated_opens.load() == 1);

  auto start = std::chrono::steady_clock::now();
  write_path(*b, "f", "new bytes");
  CHECK(seconds_since(start) < 2.0);  // a answered the recall at once: no lease wait
  CHECK(server_stat(*b, "delegations.recalled") == 1);
  CHECK(server_stat(*b, "delegations.returned") == returned + 1);
  CHECK(server_stat(*b, "delegations.expired") == 0);

  CHECK(read_all(held, 64) == "new bytes");  // the open file: its cached blocks were dropped
  CHECK(read_all(*a, "f", 64) == "new bytes");
  CHECK(a->stats().delegated_opens.load() == 1);  // that open asked the server again
}

TEST_CASE("opening to write, removing or renaming over a delegated file recalls it") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto a = Client::mount(server.url());
  auto b = Client::mount(server.url());
  make_file(server.url(), "f", "first");
  make_file(server.url(), "other", "second");
  CHECK(read_all(*a, "f", 64) == "first");

  SUBCASE("open for writing") {
    File w = b->open("f", O_RDWR);
    CHECK(server_stat(*b, "delegations.recalled") == 1);
    CHECK(read_all(*a, "f", 64) == "first");
    CHECK(a->stats().delegated_opens.load() == 0);
  }
  SUBCASE("remove and create again") {
    b->unlink("f");
    write_path(*b, "f", "replaced", O_EXCL);
    CHECK(read_all(*a, "f", 64) == "replaced");
  }
  SUBCASE("rename over it") {
    b->rename("other", "f");
    CHECK(read_all(*a, "f", 64) == "second");
  }
  SUBCASE("rename it away") {
    b->rename("f", "moved");
    CHECK(odafs::test::errno_of([&] { a->open("f", O_RDONLY); }) == ENOENT);
  }
  CHECK(server_stat(*b, "delegations.recalled") >= 1);
}

TEST_CASE("a holder that stops answering loses its delegation after the lease") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "1000"});
  pid_t holder = holder_process(server.url(), "f", [](Client& c) { take_read_delegation(c, "f"); });
  REQUIRE(kill(holder, SIGSTOP) == 0);
  auto b = Client::mount(server.url());
  auto start = std::chrono::steady_clock::now();
  write_path(*b, "f", "after!");
  double waited = seconds_since(start);
  CHECK(waited >= 0.9);  // the recall went unanswered: the write waited out the lease
  CHECK(waited < 10.0);  // and no longer
  CHECK(server_stat(*b, "delegations.expired") == 1);
  CHECK(read_all(*b, "f", 64) == "after!");
  reap(holder);
}

TEST_CASE("a holder that dies gives its delegations up at once") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--lease-ms", "30000"});
  pid_t holder = holder_process(server.url(), "f", [](Client& c) { take_read_delegation(c, "f"); });
  reap(holder);
  auto b = Client::mount(server.url());
  auto start = std::chrono::steady_clock::now();
  write_path(*b, "f", "after!");
  CHECK(seconds_since(start) < 5.0);  // far below the 30 s lease
  CHECK(server_stat(*b, "delegations.expired") == 0);
  CHECK(server_stat(*b, "delegations.dropped") == 1);  // with its connection
  CHECK(server_stat(*b, "delegations.held") == 1);     // b's own, from its CREATE
}

TEST_CASE(
    "after a read delegation is recalled, its reader takes none for a lease; the writer may") {
  TempDir dir;
  ServerProcess server(dir.path());  // a lease, and so a cool-down, of 5 s
  make_file(server.url(), "log", "start\n");
  auto reader = Client::mount(server.url());
  auto writer = Client::mount(server.url());
  CHECK(read_all(*reader, "log", 64) == "start\n");  // the reader takes a read delegation
  CHECK(read_all(*reader, "log", 64) == "start\n");
  const uint64_t delegated = reader->stats().delegated_opens.load();
  CHECK(delegated == 1);
  writer->truncate("log", 5);  // a change by another: recalls it
  CHECK(server_stat(*writer, "delegations.recalled") == 1);
  // A reader re-opening the file at every turn would take a new delegation each time, and
  // each of the writer's changes would wait for its recall (c5ddafe): now its opens ask the
  // server and are granted none for a lease.
  const uint64_t cooled = server_stat(*writer, "delegations.cooled");
  for (int i = 0; i < 3; ++i) CHECK(read_all(*reader, "log", 64) == "start");
  CHECK(reader->stats().delegated_opens.load() == delegated);
  CHECK(server_stat(*writer, "delegations.cooled") >= cooled + 3);
  const uint64_t recalled = server_stat(*writer, "delegations.recalled");
  writer->truncate("log", 4);  // no delegation to recall
  CHECK(server_stat(*writer, "delegations.recalled") == recalled);
  // The writer, whose change recalled it, may still take one: a write delegation.
  const uint64_t granted_write = server_stat(*writer, "delegations.granted_write");
  File w = writer->open("log", O_RDWR);
  CHECK(server_stat(*writer, "delegations.granted_write") == granted_write + 1);
}

TEST_CASE("without delegations every open asks the server") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--no-delegations"});
  auto fs = Client::mount(server.url());
  write_path(*fs, "f", "x");
  const uint64_t opens = server_stat(*fs, "calls.OPEN");
  for (int i = 0; i < 3; ++i) CHECK(read_all(*fs, "f", 64) == "x");
  CHECK(server_stat(*fs, "calls.OPEN") == opens + 3);
  CHECK(fs->stats().delegated_opens.load() == 0);
}
