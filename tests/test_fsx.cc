// An fsx-style randomized test through real odafs-mounts (issue #38, "What to build"): a
// seeded random sequence of writes at random offsets and lengths, truncations (shrinking
// and growing), appends, preads compared byte for byte, fsyncs, closes and reopens of one
// file on one mount, reads of it through a second mount of the same export after a close
// (close-to-open), server crashes (SIGKILL) and stops (SIGTERM), restarted on the same
// port and state directory, and cuts of the writing mount's connections (a relay resets
// them, the server staying up), all interleaved; then, on a small tmpfs export, the same with
// the disk full. The file is checked against a reference kept in memory: every byte a call
// acknowledged must be there (through the mount, through the other mount, and on the
// export's disk at the end).
//
// The seed is drawn at random unless ODAFS_FSX_SEED gives it, and ODAFS_FSX_OPS sets how
// many operations run; a failure names the seed and the last operations, so that
// `ODAFS_FSX_SEED=N build-quick/tests/test_fsx` runs the same sequence again.
// ODAFS_FSX_MOUNT_OPTIONS gives both mounts options (`-o`).
//
// A full disk: a write, fsync or close may fail (ENOSPC or EDQUOT only). A failed call may
// report a failure of any write since the file's last successful fsync or close (a client
// sends writes later than it acknowledges them), so the reference then knows nothing of the
// bytes from the lowest offset written since, to its end: they, and the size, are
// undefined until written or truncated again. Everything else must be there. A pread may
// miss bytes written since the last fsync or close only if the fsync right after it fails.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "tests/support/mount_process.h"
#include "tests/support/server_process.h"
#include "tests/support/tcp_relay.h"
#include "tests/support/tmpfs.h"

using odafs::test::MountProcess;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TcpRelay;
using odafs::test::TempDir;
using odafs::test::Tmpfs;
using odafs::test::tmpfs_skip_reason;

namespace {

// The file as acknowledged calls left it. Its size is known exactly, or (after a failed
// call) only to lie in [lower_, bytes_.size()]; each byte is known or undefined.
class Reference {
 public:
  uint64_t upper() const { return bytes_.size(); }
  bool size_known() const { return lower_ == bytes_.size(); }

  // An acknowledged write of data at off.
  void write(uint64_t off, const std::string& data) {
    if (data.empty()) return;  // a write of nothing extends nothing
    const uint64_t end = off + data.size();
    if (end > bytes_.size()) {
      // A hole between the last byte that surely exists and off reads as zeros; what lies
      // between that and the old upper bound stays as it was (known or not).
      grow(end);
    }
    std::copy(data.begin(), data.end(), bytes_.begin() + static_cast<ptrdiff_t>(off));
    std::fill(known_.begin() + static_cast<ptrdiff_t>(off),
              known_.begin() + static_cast<ptrdiff_t>(end), true);
    lower_ = std::max(lower_, end);
    dirty(off);
  }
  // An acknowledged truncation (or extension) to size.
  void truncate(uint64_t size) {
    if (size > bytes_.size()) {
      grow(size);
    } else {
      bytes_.resize(size);
      known_.resize(size);
    }
    lower_ = size;
    lower_at_sync_ = size;  // sent at once: acknowledged for good
    dirty(size);
  }
  // A write, fsync or close failed: what was written since the last successful fsync or
  // close is undefined from the lowest offset written; a failed write of [off, reach) may
  // have written some of it, so the file may reach there.
  void failed(uint64_t off = UINT64_MAX, uint64_t reach = 0) {
    if (reach > bytes_.size()) grow(reach);
    dirty(off);
    for (uint64_t i = dirty_from_; i < bytes_.size(); ++i) known_[i] = false;
    // The writes since may not have extended the file at all.
    lower_ = std::min({lower_, dirty_from_, lower_at_sync_});
    lower_at_sync_ = lower_;
    dirty_from_ = UINT64_MAX;
  }
  // An fsync or close succeeded: everything written so far is acknowledged for good.
  void synced() {
    dirty_from_ = UINT64_MAX;
    lower_at_sync_ = lower_;
  }

  // Why `got`, what a read of want bytes at off returned, is wrong, or "".
  std::string check_read(uint64_t off, size_t want, const std::string& got) const {
    if (got.size() > want) return "read more than asked";
    if (!got.empty() && off + got.size() > bytes_.size()) {
      return "read past the end: " + std::to_string(off + got.size()) + " > " +
             std::to_string(bytes_.size());
    }
    for (size_t i = 0; i < got.size(); ++i) {
      const uint64_t at = off + i;
      if (known_[at] && got[i] != bytes_[at]) {
        return "byte " + std::to_string(at) + " is " + std::to_string(uint8_t(got[i])) +
               ", was written " + std::to_string(uint8_t(bytes_[at]));
      }
    }
    // A short read: the file ends there, so no byte past it may be known to exist.
    const uint64_t end = off + got.size();
    if (got.size() < want && end < lower_ && off < lower_) {
      return "the file ends at " + std::to_string(end) + ", but its bytes reach " +
             std::to_string(lower_);
    }
    if (got.size() < want && size_known() && off < bytes_.size() && end != bytes_.size()) {
      return "the file ends at " + std::to_string(end) + ", not " + std::to_string(bytes_.size());
    }
    return "";
  }

