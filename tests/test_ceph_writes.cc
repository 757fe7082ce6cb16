// Writes through odafsd gateways over CephFS, against the suite's one-node cluster
// (tests/support/ceph_gateway.h; skipped, naming the reason, where Ceph cannot run): write
// delegations under CephFS write delegations (a close keeps only its commit; another
// gateway's access recalls the holder, which commits, before CephFS lets it proceed),
// failover to the next gateway and a gateway's restart with bytes kept under them, and
// clients stopped while holding delegations (others wait at most their lease).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "doctest/doctest.h"
#include "rpc/call_credential.h"
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
using odafs::test::evict_session_of;
using odafs::test::fresh_top;
using odafs::test::gateway;
using odafs::test::make_key_file;
using odafs::test::no_cluster;
using odafs::test::pattern;
using odafs::test::read_all;
using odafs::test::server_stat;
using odafs::test::uncached;
using odafs::test::until_delegated;
using odafs::test::write_file;
const char* skip_reason() { return odafs::test::cluster_skip_reason(); }

constexpr int kFiles = 8;
std::string name_of(const std::string& top, int i) { return top + "/f" + std::to_string(i); }
std::string bytes_of(int i) { return pattern(3000 + 1000 * static_cast<size_t>(i), 40 + i); }

// Writes kFiles files through c and closes them; they were granted write delegations.
void write_delegated(Client& c, const std::string& top) {
  const uint64_t granted = server_stat(c, "delegations.granted_write");
  for (int i = 0; i < kFiles; ++i) write_file(c, name_of(top, i), bytes_of(i));
  CHECK(server_stat(c, "delegations.granted_write") >= granted + kFiles);
}

// c's next calls reach a gateway that lets it write back what its closes kept: every file
// of write_delegated, none lost.
void expect_reclaimed(Client& c, const std::string& top) {
  CHECK(odafs::test::eventually(
      [&] {
        (void)c.stat(top);
        return c.stats().reclaimed_files.load() >= static_cast<uint64_t>(kFiles);
      },
      20));
  CHECK(c.stats().lost_files.load() == 0);
}

// Gateways A (a 2 s lease) and B, and a client process that took a delegation on file f
// through A (take), stopped: it answers no recall. Killed when this goes.
struct StoppedHolder {
  StoppedHolder(const char* what, const std::function<void(Client&, const std::string&)>& take)
      : a(gateway({"--lease-ms", "2000"})),
        b(gateway()),
        setup(Client::mount(b->url())),
        f(fresh_top(*setup, what) + "/f") {
    holder = odafs::test::holder_process(a->url(), f, [&](Client& c) { take(c, f); });
    REQUIRE(kill(holder, SIGSTOP) == 0);
  }
  ~StoppedHolder() { odafs::test::reap(holder); }
  std::unique_ptr<odafs::test::ServerProcess> a, b;
  std::unique_ptr<Client> setup;  // through B
  const std::string f;
  pid_t holder = 0;
};

// Every file whole, read through a gateway of its own (no cache).
void check_whole(const std::string& url, const std::string& top) {
  auto reader = Client::mount(url, uncached());
  for (int i = 0; i < kFiles; ++i) {
    CHECK_MESSAGE(read_all(*reader, name_of(top, i), bytes_of(i).size()) == bytes_of(i),
                  name_of(top, i));
  }
}

}  // namespace

// A gateway grants write delegations under CephFS write delegations: a close sends its
// bytes and keeps only their commit. Another gateway's access to the file makes CephFS
// recall the gateway's delegation, and the gateway its client's: the holder commits and
// returns it, and only then does CephFS let the other access proceed, which finds every
// byte the closes acknowledged.
TEST_CASE("write delegations over CephFS: another gateway reads every closed byte" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto a = gateway();
  auto b = gateway();
  auto writer = Client::mount(a->url());
  const std::string top = fresh_top(*writer, "wdeleg");
  const uint64_t commits = server_stat(*writer, "calls.COMMIT");
  write_delegated(*writer, top);
  CHECK(server_stat(*writer, "leases.taken_write") >= static_cast<uint64_t>(kFiles));
  CHECK(server_stat(*writer, "calls.COMMIT") == commits);  // the closes committed nothing

  const auto start = std::chrono::steady_clock::now();
  check_whole(b->url(), top);
  const double seconds = odafs::test::seconds_since(start);
  MESSAGE("read through B after the recalls: " << seconds << " s");
  CHECK(seconds < 5.0);  // no recall waited out a lease (5 s each)
  CHECK(server_stat(*writer, "calls.COMMIT") >= commits + kFiles);  // the recalls' commits
  CHECK(server_stat(*writer, "leases.unreturned") == 0);
  // Removing a file it holds a write delegation on waits for nothing (A gives the lease
  // back before the unlink, which CephFS would otherwise hold for the give-back).
  write_file(*writer, top + "/gone", "short-lived");
  auto removing = std::chrono::steady_clock::now();
  writer->unlink(top + "/gone");
  CHECK(odafs::test::seconds_since(removing) < 2.0);
  CHECK(server_stat(*writer, "leases.unreturned") == 0);
  // The writer reads its files on, through A, and writes again.
  CHECK(read_all(*writer, name_of(top, 0), bytes_of(0).size()) == bytes_of(0));
  write_file(*writer, name_of(top, 1), "again");
  CHECK(read_all(*Client::mount(b->url(), uncached()), name_of(top, 1), 5) == "again");
}

