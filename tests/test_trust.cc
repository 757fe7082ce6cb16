// Trust, tried as an attacker would: raw calls from an unprivileged local user (a forked
// child that became uid 1002) with AUTH_NONE, forged AUTH_SYS credentials and odd ids; the
// export rules (--clients: no match, ro, root_squash, all_squash, anonuid, secure;
// --read-only); the procedure table of docs/protocol.md walked as another user against a
// 0600 file and a 0700 directory; and the node table's descriptors, which one user's
// LOOKUPs must not turn against another's reads.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <grp.h>
#include <ifaddrs.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "base/net.h"
#include "rpc/message_header.h"
#include "rpc/record.h"
#include "tests/support/confinement_world.h"
#include "tests/support/delegation_holder.h"
#include "tests/support/hostile.h"

using namespace odafs::test::confinement;
using odafs::rpc::AuthSysCred;
using odafs::test::stat_of;

// A case that becomes other users and needs odafsd to act as its callers: root only.
#define ROOT_TEST(name)                           \
  TEST_CASE(name* doctest::skip(geteuid() != 0) * \
            doctest::description("needs root: becomes other users, odafsd acts as callers"))

namespace {

constexpr uint32_t kAlice = 1001;
constexpr uint32_t kBob = 1002;
constexpr uint32_t kNobody = 65534;

AuthSysCred as_user(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups = {}) {
  return AuthSysCred{uid, gid, "attacker", std::move(groups)};
}

uid_t owner_of(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

// Runs body in a forked child and returns what body returned: a list of results, one per
// check, for the parent to compare ({-1000} when body threw).
std::vector<int> in_child(const std::function<std::vector<int>()>& body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    std::vector<int> out;
    try {
      out = body();
    } catch (...) {
      out = {-1000};
    }
    [[maybe_unused]] ssize_t n = write(fds[1], out.data(), out.size() * sizeof(int));
    _exit(0);
  }
  close(fds[1]);
  std::vector<int> results;
  int v;
  while (read(fds[0], &v, sizeof v) == sizeof v) results.push_back(v);
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return results;
}

// Runs body in a child process that has become uid:gid (no groups): in_child.
std::vector<int> as_local_user(uint32_t uid, uint32_t gid,
                               const std::function<std::vector<int>()>& body) {
  return in_child([&]() -> std::vector<int> {
    if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) return {-1001};
    return body();
  });
}

// An export as an attacker finds it: root's 0600 file, alice's 0600 file and 0700
// directory (with a file in it), a 0640 file of group 0, and a world-writable directory.
struct Export {
  TempDir dir;
  Export() {
    REQUIRE(chmod(dir.path().c_str(), 0755) == 0);
    write_local(dir / "rootfile", "root's secret");
    REQUIRE(chmod((dir / "rootfile").c_str(), 0600) == 0);
    write_local(dir / "alicefile", "alice's secret");
    REQUIRE(chmod((dir / "alicefile").c_str(), 0600) == 0);
    REQUIRE(chown((dir / "alicefile").c_str(), kAlice, kAlice) == 0);
    REQUIRE(mkdir((dir / "alicedir").c_str(), 0700) == 0);
    write_local(dir / "alicedir/inner", "inner");
    REQUIRE(chown((dir / "alicedir/inner").c_str(), kAlice, kAlice) == 0);
    REQUIRE(chown((dir / "alicedir").c_str(), kAlice, kAlice) == 0);
    write_local(dir / "group0", "for group 0");
    REQUIRE(chmod((dir / "group0").c_str(), 0640) == 0);
    REQUIRE(mkdir((dir / "pub").c_str(), 0777) == 0);
    REQUIRE(chmod((dir / "pub").c_str(), 0777) == 0);
  }
};

}  // namespace

