#include "server/space_account.h"

#include <algorithm>
#include <utility>

#include "base/futex.h"

namespace odafs::server {

namespace {
constexpr int64_t kMinMargin = int64_t{64} << 20;
}  // namespace

SpaceAccount::SpaceAccount(Options options, StatFn stat)
    : options_(options), stat_(std::move(stat)) {}

int64_t SpaceAccount::estimate() const {
  // base_ first: an older base with newer counters only underestimates (see sample).
  const int64_t base = base_.load();
  const int64_t pending = pending_.load();  // before written_: a write ending between the two
  return base - written_.load() - pending;  // is then counted twice, never missed
}

bool SpaceAccount::sample() {
  // written_ before the statvfs: a write that lands between the two is in the sample and
  // still counted since (twice: on the safe side). Samples racing each other each store a
  // valid pair; the older may win, which only underestimates.
  const int64_t before = written_.load();
  struct statvfs vfs;
  stats_.samples.fetch_add(1, std::memory_order_relaxed);
  if (!stat_(&vfs)) {
    sampled_ok_.store(false);
    return false;
  }
  const int64_t avail = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  base_.store(avail + before);
  total_.store(static_cast<int64_t>(vfs.f_blocks) * static_cast<int64_t>(vfs.f_frsize));
  sampled_ms_.store(now_ms(), std::memory_order_relaxed);
  sampled_ok_.store(true);
  return true;
}

int64_t SpaceAccount::margin() const {
  if (options_.margin_bytes >= 0) return options_.margin_bytes;
  return std::max(kMinMargin, total_.load(std::memory_order_relaxed) / 100);
}

bool SpaceAccount::promise(uint64_t bytes) {
  const int64_t now = now_ms();
  if (now - sampled_ms_.load(std::memory_order_relaxed) >= options_.refresh_ms) sample();
  promised_.fetch_add(bytes);  // before the estimate is read (see promised_)
  auto fits = [&] {
    return sampled_ok_.load() && estimate() - margin() >= static_cast<int64_t>(promised_.load());
  };
  if (fits() || (sample() && fits())) {
    stats_.promises.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  promised_.fetch_sub(bytes);
  stats_.declined.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void SpaceAccount::unpromise(uint64_t bytes) { promised_.fetch_sub(bytes); }

bool SpaceAccount::begin_write(uint64_t len, uint64_t uncovered) {
  pending_.fetch_add(static_cast<int64_t>(len));
  // The common case: nothing promised, or room beyond it; the uncovered bytes are in
  // pending_ already, so the estimate is what is left after them.
  auto leaves_promised = [&] {
    const uint64_t promised = promised_.load();
    return promised == 0 || uncovered == 0 || estimate() >= static_cast<int64_t>(promised);
  };
  if (leaves_promised() || (sample() && leaves_promised())) return true;
  pending_.fetch_sub(static_cast<int64_t>(len));
  stats_.refused.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void SpaceAccount::end_write(uint64_t len, uint64_t written) {
  written_.fetch_add(static_cast<int64_t>(written));  // before pending_ drops (see estimate)
  pending_.fetch_sub(static_cast<int64_t>(len));
}

void SpaceAccount::report_counters(const CounterSink& add) const {
  add("promised_bytes", promised());
  add("promises", stats_.promises.load());
  add("declined", stats_.declined.load());
  add("refused", stats_.refused.load());
  add("samples", stats_.samples.load());
}

}  // namespace odafs::server