// A holder still writing a file when another gateway's reader comes: its recall's
// write-back sends bytes no close acknowledged, which CephFS holds until A gives its
// delegation back, so A stops waiting for the return as soon as such a write waits in
// CephFS (not at the lease, 5 s). The bytes land once it has; the close then reports
// nothing lost, and a later read through B finds them all.
TEST_CASE("a recall does not wait out the lease for a holder still writing the file" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto a = gateway();
  auto b = gateway();
  auto writer = Client::mount(a->url());
  const std::string top = fresh_top(*writer, "wopen");
  const std::string f = top + "/f";
  const std::string data = pattern(48 * 1024, 71);
  File open = writer->open(f, O_RDWR | O_CREAT, 0644);
  CHECK(open.pwrite(data.data(), data.size(), 0) == data.size());  // partly written behind
  const auto start = std::chrono::steady_clock::now();
  auto reader = Client::mount(b->url(), uncached());
  (void)reader->stat(f);  // recalls A's write delegation on f
  const double seconds = odafs::test::seconds_since(start);
  MESSAGE("B's stat of a file written through A, open: " << seconds << " s");
  CHECK(seconds < 4.0);
  CHECK(server_stat(*writer, "leases.unreturned") == 1);  // given back with the write waiting
  open.close();
  CHECK(read_all(*reader, f, data.size()) == data);
}

// Who may use a write delegation over CephFS: another user on the same mount is not served
// from root's (her open asks the gateway, which acts as her: EACCES on root's 0600 file),
// is granted none on a file she may not write, and what she writes under her own is hers.
TEST_CASE("write delegations over CephFS serve only their holder's rights" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto a = gateway({"--auth-sys"});  // every call runs as the uid it claims
  auto mount = Client::mount(a->url());
  const std::string top = fresh_top(*mount, "wusers");
  const std::string secret = top + "/secret";
  const uint64_t granted = server_stat(*mount, "delegations.granted_write");
  {
    File f = mount->open(secret, O_RDWR | O_CREAT, 0600);
    f.pwrite("root only", 9, 0);
    f.close();  // kept under root's write delegation
  }
  CHECK(server_stat(*mount, "delegations.granted_write") == granted + 1);
  odafs::rpc::CallerCred cred;
  cred.auth_sys = true;
  cred.uid = cred.gid = 4242;
  const odafs::rpc::CallCredential alice(cred, "test");
  {
    odafs::rpc::CallAs as(alice);
    CHECK(odafs::test::errno_of([&] { mount->open(secret, O_RDONLY); }) == EACCES);
    CHECK(odafs::test::errno_of([&] { mount->open(secret, O_RDWR); }) == EACCES);
    write_file(*mount, top + "/hers", "alice's");
  }
  CHECK(server_stat(*mount, "delegations.granted_write") == granted + 2);  // hers, not root's
  auto b = gateway();
  auto other = Client::mount(b->url(), uncached());
  CHECK(read_all(*other, secret, 9) == "root only");
  CHECK(other->stat(top + "/hers").uid == 4242u);
  CHECK(read_all(*other, top + "/hers", 7) == "alice's");
}

// A gateway that stays dead is fenced by its peer (--ceph-peer): B evicts A's CephFS session
// once A has refused connections for 3 s, so a file A held under a write lease is B's to
// read within seconds, not at the MDS's session timeout (30 s here). A gateway restarted at
// once keeps its new session: B evicts only sessions opened before it last saw A alive.
TEST_CASE("a peer fences a gateway that stays dead, and not one that restarted" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto a = gateway();
  auto b = gateway({"--ceph-peer", "127.0.0.1:" + std::to_string(a->port())});
  auto on_b = Client::mount(b->url(), uncached());
  const std::string top = fresh_top(*on_b, "fence");
  const std::string f = top + "/f";
  const std::string v1 = pattern(12000, 61), v2 = pattern(12000, 62);
  auto write_through_a = [&](const std::string& data) {
    auto writer = Client::mount(a->url());  // unmounted at once: its commit is sent
    write_file(*writer, f, data);
  };
  write_through_a(v1);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // B has seen A alive

  a->kill_hard();
  a->start_again();
  std::this_thread::sleep_for(std::chrono::milliseconds(4000));               // past B's 3 s
  CHECK(read_all(*Client::mount(a->url(), uncached()), f, v1.size()) == v1);  // still mounted
  CHECK(server_stat(*on_b, "fence.evicted_sessions") == 0);

  write_through_a(v2);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // A lived past the margin
  a->kill_hard();
  const auto start = std::chrono::steady_clock::now();
  CHECK(read_all(*on_b, f, v2.size()) == v2);
  const double seconds = odafs::test::seconds_since(start);
  MESSAGE("read through B after A died holding the file: " << seconds << " s");
  CHECK(seconds < 15.0);
  CHECK(server_stat(*on_b, "fence.evicted_sessions") >= 1);
}