ROOT_TEST("an unprivileged local user's raw calls: AUTH_NONE is anonymous, forged ids refused") {
  Export e;
  ServerProcess server(e.dir.path());
  const uint16_t port = server.port();
  std::vector<int> got = as_local_user(kBob, kBob, [port] {
    std::vector<int> r;
    Handle root, f;
    {
      Raw none(port, std::nullopt);  // AUTH_NONE
      r.push_back(none.mount("/", &root));
      r.push_back(none.lookup(root, "rootfile", &f));
      r.push_back(none.read(f));
      r.push_back(none.setattr(f, Raw::Set::kOwner, kBob));
      Handle pub;
      r.push_back(none.lookup(root, "pub", &pub));
      r.push_back(none.create(pub, "by_none"));
    }
    // Claiming someone else: root, alice.
    r.push_back(Raw(port, as_user(0, 0)).mount("/"));
    r.push_back(Raw(port, as_user(kAlice, kAlice)).mount("/"));
    // Ids the kernel cannot take.
    r.push_back(Raw(port, as_user(kBob, UINT32_MAX)).mount("/"));
    r.push_back(Raw(port, as_user(kBob, kBob, {UINT32_MAX})).mount("/"));
    r.push_back(Raw(port, as_user(UINT32_MAX, kBob)).mount("/"));
    // Himself, claiming group 0: he is not in it, so it is dropped.
    Raw self(port, as_user(kBob, 0, {0}));
    Handle g;
    r.push_back(self.mount("/", &root));
    r.push_back(self.lookup(root, "group0", &g));
    r.push_back(self.read(g));
    return r;
  });
  const std::vector<int> want = {ODAFS_OK,       ODAFS_OK, ODAFS_ERR_ACCES,
                                 ODAFS_ERR_PERM, ODAFS_OK, ODAFS_OK,          // AUTH_NONE
                                 kBadCred,       kBadCred,                    // others
                                 kBadCred,       kBadCred, kBadCred,          // odd ids
                                 ODAFS_OK,       ODAFS_OK, ODAFS_ERR_ACCES};  // group 0
  CHECK(got == want);
  CHECK(owner_of(e.dir / "rootfile") == 0);
  CHECK(read_local(e.dir / "rootfile") == "root's secret");
  CHECK(owner_of(e.dir / "pub/by_none") == kNobody);
  auto admin = odafs::Client::mount(server.url());
  CHECK(stat_of(*admin, "auth.refused.not_socket_owner") == 2);
  CHECK(stat_of(*admin, "auth.refused.bad_credential") == 3);
}

