#include "server/cpu_accounting.h"

namespace odafs::server {

uint64_t CpuAccounting::read_us(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}

void CpuAccounting::join(const std::string& group) {
  Member m{pthread_self(), {}, group};
  if (pthread_getcpuclockid(m.thread, &m.clock) != 0) return;
  std::lock_guard lock(mu_);
  retired_us_.try_emplace(group, 0);
  live_.push_back(std::move(m));
}

void CpuAccounting::leave() {
  pthread_t self = pthread_self();
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < live_.size(); ++i) {
    if (pthread_equal(live_[i].thread, self)) {
      retired_us_[live_[i].group] += read_us(live_[i].clock);
      live_.erase(live_.begin() + static_cast<long>(i));
      return;
    }
  }
}

std::map<std::string, uint64_t> CpuAccounting::usage_us() const {
  std::lock_guard lock(mu_);
  std::map<std::string, uint64_t> out = retired_us_;
  for (const Member& m : live_) out[m.group] += read_us(m.clock);
  return out;
}

}  // namespace odafs::server