// A mount on odafs://A,B/ keeps its closed files' commits under A's write delegations; A
// is killed (and fenced, as a deployment does); the mount fails over to B and writes back
// what A never made durable: every closed file is whole in CephFS.
TEST_CASE("A killed under write delegations: the mount fails over and every closed file is whole" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  odafs::test::TempDir keys;
  const std::string key = make_key_file(keys, "writes-failover");
  auto a = gateway({"--handle-key-file", key});
  auto b = gateway({"--handle-key-file", key});
  MountOptions o;
  o.reconnect_window_ms = 10000;
  auto c = Client::mount(odafs::test::both_url(*a, *b), o);
  const std::string top = fresh_top(*c, "wfailover");
  write_delegated(*c, top);

  const pid_t dead = a->pid();
  a->kill_hard();
  evict_session_of(dead);
  expect_reclaimed(*c, top);  // the next call finds A gone and mounts B
  check_whole(b->url(), top);
}

// A gateway killed while its client keeps commits under write delegations, and restarted
// with its state directory: the client reclaims in its grace period, and loses nothing.
TEST_CASE("a gateway restarted while clients hold write delegations loses nothing" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto a = gateway();  // ServerProcess gives it a state directory it keeps across restarts
  auto c = Client::mount(a->url());
  const std::string top = fresh_top(*c, "wrestart");
  write_delegated(*c, top);
  a->kill_hard();
  a->start_again();
  expect_reclaimed(*c, top);
  auto b = gateway();
  check_whole(b->url(), top);
}

const char* mount_skip_reason() { return odafs::test::cluster_mount_skip_reason(); }

// Through a real mount with default options: files closed under write delegations
// through A, A killed and restarted; the mount's next call reclaims, and every closed
// byte is in CephFS, read through another gateway.
TEST_CASE("a FUSE mount's closed files survive its gateway's SIGKILL and restart" *
          doctest::skip(*mount_skip_reason() != '\0') * doctest::description(mount_skip_reason())) {
  auto a = gateway();
  odafs::test::TempDir mnt;
  auto setup = Client::mount(a->url());
  const std::string top = fresh_top(*setup, "wfuse");
  {
    odafs::test::MountProcess on_a(a->url(), mnt.path());
    for (int i = 0; i < kFiles; ++i) {
      odafs::test::write_local(on_a / (name_of(top, i).substr(1)), bytes_of(i));  // closed
    }
    CHECK(server_stat(*setup, "delegations.granted_write") >= static_cast<uint64_t>(kFiles));
    setup.reset();
    a->kill_hard();
    a->start_again();
    for (int i = 0; i < kFiles; ++i) {  // through the restarted A, after the reclaim
      CHECK(odafs::test::read_local(on_a / (name_of(top, i).substr(1))) == bytes_of(i));
    }
  }
  auto b = gateway();
  check_whole(b->url(), top);
}

// A stopped client holding a write delegation through A: a read through B waits at most
// A's lease (A gives CephFS's delegation back without the holder's return), and finds
// the bytes the holder's close acknowledged (sent by the close, written by CephFS when A
// gave its delegation back).
TEST_CASE("a stopped write-delegation holder delays another gateway's reader by at most its lease" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  const std::string kept = pattern(20000, 77);
  StoppedHolder stopped("wstopped", [&](Client& c, const std::string& f) {
    // Over "before", without O_TRUNC: a truncation gives the delegation back.
    const uint64_t granted = server_stat(c, "delegations.granted_write");
    odafs::test::write_path(c, f, kept);
    if (server_stat(c, "delegations.granted_write") == granted) _exit(3);
  });
  auto& [a, b, setup, f, holder] = stopped;
  auto on_a = Client::mount(a->url());
  const auto start = std::chrono::steady_clock::now();
  CHECK(read_all(*Client::mount(b->url(), uncached()), f, kept.size()) == kept);
  CHECK(odafs::test::seconds_since(start) < 4.0);
  CHECK(server_stat(*on_a, "leases.unreturned") > 0);
}

