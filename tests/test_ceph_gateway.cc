// odafsd over CephFS (--export ceph:PATH), against a real one-node cluster
// (tests/support/ceph_cluster.h; skipped, naming the reason, where Ceph cannot run): the
// client library through one gateway (names, bytes, one-sided reads), and two gateways on
// one CephFS (written through one, read through the other; a change through one makes the
// other give back its CephFS delegation, after it dropped its cached blocks, so its
// clients' references fault and they read the new bytes by RPC, and after it recalled its
// clients' read delegations); as another user, the caller's identity decides on CephFS
// too.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "client/client.h"
#include "doctest/doctest.h"
#include "rpc/call_credential.h"
#include "tests/support/ceph_cluster.h"
#include "tests/support/ceph_gateway.h"
#include "tests/support/client_util.h"
#include "tests/support/delegation_holder.h"
#include "tests/support/mount_process.h"
#include "tests/support/mounted.h"
#include "tests/support/server_process.h"

namespace {

using odafs::Client;
using odafs::File;
using odafs::MountOptions;
using odafs::test::cluster;
using odafs::test::evict_session_of;
using odafs::test::fresh_top;
using odafs::test::gateway;
using odafs::test::make_key_file;
using odafs::test::no_cluster;
using odafs::test::read_all;
using odafs::test::ServerProcess;
using odafs::test::uncached;
using odafs::test::until_delegated;
using odafs::test::write_file;
const char* skip_reason() { return odafs::test::cluster_skip_reason(); }
const char* mount_skip_reason() { return odafs::test::cluster_mount_skip_reason(); }

// Reads `file` whole until a read is one-sided (true), for up to 10 s. A gateway caches a
// file, and so hands out references to it, only under a CephFS delegation, which CephFS
// refuses while any client has the file open to write: the gateway that wrote it closes
// it a moment after the writes stop.
bool reads_one_sided(Client& c, File& file, const std::string& expect) {
  bool wrong = false;
  return odafs::test::eventually(
             [&] {
               const uint64_t before = c.stats().ordma_reads.load();
               wrong = read_all(file, expect.size()) != expect;
               return wrong || c.stats().ordma_reads.load() > before;
             },
             10) &&
         !wrong;
}

}  // namespace

TEST_CASE("one gateway over CephFS: names, bytes, one-sided reads" * doctest::skip(no_cluster()) *
          doctest::description(skip_reason())) {
  auto gw = gateway();
  auto c = Client::mount(gw->url());
  const std::string top = fresh_top(*c, "one");
  const std::string data = odafs::test::pattern(64 * 1024, 7);
  write_file(*c, top + "/f", data);
  CHECK(c->stat(top + "/f").size == data.size());

  c->symlink("f", top + "/l");
  CHECK(c->readlink(top + "/l") == "f");
  c->rename(top + "/f", top + "/g");
  std::vector<std::string> names;
  for (const auto& e : c->readdir(top)) names.push_back(e.name);
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"g", "l"});

  // A read brings references, the next reads by them (through the ring).
  auto reader = Client::mount(gw->url(), uncached());
  {
    File g = reader->open(top + "/g", O_RDONLY);
    CHECK(reads_one_sided(*reader, g, data));
  }
  CHECK(reader->stats().fallbacks.load() == 0);
  CHECK(odafs::test::server_stat(*reader, "leases.taken") > 0);

  c->unlink(top + "/l");
  c->unlink(top + "/g");
  c->rmdir(top);
  CHECK(odafs::test::errno_of([&] { c->stat(top); }) == ENOENT);
}