 private:
  void grow(uint64_t end) {
    bytes_.resize(end, '\0');
    known_.resize(end, true);  // past every byte the file may have had: zeros
  }
  void dirty(uint64_t off) { dirty_from_ = std::min(dirty_from_, off); }

  std::string bytes_;
  std::vector<bool> known_;
  uint64_t lower_ = 0;
  uint64_t lower_at_sync_ = 0;  // lower_ at the last successful fsync, close or truncation
  uint64_t dirty_from_ = UINT64_MAX;
};

// The seed and operation count of a run: from ODAFS_FSX_SEED and ODAFS_FSX_OPS, else a
// random seed and `ops`.
uint64_t fsx_seed() {
  if (const char* s = std::getenv("ODAFS_FSX_SEED"); s != nullptr && *s != '\0') {
    return std::strtoull(s, nullptr, 0);
  }
  return std::random_device()() | (uint64_t{std::random_device()()} << 32);
}
// odafs-mount options for both mounts, from ODAFS_FSX_MOUNT_OPTIONS ("write_behind=1048576"),
// else the defaults.
std::vector<std::string> fsx_mount_options() {
  const char* s = std::getenv("ODAFS_FSX_MOUNT_OPTIONS");
  if (s == nullptr || *s == '\0') return {};
  return {s};
}
int fsx_ops(int ops) {
  if (const char* s = std::getenv("ODAFS_FSX_OPS"); s != nullptr && *s != '\0') {
    return std::max(1, std::atoi(s));
  }
  return ops;
}

// The last operations run, for a failure's message.
class Recent {
 public:
  void add(std::string op) {
    ops_.push_back(std::move(op));
    if (ops_.size() > 24) ops_.pop_front();
  }
  std::string text() const {
    std::string out;
    for (const std::string& op : ops_) out += "  " + op + "\n";
    return out;
  }

 private:
  std::deque<std::string> ops_;
};

struct Shape {
  uint64_t max_size;  // offsets and truncations stay below this
  size_t max_len;     // the longest write or read
  bool restarts;      // crash and stop the server now and then
  bool may_fill;      // the disk may be full: writes, fsyncs and closes may fail ENOSPC
  // Half the restarts come with the file open (else it is closed first, reopened after).
  bool restart_open = true;
};

// One run: `ops` random operations on file `name` through mount `a`, read after closes
// through mount `b`, against a Reference. `disk` is the export's directory (checked at
// the end, after both mounts are gone). With a relay, mount `a`'s RPC connections go
// through it, and some of the restarts are cuts of them instead (the server stays up).
class Fsx {
 public:
  Fsx(uint64_t seed, Shape shape, ServerProcess& server, const std::string& disk,
      TcpRelay* relay = nullptr)
      : seed_(seed), rng_(seed), shape_(shape), server_(server), disk_(disk), relay_(relay) {}

  void run(int ops) {
    TempDir ma, mb;
    const std::string url_a = relay_ != nullptr
                                  ? "odafs://127.0.0.1:" + std::to_string(relay_->port()) + "/"
                                  : server_.url();
    auto a = std::make_unique<MountProcess>(url_a, ma.path(), fsx_mount_options());
    auto b = std::make_unique<MountProcess>(server_.url(), mb.path(), fsx_mount_options());
    path_a_ = *a / "fsx";
    path_b_ = *b / "fsx";
    INFO("fsx seed ", seed_, " (ODAFS_FSX_SEED=", seed_, " to run it again); last operations:\n",
         recent_.text());
    reopen(O_CREAT | O_TRUNC);
    for (int i = 0; i < ops && !failed_; ++i) step(i);
    close_a();
    if (!failed_) read_through(path_b_, "the other mount, at the end");
    if (failed_) {
      MESSAGE("the writing odafs-mount said:\n", a->stderr_text());
      MESSAGE("the reading odafs-mount said:\n", b->stderr_text());
    }
    // Unmounted: whatever the mounts kept is on the server's disk.
    if (a->unmount() != 0) fail("odafs-mount (writer) exited non-zero: " + a->stderr_text());
    b->unmount();
    if (!failed_) read_through(disk_ + "/fsx", "the export's disk");
  }
  bool failed() const { return failed_; }
  int failures() const { return refused_; }

