// Integration: every procedure against a real odafsd on 127.0.0.1.
#include <dirent.h>
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>

#include "client/client.h"
#include "client/odafs.h"
#include "tests/support/client_util.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::Error;
using odafs::File;
using odafs::test::errno_of;
using odafs::test::failed_with;
using odafs::test::pattern;
using odafs::test::read_all;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

TEST_CASE("mount, create, write, read, stat, readdir, remove") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  CHECK(fs->limits().max_read >= 4096);

  std::string data = pattern(100000, 1);
  {
    File f = fs->open("/hello.bin", O_RDWR | O_CREAT | O_EXCL, 0640);
    CHECK(f.pwrite(data.data(), data.size(), 0) == data.size());
    CHECK(read_all(f, data.size()) == data);
    f.close();
  }
  CHECK(read_local(dir / "hello.bin") == data);
  odafs::Attr a = fs->stat("hello.bin");
  CHECK(a.type == odafs::FileType::kRegular);
  CHECK(a.size == data.size());
  CHECK(a.mode == 0640);

  fs->mkdir("/sub", 0750);
  CHECK(fs->stat("/sub").type == odafs::FileType::kDirectory);
  auto entries = fs->readdir("/");
  std::set<std::string> names;
  for (auto& e : entries) names.insert(e.name);
  CHECK(names == std::set<std::string>{"hello.bin", "sub"});

  fs->rename("/hello.bin", "/sub/moved.bin");
  CHECK(errno_of([&] { fs->stat("/hello.bin"); }) == ENOENT);
  CHECK(fs->stat("/sub/moved.bin").size == data.size());
  fs->unlink("/sub/moved.bin");
  fs->rmdir("/sub");
  CHECK(fs->readdir("/").empty());
  CHECK(::access((dir / "sub").c_str(), F_OK) != 0);
}

TEST_CASE("setattr: chmod, truncate down and up, times") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  auto fs = Client::mount(server.url());
  std::string data = pattern(20000, 2);
  File f = fs->open("f", O_RDWR | O_CREAT, 0644);
  f.pwrite(data.data(), data.size(), 0);
  CHECK(read_all(f, 20000) == data);  // now cached on the server
  fs->chmod("f", 0600);
  CHECK(fs->stat("f").mode == 0600);
  f.truncate(5000);
  CHECK(f.stat().size == 5000);
  CHECK(read_all(f, 20000) == data.substr(0, 5000));
  f.truncate(12000);  // grows with zeros, not with the stale cached bytes
  std::string expect = data.substr(0, 5000) + std::string(7000, '\0');
  CHECK(read_all(f, 20000) == expect);
  CHECK(read_local(dir / "f") == expect);
  fs->truncate("f", 0);
  CHECK(fs->stat("f").size == 0);
  CHECK(read_all(f, 100).empty());

  struct timespec times[2] = {{1000000000, 5}, {1200000000, 123456789}};
  fs->utimens("f", times);
  odafs::Attr a = fs->stat("f");
  CHECK(a.atime.tv_sec == 1000000000);
  CHECK(a.mtime.tv_sec == 1200000000);
  CHECK(a.mtime.tv_nsec == 123456789);
  struct stat local;
  REQUIRE(::stat((dir / "f").c_str(), &local) == 0);
  CHECK(local.st_mtim.tv_sec == 1200000000);
  struct timespec now_m[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  fs->utimens("f", now_m);
  a = fs->stat("f");
  CHECK(a.atime.tv_sec == 1000000000);  // omitted: unchanged
  CHECK(a.mtime.tv_sec > 1700000000);   // the server's clock
}

TEST_CASE("FSSTAT reports the export's file system") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  odafs::FsStat s = fs->statfs();
  struct statvfs local;
  REQUIRE(::statvfs(dir.path().c_str(), &local) == 0);
  CHECK(s.total_bytes == static_cast<uint64_t>(local.f_blocks) * local.f_frsize);
  CHECK(s.total_bytes > 0);
  CHECK(s.free_bytes <= s.total_bytes);
  CHECK(s.avail_bytes <= s.free_bytes);
  CHECK(s.max_name == local.f_namemax);
}

