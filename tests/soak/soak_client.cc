#include "tests/soak/soak_client.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "tests/soak/soak_model.h"
#include "tests/support/server_process.h"

namespace odafs::soak {
namespace {

constexpr uint64_t kSharedMaxBlocks = 32;
constexpr uint64_t kPrivateMaxBlocks = 24;
constexpr int kPrivateFiles = 4;

bool is_race(int err) { return err == ENOENT || err == ESTALE || err == EEXIST; }
// What a call cut off by a server restart fails with (never EIO: lost bytes report that).
bool is_cut_off(int err) {
  return err == ECONNRESET || err == EPIPE || err == ECONNREFUSED || err == ECONNABORTED ||
         err == ENOTCONN || err == ETIMEDOUT;
}

class Workload {
 public:
  Workload(const ClientConfig& cfg, ClientReport& report)
      : cfg_(cfg), rep_(report), rng_(cfg.seed) {}

  void run() {
    MountOptions o;
    o.read_mode = cfg_.mode == "rpc" ? ReadMode::kPrePosted : ReadMode::kOrdma;
    o.same_host_shortcut = cfg_.mode == "ring";
    o.direct_writes = cfg_.mode == "tcp";
    o.cache_blocks = 256;  // small: blocks are evicted and re-read all the time
    o.stability = cfg_.id % 4 == 3 ? Stability::kDataSync : Stability::kUnstable;
    if (cfg_.restarts) o.reconnect_window_ms = 30000;
    fs_ = Client::mount(cfg_.url, o);
    bs_ = fs_->limits().block_size;
    ensure_dir("shared");
    ensure_dir(private_dir());

    const auto start = std::chrono::steady_clock::now();
    const auto end = start + std::chrono::seconds(cfg_.seconds);
    rep_.ops_per_second.assign(static_cast<size_t>(cfg_.seconds) + 1, 0);
    for (auto now = start; now < end; now = std::chrono::steady_clock::now()) {
      one_op();
      ++rep_.ops;
      auto s = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
      ++rep_.ops_per_second[std::min(static_cast<size_t>(s), rep_.ops_per_second.size() - 1)];
    }
    // What the unmount could not write back is lost too (and saved in a rescue file).
    if (Status unmounted = fs_->try_unmount(); !unmounted.ok()) {
      unexpected("unmount: " + unmounted.to_string());
    }
    rep_.lost = fs_->stats().lost_files.load();
  }

 private:
  void one_op() {
    picked_.clear();
    unsigned pick = static_cast<unsigned>(rng_() % 100);
    if (pick < 30) return shared("read", [&] { shared_read(); });
    if (pick < 45) return shared("write", [&] { shared_write(); });
    if (pick < 51) return shared("append", [&] { shared_append(); });
    if (pick < 55) return shared("truncate", [&] { shared_truncate(); });
    if (pick < 63) return shared("create", [&] { shared_create(); });
    if (pick < 67) return shared("rename", [&] { fs_->rename(shared_name(), shared_name()); });
    if (pick < 71) return shared("remove", [&] { fs_->unlink(shared_name()); });
    if (pick < 83) return own("read", [&] { private_read(); });
    if (pick < 93) return own("write", [&] { private_write(); });
    if (pick < 96) return own("append", [&] { private_append(); });
    if (pick < 98) return own("truncate", [&] { private_truncate(); });
    if (pick < 99) return own("rename", [&] { private_rename(); });
    return own("remove", [&] { private_remove(); });
  }

  // --- shared files: checked block by block; conflicts with other clients are races ---

  void shared_read() {
    std::string name = shared_name();
    File f = fs_->open(name, O_RDONLY);
    uint64_t size = f.stat().size;
    buf_.resize(size + bs_);  // ask past the end: the file may have grown meanwhile
    size_t n = f.pread(buf_.data(), buf_.size(), 0);
    std::string fault = check_file({buf_.data(), n}, bs_, 0);
    if (!fault.empty()) checksum_problem(name + ": " + fault + diagnosis(name, size, n));
    rep_.bytes_checked += n;
    f.close();
  }

