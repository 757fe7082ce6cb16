#include "server/recovery.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "base/futex.h"
#include "base/log.h"
#include "server/private_files.h"

namespace odafs::server {
namespace {

constexpr std::string_view kRecordHeader = "odafs-recovery 1";

std::string to_hex(const Recovery::Owner& o) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(o.size() * 2);
  for (unsigned char c : o) {
    s.push_back(kDigits[c >> 4]);
    s.push_back(kDigits[c & 15]);
  }
  return s;
}

bool from_hex(std::string_view s, Recovery::Owner* o) {
  if (s.size() != o->size() * 2) return false;
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < o->size(); ++i) {
    int hi = digit(s[2 * i]), lo = digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*o)[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

}  // namespace

Recovery::Recovery(Options options)
    : options_(std::move(options)), name_(base_of(options_.record_path)) {
  if (options_.record_path.empty()) return;
  Result<int> dir = open_private_dir(dir_of(options_.record_path), true);
  if (!dir.ok()) {
    ODAFS_LOG_ERROR("recovery record %s: its directory will not do (%s); no write delegations",
                    options_.record_path.c_str(), dir.status().message().c_str());
    return;
  }
  read_record(*dir);
  writer_ = std::make_unique<RecordWriter>(*dir, name_, options_.record_path);
  usable_ = true;
  if (pending_.empty()) return;
  stats_.reclaimers.store(pending_.size(), std::memory_order_relaxed);
  grace_ends_ms_ = now_ms() + options_.grace_ms;
  grace_.store(options_.grace_ms > 0, std::memory_order_relaxed);
  ODAFS_LOG_INFO("grace period of up to %d ms: %zu client(s) may hold writes to reclaim",
                 options_.grace_ms, pending_.size());
  if (options_.grace_ms <= 0) {
    std::lock_guard lock(mu_);
    end_grace_locked();
  }
}

Recovery::~Recovery() = default;

void Recovery::read_record(int dir_fd) {
  // A header line, then one line of 32 hex digits per owner.
  const size_t line = 2 * sizeof(Owner) + 1;
  const size_t max_bytes = kRecordHeader.size() + 1 + options_.max_owners * line;
  struct stat st;
  Result<std::string> text = read_private_file(dir_fd, name_, max_bytes, &st);
  if (text.errno_value() == ENOENT) return;
  const char* path = options_.record_path.c_str();
  if (text.errno_value() == EFBIG) {
    ODAFS_LOG_ERROR(
        "recovery record %s names more owners than the %zu connections the server "
        "allows (forged or corrupt): ignored, its clients' kept writes are lost",
        path, options_.max_owners);
    return;
  }
  if (!text.ok()) {
    ODAFS_LOG_ERROR(
        "recovery record %s will not do (%s): ignored, its clients' kept writes "
        "are lost",
        path, text.status().message().c_str());
    return;
  }
  std::string_view rest = *text;
  auto next_line = [&rest] {
    const size_t end = rest.find('\n');
    const std::string_view l = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    return l;
  };
  if (next_line() != kRecordHeader) {
    ODAFS_LOG_ERROR("recovery record %s is not one (no '%s' line): ignored", path,
                    std::string(kRecordHeader).c_str());
    return;
  }
  std::set<Owner> owners;
  while (!rest.empty()) {
    Owner o;
    if (!from_hex(next_line(), &o)) {
      ODAFS_LOG_ERROR("recovery record %s: a bad line ignored", path);
      continue;
    }
    owners.insert(o);
  }
  if (owners.size() > options_.max_owners) {
    ODAFS_LOG_ERROR(
        "recovery record %s names more owners than the %zu connections the server "
        "allows (forged or corrupt): ignored, its clients' kept writes are lost",
        path, options_.max_owners);
    return;
  }
  for (const Owner& o : owners) recorded_.emplace(o, 0);  // on disk already
  pending_ = std::move(owners);
}

uint64_t Recovery::submit_record_locked() {
  std::string text(kRecordHeader);
  text.push_back('\n');
  for (const auto& [o, version] : recorded_) {
    text += to_hex(o);
    text.push_back('\n');
  }
  return writer_->submit(std::move(text));
}

Result<Recovery::Joined> Recovery::join(uint64_t connection, const Owner& owner) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = owners_.emplace(connection, owner);
  if (!fresh && it->second != owner)
    return Status(EINVAL, "client id: the connection named another owner");
  Joined j;
  const int64_t now = now_ms();
  if (grace_.load(std::memory_order_relaxed) && !grace_over_locked(now)) {
    j.reclaim = pending_.count(owner) != 0;
    j.grace_ms = static_cast<uint32_t>(grace_ends_ms_ - now);
  }
  return j;
}