// SIGTERM stops a gateway promptly (test_shutdown holds the other states) while it holds
// CephFS delegations under its cache and its client holds an odafs read delegation: the
// leases are given back by the unmount, not waited out.
TEST_CASE("a gateway holding CephFS leases stops within 2 s of SIGTERM" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto gw = gateway();
  auto c = Client::mount(gw->url(), uncached());
  const std::string top = fresh_top(*c, "stop");
  const std::string data = odafs::test::pattern(16 * 1024, 9);
  {
    // Written by a client that unmounts: c would keep its bytes' commit under a write
    // delegation, and its unmount would wait for the stopped gateway to come back.
    auto writer = Client::mount(gw->url());
    write_file(*writer, top + "/f", data);
  }
  File f = c->open(top + "/f", O_RDONLY);
  REQUIRE(reads_one_sided(*c, f, data));
  REQUIRE(odafs::test::server_stat(*c, "leases.held") > 0);
  auto start = std::chrono::steady_clock::now();
  const int status = gw->stop();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CAPTURE(took);
  CHECK(took < 2.0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("two gateways on one CephFS: written through one, read through the other" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto a = gateway();
  auto b = gateway();
  auto on_a = Client::mount(a->url(), uncached());
  auto on_b = Client::mount(b->url(), uncached());
  const std::string top = fresh_top(*on_a, "two");
  const std::string f = top + "/f";
  const std::string v1 = odafs::test::pattern(64 * 1024, 1);
  const std::string v2 = odafs::test::pattern(64 * 1024, 2);

  write_file(*on_a, f, v1);
  CHECK(read_all(*on_b, f, v1.size()) == v1);  // closed through A, read through B

  // A reader on A with the file open, reading one-sided by references to A's blocks.
  auto holder = Client::mount(a->url(), uncached());
  File open_on_a = holder->open(f, O_RDONLY);
  CHECK(reads_one_sided(*holder, open_on_a, v1));

  write_file(*on_b, f, v2);  // through B, closed

  // B's bytes landed only once A gave its CephFS delegation back, and A dropped its blocks
  // before that: the references the open reader holds fault at once, with no call of
  // anyone's to A between, and it reads B's bytes by RPC.
  const uint64_t fallbacks = holder->stats().fallbacks.load();
  CHECK(read_all(open_on_a, v2.size()) == v2);
  CHECK(holder->stats().fallbacks.load() > fallbacks);
  CHECK(odafs::test::server_stat(*holder, "leases.recalled") > 0);
  // An open through A sees them too (close-to-open across gateways).
  CHECK(read_all(*on_a, f, v2.size()) == v2);

  // And the other way: a write through A, read through B.
  write_file(*on_a, f, v1);
  CHECK(read_all(*on_b, f, v1.size()) == v1);
}

TEST_CASE("a read delegation through one gateway is recalled by a write through the other" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto a = gateway();
  auto b = gateway();
  auto on_b = Client::mount(b->url());
  auto reader = Client::mount(a->url());  // caches, and takes delegations
  const std::string top = fresh_top(*on_b, "deleg");
  const std::string f = top + "/f";
  const std::string v1 = odafs::test::pattern(16 * 1024, 3);
  const std::string v2 = odafs::test::pattern(16 * 1024, 4);
  write_file(*on_b, f, v1);

  REQUIRE(until_delegated(*reader, f, v1));
  CHECK(odafs::test::server_stat(*reader, "delegations.held") > 0);

  // B's write waits for CephFS's delegation, which A gives back only after it recalled
  // the reader's.
  const uint64_t recalled = odafs::test::server_stat(*reader, "delegations.recalled");
  const uint64_t unreturned = odafs::test::server_stat(*reader, "leases.unreturned");
  write_file(*on_b, f, v2);
  CHECK(odafs::test::server_stat(*reader, "delegations.recalled") > recalled);
  // Returned before B's write went ahead: A waited for the return (bounded by the lease)
  // before giving CephFS's back, so the reader's next open asks A.
  CHECK(odafs::test::server_stat(*reader, "delegations.held") == 0);
  CHECK(odafs::test::server_stat(*reader, "leases.unreturned") == unreturned);
  const uint64_t delegated_opens = reader->stats().delegated_opens.load();
  File r = reader->open(f, O_RDONLY);
  CHECK(reader->stats().delegated_opens.load() == delegated_opens);
  CHECK(read_all(r, v2.size()) == v2);
  r.close();

  // The holder writes the file itself, through A: A gives its CephFS delegation back
  // first (CephFS would recall it from A's own open to write). No delegation runs out
  // unreturned anywhere in this test: A never waits on a return that queues behind a
  // call of the same client.
  REQUIRE(until_delegated(*reader, f, v2));
  write_file(*reader, f, v1);
  CHECK(odafs::test::server_stat(*reader, "delegations.expired") == 0);
  CHECK(read_all(*on_b, f, v1.size()) == v1);
}

TEST_CASE(
    "two gateways through FUSE mounts: written through one, read through the other; another "
    "user of a mount is refused root's file and makes her own as herself" *
    doctest::skip(*mount_skip_reason() != '\0') * doctest::description(mount_skip_reason())) {
  using odafs::test::as_nobody;
  using odafs::test::failed_with;
  using odafs::test::kNobody;
  auto a = gateway();
  auto b = gateway();
  auto setup = Client::mount(a->url());
  const std::string top = fresh_top(*setup, "fuse");
  setup->chmod(top, 0777);
  odafs::test::TempDir mnt_a, mnt_b;
  odafs::test::MountProcess on_a(a->url(), mnt_a.path(), {"allow_other"});
  odafs::test::MountProcess on_b(b->url(), mnt_b.path(), {"allow_other"});
  const std::string f_a = on_a / (top.substr(1) + "/f");
  const std::string f_b = on_b / (top.substr(1) + "/f");
  const std::string v1 = odafs::test::pattern(40000, 5);
  const std::string v2 = odafs::test::pattern(40000, 6);

  odafs::test::write_local(f_a, v1);  // closed through mount A
  CHECK(odafs::test::read_local(f_b) == v1);
  odafs::test::write_local(f_b, v2);  // and back
  CHECK(odafs::test::read_local(f_a) == v2);

  // Another user on mount A: root's 0600 file is refused her by CephFS (the gateway acts
  // as her), and a file she makes is hers on CephFS, as gateway B sees it.
  REQUIRE(chmod(f_a.c_str(), 0600) == 0);
  CHECK(as_nobody([&] { return failed_with(open(f_a.c_str(), O_RDONLY) < 0); }) == EACCES);
  const std::string mine = on_a / (top.substr(1) + "/mine");
  CHECK(as_nobody([&] {
          int fd = open(mine.c_str(), O_CREAT | O_WRONLY, 0600);
          if (fd < 0) return errno;
          const bool wrote = write(fd, "hers", 4) == 4;
          return close(fd) == 0 && wrote ? 0 : 1;
        }) == 0);
  auto on_b_client = Client::mount(b->url());
  CHECK(on_b_client->stat(top + "/mine").uid == kNobody);
  CHECK(odafs::test::read_local(on_b / (top.substr(1) + "/mine")) == "hers");  // root, via B
}

TEST_CASE("a gateway acts as its callers on CephFS: no root needed, permissions hold" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  // --auth-sys: every call runs as the uid it claims (root's own socket may claim anyone).
  auto gw = gateway({"--auth-sys"});
  auto root = Client::mount(gw->url());
  const std::string top = fresh_top(*root, "caller");
  File secret = root->open(top + "/secret", O_WRONLY | O_CREAT, 0600);
  secret.pwrite("root only", 9, 0);
  secret.close();
  root->mkdir(top + "/private", 0700);

  odafs::rpc::CallerCred cred;
  cred.auth_sys = true;
  cred.uid = 4242;
  cred.gid = 4242;
  const odafs::rpc::CallCredential alice(cred, "test");
  {
    auto fs = Client::mount(gw->url(), uncached());
    odafs::rpc::CallAs as(alice);
    CHECK(odafs::test::errno_of([&] { fs->open(top + "/secret", O_RDONLY); }) == EACCES);
    CHECK(odafs::test::errno_of([&] { fs->stat(top + "/private/x"); }) == EACCES);
    File mine = fs->open(top + "/alice", O_WRONLY | O_CREAT, 0600);
    mine.pwrite("hers", 4, 0);
    mine.close();
  }
  CHECK(root->stat(top + "/alice").uid == 4242u);  // made as her, on CephFS
}

namespace {

// Reads len bytes of the file a handle names, by handle alone (no path, no open).
std::string read_by_handle(Client& c, const odafs::Handle& h, size_t len) {
  std::string out(len, '\0');
  odafs::AsyncRead op;
  c.start_read(op, h, out.data(), len, 0);
  out.resize(c.finish_read(op));
  return out;
}

}  // namespace

TEST_CASE("gateways sharing --handle-key-file take each other's handles, after a restart too" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  odafs::test::TempDir keys;
  const std::string key = make_key_file(keys, "shared");
  auto a = gateway({"--handle-key-file", key, "--grace-ms", "300"});  // a short one (below)
  auto b = gateway({"--handle-key-file", key});
  auto other = gateway({"--handle-key-file", make_key_file(keys, "other")});
  auto on_a = Client::mount(a->url(), uncached());
  const std::string top = fresh_top(*on_a, "handles");
  const std::string data = odafs::test::pattern(20000, 3);
  write_file(*on_a, top + "/f", data);
  const odafs::Handle h = on_a->open(top + "/f", O_RDONLY).handle();

  auto on_b = Client::mount(b->url(), uncached());
  CHECK(read_by_handle(*on_b, h, data.size()) == data);  // never looked up through B
  // A forger without the key: any one bit changed anywhere (the inode number, to reach
  // another file; the MAC; the version) is refused, and B serves on.
  for (size_t i = 0; i < h.size(); ++i) {
    odafs::Handle forged = h;
    forged[i] ^= 0x01;
    CHECK_MESSAGE(odafs::test::errno_of([&] { read_by_handle(*on_b, forged, data.size()); }) != 0,
                  "byte ", i);
  }
  CHECK(read_by_handle(*on_b, h, data.size()) == data);
  auto on_other = Client::mount(other->url(), uncached());
  CHECK(odafs::test::errno_of([&] { read_by_handle(*on_other, h, data.size()); }) != 0);
  // The same key, another directory of the file system: not its handle either.
  ServerProcess sub("ceph:" + top, {"--ceph-conf", cluster().conf, "--handle-key-file", key});
  auto on_sub = Client::mount(sub.url(), uncached());
  CHECK(read_all(*on_sub, "/f", data.size()) == data);  // by its own name, yes
  CHECK(odafs::test::errno_of([&] { read_by_handle(*on_sub, h, data.size()); }) != 0);

  on_a.reset();
  a->restart();  // a new instance: the handle is still good
  auto again = Client::mount(a->url(), uncached());
  // Its recovery record may still name on_a, whose write delegation made the file (it is
  // rewritten in the background): a read by handle alone is not retried in the grace
  // period, so it waits for the period's end.
  CHECK(odafs::test::eventually(
      [&] { return odafs::test::server_stat(*again, "recovery.in_grace") == 0; }));
  CHECK(read_by_handle(*again, h, data.size()) == data);

  // Removed: the handle is stale everywhere.
  on_b->unlink(top + "/f");
  CHECK(odafs::test::errno_of([&] { read_by_handle(*again, h, data.size()); }) == ESTALE);
}

TEST_CASE("--handle-key-file must be private, long enough, and for a CephFS export" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  odafs::test::TempDir keys;
  const std::string open_to_all = make_key_file(keys, "open");
  REQUIRE(chmod(open_to_all.c_str(), 0644) == 0);
  CHECK_THROWS(gateway({"--handle-key-file", open_to_all}));
  const std::string short_key = keys.path() + "/short";
  odafs::test::write_local(short_key, "too short");
  REQUIRE(chmod(short_key.c_str(), 0600) == 0);
  CHECK_THROWS(gateway({"--handle-key-file", short_key}));
  odafs::test::TempDir local;
  CHECK_THROWS(ServerProcess(local.path(), {"--handle-key-file", make_key_file(keys, "local")}));
}

// A CephFS call that waits on the cluster hands its RPC thread's event loop over
// (rpc::before_blocking), as a POSIX flush does: a read stalled by another CephFS client's
// capabilities (gateway B, stopped while it has the file open to write) stalls its caller
// only. A has one event loop, so without the hand-over every other client of A would wait
// as long (until B's session times out, 30 s or more).
TEST_CASE("a CephFS read stalled by a stopped gateway stalls its caller, not the gateway" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto a = gateway({"--threads", "1"});
  auto b = gateway();
  auto on_a = Client::mount(a->url(), uncached());
  auto on_b = Client::mount(b->url(), uncached());
  const std::string top_a = fresh_top(*on_a, "stall-a");
  const std::string top_b = fresh_top(*on_b, "stall-b");
  const std::string g = top_a + "/g";
  const std::string f = top_b + "/f";
  const std::string v = odafs::test::pattern(16 * 1024, 7);
  write_file(*on_a, g, v);
  auto other = Client::mount(a->url(), uncached());  // another client of A, same loop
  CHECK(read_all(*other, g, v.size()) == v);
  auto reader = Client::mount(a->url(), uncached());
  File r_dir_warm = reader->open(top_b, O_RDONLY);  // the path resolved before B stops
  r_dir_warm.close();

  // B writes f and stops at once, with f still open to write (it closes a written file
  // only once its writes stop for 500 ms): a read of f elsewhere needs B's capabilities.
  File w = on_b->open(f, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(w.pwrite(v.data(), v.size(), 0) == v.size());
  REQUIRE(kill(b->pid(), SIGSTOP) == 0);
  struct Resume {
    pid_t pid;
    ~Resume() { kill(pid, SIGCONT); }
  } resume{b->pid()};

  std::atomic<bool> read_done{false};
  std::string got;
  std::thread stalled([&] {
    File r = reader->open(f, O_RDONLY);
    got = read_all(r, v.size());
    read_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const bool stalled_meanwhile = !read_done.load();
  CHECK(stalled_meanwhile);  // else B's stop did not stall it and the rest proves nothing

  const auto start = std::chrono::steady_clock::now();
  CHECK(read_all(*other, g, v.size()) == v);
  CHECK(other->stat(g).size == v.size());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 2.0);
  CHECK(!read_done.load());  // the stall spanned those calls
  CHECK(odafs::test::server_stat(*other, "rpc.handovers") > 0);

  kill(b->pid(), SIGCONT);
  stalled.join();
  w.close();
  // The read saw all of B's write, or (had it reached CephFS before the write) none of it.
  CHECK((got == v || got.empty()));
}

// Permissions under the lease: CephFS recalls a gateway's read delegation when another
// client changes the file's mode or owner (the auth capability goes with it), so the
// gateway recalls its own clients' delegations, and they ask again.
TEST_CASE("a chmod and a chown through another gateway reach a delegation holder within 2 s" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto a = gateway();
  auto b = gateway();
  auto on_b = Client::mount(b->url());
  auto holder = Client::mount(a->url());  // caches attributes under its delegations
  const std::string top = fresh_top(*on_b, "perm");
  const std::string f = top + "/f";
  const std::string v = odafs::test::pattern(8 * 1024, 8);
  write_file(*on_b, f, v);
  on_b->chmod(f, 0644);
  auto seen_within_2s = [&](const std::function<bool()>& seen) {
    const auto start = std::chrono::steady_clock::now();
    const bool ok = odafs::test::eventually(seen, 10);
    return ok && std::chrono::steady_clock::now() - start < std::chrono::seconds(2);
  };

  REQUIRE(until_delegated(*holder, f, v));
  CHECK((holder->stat(f).mode & 07777) == 0644);
  uint64_t recalled = odafs::test::server_stat(*holder, "leases.recalled");
  on_b->chmod(f, 0600);
  CHECK(odafs::test::server_stat(*holder, "leases.recalled") > recalled);
  CHECK(seen_within_2s([&] { return (holder->stat(f).mode & 07777) == 0600; }));

  REQUIRE(until_delegated(*holder, f, v));
  recalled = odafs::test::server_stat(*holder, "leases.recalled");
  on_b->chown(f, 1234, 5678);
  CHECK(odafs::test::server_stat(*holder, "leases.recalled") > recalled);
  CHECK(seen_within_2s([&] {
    const odafs::Attr attr = holder->stat(f);
    return attr.uid == 1234 && attr.gid == 5678;
  }));
  File r = holder->open(f, O_RDONLY);
  CHECK(read_all(r, v.size()) == v);
}