 private:
  uint64_t pick(uint64_t below) { return below == 0 ? 0 : rng_() % below; }

  void step(int i) {
    const uint64_t r = pick(100);
    if (r < 30) {
      do_write(pick(shape_.max_size), 1 + pick(shape_.max_len), i);
    } else if (r < 40) {
      if (ref_.size_known()) do_write(ref_.upper(), 1 + pick(shape_.max_len), i);  // append
    } else if (r < 62) {
      do_read(pick(shape_.max_size), 1 + pick(shape_.max_len));
    } else if (r < 70) {
      do_truncate(pick(shape_.max_size));
    } else if (r < 78) {
      recent_.add("fsync");
      call_ok(::fsync(fd_) == 0, "fsync", /*syncs=*/true);
    } else if (r < 88) {
      close_a();
      reopen(0);
    } else if (r < 96) {
      close_a();
      read_through(path_b_, "the other mount, after a close");
      reopen(0);
    } else if (shape_.restarts) {
      if (relay_ != nullptr && pick(3) == 0) {
        // The writer's connections reset by the path, the server staying up, the file
        // open: the mount reconnects at its next call and loses nothing.
        recent_.add("connection cut");
        relay_->reset_all();
        return;
      }
      const bool hard = pick(2) == 0;
      const bool open = pick(2) == 0 && shape_.restart_open;
      if (!open) close_a();
      recent_.add(hard ? "server SIGKILL, restart" : "server SIGTERM, restart");
      if (hard) {
        server_.kill_hard();
      } else {
        server_.stop();
      }
      server_.start_again();
      if (!open) reopen(0);
    }
  }

  // Whether a call that returned `ok` may go on: a failure is allowed only on a full disk,
  // with ENOSPC or EDQUOT, and then the reference forgets what it cannot vouch for.
  // `syncs`: a successful call acknowledges every write before it for good (fsync, close).
  // A failed write names the range it tried, [off, reach).
  bool call_ok(bool ok, const char* what, bool syncs = false, uint64_t off = UINT64_MAX,
               uint64_t reach = 0) {
    if (ok) {
      if (syncs) ref_.synced();
      return true;
    }
    const int err = errno;
    if (shape_.may_fill && (err == ENOSPC || err == EDQUOT)) {
      ++refused_;
      ref_.failed(off, reach);
      recent_.add(std::string("  -> ") + what + " failed: " + std::strerror(err));
      return false;
    }
    fail(std::string(what) + " failed: " + std::strerror(err));
    return false;
  }

  void fail(const std::string& why) {
    failed_ = true;
    FAIL_CHECK(why);
  }

  void reopen(int flags) {
    recent_.add("open" + std::string(flags & O_TRUNC ? " O_TRUNC" : ""));
    // O_CLOEXEC: the servers restarted here are this process's children, and one that
    // kept the descriptor would hold the file open as long as it runs. Close-on-exec is
    // still a close: the kernel flushes the descriptor as the child as it execs, while
    // the server is down. That flush must neither take the report of a failed write this
    // process's close owes (odafs-mount keeps a mark per caller) nor lose the run it could
    // not send (kept for the next call).
    fd_ = ::open(path_a_.c_str(), O_RDWR | O_CLOEXEC | flags, 0644);
    if (fd_ < 0) return fail(std::string("open: ") + std::strerror(errno));
    if (flags & O_TRUNC) {
      ref_.truncate(0);
      ref_.synced();
    }
  }

  void close_a() {
    if (fd_ < 0) return;
    recent_.add("close");
    const int fd = fd_;
    fd_ = -1;
    call_ok(::close(fd) == 0, "close", /*syncs=*/true);
  }

  void do_write(uint64_t off, size_t len, int i) {
    recent_.add("write " + std::to_string(len) + " at " + std::to_string(off));
    std::string data = odafs::test::pattern(len, seed_ ^ (uint64_t(i) << 20));
    const ssize_t n = ::pwrite(fd_, data.data(), len, static_cast<off_t>(off));
    if (n >= 0 && static_cast<size_t>(n) != len) {
      // A short write is acknowledged for what it wrote; the rest failed (a full disk).
      data.resize(static_cast<size_t>(n));
      ref_.write(off, data);
      errno = ENOSPC;
      call_ok(false, "write (short)", false, off, off + len);
      return;
    }
    if (call_ok(n >= 0, "write", false, off, off + len)) ref_.write(off, data);
  }

  void do_truncate(uint64_t size) {
    recent_.add("truncate to " + std::to_string(size));
    if (call_ok(::ftruncate(fd_, static_cast<off_t>(size)) == 0, "ftruncate")) ref_.truncate(size);
  }