namespace {

// Why this machine cannot give a test a network namespace of its own with a second
// address of the host's ("" when it can): for a doctest skip.
const char* netns_skip() {
  static const std::string why = []() -> std::string {
    if (geteuid() != 0) return "needs root: makes a network namespace, becomes other users";
    if (std::system("ip -V >/dev/null 2>&1") != 0) return "needs the ip tool (iproute2)";
    pid_t child = fork();
    if (child < 0) return "cannot fork";
    if (child == 0) {
      _exit(unshare(CLONE_NEWNET) == 0 && std::system("ip link set lo up 2>/dev/null") == 0 ? 0
                                                                                            : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return "cannot make a network namespace here (unshare(CLONE_NEWNET), ip link)";
    }
    return "";
  }();
  return why.c_str();
}

}  // namespace

TEST_CASE(
    "a local user connecting from another of the host's addresses is named by the kernel: "
    "he cannot claim another uid" *
    doctest::skip(*netns_skip() != '\0') * doctest::description(netns_skip())) {
  Export e;
  // All of it in a network namespace of the test's own (gone with its last process): its
  // loopback, and a second address of the host's, 10.253.0.1, on a dummy interface (or on
  // lo where dummy interfaces cannot be made).
  std::vector<int> got = in_child([&]() -> std::vector<int> {
    if (unshare(CLONE_NEWNET) != 0) return {-2000};
    if (std::system("exec 2>/dev/null; ip link set lo up && "
                    "{ ip link add odafs-t0 type dummy && ip link set odafs-t0 up && "
                    "ip addr add 10.253.0.1/32 dev odafs-t0 || "
                    "ip addr add 10.253.0.1/32 dev lo; }") != 0) {
      return {-2001};
    }
    // Listening on every address of the namespace: bob connects to 10.253.0.1, so his
    // socket's address is that one, not loopback.
    ServerProcess server(e.dir.path(), {"--listen", "0.0.0.0:0", "--clients", "*(rw)"});
    const uint16_t port = server.port();
    return as_local_user(kBob, kBob, [port] {
      std::vector<int> r;
      Handle root, f;
      {
        Raw alice(port, as_user(kAlice, kAlice), "10.253.0.1");
        r.push_back(alice.mount("/", &root));
        r.push_back(alice.lookup(root, "alicefile", &f));
        r.push_back(alice.read(f));
      }
      r.push_back(Raw(port, as_user(0, 0), "10.253.0.1").mount("/", &root));
      r.push_back(Raw(port, as_user(kBob, kBob), "10.253.0.1").mount("/", &root));
      return r;
    });
  });
  // Claiming alice or root is refused; claiming himself works (the kernel named him).
  std::string results;
  for (int v : got) results += std::to_string(v) + " ";
  CAPTURE(results);
  CHECK(got == std::vector<int>{kBadCred, kBadCred, kBadCred, kBadCred, ODAFS_OK});
  CHECK(read_local(e.dir / "alicefile") == "alice's secret");
}

TEST_CASE(
    "every address of the host's interfaces is local, IPv4 mapped into IPv6 too; others not") {
  // An address from its text: IPv6 when it has a colon.
  auto address = [](const std::string& text) {
    sockaddr_storage a{};
    const bool is_v6 = text.find(':') != std::string::npos;
    a.ss_family = is_v6 ? AF_INET6 : AF_INET;
    void* bytes = is_v6 ? static_cast<void*>(&reinterpret_cast<sockaddr_in6&>(a).sin6_addr)
                        : static_cast<void*>(&reinterpret_cast<sockaddr_in&>(a).sin_addr);
    REQUIRE(inet_pton(a.ss_family, text.c_str(), bytes) == 1);
    return a;
  };
  ifaddrs* list = nullptr;
  REQUIRE(getifaddrs(&list) == 0);
  int checked = 0;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text,
                sizeof text);
      CAPTURE(text);
      CHECK(odafs::net::is_host_address(address(text)));
      CHECK(odafs::net::is_host_address(address("::ffff:" + std::string(text))));
      ++checked;
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      sockaddr_storage a{};
      std::memcpy(&a, i->ifa_addr, sizeof(sockaddr_in6));
      CHECK(odafs::net::is_host_address(a));
      ++checked;
    }
  }
  freeifaddrs(list);
  CHECK(checked >= 1);
  // Documentation ranges (RFC 5737, RFC 3849): no host here has them.
  CHECK_FALSE(odafs::net::is_host_address(address("192.0.2.77")));
  CHECK_FALSE(odafs::net::is_host_address(address("::ffff:192.0.2.77")));
  CHECK_FALSE(odafs::net::is_host_address(address("2001:db8::77")));
}

TEST_CASE("a credential with more than 16 groups, or none decodable, is AUTH_BADCRED") {
  TempDir dir;
  ServerProcess server(dir.path());
  // A NULL call by hand: AUTH_SYS with 17 groups.
  std::string body;
  auto put = [&body](uint32_t v) {
    v = htonl(v);
    body.append(reinterpret_cast<const char*>(&v), 4);
  };
  for (uint32_t v :
       {7u, 0u /*CALL*/, 2u, static_cast<uint32_t>(ODAFS_PROGRAM), static_cast<uint32_t>(ODAFS_V2),
        static_cast<uint32_t>(ODAFSPROC_GETATTR), 1u /*AUTH_SYS*/, 4u * (1 + 1 + 1 + 1 + 1 + 17)}) {
    put(v);
  }
  put(0);  // stamp
  put(0);  // machine name: empty
  put(getuid());
  put(getgid());
  put(17);
  for (int i = 0; i < 17; ++i) put(100 + i);
  put(0);  // verifier AUTH_NONE
  put(0);
  body.append(40, '\0');  // a handle's worth of arguments
  std::string record(4, '\0');
  uint32_t mark = htonl(0x80000000u | static_cast<uint32_t>(body.size()));
  std::memcpy(record.data(), &mark, 4);
  record += body;
  int fd = odafs::net::connect_tcp({"127.0.0.1", server.port()});
  REQUIRE(write(fd, record.data(), record.size()) == static_cast<ssize_t>(record.size()));
  char reply[256];
  REQUIRE(odafs::net::read_full(fd, reply, 4));
  const uint32_t len = ntohl(*reinterpret_cast<uint32_t*>(reply)) & 0x7fffffffu;
  REQUIRE(len <= sizeof reply);
  REQUIRE(odafs::net::read_full(fd, reply, len));
  close(fd);
  odafs::rpc::ReplyHeader h;
  size_t offset = 0;
  REQUIRE(odafs::rpc::decode_reply_header(reply, len, &h, &offset));
  CHECK(h.xid == 7);
  CHECK(h.reply_stat == MSG_DENIED);
  CHECK(h.reject_stat == AUTH_ERROR);
  CHECK(h.auth_stat == AUTH_BADCRED);
}