TEST_CASE("reads across block boundaries, past EOF, and files larger than the cache") {
  TempDir dir;
  // 1 MiB cache of 4 KiB blocks, 3 MiB file: every pass evicts.
  ServerProcess server(dir.path(), {"--cache-mb", "1", "--block-size", "4096"});
  std::string data = pattern(3 * 1024 * 1024 + 123, 3);
  write_local(dir / "big", data);
  for (auto mode : {odafs::ReadMode::kInline, odafs::ReadMode::kPrePosted}) {
    CAPTURE(static_cast<int>(mode));
    odafs::MountOptions mo;
    mo.read_mode = mode;
    auto fs = Client::mount(server.url(), mo);
    File f = fs->open("big");
    CHECK(read_all(f, data.size() + 1000) == data);  // whole file, short at EOF
    for (uint64_t off : {0ul, 4095ul, 4096ul, 4097ul, 8191ul, 123456ul, 3145727ul}) {
      CAPTURE(off);
      CHECK(read_all(f, 10000, off) == data.substr(off, 10000));
    }
    CHECK(read_all(f, 100, data.size() - 10) == data.substr(data.size() - 10));
    CHECK(read_all(f, 100, data.size()).empty());
    CHECK(read_all(f, 100, data.size() + 5000).empty());
    // Random small reads.
    for (int i = 0; i < 200; ++i) {
      uint64_t off = (static_cast<uint64_t>(i) * 7919 * 4099) % data.size();
      size_t len = 1 + (static_cast<size_t>(i) * 131) % 20000;
      CHECK(read_all(f, len, off) == data.substr(off, len));
    }
  }
}

TEST_CASE("writes at odd offsets keep the server cache and the file coherent") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  auto fs = Client::mount(server.url());
  File f = fs->open("w", O_RDWR | O_CREAT, 0644);
  std::string model;
  auto apply = [&](uint64_t off, const std::string& bytes) {
    if (model.size() < off + bytes.size()) model.resize(off + bytes.size(), '\0');
    model.replace(off, bytes.size(), bytes);
    f.pwrite(bytes.data(), bytes.size(), off);
  };
  apply(0, pattern(5000, 10));
  CHECK(read_all(f, 100000) == model);  // cache the blocks
  apply(4090, pattern(20, 11));         // straddles a block boundary
  apply(20000, pattern(100, 12));       // leaves a hole
  apply(4096 * 3 + 5, pattern(9000, 13));
  CHECK(read_all(f, 100000) == model);
  CHECK(read_local(dir / "w") == model);
}