  void do_read(uint64_t off, size_t len) {
    recent_.add("pread " + std::to_string(len) + " at " + std::to_string(off));
    std::string got(len, '\0');
    size_t done = 0;
    while (done < len) {
      const ssize_t n = ::pread(fd_, got.data() + done, len - done, static_cast<off_t>(off + done));
      if (n < 0) return fail(std::string("pread: ") + std::strerror(errno));
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    got.resize(done);
    std::string why = ref_.check_read(off, len, got);
    if (!why.empty() && shape_.may_fill) {
      // A write that could not be sent on a full disk is gone before its failure is
      // reported (at the next write, fsync or close): the fsync must report it now.
      recent_.add("  -> pread: " + why + "; fsync");
      if (!call_ok(::fsync(fd_) == 0, "fsync", /*syncs=*/true)) {
        why = ref_.check_read(off, len, got);
      }
    }
    if (!why.empty()) fail("pread: " + why);
  }

  // Reads the whole file at path (another mount's, or the disk's) and checks it.
  void read_through(const std::string& path, const char* where) {
    recent_.add(std::string("read all through ") + where);
    std::string got;
    try {
      got = read_local(path);
    } catch (const std::exception& e) {
      return fail(std::string(where) + ": " + e.what());
    }
    const size_t want = ref_.upper() + 1;  // one past, to see the end
    if (std::string why = ref_.check_read(0, want, got); !why.empty()) {
      // Where the bytes are missing tells a stale copy from a loss.
      const std::string on_disk = read_local(disk_ + "/fsx");
      const std::string disk_why = ref_.check_read(0, want, on_disk);
      fail(std::string(where) + ": " + why +
           "; the export's disk: " + (disk_why.empty() ? "right" : disk_why));
    }
  }

  const uint64_t seed_;
  std::mt19937_64 rng_;
  const Shape shape_;
  ServerProcess& server_;
  const std::string disk_;
  TcpRelay* const relay_;
  std::string path_a_, path_b_;
  int fd_ = -1;
  Reference ref_;
  Recent recent_;
  bool failed_ = false;
  int refused_ = 0;  // calls a full disk refused
};

// Why the full-disk run cannot run here ("" when it can).
const char* full_disk_skip() {
  if (*tmpfs_skip_reason() != '\0') return tmpfs_skip_reason();
  return odafs::test::fuse_available() ? "" : odafs::test::fuse_skip_description();
}

}  // namespace

ODAFS_MOUNT_TEST(
    "fsx: random writes, truncations, appends, reads, fsyncs and reopens through two mounts, "
    "with server crashes and stops: every acknowledged byte is there") {
  const uint64_t seed = fsx_seed();
  std::fprintf(stderr, "test_fsx: seed %llu\n", static_cast<unsigned long long>(seed));
  TempDir exported;
  ServerProcess server(exported.path());
  TcpRelay relay(server.port());
  Fsx fsx(seed, Shape{1 << 20, 96 * 1024, /*restarts=*/true, /*may_fill=*/false}, server,
          exported.path(), &relay);
  fsx.run(fsx_ops(1500));
  CHECK_FALSE(fsx.failed());
}

namespace {

void fsx_full_disk(bool restart_open) {
  const uint64_t seed = fsx_seed();
  std::fprintf(stderr, "test_fsx (full disk): seed %llu\n", static_cast<unsigned long long>(seed));
  TempDir dir;
  Tmpfs fs(dir / "export", "size=3m");
  REQUIRE(fs.mounted);
  // Most of the disk taken, so that the file's growth meets the end of it.
  odafs::test::write_local(fs.dir + "/filler", std::string(2300 * 1024, 'f'));
  ServerProcess server(fs.dir);
  TcpRelay relay(server.port());
  Shape shape{3 << 20, 128 * 1024, /*restarts=*/true, /*may_fill=*/true};
  shape.restart_open = restart_open;
  Fsx fsx(seed, shape, server, fs.dir, &relay);
  fsx.run(fsx_ops(800));
  CHECK_FALSE(fsx.failed());
  CHECK(fsx.failures() > 0);  // the disk did fill
}

}  // namespace

TEST_CASE(
    "fsx on a full export: every write, fsync and close succeeds with its bytes there, "
    "or fails ENOSPC at that call (restarts with the file closed)" *
    doctest::skip(*full_disk_skip() != '\0') * doctest::description(full_disk_skip())) {
  fsx_full_disk(/*restart_open=*/false);
}

// Seed 9836354332746644802 lost the end of a write here: a run sent by a read failed on
// the full disk, the close-on-exec flush of a restarted server's child took the report,
// and this process's close returned 0 (issue #38).
TEST_CASE(
    "fsx on a full export with restarts while the file is open: a failed write is reported "
    "to the writer's own close" *
    doctest::skip(*full_disk_skip() != '\0') * doctest::description(full_disk_skip())) {
  fsx_full_disk(/*restart_open=*/true);
}
