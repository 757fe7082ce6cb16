// odafs-peers: one client process of the side-by-side benchmark (bench/peers/run.sh): the
// same workloads, same seeds, against libodafs (odafs://) or libnfs (nfs://).
//
//   odafs-peers --target URL [--mode rpc|ordma|ordma_tcp] --name NAME --server-pid PID
//       --run W1,W2,... [--round R] [--seconds S] [--file PATH] [--seq-file PATH]
//       [--start-at UNIX_MS] [--label L] [--pm-files N] [--pm-txns N] [--ops N]
//       [--perf-ctl CTL:ACK[,CTL:ACK...]]
//   odafs-peers --make-file PATH --mb M
//
// Workloads (--run), each a JSON line on stdout:
//   lat    4 KiB reads at random 4 KiB-aligned offsets of --file, one at a time, for S
//          seconds: mean / p50 / p90 / p99 latency;
//   qN     the same with N reads in flight (libodafs IoQueue; libnfs nfs_pread_async with
//          an nfs_service poll loop): reads/s, mean latency by Little's law;
//   seq    sequential 1 MiB reads of --seq-file, whole passes for at least S seconds: MB/s;
//   pm_ro  PostMark's Fig. 6 configuration (read-only transactions on a pool of 1-7 KiB
//          files, each read wrapped in open and close) through bench/postmark;
//   pm_std standard PostMark (creates, deletes, reads, appends), --pm-files / 4 files and
//          --pm-txns / 10 transactions.
// Each row carries the server's CPU per operation, from /proc/PID/stat of --server-pid
// (the same meter for odafsd and ganesha.nfsd). Before measuring, the files are read
// whole once, so they are warm in the server's cache (and, for ORDMA, the client holds a
// reference for every block). No client data cache on either side: libnfs's page cache is
// off by default, and the odafs mount has cache_blocks = 0, so every read leaves the client.
// --start-at makes the process wait, after its set-up, until that wall-clock time, so that
// several processes measure together (--label names their rows).
// --ops N makes lat and qN do exactly N reads, and seq exactly N 1 MiB reads, instead of
// running for S seconds. --perf-ctl names the control and ack FIFOs of `perf stat -D -1
// --control fifo:CTL,ACK` instances (one counting this process, one the server): they are
// told "enable" after the set-up and warm-up and "disable" after the workloads, so that
// their counts are the workloads' alone (bench/peers/bound.sh divides them by N).
//
// --make-file writes the data files with content fill_content(kSeed, offset): every read
// checks its first bytes against it (a cheap check that allocates nothing).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/peers/nfs_client.h"
#include "bench/postmark/postmark.h"
#include "client/client.h"
#include "client/io_queue.h"

