#include "bench/postmark/postmark.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace odafs::postmark {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double per_second(uint64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0; }

}  // namespace

void fill_content(uint64_t seed, uint64_t offset, char* dst, size_t len) {
  for (size_t i = 0; i < len;) {
    uint64_t pos = offset + i;
    uint64_t word = mix(seed ^ (pos >> 3));
    size_t shift = pos & 7;
    size_t n = std::min<size_t>(8 - shift, len - i);
    for (size_t k = 0; k < n; ++k) dst[i + k] = static_cast<char>(word >> ((shift + k) * 8));
    i += n;
  }
}

Postmark::Postmark(Client& fs, const Config& config, uint32_t block_size)
    : owned_(std::make_unique<ClientBackend>(fs)),
      fs_(owned_.get()),
      cfg_(config),
      block_size_(block_size),
      rng_(config.seed) {}

Postmark::Postmark(Backend& fs, const Config& config, uint32_t block_size)
    : fs_(&fs), cfg_(config), block_size_(block_size), rng_(config.seed) {}

uint64_t Postmark::random_size() {
  return cfg_.size_low + rng_() % (cfg_.size_high - cfg_.size_low + 1);
}

void Postmark::create_pool() {
  try {
    fs_->mkdir("pm");
  } catch (const Error& e) {
    if (e.errno_value() != EEXIST) throw;
  }
  for (size_t d = 0; d < cfg_.subdirectories; ++d) fs_->mkdir("pm/s" + std::to_string(d));
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < cfg_.files; ++i) create_one(true);
  counts_.create_s = seconds_since(t0);
}

void Postmark::adopt_pool(const Postmark& other) {
  pool_ = other.pool_;
  next_name_ = other.next_name_;
}

uint64_t Postmark::pool_blocks() const {
  uint64_t blocks = 0;
  for (const PoolFile& f : pool_) blocks += (f.size + block_size_ - 1) / block_size_;
  return blocks;
}

void Postmark::transactions(size_t count) {
  auto t0 = std::chrono::steady_clock::now();
  for (size_t t = 0; t < count; ++t) {
    if (cfg_.bias_read >= 0 && !pool_.empty()) {
      if (static_cast<int>(rng_() % 10) < cfg_.bias_read) {
        read_one();
      } else {
        append_one();
      }
    }
    if (cfg_.bias_create >= 0) {
      if (pool_.empty() || static_cast<int>(rng_() % 10) < cfg_.bias_create) {
        create_one(false);
      } else {
        delete_one(false);
      }
    }
  }
  counts_.transactions_s += seconds_since(t0);
}

void Postmark::delete_pool() {
  auto t0 = std::chrono::steady_clock::now();
  while (!pool_.empty()) delete_one(true);
  counts_.delete_s = seconds_since(t0);
}

void Postmark::write_range(const PoolFile& pf, uint64_t from, uint64_t to) {
  buf_.resize(cfg_.write_block);
  for (uint64_t pos = from; pos < to;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(cfg_.write_block, to - pos));
    fill_content(pf.seed, pos, buf_.data(), n);
    fs_->pwrite(buf_.data(), n, pos);
    pos += n;
  }
  counts_.bytes_written += to - from;
}

void Postmark::create_one(bool alone) {
  PoolFile pf;
  std::string dir = cfg_.subdirectories > 0
                        ? "pm/s" + std::to_string(rng_() % cfg_.subdirectories) + "/"
                        : std::string("pm/");
  pf.path = dir + "f" + std::to_string(next_name_++);
  pf.seed = mix(cfg_.seed ^ (next_name_ << 20));
  pf.size = random_size();
  fs_->open(pf.path, O_RDWR | O_CREAT | O_EXCL, 0644);
  write_range(pf, 0, pf.size);
  fs_->close();
  pool_.push_back(std::move(pf));
  ++counts_.created;
  if (alone) ++counts_.created_alone;
}