ROOT_TEST("--clients: no rule matches, secure, ro, root_squash, all_squash, anonuid") {
  Export e;
  SUBCASE("a client no rule admits is refused whatever it calls, NULL included") {
    ServerProcess server(e.dir.path(), {"--clients", "10.0.0.0/8(rw)"});
    CHECK(Raw(server.port()).null() == kTooWeak);
    CHECK(Raw(server.port()).mount("/") == kTooWeak);
    Handle root{};  // a handle guessed or kept from elsewhere does not help
    CHECK(Raw(server.port()).getattr(root) == kTooWeak);
  }
  SUBCASE("secure: a source port of 1024 and above is refused") {
    ServerProcess server(e.dir.path(), {"--clients", "127.0.0.1(rw,secure,no_root_squash)"});
    CHECK(Raw(server.port()).mount("/") == kTooWeak);
  }
  SUBCASE("root_squash (the default of a rule): root's calls run as the anonymous user") {
    ServerProcess server(e.dir.path(), {"--clients", "127.0.0.1"});
    Raw raw(server.port(), as_user(0, 0));
    Handle root, f, pub;
    REQUIRE(raw.mount("/", &root) == ODAFS_OK);
    REQUIRE(raw.lookup(root, "rootfile", &f) == ODAFS_OK);
    CHECK(raw.read(f) == ODAFS_ERR_ACCES);
    REQUIRE(raw.lookup(root, "pub", &pub) == ODAFS_OK);
    CHECK(raw.create(pub, "squashed") == ODAFS_OK);
    CHECK(owner_of(e.dir / "pub/squashed") == kNobody);
  }
  SUBCASE("no_root_squash: root is root") {
    ServerProcess server(e.dir.path(), {"--clients", "127.0.0.1(no_root_squash)"});
    Raw raw(server.port(), as_user(0, 0));
    Handle root, f;
    REQUIRE(raw.mount("/", &root) == ODAFS_OK);
    REQUIRE(raw.lookup(root, "rootfile", &f) == ODAFS_OK);
    CHECK(raw.read(f) == ODAFS_OK);
  }
  SUBCASE("all_squash with anonuid/anongid: everyone is that user") {
    ServerProcess server(e.dir.path(),
                         {"--clients", "127.0.0.0/8(all_squash,anonuid=4242,anongid=4243)"});
    Raw raw(server.port(), as_user(0, 0));
    Handle root, pub;
    REQUIRE(raw.mount("/", &root) == ODAFS_OK);
    REQUIRE(raw.lookup(root, "pub", &pub) == ODAFS_OK);
    CHECK(raw.create(pub, "everyone") == ODAFS_OK);
    struct stat st {};
    REQUIRE(stat((e.dir / "pub/everyone").c_str(), &st) == 0);
    CHECK(st.st_uid == 4242);
    CHECK(st.st_gid == 4243);
  }
}