namespace {

using odafs::bench::Json;
using odafs::bench::rounded;

using odafs::Error;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kSeed = 1;
constexpr size_t kBlock = 4096, kSeqChunk = 1 << 20, kMaxDepth = 64;
// The data files' sizes: run.sh makes them so (--make-file).
constexpr uint64_t kFileBytes = 64u << 20, kSeqFileBytes = 256u << 20;

// This process's CPU microseconds (user + system) so far: the client's cost per read.
double self_cpu_us() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Throws EIO unless buf starts with the bytes the data file holds at offset.
void check_content(const char* buf, uint64_t offset) {
  char want[8];
  odafs::postmark::fill_content(kSeed, offset, want, sizeof want);
  if (std::memcmp(buf, want, sizeof want) != 0) throw Error(EIO, "a read came back wrong");
}

// What the workloads need of a client library: sync and in-flight reads of one file, and
// a PostMark backend. Throws odafs::Error.
class Reader {
 public:
  virtual ~Reader() = default;
  // Makes path the file later reads read (closing the previous one).
  virtual void open(const std::string& path) = 0;
  // Reads exactly len bytes at offset.
  virtual void read(void* buf, size_t len, uint64_t offset) = 0;
  // Up to kMaxDepth reads in flight; wait returns the tags of at least one completed read.
  virtual void submit(void* buf, size_t len, uint64_t offset, size_t tag) = 0;
  virtual size_t wait(std::span<size_t> tags) = 0;
  virtual odafs::postmark::Backend& backend() = 0;
  // What the client library did so far, by path: (one-sided reads, READ calls, faults
  // answered with an RPC). Zeros for libnfs, which has one path.
  struct Paths {
    double ordma = 0, rpc = 0, fallbacks = 0;
  };
  virtual Paths paths() const { return {}; }
};

class OdafsReader final : public Reader {
 public:
  OdafsReader(const std::string& url, const std::string& mode) {
    odafs::MountOptions mo;
    if (mode == "rpc") {
      mo.read_mode = odafs::ReadMode::kPrePosted;
    } else if (mode == "ordma" || mode == "ordma_tcp") {
      mo.read_mode = odafs::ReadMode::kOrdma;
      mo.same_host_shortcut = mode == "ordma";
    } else {
      throw Error(EINVAL, "unknown --mode " + mode);
    }
    mo.cache_blocks = 0;              // every read leaves the client, as with libnfs
    mo.directory_entries = 1u << 17;  // references for every block of both data files
    client_ = odafs::Client::mount(url, mo);
    queue_.emplace(*client_, kMaxDepth);
    backend_.emplace(*client_);
  }
  ~OdafsReader() override {
    queue_.reset();  // before the files and client it reads
  }
  void open(const std::string& path) override {
    file_.reset();
    file_.emplace(client_->open(path, O_RDONLY));
  }
  void read(void* buf, size_t len, uint64_t offset) override {
    if (file_->pread(buf, len, offset) != len) throw Error(EIO, "short read");
  }
  void submit(void* buf, size_t len, uint64_t offset, size_t tag) override {
    queue_->submit_read(*file_, buf, len, offset, tag);
  }
  size_t wait(std::span<size_t> tags) override {
    size_t n = queue_->wait(std::span(got_, tags.size()), 1, -1);
    for (size_t i = 0; i < n; ++i) {
      if (got_[i].error != 0 || got_[i].bytes != kBlock) {
        throw Error(got_[i].error ? got_[i].error : EIO, "async read failed");
      }
      tags[i] = got_[i].user_tag;
    }
    return n;
  }
  odafs::postmark::Backend& backend() override { return *backend_; }
  Paths paths() const override {
    const odafs::ClientStats& s = client_->stats();
    return {static_cast<double>(s.ordma_reads.load()), static_cast<double>(s.rpc_reads.load()),
            static_cast<double>(s.fallbacks.load())};
  }

 private:
  std::unique_ptr<odafs::Client> client_;
  std::optional<odafs::File> file_;
  std::optional<odafs::IoQueue> queue_;
  std::optional<odafs::postmark::ClientBackend> backend_;
  odafs::Completion got_[kMaxDepth];
};

class NfsReader final : public Reader {
 public:
  explicit NfsReader(const std::string& url) : mount_(url), backend_(mount_) {}
  ~NfsReader() override {
    queue_.reset();
    if (fh_ != nullptr) mount_.close_quietly(fh_);
  }
  void open(const std::string& path) override {
    close();
    fh_ = mount_.open(path, O_RDONLY, 0);
    queue_.emplace(mount_, fh_, kMaxDepth);
  }
  void read(void* buf, size_t len, uint64_t offset) override {
    mount_.read_exactly(fh_, buf, len, offset);
  }
  void submit(void* buf, size_t len, uint64_t offset, size_t tag) override {
    queue_->submit(buf, len, offset, tag);
  }
  size_t wait(std::span<size_t> tags) override { return queue_->wait(tags); }
  odafs::postmark::Backend& backend() override { return backend_; }