void Postmark::delete_one(bool alone) {
  size_t i = static_cast<size_t>(rng_() % pool_.size());
  fs_->unlink(pool_[i].path);
  pool_[i] = std::move(pool_.back());
  pool_.pop_back();
  ++counts_.deleted;
  if (alone) ++counts_.deleted_alone;
}

void Postmark::read_one() {
  const PoolFile& pf = pool_[static_cast<size_t>(rng_() % pool_.size())];
  fs_->open(pf.path, O_RDONLY, 0);
  buf_.resize(cfg_.read_block);
  bool bad = false;
  uint64_t pos = 0;
  for (;;) {
    size_t n = fs_->pread(buf_.data(), cfg_.read_block, pos);
    if (n == 0) break;
    if (cfg_.verify) {
      want_.resize(n);
      fill_content(pf.seed, pos, want_.data(), n);
      bad = bad || std::memcmp(want_.data(), buf_.data(), n) != 0;
    }
    counts_.blocks_touched += (pos + n - 1) / block_size_ - pos / block_size_ + 1;
    pos += n;
  }
  fs_->close();
  if (cfg_.verify && pos != pf.size) bad = true;
  if (bad) {
    ++counts_.mismatches;
    std::fprintf(stderr, "postmark: %s read back wrong (%llu of %llu bytes)\n", pf.path.c_str(),
                 static_cast<unsigned long long>(pos), static_cast<unsigned long long>(pf.size));
  }
  counts_.bytes_read += pos;
  ++counts_.read;
}

void Postmark::append_one() {
  PoolFile& pf = pool_[static_cast<size_t>(rng_() % pool_.size())];
  uint64_t add = random_size();
  fs_->open(pf.path, O_RDWR, 0);
  write_range(pf, pf.size, pf.size + add);
  fs_->close();
  pf.size += add;
  ++counts_.appended;
}

std::string Postmark::report() const {
  const Counts& c = counts_;
  double total = c.create_s + c.transactions_s + c.delete_s;
  uint64_t created_mixed = c.created - c.created_alone;
  uint64_t deleted_mixed = c.deleted - c.deleted_alone;
  uint64_t txns = cfg_.transactions;
  char out[2048];
  std::snprintf(
      out, sizeof out,
      "Time:\n"
      "\t%.2f seconds total\n"
      "\t%.2f seconds of transactions (%.0f per second)\n\n"
      "Files:\n"
      "\t%llu created (%.0f per second)\n"
      "\t\tCreation alone: %llu files (%.0f per second)\n"
      "\t\tMixed with transactions: %llu files (%.0f per second)\n"
      "\t%llu read (%.0f per second)\n"
      "\t%llu appended (%.0f per second)\n"
      "\t%llu deleted (%.0f per second)\n"
      "\t\tDeletion alone: %llu files (%.0f per second)\n"
      "\t\tMixed with transactions: %llu files (%.0f per second)\n\n"
      "Data:\n"
      "\t%.2f megabytes read (%.2f megabytes per second)\n"
      "\t%.2f megabytes written (%.2f megabytes per second)\n",
      total, c.transactions_s, per_second(txns, c.transactions_s),
      static_cast<unsigned long long>(c.created), per_second(c.created, total),
      static_cast<unsigned long long>(c.created_alone), per_second(c.created_alone, c.create_s),
      static_cast<unsigned long long>(created_mixed), per_second(created_mixed, c.transactions_s),
      static_cast<unsigned long long>(c.read), per_second(c.read, c.transactions_s),
      static_cast<unsigned long long>(c.appended), per_second(c.appended, c.transactions_s),
      static_cast<unsigned long long>(c.deleted), per_second(c.deleted, total),
      static_cast<unsigned long long>(c.deleted_alone), per_second(c.deleted_alone, c.delete_s),
      static_cast<unsigned long long>(deleted_mixed), per_second(deleted_mixed, c.transactions_s),
      c.bytes_read / 1048576.0, per_second(c.bytes_read, total) / 1048576.0,
      c.bytes_written / 1048576.0, per_second(c.bytes_written, total) / 1048576.0);
  return out;
}

}  // namespace odafs::postmark