  // For a failed check: each block's owner and whether the export on disk holds the same
  // bytes (the soak runs on the server's host and passes the export in ODAFS_SOAK_EXPORT),
  // which tells a read path serving wrong bytes from a write that put them there.
  std::string diagnosis(const std::string& name, uint64_t size, size_t n) {
    const char* export_dir = std::getenv("ODAFS_SOAK_EXPORT");
    if (export_dir == nullptr) return "";
    std::string disk;
    try {
      disk = test::read_local(std::string(export_dir) + "/" + name);
    } catch (const std::exception&) {
    }
    std::string d = " (stat size " + std::to_string(size) + ", read " + std::to_string(n) +
                    ", on disk " + std::to_string(disk.size()) + "; blocks:";
    for (size_t b = 0; b * bs_ < n; ++b) {
      BlockId id;
      if (check_block({buf_.data() + b * bs_, bs_}, &id) != BlockCheck::kValid) continue;
      bool same = disk.size() >= (b + 1) * bs_ &&
                  std::memcmp(disk.data() + b * bs_, buf_.data() + b * bs_, bs_) == 0;
      d += " " + std::to_string(b) + "=file " + std::to_string(id.file_id) + " writer " +
           std::to_string(id.writer) + (same ? "" : " (not on disk)");
    }
    return d + ")";
  }

  // The file id of an open shared file, from its block 0; 0 when it has none yet (just
  // created, not written), which makes the caller skip the file.
  uint64_t file_id_of(File& f, const std::string& name) {
    buf_.resize(bs_);
    size_t n = f.pread(buf_.data(), bs_, 0);
    if (n < bs_) return 0;
    BlockId id;
    BlockCheck c = check_block({buf_.data(), bs_}, &id);
    if (c == BlockCheck::kZero) return 0;
    if (c != BlockCheck::kValid || id.index != 0) {
      checksum_problem(name + ": block 0 is not a valid block 0");
      return 0;
    }
    rep_.bytes_checked += n;
    return id.file_id;
  }

  void shared_write() {
    std::string name = shared_name();
    File f = fs_->open(name, O_RDWR);
    if (uint64_t id = file_id_of(f, name); id != 0) {
      uint64_t first = rng_() % kSharedMaxBlocks;
      uint64_t count = std::min<uint64_t>(1 + rng_() % 4, kSharedMaxBlocks - first);
      write_blocks(f, id, first, count, first * bs_, nullptr);
    }
    f.close();
  }

  void shared_append() {
    std::string name = shared_name();
    File f = fs_->open(name, O_RDWR);
    uint64_t blocks = f.stat().size / bs_;
    if (uint64_t id = file_id_of(f, name); id != 0) {
      if (blocks >= kSharedMaxBlocks) {
        f.truncate(bs_ * (1 + rng_() % (kSharedMaxBlocks / 2)));
      } else {
        write_blocks(f, id, blocks, 1 + rng_() % 2, blocks * bs_, nullptr);
      }
    }
    f.close();
  }

  void shared_truncate() {
    std::string name = shared_name();
    File f = fs_->open(name, O_RDWR);
    uint64_t blocks = f.stat().size / bs_;
    // Keep block 0: it names the file for the next writer.
    if (blocks > 0) f.truncate(bs_ * (1 + rng_() % blocks));
    f.close();
  }

  void shared_create() {
    std::string name = shared_name();
    File f = fs_->open(name, O_RDWR | O_CREAT | O_EXCL, 0644);
    uint64_t id = (static_cast<uint64_t>(cfg_.id) + 1) << 40 | ++files_created_;
    write_blocks(f, id, 0, 1 + rng_() % 4, 0, nullptr);
    f.close();
  }

  // --- private files: this client's alone, so every byte must match the model ---

  void private_read() {
    std::string name = private_name();
    auto it = model_.find(name);
    if (it == model_.end()) {
      if (unsure_.count(name) != 0) return;  // an interrupted operation's: either way
      int err = 0;
      try {
        fs_->stat(name);
      } catch (const Error& e) {
        err = e.errno_value();
      }
      if (err != ENOENT && !(cfg_.restarts && is_cut_off(err)))
        checksum_problem(name + ": removed, but stat gave errno " + std::to_string(err));
      return;
    }
    const std::vector<unsigned char>& want = it->second;
    File f = fs_->open(name, O_RDONLY);
    uint64_t size = f.stat().size;
    buf_.resize(want.size() + bs_);
    size_t n = f.pread(buf_.data(), buf_.size(), 0);
    if (size != want.size() || n != want.size() ||
        !std::equal(want.begin(), want.end(), buf_.begin())) {
      size_t at = static_cast<size_t>(
          std::mismatch(want.begin(), want.begin() + std::min(n, want.size()), buf_.begin()).first -
          want.begin());
      // Whether the export holds it so (lost bytes) or only this read saw it (a read bug).
      std::string on_disk = "?";
      if (const char* dir = std::getenv("ODAFS_SOAK_EXPORT")) {
        const std::string bytes = test::read_local(std::string(dir) + "/" + name);
        on_disk = bytes.size() == want.size() && std::equal(want.begin(), want.end(), bytes.begin())
                      ? "right"
                      : "wrong";
      }
      checksum_problem(name + ": size " + std::to_string(size) + ", read " + std::to_string(n) +
                       ", want " + std::to_string(want.size()) + ", first difference at " +
                       std::to_string(at) + ", on disk " + on_disk);
    }
    rep_.bytes_checked += n;
    f.close();
  }