TEST_CASE("concurrent clients write disjoint ranges of one file; every byte checks") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096", "--threads", "4"});
  constexpr int kClients = 4;
  constexpr size_t kSlice = 300000;  // not block aligned: neighbours share blocks
  {
    auto fs = Client::mount(server.url());
    fs->open("shared", O_RDWR | O_CREAT).close();
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      try {
        auto fs = Client::mount(server.url());
        File f = fs->open("shared", O_RDWR);
        std::string mine = pattern(kSlice, 100 + c);
        // Write in uneven pieces, interleaving with the others.
        for (size_t off = 0; off < kSlice;) {
          size_t n = std::min<size_t>(kSlice - off, 1000 + 777 * (off % 5));
          f.pwrite(mine.data() + off, n, c * kSlice + off);
          off += n;
        }
        f.close();
      } catch (const std::exception& e) {
        ++failures;
        MESSAGE(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures == 0);
  std::string expect;
  for (int c = 0; c < kClients; ++c) expect += pattern(kSlice, 100 + c);
  auto fs = Client::mount(server.url());
  File f = fs->open("shared");
  CHECK(read_all(f, expect.size() + 10) == expect);
  CHECK(read_local(dir / "shared") == expect);
}

TEST_CASE("readdir with many entries resumes by cookie") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  fs->mkdir("many");
  std::set<std::string> made;
  for (int i = 0; i < 3000; ++i) {
    std::string name = "file-with-a-longish-name-" + std::to_string(i);
    write_local(dir / ("many/" + name), "");
    made.insert(name);
  }
  std::set<std::string> seen;
  for (auto& e : fs->readdir("many")) {
    CHECK(seen.insert(e.name).second);  // no duplicates across pages
  }
  CHECK(seen == made);
  auto before = fs->server_stats();
  uint64_t calls = 0;
  for (auto& [k, v] : before)
    if (k == "calls.READDIR") calls = v;
  CHECK(calls >= 2);  // 3000 names do not fit one 64 KiB reply

  SUBCASE(
      "with attributes: each entry's, as lstat; none for regular files under a write "
      "delegation") {
    write_local(dir / "many/file-with-a-longish-name-7", "seven");
    REQUIRE(symlink("x", (dir / "many/link").c_str()) == 0);
    seen.clear();
    int mismatched = 0;
    for (auto& e : fs->readdir("many", true)) {
      CHECK(seen.insert(e.name).second);
      REQUIRE(e.attr.has_value());
      const odafs::Attr want = fs->lstat("many/" + e.name);
      mismatched += e.attr->fileid != e.fileid || e.attr->size != want.size ||
                    e.attr->mode != want.mode || e.attr->type != e.type;
    }
    CHECK(seen.size() == made.size() + 1);
    CHECK(mismatched == 0);
    // Another client holds a write delegation (its bytes unsent): regular files come
    // without attributes; the symlink keeps its own.
    auto other = Client::mount(server.url());
    File f = other->open("many/file-with-a-longish-name-7", O_RDWR);
    f.pwrite("longer now", 10, 0);
    f.close();
    for (auto& e : fs->readdir("many", true)) {
      CHECK(e.attr.has_value() == (e.type == odafs::FileType::kSymlink));
    }
    CHECK(fs->stat("many/file-with-a-longish-name-7").size == 10);  // recalled
  }
}

TEST_CASE("symlinks: created, read, followed inside the export only") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  fs->mkdir("d");
  write_local(dir / "d/target", "payload");
  fs->symlink("d/target", "rel");
  fs->symlink("/d/target", "abs");
  fs->symlink("../../../../d/target", "up");
  CHECK(fs->readlink("rel") == "d/target");
  CHECK(fs->lstat("rel").type == odafs::FileType::kSymlink);
  for (const char* link : {"rel", "abs", "up"}) {
    CAPTURE(link);
    File f = fs->open(link);
    CHECK(read_all(f, 100) == "payload");
  }
  fs->symlink("loop2", "loop1");
  fs->symlink("loop1", "loop2");
  CHECK(errno_of([&] { fs->open("loop1"); }) == ELOOP);
  fs->unlink("rel");
  CHECK(read_local(dir / "d/target") == "payload");  // unlink removed the link only
}

TEST_CASE("hard links: one file under two names, counted, outliving either name") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  fs->mkdir("d");
  fs->mkdir("e");
  write_local(dir / "d/a", "shared bytes");
  odafs::Attr a = fs->link("d/a", "e/b");
  CHECK(a.nlink == 2);
  CHECK(a.fileid == fs->stat("d/a").fileid);
  CHECK(fs->stat("e/b").fileid == a.fileid);
  CHECK(fs->stat("d/a").nlink == 2);
  // A write through one name is the other's: one inode on the server.
  File w = fs->open("e/b", O_WRONLY);
  CHECK(w.pwrite("SHARED", 6, 0) == 6);
  w.fsync();  // a sole writer's close keeps its bytes (a write delegation): fsync sends them
  w.close();
  CHECK(read_local(dir / "d/a") == "SHARED bytes");
  // Removing one name leaves the file under the other.
  fs->unlink("d/a");
  CHECK(fs->stat("e/b").nlink == 1);
  File r = fs->open("e/b");
  CHECK(read_all(r, 100) == "SHARED bytes");
  // link(2)'s errors: an existing name, a directory, a missing source, a bad name.
  write_local(dir / "c", "x");
  CHECK(errno_of([&] { fs->link("c", "e/b"); }) == EEXIST);
  CHECK(errno_of([&] { fs->link("d", "d2"); }) == EPERM);
  CHECK(errno_of([&] { fs->link("missing", "m2"); }) == ENOENT);
  CHECK(errno_of([&] { fs->link("c", "e/.."); }) != 0);
  CHECK(read_local(dir / "c") == "x");
}

