// Trust, tried as an attacker would: raw calls from an unprivileged local user (a forked
// child that became uid 1002) with AUTH_NONE, forged AUTH_SYS credentials and odd ids; the
// export rules (--clients: no match, ro, root_squash, all_squash, anonuid, secure;
// --read-only); the procedure table of docs/protocol.md walked as another user against a
// 0600 file and a 0700 directory; and the node table's descriptors, which one user's
// LOOKUPs must not turn against another's reads.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <ifaddrs.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sched.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
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
#include "server/export_rules.h"
#include "tests/support/confinement_world.h"
#include "tests/support/delegation_holder.h"
#include "tests/support/hostile.h"

using namespace odafs::test::confinement;
using odafs::rpc::AuthSysCred;
using odafs::test::eventually;
using odafs::test::failed_with;
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

// One odafsd started with exactly `args` (no --state-dir added), watched for at most
// `seconds`: it printed its ready line (then it runs until the Trial ends), exited, or did
// neither (blocked: killed at the end of the wait). Its stdout and stderr together are
// output().
class Trial {
 public:
  explicit Trial(std::vector<std::string> args, double seconds = 10) {
    args.insert(args.begin(), ODAFSD_PATH);
    int out[2];
    REQUIRE(pipe2(out, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, out[1], 2);
    std::vector<char*> argv = odafs::test::argv_of(args);
    REQUIRE(posix_spawn(&pid_, ODAFSD_PATH, &fa, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    fd_ = out[0];
    const bool settled = odafs::test::eventually(
        [&] {
          drain();
          if (waitpid(pid_, &status_, WNOHANG) == pid_) {
            pid_ = -1;
            return true;
          }
          const size_t at = output_.find("odafsd ready rpc=127.0.0.1:");
          if (at == std::string::npos || output_.find('\n', at) == std::string::npos) return false;
          port_ = static_cast<uint16_t>(std::stoi(output_.substr(at + 27)));
          return true;
        },
        seconds);
    blocked_ = !settled;
  }
  ~Trial() { stop(SIGKILL); }
  // Stops a running server with sig and waits for it (SIGKILL after 10 s); its wait status.
  int stop(int sig = SIGTERM) {
    if (pid_ > 0) {
      kill(pid_, sig);
      if (!odafs::test::eventually([&] { return waitpid(pid_, &status_, WNOHANG) == pid_; }, 10)) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status_, 0);
      }
      pid_ = -1;
    }
    if (fd_ >= 0) {
      drain();
      close(fd_);
      fd_ = -1;
    }
    return status_;
  }
  bool ready() const { return port_ != 0; }
  bool blocked() const { return blocked_; }
  // It exited at once with odafsd's usage status (2): refused to start.
  bool refused() const {
    return !blocked_ && port_ == 0 && WIFEXITED(status_) && WEXITSTATUS(status_) == 2;
  }
  uint16_t port() const { return port_; }
  std::string url() const { return "odafs://127.0.0.1:" + std::to_string(port_) + "/"; }
  const std::string& output() {
    drain();
    return output_;
  }

 private:
  void drain() {
    char buf[4096];
    ssize_t n;
    while (fd_ >= 0 && poll_readable() && (n = read(fd_, buf, sizeof buf)) > 0) {
      output_.append(buf, static_cast<size_t>(n));
    }
  }
  bool poll_readable() {
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
  }
  pid_t pid_ = -1;
  int fd_ = -1;
  int status_ = 0;
  uint16_t port_ = 0;
  bool blocked_ = false;
  std::string output_;
};

// The name odafsd gives the recovery record of export `dir` in its state directory
// (odafsd.cc, recovery_record_path).
std::string record_name(const std::string& dir) {
  char* real = realpath(dir.c_str(), nullptr);
  REQUIRE(real != nullptr);
  const std::string key = real;
  free(real);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  char name[32];
  std::snprintf(name, sizeof name, "recovery-%02x%02x%02x%02x%02x%02x%02x%02x", digest[0],
                digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7]);
  return name;
}