TEST_CASE("a client fails over to the next gateway: its open file reads and writes on" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  odafs::test::TempDir keys;
  const std::string key = make_key_file(keys, "failover");
  auto a = gateway({"--handle-key-file", key});
  auto b = gateway({"--handle-key-file", key});
  MountOptions o = uncached();
  o.reconnect_window_ms = 5000;
  const std::string both = odafs::test::both_url(*a, *b);
  auto c = Client::mount(both, o);
  const std::string top = fresh_top(*c, "failover");
  const std::string v1 = odafs::test::pattern(30000, 4);
  File f = c->open(top + "/f", O_RDWR | O_CREAT, 0644);
  CHECK(f.pwrite(v1.data(), v1.size(), 0) == v1.size());
  f.fsync();
  CHECK(read_all(f, v1.size()) == v1);

  // The gateway in use dies: the next call fails over to b. Its CephFS session keeps the
  // file's capabilities until the MDS times it out (30 s here); a deployment fences a dead
  // gateway at once, as here (docs/ceph.md).
  const pid_t dead = a->pid();
  a->kill_hard();
  evict_session_of(dead);
  CHECK(read_all(f, v1.size()) == v1);
  CHECK(f.pwrite("AFTER", 5, 0) == 5u);
  f.fsync();
  f.close();
  auto on_b = Client::mount(b->url(), uncached());
  CHECK(read_all(*on_b, top + "/f", 5) == "AFTER");
  // New opens by path go to b too.
  write_file(*c, top + "/g", "made after");
  CHECK(read_all(*on_b, top + "/g", 10) == "made after");

  // Both away: a mount names the last failure after trying each.
  const pid_t b_pid = b->pid();
  b->kill_hard();
  evict_session_of(b_pid);  // else its capabilities on / stall the next case for 30 s
  MountOptions quick = uncached();
  CHECK(odafs::test::errno_of([&] { Client::mount(both, quick); }) == ECONNREFUSED);
}

// A gateway killed while it holds CephFS leases, restarted with its state directory,
// evicts the session its dead instance left (its uuid kept there): another gateway's
// write to a file the dead one held waits seconds, not the MDS's session timeout (30 s on
// the suite's cluster), and the dead one's client reads on through the new instance.
TEST_CASE("a gateway killed holding a lease and restarted frees the file at once" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  auto a = gateway();  // ServerProcess gives it a state directory it keeps across restarts
  auto b = gateway();
  auto on_b = Client::mount(b->url());
  auto reader = Client::mount(a->url());
  const std::string top = fresh_top(*on_b, "restart");
  const std::string f = top + "/f";
  const std::string v1 = odafs::test::pattern(16 * 1024, 9);
  const std::string v2 = odafs::test::pattern(16 * 1024, 10);
  write_file(*on_b, f, v1);
  REQUIRE(until_delegated(*reader, f, v1));  // A holds CephFS's delegation on f

  a->kill_hard();
  a->start_again();
  const auto start = std::chrono::steady_clock::now();
  write_file(*on_b, f, v2);  // waits for the dead instance's delegation to go
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 10.0);
  CHECK(read_all(*reader, f, v2.size()) == v2);  // through the restarted A
}

// A stopped client holding a read delegation through gateway A (it answers no recall)
// delays a write through the other gateway by at most its lease (--lease-ms: A waits that
// long for its return before it gives CephFS's delegation back), and one through A by at
// most its lease too, after which A takes the delegation from it.
TEST_CASE("a stopped client delays writers through either gateway by at most its lease" *
          doctest::skip(no_cluster()) * doctest::description(skip_reason())) {
  StoppedHolder stopped("stopped", [](Client& c, const std::string& f) {
    if (!until_delegated(c, f, "before")) _exit(3);
  });
  auto& [a, b, setup, f, holder] = stopped;
  auto on_a = Client::mount(a->url());
  const uint64_t expired = odafs::test::server_stat(*on_a, "delegations.expired");

  auto start = std::chrono::steady_clock::now();
  write_file(*setup, f, "through B");
  CHECK(odafs::test::seconds_since(start) < 4.0);
  CHECK(odafs::test::server_stat(*on_a, "leases.unreturned") > 0);  // given back without it
  // Write through A: its own open to write recalls the (read) delegation A granted; a
  // holder that never returns it is waited for 2 s at most.
  start = std::chrono::steady_clock::now();
  write_file(*on_a, f, "through A");
  CHECK(odafs::test::seconds_since(start) < 4.0);
  CHECK(read_all(*setup, f, 9) == "through A");
  CHECK(odafs::test::server_stat(*on_a, "delegations.expired") > expired);  // taken from it
}