TEST_CASE("O_APPEND is atomic at the server: two clients' appends never overwrite each other") {
  TempDir dir;
  ServerProcess server(dir.path());
  constexpr int kRecords = 200;
  constexpr size_t kRecord = 100;
  write_local(dir / "log", "");
  auto appender = [&](char who) {
    auto fs = Client::mount(server.url());
    File f = fs->open("log", O_WRONLY | O_APPEND);
    for (int i = 0; i < kRecords; ++i) {
      std::string rec(kRecord, who);
      std::snprintf(rec.data(), kRecord, "%c%05d", who, i);
      rec[6] = who;                                              // snprintf's NUL
      CHECK(f.pwrite(rec.data(), rec.size(), 0) == rec.size());  // the offset is ignored
    }
    f.close();
  };
  std::thread a(appender, 'a'), b(appender, 'b');
  a.join();
  b.join();
  std::string all = read_local(dir / "log");
  REQUIRE(all.size() == 2 * kRecords * kRecord);
  int next[2] = {0, 0};  // each writer's records come whole and in its order
  for (size_t at = 0; at < all.size(); at += kRecord) {
    std::string rec = all.substr(at, kRecord);
    REQUIRE((rec[0] == 'a' || rec[0] == 'b'));
    int& n = next[rec[0] - 'a'];
    CHECK(std::stoi(rec.substr(1, 5)) == n);
    CHECK(rec.substr(7) == std::string(kRecord - 7, rec[0]));
    ++n;
  }
  CHECK(next[0] == kRecords);
  CHECK(next[1] == kRecords);
}

TEST_CASE("write stability: FILE_SYNC, DATA_SYNC and UNSTABLE + COMMIT") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  File f = fs->open("s", O_RDWR | O_CREAT);
  odafs::WriteVerifier v1{}, v2{};
  int committed = -1;
  std::string data = pattern(10000, 5);
  CHECK(fs->write(f.handle(), data.data(), data.size(), 0, odafs::Stability::kFileSync, &v1,
                  &committed) == data.size());
  CHECK(committed == 2);
  CHECK(read_local(dir / "s") == data);  // byte for byte in the backing file
  fs->write(f.handle(), data.data(), 10, 0, odafs::Stability::kDataSync, &v2, &committed);
  CHECK(committed == 1);
  fs->write(f.handle(), data.data(), 10, 0, odafs::Stability::kUnstable, &v2, &committed);
  CHECK(committed == 0);
  CHECK(v1 == v2);
  CHECK(fs->commit(f.handle()) == v1);
  CHECK(v1 == fs->limits().write_verifier);
}