void Recovery::reclaim_complete(uint64_t connection) {
  std::lock_guard lock(mu_);
  auto it = owners_.find(connection);
  if (it == owners_.end() || pending_.erase(it->second) == 0) return;
  stats_.reclaimed.fetch_add(1, std::memory_order_relaxed);
  grace_over_locked(now_ms());
}

bool Recovery::holds_back_slow(uint64_t connection) {
  std::lock_guard lock(mu_);
  if (grace_over_locked(now_ms())) return false;
  auto it = owners_.find(connection);
  if (it != owners_.end() && pending_.count(it->second) != 0) return false;
  stats_.held_back.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool Recovery::grace_over_now() {
  std::lock_guard lock(mu_);
  return grace_over_locked(now_ms());
}

bool Recovery::grace_over_locked(int64_t now) {
  if (!grace_.load(std::memory_order_relaxed)) return true;
  if (!pending_.empty() && now < grace_ends_ms_) return false;
  // Past its time, the period waits on for owners that came back and are writing back
  // (connected, RECLAIM_COMPLETE not yet sent): ended under them, their write-backs would
  // find files others renamed or removed meanwhile, and report bytes lost that were on
  // their way. Bounded, by a second grace_ms: a reclaimer that never completes holds
  // everyone back no longer than that.
  if (!pending_.empty() && now < grace_ends_ms_ + options_.grace_ms) {
    for (const auto& [connection, owner] : owners_) {
      if (pending_.count(owner) != 0) return false;
    }
  }
  end_grace_locked();
  return true;
}

void Recovery::end_grace_locked() {
  if (!pending_.empty()) {
    ODAFS_LOG_WARN("grace period over: %zu client(s) did not come back to reclaim",
                   pending_.size());
  } else {
    ODAFS_LOG_INFO("grace period over: every client reclaimed");
  }
  // Nobody holds a write delegation of this instance yet (none is granted in a grace
  // period): the record starts empty, and each holder's first grant writes it in again.
  // Those who did not come back have lost what they kept.
  pending_.clear();
  recorded_.clear();
  submit_record_locked();
  grace_.store(false, std::memory_order_relaxed);
}

bool Recovery::may_hold_writes(uint64_t connection) {
  if (!usable_) return false;
  std::unique_lock lock(mu_);
  auto it = owners_.find(connection);
  if (it == owners_.end()) return false;
  const Owner owner = it->second;
  // Named already: granted once its version is on disk (another call may have just queued
  // it: the grant waits for it as that call does).
  auto [entry, fresh] = recorded_.try_emplace(owner, 0);
  if (fresh) {
    if (stopping_.load(std::memory_order_relaxed)) {
      recorded_.erase(entry);
      return false;
    }
    entry->second = submit_record_locked();
  }
  const uint64_t version = entry->second;
  lock.unlock();
  if (writer_->wait_durable(version)) return true;
  // Not recorded: a later version (another owner's) may still name it, which only lets it
  // reclaim after a restart that it need not.
  lock.lock();
  auto again = recorded_.find(owner);
  if (fresh && again != recorded_.end() && again->second == version &&
      !stopping_.load(std::memory_order_relaxed)) {
    recorded_.erase(again);
    submit_record_locked();
  }
  return false;
}

void Recovery::connection_closed(uint64_t connection) {
  std::lock_guard lock(mu_);
  owners_.erase(connection);
}

void Recovery::forget(const Owner& owner) {
  std::lock_guard lock(mu_);
  if (stopping_.load(std::memory_order_relaxed) || pending_.count(owner) != 0) return;
  if (recorded_.erase(owner) != 0) submit_record_locked();
}

void Recovery::stopping() {
  stopping_.store(true, std::memory_order_relaxed);
  if (writer_) writer_->stop();
}

void Recovery::report_counters(const CounterSink& add) {
  add("in_grace", in_grace() ? 1 : 0);
  add("reclaimers", stats_.reclaimers.load());
  add("reclaimed", stats_.reclaimed.load());
  add("held_back", stats_.held_back.load());
  add("record_writes", record_writes());
}

}  // namespace odafs::server