ROOT_TEST("MKNOD over raw RPC: devices only under a `devices` rule and for unsquashed root") {
  Export e;
  SUBCASE("without `devices`: FIFOs and sockets by write permission, no device for anyone") {
    ServerProcess server(e.dir.path(), {"--clients", "127.0.0.1(no_root_squash)"});
    Raw root_raw(server.port(), as_user(0, 0));
    Handle root, pub;
    REQUIRE(root_raw.mount("/", &root) == ODAFS_OK);
    REQUIRE(root_raw.lookup(root, "pub", &pub) == ODAFS_OK);
    CHECK(root_raw.mknod(pub, "null", ODAFS_CHR, 0666, 1, 3) == ODAFS_ERR_PERM);
    CHECK(root_raw.mknod(pub, "loop", ODAFS_BLK, 0600, 7, 0) == ODAFS_ERR_PERM);
    // Other types are the other procedures': INVAL, as is a type that is none.
    CHECK(root_raw.mknod(pub, "reg", ODAFS_REG) == ODAFS_ERR_INVAL);
    CHECK(root_raw.mknod(pub, "dir", ODAFS_DIR) == ODAFS_ERR_INVAL);
    CHECK(root_raw.mknod(pub, "lnk", ODAFS_LNK) == ODAFS_ERR_INVAL);
    CHECK(root_raw.mknod(pub, "odd", 99) == ODAFS_ERR_INVAL);
    CHECK(!std::filesystem::exists(e.dir / "pub/null"));
    // A mode with type bits in it gets the permission bits only.
    odafs_fattr attr{};
    CHECK(root_raw.mknod(pub, "fifo", ODAFS_FIFO, S_IFCHR | 04640, 1, 3, &attr) == ODAFS_OK);
    CHECK(attr.type == ODAFS_FIFO);
    CHECK(attr.mode == 04640);
    CHECK(attr.rdev.major == 0);
    struct stat st {};
    REQUIRE(lstat((e.dir / "pub/fifo").c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    Raw bob(server.port(), as_user(kBob, kBob));
    CHECK(bob.mknod(root, "in_root", ODAFS_FIFO) == ODAFS_ERR_ACCES);  // 0755, root's
    Handle alicedir;
    CHECK(bob.lookup(root, "alicedir", &alicedir) == ODAFS_OK);
    CHECK(bob.mknod(alicedir, "in_alice", ODAFS_SOCK) == ODAFS_ERR_ACCES);
    CHECK(bob.mknod(pub, "bobs", ODAFS_SOCK, 0600) == ODAFS_OK);
    CHECK(owner_of(e.dir / "pub/bobs") == kBob);
    CHECK(bob.mknod(pub, "bobs", ODAFS_FIFO) == ODAFS_ERR_EXIST);
    CHECK(bob.mknod(pub, "../escape", ODAFS_FIFO) != ODAFS_OK);
    // A FIFO bob may only read: CREATE of it (UNCHECKED opens what exists) must neither
    // wait for a writer (opening a FIFO to read does) nor treat it as a file.
    CHECK(root_raw.mknod(pub, "ro_fifo", ODAFS_FIFO, 0444) == ODAFS_OK);
    CHECK(bob.create(pub, "ro_fifo", ODAFS_CREATE_UNCHECKED) == ODAFS_ERR_EXIST);
    CHECK(root_raw.create(pub, "ro_fifo", ODAFS_CREATE_UNCHECKED) == ODAFS_ERR_EXIST);
    Handle fifo;
    CHECK(bob.lookup(pub, "ro_fifo", &fifo) == ODAFS_OK);
    CHECK(bob.read(fifo) == ODAFS_ERR_INVAL);
  }
  SUBCASE("with `devices`: root may; a squashed root and any other user may not") {
    ServerProcess server(e.dir.path(), {"--clients", "127.0.0.1(no_root_squash,devices)"});
    Raw root_raw(server.port(), as_user(0, 0));
    Handle root, pub;
    REQUIRE(root_raw.mount("/", &root) == ODAFS_OK);
    REQUIRE(root_raw.lookup(root, "pub", &pub) == ODAFS_OK);
    odafs_fattr attr{};
    CHECK(root_raw.mknod(pub, "null", ODAFS_CHR, 0666, 1, 3, &attr) == ODAFS_OK);
    CHECK(attr.type == ODAFS_CHR);
    CHECK(attr.rdev.major == 1);
    CHECK(attr.rdev.minor == 3);
    struct stat st {};
    REQUIRE(lstat((e.dir / "pub/null").c_str(), &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
    CHECK(st.st_rdev == makedev(1, 3));
    Raw bob(server.port(), as_user(kBob, kBob));
    CHECK(bob.mknod(pub, "bobs_null", ODAFS_CHR, 0666, 1, 3) == ODAFS_ERR_PERM);
    CHECK(bob.mknod(pub, "bobs_loop", ODAFS_BLK, 0600, 7, 0) == ODAFS_ERR_PERM);
  }
  SUBCASE("`devices` with root squashed: root's MKNOD runs as the anonymous user: PERM") {
    ServerProcess server(e.dir.path(), {"--clients", "127.0.0.1(devices)"});
    Raw root_raw(server.port(), as_user(0, 0));
    Handle root, pub;
    REQUIRE(root_raw.mount("/", &root) == ODAFS_OK);
    REQUIRE(root_raw.lookup(root, "pub", &pub) == ODAFS_OK);
    CHECK(root_raw.mknod(pub, "null", ODAFS_CHR, 0666, 1, 3) == ODAFS_ERR_PERM);
    CHECK(root_raw.mknod(pub, "fifo", ODAFS_FIFO) == ODAFS_OK);
    CHECK(owner_of(e.dir / "pub/fifo") == kNobody);
  }
}

ROOT_TEST("a restarted server squashes and refuses as before; admissions are made anew") {
  Export e;
  ServerProcess server(e.dir.path(), {"--clients", "127.0.0.1"});  // root_squash
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    if (round == 1) server.restart();  // same port, export and flags; every connection new
    Raw root(server.port(), as_user(0, 0));
    Handle dir, pub;
    REQUIRE(root.mount("/", &dir) == ODAFS_OK);
    REQUIRE(root.lookup(dir, "pub", &pub) == ODAFS_OK);
    const std::string name = "squashed" + std::to_string(round);
    CHECK(root.create(pub, name) == ODAFS_OK);
    CHECK(owner_of(e.dir / ("pub/" + name)) == kNobody);
    std::vector<int> bob = as_local_user(kBob, kBob, [&] {
      return std::vector<int>{Raw(server.port(), as_user(kAlice, kAlice)).mount("/"),
                              Raw(server.port(), std::nullopt).mount("/")};
    });
    CHECK(bob == std::vector<int>{kBadCred, ODAFS_OK});
  }
}

ROOT_TEST("ro rules and --read-only: EROFS from every change, reads as before") {
  Export e;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--clients", "127.0.0.1(ro,no_root_squash)"},
        std::vector<std::string>{"--read-only"}}) {
    CAPTURE(args[0]);
    ServerProcess server(e.dir.path(), args);
    Raw raw(server.port());
    Handle root, f, pub;
    REQUIRE(raw.mount("/", &root) == ODAFS_OK);
    REQUIRE(raw.lookup(root, "rootfile", &f) == ODAFS_OK);
    REQUIRE(raw.lookup(root, "pub", &pub) == ODAFS_OK);
    CHECK(raw.read(f) == ODAFS_OK);
    CHECK(raw.write(f) == ODAFS_ERR_ROFS);
    CHECK(raw.write_direct(f) == ODAFS_ERR_ROFS);
    CHECK(raw.setattr(f, Raw::Set::kMode) == ODAFS_ERR_ROFS);
    CHECK(raw.create(pub, "x") == ODAFS_ERR_ROFS);
    CHECK(raw.mkdir(pub, "d") == ODAFS_ERR_ROFS);
    CHECK(raw.symlink(pub, "l", "t") == ODAFS_ERR_ROFS);
    CHECK(raw.link(f, pub, "h") == ODAFS_ERR_ROFS);
    CHECK(raw.rename(root, "rootfile", pub, "moved") == ODAFS_ERR_ROFS);
    CHECK(raw.remove(root, "rootfile") == ODAFS_ERR_ROFS);
    uint32_t granted = 0;
    CHECK(raw.access(f, ODAFS_ACCESS_READ | ODAFS_ACCESS_WRITE, &granted) == ODAFS_OK);
    CHECK(granted == ODAFS_ACCESS_READ);
    CHECK(read_local(e.dir / "rootfile") == "root's secret");
    CHECK(stat_of(*odafs::Client::mount(server.url()), "auth.read_only") == 9);
  }
}

TEST_CASE("odafsd refuses a non-loopback --listen without --clients, and bad rules") {
  TempDir dir;
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--listen", "0.0.0.0:0"},
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--clients", "10.0.0.0/99"},
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--clients", "*(rw,bogus)"}}) {
    CAPTURE(extra[1]);
    // Bounded: a server that wrongly starts would otherwise be waited for for ever.
    std::vector<std::string> args = {"timeout", "10", ODAFSD_PATH, "--export", dir.path()};
    args.insert(args.end(), extra.begin(), extra.end());
    std::string cmd;
    for (const std::string& a : args) cmd += "'" + a + "' ";
    cmd += "2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
    int status = pclose(p);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 2);
    CHECK(out.find("--clients") != std::string::npos);
  }
}