  void private_write() {
    std::string name = private_name();
    bool exists = model_.count(name) != 0;
    // After a restart cut an operation off, a file left out of the model may exist.
    const int create = cfg_.restarts ? O_CREAT | O_TRUNC : O_CREAT | O_EXCL;
    File f = fs_->open(name, exists ? O_RDWR : O_RDWR | create, 0644);
    uint64_t first = rng_() % kPrivateMaxBlocks;
    write_blocks(f, private_id(), first, 1 + rng_() % 3, first * bs_, &model_[name]);
    f.close();
    unsure_.erase(name);
  }

  void private_append() {
    std::string name = private_name();
    auto it = model_.find(name);
    if (it == model_.end() || it->second.size() > kPrivateMaxBlocks * bs_) return;
    File f = fs_->open(name, O_RDWR | O_APPEND);
    write_blocks(f, private_id(), 0, 1 + rng_() % 2, it->second.size(), &it->second);
    f.close();
  }

  void private_truncate() {
    std::string name = private_name();
    auto it = model_.find(name);
    if (it == model_.end()) return;
    uint64_t size = rng_() % (kPrivateMaxBlocks * bs_ + 1);  // any size, not just blocks
    fs_->truncate(name, size);
    it->second.resize(size, 0);
  }

  void private_rename() {
    std::string from = private_name(), to = private_name();
    auto it = model_.find(from);
    if (it == model_.end() || from == to) return;
    fs_->rename(from, to);
    std::vector<unsigned char> bytes = std::move(it->second);
    model_.erase(it);
    model_[to] = std::move(bytes);
    unsure_.erase(to);
  }

  void private_remove() {
    std::string name = private_name();
    if (model_.erase(name) != 0) fs_->unlink(name);
  }

  // Writes `count` blocks of file `file_id`, numbered from `first`, at byte `offset` (for an
  // O_APPEND file the client puts them at the end, which the model says is `offset`). With
  // a model, records the bytes there too.
  void write_blocks(File& f, uint64_t file_id, uint64_t first, uint64_t count, uint64_t offset,
                    std::vector<unsigned char>* model) {
    out_.resize(count * bs_);
    for (uint64_t i = 0; i < count; ++i) {
      fill_block({out_.data() + i * bs_, bs_},
                 BlockId{file_id, first + i, static_cast<uint64_t>(cfg_.id), ++seq_});
    }
    f.pwrite(out_.data(), out_.size(), offset);
    if (model != nullptr) {
      if (model->size() < offset + out_.size()) model->resize(offset + out_.size(), 0);
      std::copy(out_.begin(), out_.end(), model->begin() + static_cast<ptrdiff_t>(offset));
    }
  }

  template <class Fn>
  void shared(const char* what, Fn&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      if (is_race(e.errno_value())) {
        ++rep_.races;
      } else if (cfg_.restarts && is_cut_off(e.errno_value())) {
        ++rep_.interrupted;
      } else {
        unexpected(std::string("shared ") + what + ": " + e.what());
      }
    }
  }

  template <class Fn>
  void own(const char* what, Fn&& fn) {
    try {
      fn();
      note(what, "ok");
    } catch (const Error& e) {
      note(what, e.what());
      if (!cfg_.restarts || !is_cut_off(e.errno_value())) {
        unexpected(std::string("private ") + what + ": " + e.what());
        return;
      }
      // Cut off by a restart: what the server did is unknown, so the files the operation
      // picked leave the model and the export.
      ++rep_.interrupted;
      for (const std::string& name : picked_) forget_private(name);
    }
  }

  // The operation on `name` was cut off: what the server did is unknown (a CREATE may have
  // run and its answer been lost), so the file is removed, retried while the cut lasts. If
  // that fails too, `name` is unsure until a write makes it anew (the next create of it is
  // O_EXCL-free): a read then checks nothing of it.
  void forget_private(const std::string& name) {
    model_.erase(name);
    for (int attempt = 0; attempt < 100; ++attempt) {
      try {
        fs_->unlink(name);
        return;
      } catch (const Error& e) {
        if (e.errno_value() == ENOENT) return;
        if (!is_cut_off(e.errno_value())) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // pacing the retries
    }
    unsure_.insert(name);
  }

  void unexpected(const std::string& what) {
    if (rep_.errors++ == 0 && rep_.first_problem.empty()) rep_.first_problem = what;
    std::fprintf(stderr, "soak client %d: %s\n", cfg_.id, what.c_str());
  }

  // The last few private operations on each file the current one picked, for the report of
  // a checksum failure: when a restart cut in, what the file went through.
  void note(const char* what, const std::string& outcome) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count() %
                    100000000;
    for (const std::string& name : picked_) {
      auto& h = history_[name];
      h.push_back(std::to_string(ms) + " " + what + " " + outcome.substr(0, 80) + " size " +
                  std::to_string(model_.count(name) ? model_[name].size() : 0));
      if (h.size() > 6) h.erase(h.begin());
    }
  }

