#include "base/log.h"

#include <strings.h>
#include <syslog.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace odafs {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("ODAFS_LOG");
  if (env == nullptr) return LogLevel::kInfo;
  if (strcasecmp(env, "debug") == 0) return LogLevel::kDebug;
  if (strcasecmp(env, "warn") == 0) return LogLevel::kWarn;
  if (strcasecmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<LogLevel> g_level{initial_level()};
std::atomic<bool> g_syslog{false};

}  // namespace

bool LogThrottle::allow(uint64_t* dropped) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t now = ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  int64_t next = next_ms_.load(std::memory_order_relaxed);
  if (now < next || !next_ms_.compare_exchange_strong(next, now + interval_ms_)) {
    held_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  uint64_t held = held_.exchange(0, std::memory_order_relaxed);
  if (dropped != nullptr) *dropped = held;
  return true;
}

void log_to_syslog(const char* ident) {
  openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
  g_syslog.store(true, std::memory_order_release);
}

void set_log_level(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }

void log_line(LogLevel level, const char* fmt, ...) {
  if (level < log_level()) return;
  static const char* const kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  char line[1024];
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  tm parts;
  gmtime_r(&now.tv_sec, &parts);
  int n =
      std::snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %-5s ", parts.tm_hour, parts.tm_min,
                    parts.tm_sec, now.tv_nsec / 1000000, kNames[static_cast<int>(level)]);
  va_list args;
  va_start(args, fmt);
  int m = std::vsnprintf(line + n, sizeof line - n - 1, fmt, args);
  va_end(args);
  size_t len = n + (m < 0 ? 0 : std::min<size_t>(m, sizeof line - n - 2));
  line[len++] = '\n';
  // One fwrite per line: stdio locks the stream, so concurrent lines stay whole.
  std::fwrite(line, 1, len, stderr);
  if (g_syslog.load(std::memory_order_acquire)) {
    static const int kPriorities[] = {LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR};
    // syslog stamps the time itself: the message alone, without the newline.
    syslog(kPriorities[static_cast<int>(level)], "%.*s", static_cast<int>(len - 1 - n), line + n);
  }
}

}  // namespace odafs