// The procedure table of docs/protocol.md ("Who may call what"), walked as bob against
// alice's 0600 file and her 0700 directory.
ROOT_TEST("every procedure, as another user, against a 0600 file and a 0700 directory") {
  Export e;
  ServerProcess server(e.dir.path());
  Handle root, file, dir, inner;
  {
    Raw admin(server.port());
    REQUIRE(admin.mount("/", &root) == ODAFS_OK);
    REQUIRE(admin.lookup(root, "alicefile", &file) == ODAFS_OK);
    REQUIRE(admin.lookup(root, "alicedir", &dir) == ODAFS_OK);
    REQUIRE(admin.lookup(dir, "inner", &inner) == ODAFS_OK);
  }
  struct Row {
    const char* what;
    std::function<int(Raw&)> call;
    int want;
  };
  const std::vector<Row> table = {
      {"GETATTR file", [&](Raw& r) { return r.getattr(file); }, ODAFS_OK},
      {"READ file", [&](Raw& r) { return r.read(file); }, ODAFS_ERR_ACCES},
      {"READ_DIRECT file", [&](Raw& r) { return r.read_direct(file); }, ODAFS_ERR_ACCES},
      {"GETREFS file", [&](Raw& r) { return r.getrefs(file); }, ODAFS_ERR_ACCES},
      {"WRITE file", [&](Raw& r) { return r.write(file); }, ODAFS_ERR_ACCES},
      {"WRITE_DIRECT file", [&](Raw& r) { return r.write_direct(file); }, ODAFS_ERR_ACCES},
      {"COMMIT file", [&](Raw& r) { return r.commit(file); }, ODAFS_ERR_ACCES},
      {"SETATTR mode", [&](Raw& r) { return r.setattr(file, Raw::Set::kMode); }, ODAFS_ERR_PERM},
      {"SETATTR size", [&](Raw& r) { return r.setattr(file, Raw::Set::kSize); }, ODAFS_ERR_ACCES},
      {"SETATTR times", [&](Raw& r) { return r.setattr(file, Raw::Set::kClientTimes); },
       ODAFS_ERR_PERM},
      {"SETATTR owner", [&](Raw& r) { return r.setattr(file, Raw::Set::kOwner, kBob); },
       ODAFS_ERR_PERM},
      {"ACCESS file",
       [&](Raw& r) {
         uint32_t granted = 99;
         int st = r.access(file, ODAFS_ACCESS_READ | ODAFS_ACCESS_WRITE, &granted);
         return st == ODAFS_OK ? static_cast<int>(granted) : st;
       },
       0},
      {"REMOVE file", [&](Raw& r) { return r.remove(root, "alicefile"); }, ODAFS_ERR_ACCES},
      {"RENAME file", [&](Raw& r) { return r.rename(root, "alicefile", root, "stolen"); },
       ODAFS_ERR_ACCES},
      {"LOOKUP in dir", [&](Raw& r) { return r.lookup(dir, "inner"); }, ODAFS_ERR_ACCES},
      {"MOUNT of a path through dir", [&](Raw& r) { return r.mount("/alicedir/inner"); },
       ODAFS_ERR_ACCES},
      {"READDIR dir", [&](Raw& r) { return r.readdir(dir); }, ODAFS_ERR_ACCES},
      {"CREATE in dir", [&](Raw& r) { return r.create(dir, "x"); }, ODAFS_ERR_ACCES},
      {"MKDIR in dir", [&](Raw& r) { return r.mkdir(dir, "x"); }, ODAFS_ERR_ACCES},
      {"SYMLINK in dir", [&](Raw& r) { return r.symlink(dir, "x", "t"); }, ODAFS_ERR_ACCES},
      {"REMOVE in dir", [&](Raw& r) { return r.remove(dir, "inner"); }, ODAFS_ERR_ACCES},
      {"RENAME out of dir", [&](Raw& r) { return r.rename(dir, "inner", root, "pub"); },
       ODAFS_ERR_ACCES},
      {"LINK into dir", [&](Raw& r) { return r.link(file, dir, "x"); }, ODAFS_ERR_ACCES},
      // A handle is checked against its object's own mode, not the path it was found by
      // (as NFS without subtree_check): inner is 0644, and bob got its handle from root.
      {"READ of dir's file by handle", [&](Raw& r) { return r.read(inner); }, ODAFS_OK},
  };
  const uint16_t port = server.port();
  std::vector<int> got = as_local_user(kBob, kBob, [&] {
    std::vector<int> r;
    Raw bob(port, as_user(kBob, kBob));
    for (const Row& row : table) r.push_back(row.call(bob));
    return r;
  });
  REQUIRE(got.size() == table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    CAPTURE(std::string(table[i].what));
    CHECK(got[i] == table[i].want);
  }
  CHECK(read_local(e.dir / "alicefile") == "alice's secret");
  CHECK(read_local(e.dir / "alicedir/inner") == "inner");
}