  void checksum_problem(const std::string& what) {
    for (const std::string& name : picked_) {
      for (const std::string& line : history_[name]) {
        std::fprintf(stderr, "soak client %d: history of %s: %s\n", cfg_.id, name.c_str(),
                     line.c_str());
      }
    }
    if (rep_.checksum_errors++ == 0) rep_.first_problem = what;
    std::fprintf(stderr, "soak client %d: CHECK FAILED %s\n", cfg_.id, what.c_str());
  }

  void ensure_dir(const std::string& path) {
    try {
      fs_->mkdir(path);
    } catch (const Error& e) {
      if (e.errno_value() != EEXIST) throw;
    }
  }

  std::string shared_name() {
    char name[32];
    std::snprintf(name, sizeof name, "shared/s%02d", static_cast<int>(rng_() % cfg_.shared_files));
    return name;
  }
  std::string private_dir() const { return "c" + std::to_string(cfg_.id); }
  std::string private_name() {
    picked_.push_back(private_dir() + "/p" + std::to_string(rng_() % kPrivateFiles));
    return picked_.back();
  }
  uint64_t private_id() const { return (static_cast<uint64_t>(cfg_.id) + 1) << 48; }

  const ClientConfig& cfg_;
  ClientReport& rep_;
  std::mt19937_64 rng_;
  std::unique_ptr<Client> fs_;
  size_t bs_ = 0;
  uint64_t seq_ = 0;
  uint64_t files_created_ = 0;
  std::vector<unsigned char> buf_, out_;
  std::map<std::string, std::vector<unsigned char>> model_;
  std::vector<std::string> picked_;  // the private files the current operation picked
  std::set<std::string> unsure_;     // private files an interrupted operation left unknown
  std::map<std::string, std::vector<std::string>> history_;
};

}  // namespace

ClientReport run_client(const ClientConfig& cfg) {
  ClientReport rep;
  rep.id = cfg.id;
  try {
    Workload(cfg, rep).run();
  } catch (const std::exception& e) {
    ++rep.errors;
    if (rep.first_problem.empty()) rep.first_problem = std::string("setup: ") + e.what();
  }
  return rep;
}

std::string ClientReport::to_line() const {
  std::ostringstream s;
  s << "SOAK id=" << id << " ops=" << ops << " races=" << races << " interrupted=" << interrupted
    << " errors=" << errors << " lost=" << lost << " checksum=" << checksum_errors
    << " bytes=" << bytes_checked << " per_s=";
  for (size_t i = 0; i < ops_per_second.size(); ++i) s << (i ? "," : "") << ops_per_second[i];
  std::string problem = first_problem;
  std::replace(problem.begin(), problem.end(), '\n', ' ');
  s << " problem=" << problem;
  return s.str();
}

bool ClientReport::parse(const std::string& line, ClientReport* out) {
  if (line.rfind("SOAK ", 0) != 0) return false;
  ClientReport r;
  std::string per_s;
  size_t p = line.find(" problem=");
  if (p == std::string::npos) return false;
  r.first_problem = line.substr(p + 9);
  std::istringstream in(line.substr(5, p - 5));
  std::string field;
  while (in >> field) {
    size_t eq = field.find('=');
    if (eq == std::string::npos) return false;
    std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "per_s") {
      std::istringstream v(value);
      std::string n;
      while (std::getline(v, n, ','))
        r.ops_per_second.push_back(static_cast<uint32_t>(std::stoul(n)));
      continue;
    }
    uint64_t n = std::stoull(value);
    if (key == "id")
      r.id = static_cast<int>(n);
    else if (key == "ops")
      r.ops = n;
    else if (key == "races")
      r.races = n;
    else if (key == "interrupted")
      r.interrupted = n;
    else if (key == "errors")
      r.errors = n;
    else if (key == "lost")
      r.lost = n;
    else if (key == "checksum")
      r.checksum_errors = n;
    else if (key == "bytes")
      r.bytes_checked = n;
  }
  *out = std::move(r);
  return true;
}

}  // namespace odafs::soak