TEST_CASE("error codes reach the caller") {
  TempDir dir;
  ServerProcess server(dir.path());
  auto fs = Client::mount(server.url());
  fs->mkdir("d");
  write_local(dir / "d/f", "x");
  write_local(dir / "file", "x");
  CHECK(errno_of([&] { fs->stat("nope"); }) == ENOENT);
  CHECK(errno_of([&] { fs->open("nope/deeper"); }) == ENOENT);
  CHECK(errno_of([&] { fs->open("file", O_CREAT | O_EXCL | O_RDWR); }) == EEXIST);
  CHECK(errno_of([&] { fs->mkdir("d"); }) == EEXIST);
  CHECK(errno_of([&] { fs->open("file/x"); }) == ENOTDIR);
  CHECK(errno_of([&] { fs->readdir("file"); }) == ENOTDIR);
  CHECK(errno_of([&] { fs->rmdir("file"); }) == ENOTDIR);
  CHECK(errno_of([&] { fs->open("d", O_RDWR); }) == EISDIR);
  CHECK(errno_of([&] { fs->unlink("d"); }) == EISDIR);
  CHECK(errno_of([&] { fs->rmdir("d"); }) == ENOTEMPTY);
  CHECK(errno_of([&] { fs->rename("d", "d/f/inside"); }) != 0);
  CHECK(errno_of([&] { fs->open(std::string(300, 'n')); }) == ENAMETOOLONG);
  CHECK(errno_of([&] { fs->readlink("file"); }) == EINVAL);
  // ESTALE: a handle whose file is gone.
  File f = fs->open("d/f");
  odafs::Handle h = f.handle();
  fs->unlink("d/f");
  CHECK(errno_of([&] { fs->getattr(h); }) == ESTALE);
  char buf[8];
  bool eof;
  CHECK(errno_of([&] { fs->read(h, buf, 8, 0, &eof); }) == ESTALE);
  // A forged handle is refused, not resolved.
  odafs::Handle forged = fs->root();
  forged[20] ^= 0x40;
  CHECK(errno_of([&] { fs->getattr(forged); }) == ESTALE);
  odafs::Handle junk{};
  CHECK(errno_of([&] { fs->getattr(junk); }) == ESTALE);
}

TEST_CASE("EACCES for a caller without permission (AUTH_SYS identity)" *
          doctest::skip(geteuid() != 0) *
          doctest::description("needs root: the server acts as another uid")) {
  TempDir dir;
  ServerProcess server(dir.path(), {"--auth-sys"});
  write_local(dir / "secret", "top secret");
  ::chmod((dir / "secret").c_str(), 0600);
  ::mkdir((dir / "locked").c_str(), 0700);
  ::chmod(dir.path().c_str(), 0777);
  // This process's credentials are what the client sends; become nobody for the mount.
  pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(90);
    try {
      auto fs = Client::mount(server.url());
      File f = fs->open("secret");
      char b[4];
      int e = errno_of([&] { f.pread(b, 4, 0); });
      if (e != EACCES) _exit(91);
      if (errno_of([&] { fs->open("locked/x", O_CREAT | O_RDWR); }) != EACCES) _exit(92);
      File mine = fs->open("mine", O_CREAT | O_RDWR, 0644);
      if (fs->stat("mine").uid != 65534) _exit(93);  // created as the caller
      _exit(0);
    } catch (...) {
      _exit(94);
    }
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("read_batch pipelines many reads on one connection") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  std::string data = pattern(1 << 20, 9);
  write_local(dir / "b", data);
  for (auto mode : {odafs::ReadMode::kInline, odafs::ReadMode::kPrePosted}) {
    odafs::MountOptions mo;
    mo.read_mode = mode;
    auto fs = Client::mount(server.url(), mo);
    File f = fs->open("b");
    std::vector<std::string> bufs(200, std::string(5000, '\0'));
    std::vector<odafs::ReadRequest> reqs(200);
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].file = &f;
      reqs[i].buf = bufs[i].data();
      reqs[i].len = 5000;
      reqs[i].offset = i * 5231;
    }
    reqs.back().offset = data.size() - 100;  // short at EOF
    fs->read_batch(reqs);
    for (size_t i = 0; i + 1 < reqs.size(); ++i) {
      CHECK(reqs[i].error == 0);
      CHECK(reqs[i].result == 5000);
      CHECK(bufs[i] == data.substr(reqs[i].offset, 5000));
    }
    CHECK(reqs.back().result == 100);
  }
}