// A recovery record naming `owners` clients (forged: none of them exists).
std::string forged_record(int owners) {
  std::string text = "odafs-recovery 1\n";
  for (int i = 0; i < owners; ++i) {
    char line[40];
    std::snprintf(line, sizeof line, "%032x\n", i + 1);
    text += line;
  }
  return text;
}

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
       {7u, 0u /*CALL*/, 2u, static_cast<uint32_t>(ODAFS_PROGRAM), static_cast<uint32_t>(ODAFS_V3),
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
  odafs::rpc::put_record_mark(record.data(), static_cast<uint32_t>(body.size()), /*last=*/true);
  record += body;
  int fd = odafs::net::connect_tcp({"127.0.0.1", server.port()}).value();
  REQUIRE(write(fd, record.data(), record.size()) == static_cast<ssize_t>(record.size()));
  char reply[256];
  REQUIRE(odafs::net::got_all(odafs::net::read_full(fd, reply, 4)));
  const size_t len = odafs::rpc::read_record_mark(reply).length;
  REQUIRE(len <= sizeof reply);
  REQUIRE(odafs::net::got_all(odafs::net::read_full(fd, reply, len)));
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
    std::vector<std::string> args = {"--export", dir.path()};
    args.insert(args.end(), extra.begin(), extra.end());
    Trial trial(args);
    CHECK(trial.refused());
    CHECK(trial.output().find("--clients") != std::string::npos);
  }
}