 private:
  void close() {
    queue_.reset();
    if (fh_ != nullptr) mount_.close(fh_);
    fh_ = nullptr;
  }
  odafs::peers::NfsMount mount_;
  odafs::peers::NfsBackend backend_;
  nfsfh* fh_ = nullptr;
  std::optional<odafs::peers::NfsReadQueue> queue_;
};

struct Options {
  std::string target, mode = "rpc", name, file = "/peers-64m.dat", seq_file = "/peers-256m.dat";
  std::string label;
  std::vector<std::string> run;
  pid_t server_pid = 0;
  size_t round = 0, pm_files = 1000, pm_txns = 3000;
  double seconds = 1.5;
  int64_t start_at_ms = 0;
  uint64_t ops = 0;  // > 0: that many reads (seq: MiB), not `seconds` of them
  std::vector<std::pair<std::string, std::string>> perf_ctl;  // (control, ack) FIFOs
};

// Sends command to each perf stat's control FIFO and waits for its ack, so that the
// counters are on (or off) before the next read.
void tell_perf(const Options& o, const char* command) {
  for (const auto& [ctl, ack] : o.perf_ctl) {
    int fd = ::open(ctl.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw Error(errno, "cannot open " + ctl);
    const std::string line = std::string(command) + "\n";
    const bool sent = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    ::close(fd);
    if (!sent) throw Error(EIO, "cannot write " + ctl);
    fd = ::open(ack.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(errno, "cannot open " + ack);
    char reply[16];
    const ssize_t n = ::read(fd, reply, sizeof reply);
    ::close(fd);
    if (n <= 0) throw Error(EIO, "no ack on " + ack);
  }
}

// The JSON row's common head: who, which round, which workload.
Json head(const Options& o, const std::string& workload) {
  return {{"contender", o.name},
          {"round", o.round},
          {"workload", o.label.empty() ? workload : o.label}};
}

// The head plus how the client's reads went between two snapshots, per operation (for
// seq: per MiB): one-sided reads, READ calls, faults. Only for odafs (libnfs has one path).
Json with_paths(Json row, const Reader& r, const Reader::Paths& p0, double ops) {
  const Reader::Paths p1 = r.paths();
  if (p1.ordma + p1.rpc == 0) return row;
  row["ordma_reads_per_op"] = rounded((p1.ordma - p0.ordma) / ops, 3);
  row["rpc_reads_per_op"] = rounded((p1.rpc - p0.rpc) / ops, 3);
  row["fallbacks_per_op"] = rounded((p1.fallbacks - p0.fallbacks) / ops, 3);
  return row;
}

// Prints a row as one JSON line.
void emit(const Json& row) {
  std::printf("%s\n", row.dump().c_str());
  std::fflush(stdout);
}

// Reads the whole file once: the server's cache (and ORDMA references) warm.
void warm(Reader& r, uint64_t bytes, std::vector<char>& chunk) {
  for (uint64_t off = 0; off < bytes; off += kSeqChunk) {
    r.read(chunk.data(), kSeqChunk, off);
    check_content(chunk.data(), off);
  }
}

void run_lat(Reader& r, const Options& o, uint64_t bytes, std::mt19937_64& rng) {
  const uint64_t blocks = bytes / kBlock;
  alignas(64) static char buf[kBlock];
  std::vector<double> lat;
  lat.reserve(1 << 20);
  const uint64_t cpu0 = odafs::bench::process_cpu_us(o.server_pid);
  const double self0 = self_cpu_us();
  const Reader::Paths paths0 = r.paths();
  const auto t_end = Clock::now() + std::chrono::duration<double>(o.seconds);
  while (lat.size() < lat.capacity() && (o.ops > 0 ? lat.size() < o.ops : Clock::now() < t_end)) {
    const uint64_t off = (rng() % blocks) * kBlock;
    auto t0 = Clock::now();
    r.read(buf, kBlock, off);
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    check_content(buf, off);
  }
  const uint64_t cpu1 = odafs::bench::process_cpu_us(o.server_pid);
  const double self1 = self_cpu_us();
  const size_t n = lat.size();
  double sum = 0;
  for (double v : lat) sum += v;
  std::sort(lat.begin(), lat.end());
  Json row = with_paths(head(o, "lat"), r, paths0, static_cast<double>(n));
  row["ops"] = n;
  row["mean_us"] = rounded(sum / static_cast<double>(n), 2);
  row["p50_us"] = rounded(lat[n / 2], 2);
  row["p90_us"] = rounded(lat[n * 9 / 10], 2);
  row["p99_us"] = rounded(lat[n * 99 / 100], 2);
  row["server_cpu_us_per_op"] = rounded(static_cast<double>(cpu1 - cpu0) / n, 2);
  row["client_cpu_us_per_op"] = rounded((self1 - self0) / static_cast<double>(n), 2);
  emit(row);
}

void run_inflight(Reader& r, const Options& o, const std::string& workload, size_t depth,
                  uint64_t bytes, std::mt19937_64& rng) {
  if (depth == 0 || depth > kMaxDepth)
    throw Error(EINVAL, "in flight: 1.." + std::to_string(kMaxDepth));
  const uint64_t blocks = bytes / kBlock;
  alignas(64) static char bufs[kMaxDepth][kBlock];
  uint64_t at[kMaxDepth];
  size_t tags[kMaxDepth];
  auto submit = [&](size_t slot) {
    at[slot] = (rng() % blocks) * kBlock;
    r.submit(bufs[slot], kBlock, at[slot], slot);
  };
  const uint64_t cpu0 = odafs::bench::process_cpu_us(o.server_pid);
  const double self0 = self_cpu_us();
  const Reader::Paths paths0 = r.paths();
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(o.seconds);
  uint64_t done = 0;
  if (o.ops > 0 && o.ops < depth) throw Error(EINVAL, "--ops below the reads in flight");
  size_t outstanding = depth;
  uint64_t submitted = depth;
  for (size_t s = 0; s < depth; ++s) submit(s);
  bool more = true;
  while (outstanding > 0) {
    const size_t k = r.wait(std::span(tags, depth));
    if (k == 0) throw Error(EIO, "in-flight reads lost");
    for (size_t i = 0; i < k; ++i) {
      check_content(bufs[tags[i]], at[tags[i]]);
      ++done;
      if (more && (o.ops == 0 || submitted < o.ops)) {
        submit(tags[i]);
        ++submitted;
      } else {
        --outstanding;
      }
    }
    more = more && Clock::now() < deadline;
  }
  const double elapsed = seconds_since(t0);
  const uint64_t cpu1 = odafs::bench::process_cpu_us(o.server_pid);
  const double self1 = self_cpu_us();
  const double rate = static_cast<double>(done) / elapsed;
  Json row = with_paths(head(o, workload), r, paths0, static_cast<double>(done));
  row["inflight"] = depth;
  row["ops"] = done;
  row["seconds"] = rounded(elapsed, 3);
  row["ops_per_s"] = rounded(rate, 1);
  row["mean_us"] = rounded(static_cast<double>(depth) / rate * 1e6, 2);
  row["server_cpu_us_per_op"] = rounded(static_cast<double>(cpu1 - cpu0) / done, 2);
  row["client_cpu_us_per_op"] = rounded((self1 - self0) / static_cast<double>(done), 2);
  emit(row);
}

void run_seq(Reader& r, const Options& o, uint64_t bytes, std::vector<char>& chunk) {
  const uint64_t cpu0 = odafs::bench::process_cpu_us(o.server_pid);
  const double self0 = self_cpu_us();
  const Reader::Paths paths0 = r.paths();
  const auto t0 = Clock::now();
  uint64_t total = 0;
  const uint64_t want = o.ops * kSeqChunk;  // 0: whole passes for `seconds`
  do {
    for (uint64_t off = 0; off < bytes && (want == 0 || total < want); off += kSeqChunk) {
      r.read(chunk.data(), kSeqChunk, off);
      check_content(chunk.data(), off);
      total += kSeqChunk;
    }
  } while (want > 0 ? total < want : seconds_since(t0) < o.seconds);
  const double elapsed = seconds_since(t0);
  const uint64_t cpu1 = odafs::bench::process_cpu_us(o.server_pid);
  const double self1 = self_cpu_us();
  const double mib = static_cast<double>(total) / kSeqChunk;
  Json row = with_paths(head(o, "seq"), r, paths0, mib);
  row["request_bytes"] = kSeqChunk;
  row["bytes"] = total;
  row["seconds"] = rounded(elapsed, 3);
  row["mb_per_s"] = rounded(static_cast<double>(total) / elapsed / 1e6, 1);
  row["server_cpu_us_per_mib"] = rounded(static_cast<double>(cpu1 - cpu0) / mib, 1);
  row["client_cpu_us_per_mib"] = rounded((self1 - self0) / mib, 1);
  emit(row);
}

void run_postmark(Reader& r, const Options& o, bool read_only) {
  odafs::postmark::Config cfg;
  cfg.seed = 42 + o.round;
  if (read_only) {  // bench/postmark/run_postmark.sh's Fig. 6 parameters, a smaller pool
    cfg.files = o.pm_files;
    cfg.size_low = 1024;
    cfg.size_high = 7168;
    cfg.read_block = cfg.write_block = 4096;
    cfg.bias_read = 10;
    cfg.bias_create = -1;
  } else {  // PostMark's defaults (postmark.h) on a quarter of the pool: its creates,
            // appends and deletes cost milliseconds each (synchronous writes)
    cfg.files = o.pm_files / 4;
  }
  cfg.transactions = read_only ? o.pm_txns : o.pm_txns / 10;
  odafs::postmark::Postmark pm(r.backend(), cfg, kBlock);
  pm.create_pool();
  if (read_only) pm.transactions(cfg.transactions / 4);  // opens and lookups warm
  pm.reset_counts();
  const uint64_t cpu0 = odafs::bench::process_cpu_us(o.server_pid);
  pm.transactions(cfg.transactions);
  const uint64_t cpu1 = odafs::bench::process_cpu_us(o.server_pid);
  const odafs::postmark::Counts c = pm.counts();
  pm.delete_pool();
  Json row = head(o, read_only ? "pm_ro" : "pm_std");
  row["files"] = cfg.files;
  row["transactions"] = cfg.transactions;
  row["seconds"] = rounded(c.transactions_s, 3);
  row["tps"] = rounded(static_cast<double>(cfg.transactions) / c.transactions_s, 1);
  row["server_cpu_us_per_txn"] =
      rounded(static_cast<double>(cpu1 - cpu0) / static_cast<double>(cfg.transactions), 2);
  emit(row);
}

void make_file(const std::string& path, size_t mb) {
  std::vector<char> chunk(kSeqChunk);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error(errno, "cannot create " + path);
  for (uint64_t off = 0; off < (uint64_t{mb} << 20); off += chunk.size()) {
    odafs::postmark::fill_content(kSeed, off, chunk.data(), chunk.size());
    if (::pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(off)) !=
        static_cast<ssize_t>(chunk.size())) {
      ::close(fd);
      throw Error(errno ? errno : EIO, "cannot write " + path);
    }
  }
  ::close(fd);
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "odafs-peers: %s (see the header of bench/peers/peers.cc)\n", why.c_str());
  std::exit(2);
}

// The command line into *o (and --make-file's path and size); a bad one ends the process
// with usage's status, --help with 0.
void parse_options(int argc, char** argv, Options* out, std::string* make, size_t* make_mb) {
  Options& o = *out;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--help" || flag == "-h") {
        std::printf(
            "odafs-peers: the flags are listed in the header of bench/peers/peers.cc;\n"
            "bench/peers/run.sh runs it (docs/PERFORMANCE.md)\n");
        std::exit(0);
      }
      if (i + 1 >= argc) usage(flag + " needs a value");
      const std::string v = argv[++i];
      if (flag == "--target")
        o.target = v;
      else if (flag == "--mode")
        o.mode = v;
      else if (flag == "--name")
        o.name = v;
      else if (flag == "--server-pid")
        o.server_pid = static_cast<pid_t>(std::stol(v));
      else if (flag == "--run") {
        for (size_t pos = 0; pos <= v.size();) {
          size_t comma = std::min(v.find(',', pos), v.size());
          if (comma > pos) o.run.push_back(v.substr(pos, comma - pos));
          pos = comma + 1;
        }
      } else if (flag == "--round")
        o.round = std::stoul(v);
      else if (flag == "--seconds")
        o.seconds = std::stod(v);
      else if (flag == "--file")
        o.file = v;
      else if (flag == "--seq-file")
        o.seq_file = v;
      else if (flag == "--start-at")
        o.start_at_ms = std::stoll(v);
      else if (flag == "--label")
        o.label = v;
      else if (flag == "--pm-files")
        o.pm_files = std::stoul(v);
      else if (flag == "--pm-txns")
        o.pm_txns = std::stoul(v);
      else if (flag == "--ops")
        o.ops = std::stoull(v);
      else if (flag == "--perf-ctl") {
        for (size_t pos = 0; pos <= v.size();) {
          size_t comma = std::min(v.find(',', pos), v.size());
          const std::string pair = v.substr(pos, comma - pos);
          const size_t colon = pair.find(':');
          if (colon == std::string::npos) usage("--perf-ctl wants CTL:ACK pairs");
          o.perf_ctl.emplace_back(pair.substr(0, colon), pair.substr(colon + 1));
          pos = comma + 1;
        }
      } else if (flag == "--make-file")
        *make = v;
      else if (flag == "--mb")
        *make_mb = std::stoul(v);
      else
        usage("unknown option " + flag);
    }
  } catch (const std::logic_error& e) {
    usage(std::string("bad value: ") + e.what());
  }
}