TEST_CASE("the C API") {
  TempDir dir;
  ServerProcess server(dir.path());
  odafs_client* c = odafs_mount(server.url().c_str());
  REQUIRE(c != nullptr);
  CHECK(odafs_mkdir(c, "/cdir", 0755) == 0);
  odafs_file* f = odafs_open(c, "/cdir/x", O_RDWR | O_CREAT, 0644);
  REQUIRE(f != nullptr);
  CHECK(odafs_pwrite(f, "hello", 5, 0) == 5);
  char buf[16] = {};
  CHECK(odafs_pread(f, buf, sizeof buf, 0) == 5);
  CHECK(std::string(buf) == "hello");
  struct stat st;
  CHECK(odafs_fstat(f, &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK(st.st_size == 5);
  CHECK(odafs_close(f) == 0);
  CHECK(failed_with(odafs_stat(c, "/missing", &st) == -1) == ENOENT);
  CHECK(failed_with(odafs_open(c, "/cdir", O_RDWR, 0) == nullptr) == EISDIR);
  int count = 0;
  CHECK(odafs_readdir(
            c, "/cdir",
            [](void* ctx, const char*, unsigned char, uint64_t) {
              ++*static_cast<int*>(ctx);
              return 0;
            },
            &count) == 0);
  CHECK(count == 1);
  CHECK(odafs_link(c, "/cdir/x", "/cdir/y") == 0);
  CHECK(odafs_stat(c, "/cdir/y", &st) == 0);
  CHECK(st.st_nlink == 2);
  CHECK(failed_with(odafs_link(c, "/cdir", "/cdir2") != 0) == EPERM);
  // access and lchown, as the server (itself here) decides: x has no x bit, which even
  // root needs to execute.
  CHECK(odafs_access(c, "/cdir/x", R_OK | W_OK) == 0);
  CHECK(failed_with(odafs_access(c, "/cdir/x", X_OK) != 0) == EACCES);
  CHECK(failed_with(odafs_access(c, "/cdir/x", 0100) != 0) == EINVAL);
  CHECK(failed_with(odafs_access(c, "/cdir/none", R_OK) != 0) == ENOENT);
  CHECK(odafs_lchown(c, "/cdir/x", static_cast<uid_t>(-1), static_cast<gid_t>(-1)) == 0);
  if (geteuid() == 0) {
    CHECK(odafs_lchown(c, "/cdir/x", 1234, 5678) == 0);
    CHECK(stat((dir / "cdir/x").c_str(), &st) == 0);
    CHECK(st.st_uid == 1234u);
    CHECK(st.st_gid == 5678u);
  } else {
    CHECK(failed_with(odafs_lchown(c, "/cdir/x", getuid() + 1, static_cast<gid_t>(-1)) != 0) ==
          EPERM);
  }
  // mknod: FIFOs and sockets, typed in stat and readdir; a regular file is not its; a
  // device needs the export's `devices` rule (the loopback default has it) and root.
  CHECK(odafs_mknod(c, "/cdir/fifo", S_IFIFO | 0640, 0) == 0);
  CHECK(odafs_lstat(c, "/cdir/fifo", &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK((st.st_mode & 07777) == 0640);  // exactly as asked: no umask at the server
  CHECK(odafs_mknod(c, "/cdir/sock", S_IFSOCK | 0600, 0) == 0);
  CHECK(odafs_lstat(c, "/cdir/sock", &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK(failed_with(odafs_mknod(c, "/cdir/reg", S_IFREG | 0600, 0) != 0) == EINVAL);
  if (geteuid() == 0) {
    CHECK(odafs_mknod(c, "/cdir/null", S_IFCHR | 0666, makedev(1, 3)) == 0);
    CHECK(odafs_lstat(c, "/cdir/null", &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
    CHECK(st.st_rdev == makedev(1, 3));
    CHECK(odafs_unlink(c, "/cdir/null") == 0);
  } else {
    CHECK(failed_with(odafs_mknod(c, "/cdir/null", S_IFCHR | 0666, makedev(1, 3)) != 0) == EPERM);
  }
  CHECK(failed_with(odafs_mknod(c, "/cdir/fifo", S_IFIFO | 0640, 0) != 0) == EEXIST);
  struct Types {
    unsigned char fifo = 0, sock = 0;
  } types;
  CHECK(odafs_readdir(
            c, "/cdir",
            [](void* ctx, const char* name, unsigned char type, uint64_t) {
              auto* t = static_cast<Types*>(ctx);
              if (std::string(name) == "fifo") t->fifo = type;
              if (std::string(name) == "sock") t->sock = type;
              return 0;
            },
            &types) == 0);
  CHECK(types.fifo == DT_FIFO);
  CHECK(types.sock == DT_SOCK);
  CHECK(odafs_unlink(c, "/cdir/fifo") == 0);
  CHECK(odafs_unlink(c, "/cdir/sock") == 0);
  CHECK(odafs_unlink(c, "/cdir/x") == 0);
  CHECK(odafs_unlink(c, "/cdir/y") == 0);
  CHECK(odafs_rmdir(c, "/cdir") == 0);
  odafs_unmount(c);
  CHECK(failed_with(odafs_mount("http://nope") == nullptr) == EINVAL);
}

TEST_CASE("asynchronous reads: many in flight, collected in any order") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--block-size", "4096"});
  std::string data = pattern(1 << 20, 61);
  write_local(dir / "a", data);
  for (auto mode : {odafs::ReadMode::kInline, odafs::ReadMode::kPrePosted}) {
    odafs::MountOptions mo;
    mo.read_mode = mode;
    auto fs = Client::mount(server.url(), mo);
    File f = fs->open("a");
    constexpr int kOps = 48;
    std::vector<odafs::AsyncRead> ops(kOps);
    std::vector<std::string> bufs(kOps, std::string(8192, '\0'));
    for (int i = 0; i < kOps; ++i) {
      fs->start_read(ops[i], f.handle(), bufs[i].data(), 8192, i * 20000u);
    }
    for (int i = kOps - 1; i >= 0; --i) {  // newest first
      bool eof = true;
      CHECK(fs->finish_read(ops[i], &eof) == 8192);
      CHECK_FALSE(eof);
      CHECK(bufs[i] == data.substr(i * 20000u, 8192));
      CHECK_FALSE(ops[i].in_flight());
    }
    // Reuse, past EOF, and misuse.
    bool eof = false;
    fs->start_read(ops[0], f.handle(), bufs[0].data(), 8192, data.size() - 10);
    CHECK(errno_of([&] { fs->start_read(ops[0], f.handle(), bufs[0].data(), 10, 0); }) == EBUSY);
    CHECK(fs->finish_read(ops[0], &eof) == 10);
    CHECK(eof);
    CHECK(errno_of([&] { fs->finish_read(ops[0]); }) == EINVAL);
    // An operation destroyed in flight collects its reply first; the client stays usable.
    {
      odafs::AsyncRead dropped;
      fs->start_read(dropped, f.handle(), bufs[1].data(), 8192, 0);
    }
    CHECK(read_all(f, 100, 5) == data.substr(5, 100));
  }
}

TEST_CASE(
    "after a server restart: FIFOs and sockets made by MKNOD are what they were, the "
    "owner of a mode-0 file still writes through its open file, MKNOD works again") {
  TempDir dir;
  ServerProcess server(dir.path());
  odafs::MountOptions patient;
  patient.reconnect_window_ms = 10000;
  auto fs = Client::mount(server.url(), patient);
  fs->mknod("fifo", S_IFIFO | 0640);
  fs->mknod("sock", S_IFSOCK | 0600);
  // A file whose mode forbids everything, open for writing by its owner (this client).
  File f = fs->open("zero", O_RDWR | O_CREAT | O_EXCL, 0);
  CHECK(f.pwrite("before", 6, 0) == 6);
  f.fsync();
  server.restart();
  odafs::Attr fifo = fs->lstat("fifo");  // the handles of the old instance are stale: found again
  CHECK(fifo.type == odafs::FileType::kFifo);
  CHECK(fifo.mode == 0640);
  CHECK(fs->lstat("sock").type == odafs::FileType::kSocket);
  CHECK(f.pwrite("after!", 6, 6) == 6);
  f.fsync();
  f.close();
  CHECK(read_local(dir / "zero") == "beforeafter!");
  struct stat st {};
  REQUIRE(lstat((dir / "zero").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0);
  fs->mknod("fifo2", S_IFIFO | 0600);
  CHECK(fs->lstat("fifo2").type == odafs::FileType::kFifo);
  CHECK(errno_of([&] { fs->mknod("fifo", S_IFIFO | 0600); }) == EEXIST);
}