// A prefix length is digits only, in range: "-0" once parsed as 0 and admitted everyone,
// "-1" as no prefix at all.
TEST_CASE("the export rule parser refuses signed, spaced or out-of-range prefix lengths") {
  for (const char* spec :
       {"127.0.0.1/-1", "10.9.8.7/-0", "10.0.0.0/+8", "10.0.0.0/ 8", "10.0.0.0/8 ", "10.0.0.0/0x8",
        "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/4294967304", "::1/129", "::1/-0", "10.0.0.0/8/8"}) {
    CAPTURE(spec);
    odafs::server::ExportRules rules;
    CHECK_THROWS_AS(rules.add(spec, kNobody, kNobody), std::invalid_argument);
    CHECK(rules.empty());
  }
  odafs::server::ExportRules rules;
  rules.add("10.9.8.7/0", kNobody, kNobody);
  rules.add("10.0.0.0/8(ro)", kNobody, kNobody);
  rules.add("::1/128", kNobody, kNobody);
  REQUIRE(rules.size() == 3);
  CHECK(rules.rule(0).prefix == 0);
  CHECK(rules.rule(1).prefix == 8);
  CHECK(rules.rule(2).prefix == 128);
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

namespace {

// CREATE UNCHECKED of `name` in the export's root, whose object is already there and
// watched by inotify: returns the reply's status, and in *opened whether odafsd opened the
// object (IN_OPEN; the reply comes after any open the server made, so reading the events
// then is enough).
int create_unchecked_over(ServerProcess& server, const std::string& path, const std::string& name,
                          bool* opened) {
  const int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  REQUIRE(in >= 0);
  REQUIRE(inotify_add_watch(in, path.c_str(), IN_OPEN) >= 0);
  Raw raw(server.port());
  Handle root;
  REQUIRE(raw.mount("/", &root) == ODAFS_OK);
  const int status = raw.create(root, name, ODAFS_CREATE_UNCHECKED);
  alignas(inotify_event) char events[4096];
  const ssize_t n = read(in, events, sizeof events);
  *opened = n > 0;
  close(in);
  return status;
}

}  // namespace

// A FIFO any user may open (0666) with a reader blocked on it: CREATE at its name must not
// open it (an open for writing would wake the reader with nothing to read).
TEST_CASE("CREATE UNCHECKED over a FIFO answers EXIST and never opens it") {
  TempDir dir;
  const std::string fifo = dir / "pipe";
  REQUIRE(mkfifo(fifo.c_str(), 0666) == 0);
  ServerProcess server(dir.path());
  bool opened = true;
  CHECK(create_unchecked_over(server, fifo, "pipe", &opened) == ODAFS_ERR_EXIST);
  CHECK_FALSE(opened);
  // A regular file at a name is still opened (the control: the watch sees opens).
  write_local(dir / "plain", "x");
  CHECK(create_unchecked_over(server, dir / "plain", "plain", &opened) == ODAFS_OK);
  CHECK(opened);
}

ROOT_TEST("CREATE UNCHECKED over a character device answers EXIST and never opens it") {
  TempDir dir;
  const std::string node = dir / "null";
  REQUIRE(mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0);
  ServerProcess server(dir.path());
  bool opened = true;
  CHECK(create_unchecked_over(server, node, "null", &opened) == ODAFS_ERR_EXIST);
  CHECK_FALSE(opened);
}

// --state-dir and --handle-key-file, as sshd treats its keys: a directory or file another
// user owns or may write could be swapped under odafsd, so it refuses to start.
ROOT_TEST("odafsd refuses a state directory or key file another user owns or may write") {
  TempDir top;
  REQUIRE(chmod(top.path().c_str(), 0755) == 0);
  TempDir exported;
  // bob_fifo: bob, who may write there, plants a FIFO as the record (which the old odafsd
  // read at start, waiting for ever, deaf to SIGTERM). refused() includes: not blocked.
  auto state_dir_case = [&](const std::string& name, mode_t mode, uid_t owner, bool bob_fifo) {
    const std::string dir = top / name;
    REQUIRE(mkdir(dir.c_str(), 0700) == 0);
    REQUIRE(chmod(dir.c_str(), mode) == 0);
    REQUIRE(chown(dir.c_str(), owner, owner) == 0);
    if (bob_fifo) {
      const std::string record = dir + "/" + record_name(exported.path());
      REQUIRE(as_local_user(kBob, kBob, [&] {
                return std::vector<int>{mkfifo(record.c_str(), 0666)};
              }) == std::vector<int>{0});
    }
    Trial trial({"--export", exported.path(), "--listen", "127.0.0.1:0", "--state-dir", dir});
    CAPTURE(name);
    CAPTURE(trial.output());
    CHECK(trial.refused());
    CHECK(trial.output().find("--state-dir") != std::string::npos);
  };
  state_dir_case("bobs", 0700, kBob, false);
  state_dir_case("world-writable", 0777, 0, true);
  state_dir_case("sticky", 01777, 0, true);
  state_dir_case("group-writable", 0770, 0, false);

  // The key file: 32 good bytes, in a directory and under an owner that may or may not do.
  const std::string key_bytes(40, 'k');
  auto key_case = [&](const std::string& path, bool good) {
    Trial trial({"--export", exported.path(), "--listen", "127.0.0.1:0", "--handle-key-file", path,
                 "--state-dir", top / "state"});
    CAPTURE(path);
    CAPTURE(trial.output());
    CHECK(trial.refused());
    // A good key passes its checks and meets the next: the export must be a CephFS one.
    CHECK((trial.output().find("needs --export ceph:PATH") != std::string::npos) == good);
    if (!good) CHECK(trial.output().find("--handle-key-file") != std::string::npos);
  };
  REQUIRE(mkdir((top / "keys").c_str(), 0700) == 0);
  write_local(top / "keys/key", key_bytes);
  REQUIRE(chmod((top / "keys/key").c_str(), 0600) == 0);
  key_case(top / "keys/key", true);
  write_local(top / "keys/bobs-key", key_bytes);
  REQUIRE(chmod((top / "keys/bobs-key").c_str(), 0600) == 0);
  REQUIRE(chown((top / "keys/bobs-key").c_str(), kBob, kBob) == 0);
  key_case(top / "keys/bobs-key", false);
  // bob's directory, with his link to root's key: he could point it anywhere.
  REQUIRE(mkdir((top / "bobs-keys").c_str(), 0755) == 0);
  REQUIRE(chown((top / "bobs-keys").c_str(), kBob, kBob) == 0);
  std::vector<int> planted = as_local_user(kBob, kBob, [&] {
    return std::vector<int>{symlink((top / "keys/key").c_str(), (top / "bobs-keys/key").c_str())};
  });
  REQUIRE(planted == std::vector<int>{0});
  key_case(top / "bobs-keys/key", false);
  // A link even in root's own directory: the key is opened O_NOFOLLOW.
  REQUIRE(symlink((top / "keys/key").c_str(), (top / "keys/link").c_str()) == 0);
  key_case(top / "keys/link", false);
  // A directory anyone may write (sticky or not): another user could have put it there.
  REQUIRE(mkdir((top / "tmp").c_str(), 0700) == 0);
  REQUIRE(chmod((top / "tmp").c_str(), 01777) == 0);
  write_local(top / "tmp/key", key_bytes);
  REQUIRE(chmod((top / "tmp/key").c_str(), 0600) == 0);
  key_case(top / "tmp/key", false);
}

// bob owns the state directory (he made it, or was given it): he plants the record's
// temporary as a link to a file of root's and forges a record, whose grace period's end
// makes odafsd write the record again.
ROOT_TEST("a state directory of bob's: odafsd refuses it, and root's file is untouched") {
  TempDir top;
  REQUIRE(chmod(top.path().c_str(), 0755) == 0);
  TempDir exported;
  const std::string state = top / "state";
  const std::string victim = top / "shadow";
  write_local(victim, "root's own\n");
  REQUIRE(chmod(victim.c_str(), 0600) == 0);
  REQUIRE(mkdir(state.c_str(), 0755) == 0);
  REQUIRE(chown(state.c_str(), kBob, kBob) == 0);
  const std::string record = state + "/" + record_name(exported.path());
  std::vector<int> planted = as_local_user(kBob, kBob, [&] {
    write_local(record, forged_record(1));
    return std::vector<int>{symlink(victim.c_str(), (record + ".tmp").c_str())};
  });
  REQUIRE(planted == std::vector<int>{0});
  Trial trial({"--export", exported.path(), "--listen", "127.0.0.1:0", "--state-dir", state,
               "--grace-ms", "50"});
  CAPTURE(trial.output());
  CHECK(trial.refused());
  CHECK(trial.output().find("--state-dir") != std::string::npos);
  if (trial.ready()) {
    // (The old odafsd started: a call after the grace period ends it, writing the record.)
    auto c = odafs::Client::mount(trial.url());
    c->stat("/");
    trial.stop();
  }
  CHECK(read_local(victim) == "root's own\n");
}

// In odafsd's own directory a stale temporary at the record's name (a link, left from
// before the directory was made private) is removed, never followed.
TEST_CASE("a link at the record's temporary is not followed when the record is written") {
  TempDir exported;
  TempDir state;
  TempDir elsewhere;
  const std::string target = elsewhere / "target";
  write_local(target, "mine\n");
  const std::string record = state / record_name(exported.path());
  write_local(record, forged_record(1));
  REQUIRE(chmod(record.c_str(), 0600) == 0);
  REQUIRE(symlink(target.c_str(), (record + ".tmp").c_str()) == 0);
  Trial trial({"--export", exported.path(), "--listen", "127.0.0.1:0", "--state-dir", state.path(),
               "--grace-ms", "50"});
  CAPTURE(trial.output());
  REQUIRE(trial.ready());
  // A call after the grace period ends it: the record is written again, empty.
  auto c = odafs::Client::mount(trial.url());
  CHECK(eventually([&] {
    c->stat("/");
    return read_local(record) == forged_record(0);
  }));
  CHECK(read_local(target) == "mine\n");
  struct stat st {};
  CHECK(failed_with(lstat((record + ".tmp").c_str(), &st) != 0) == ENOENT);  // gone
}

// A FIFO at the record's name: reading it would wait for a writer for ever, before odafsd
// takes signals. It is no record (logged), and odafsd starts and stops.
TEST_CASE("a FIFO as the recovery record never blocks odafsd's start") {
  TempDir exported;
  TempDir state;
  const std::string record = state / record_name(exported.path());
  REQUIRE(mkfifo(record.c_str(), 0600) == 0);
  Trial trial(
      {"--export", exported.path(), "--listen", "127.0.0.1:0", "--state-dir", state.path()});
  CAPTURE(trial.output());
  CHECK_FALSE(trial.blocked());
  CHECK(trial.ready());
  CHECK(trial.output().find("not a regular file") != std::string::npos);
  const int status = trial.stop(SIGTERM);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

// A record cannot name more owners than the server had connections (each owner held one
// while it was recorded): a longer one is forged or corrupt. It is refused (logged) and
// treated as empty, so no grace period holds every client back.
TEST_CASE("a recovery record naming more owners than --max-connections opens no grace period") {
  TempDir exported;
  TempDir state;
  const std::string record = state / record_name(exported.path());
  write_local(record, forged_record(17));
  REQUIRE(chmod(record.c_str(), 0600) == 0);
  Trial trial({"--export", exported.path(), "--listen", "127.0.0.1:0", "--state-dir", state.path(),
               "--max-connections", "16", "--grace-ms", "60000"});
  CAPTURE(trial.output());
  REQUIRE(trial.ready());
  auto c = odafs::Client::mount(trial.url());
  CHECK(stat_of(*c, "recovery.reclaimers") == 0);
  CHECK(stat_of(*c, "recovery.in_grace") == 0);
  CHECK(trial.output().find("more owners") != std::string::npos);
}