ROOT_TEST("bob's LOOKUPs of alice's 0600 file never change what alice's reads return") {
  Export e;
  ServerProcess server(e.dir.path());
  const uint16_t port = server.port();
  // bob looks the file up first: the server could only open it O_PATH as him.
  std::vector<int> got = as_local_user(kBob, kBob, [port] {
    Raw bob(port, as_user(kBob, kBob));
    Handle root, f;
    std::vector<int> r = {bob.mount("/", &root)};
    for (int i = 0; i < 10; ++i) r.push_back(bob.lookup(root, "alicefile", &f));
    r.push_back(bob.read(f));
    return r;
  });
  REQUIRE(got.size() == 12);
  CHECK(got[0] == ODAFS_OK);
  CHECK(got[1] == ODAFS_OK);
  CHECK(got[11] == ODAFS_ERR_ACCES);
  // alice, through root's connection (root may act as her), and root itself, read it.
  for (uint32_t uid : {kAlice, 0u}) {
    CAPTURE(uid);
    Raw reader(port, as_user(uid, uid));
    Handle root, f;
    REQUIRE(reader.mount("/", &root) == ODAFS_OK);
    REQUIRE(reader.lookup(root, "alicefile", &f) == ODAFS_OK);
    CHECK(reader.read(f) == ODAFS_OK);
    CHECK(reader.getrefs(f) == ODAFS_OK);
    CHECK(reader.commit(f) == ODAFS_OK);
  }
  // And through the library, as a program of root's reads it.
  auto fs = odafs::Client::mount(server.url());
  odafs::File f = fs->open("alicefile");
  char buf[64] = {};
  CHECK(std::string(buf, f.pread(buf, sizeof buf, 0)) == "alice's secret");
}