// The workloads of --run, in order, on reader r (its files open and warm).
void run_workloads(Reader& r, const Options& o, std::vector<char>& chunk) {
  const uint64_t small = kFileBytes, big = kSeqFileBytes;
  std::mt19937_64 rng(7 + o.round);
  for (const std::string& w : o.run) {
    if (w == "lat") {
      run_lat(r, o, small, rng);
    } else if (w.size() > 1 && w[0] == 'q') {
      run_inflight(r, o, w, std::stoul(w.substr(1)), small, rng);
    } else if (w == "seq") {
      r.open(o.seq_file);
      run_seq(r, o, big, chunk);
      r.open(o.file);
    } else if (w == "pm_ro" || w == "pm_std") {
      run_postmark(r, o, w == "pm_ro");
    } else {
      usage("unknown workload " + w);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string make;
  size_t make_mb = 0;
  parse_options(argc, argv, &o, &make, &make_mb);
  try {
    if (!make.empty()) {
      make_file(make, make_mb);
      return 0;
    }
    if (o.target.empty() || o.name.empty() || o.server_pid <= 0 || o.run.empty()) {
      usage("--target, --name, --server-pid and --run are required");
    }
    std::unique_ptr<Reader> r;
    if (o.target.rfind("nfs://", 0) == 0) {
      r = std::make_unique<NfsReader>(o.target);
    } else {
      r = std::make_unique<OdafsReader>(o.target, o.mode);
    }
    std::vector<char> chunk(kSeqChunk);
    const bool wants_seq = std::count(o.run.begin(), o.run.end(), "seq") > 0;
    if (wants_seq) {
      r->open(o.seq_file);
      warm(*r, kSeqFileBytes, chunk);
    }
    r->open(o.file);
    warm(*r, kFileBytes, chunk);
    if (o.start_at_ms > 0) {
      std::this_thread::sleep_until(
          std::chrono::system_clock::time_point(std::chrono::milliseconds(o.start_at_ms)));
    }
    tell_perf(o, "enable");
    run_workloads(*r, o, chunk);
    tell_perf(o, "disable");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-peers %s: %s\n", o.name.c_str(), e.what());
    return 1;
  }
  return 0;
}