ROOT_TEST("an unprivileged user in a grace period: cannot reclaim, waits, cannot end it") {
  Export e;
  ServerProcess server(e.dir.path(), {"--grace-ms", "3000"});
  // root's client keeps bytes under a write delegation, and is stopped before the restart:
  // the new instance's grace period waits for it.
  pid_t holder = odafs::test::holder_process(server.url(), "/pub/held", [](Client& fs) {
    odafs::test::write_path(fs, "/pub/held", "kept");
  });
  REQUIRE(odafs::test::stop_child(holder));
  server.kill_hard();
  server.start_again();
  const uint16_t port = server.port();
  std::vector<int> got = as_local_user(kBob, kBob, [port] {
    std::vector<int> r;
    Raw bob(port, as_user(kBob, kBob));
    Handle root;
    r.push_back(bob.mount("/", &root));
    client_id_res id{};
    r.push_back(bob.call(ODAFSPROC_CLIENT_ID, Args().u32(1).u32(2).u32(3).u32(4),
                         to_xdrproc(xdr_client_id_res), &id));
    r.push_back(id.client_id_res_u.ok.reclaim ? 1 : 0);
    r.push_back(bob.getattr(root));
    // RECLAIM_COMPLETE takes no arguments; the helper cannot send none (a word more is ignored).
    r.push_back(bob.bare(ODAFSPROC_RECLAIM_COMPLETE, Args().u32(0)));
    r.push_back(bob.getattr(root));  // his RECLAIM_COMPLETE ended nothing
    return r;
  });
  CHECK(got == std::vector<int>{ODAFS_OK, ODAFS_OK, 0, ODAFS_ERR_GRACE, ODAFS_OK, ODAFS_ERR_GRACE});
  odafs::test::reap(holder);
}
