#include "base/log.h"

#include <fcntl.h>
#include <strings.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace odafs {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("ODAFS_LOG");
  LogLevel level = LogLevel::kInfo;
  if (env != nullptr) parse_log_level(env, &level);
  return level;
}

std::atomic<LogLevel> g_level{initial_level()};
std::atomic<bool> g_stderr{true};
std::atomic<bool> g_syslog{false};
std::atomic<int> g_file{-1};  // the log file's descriptor; its number never changes once set
std::string g_file_path;      // set once, by log_to, before other threads log

int open_log_file(const std::string& path, std::string* error) {
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
  if (fd < 0) *error = "log file " + path + ": " + std::strerror(errno);
  return fd;
}

}  // namespace

bool parse_log_level(const char* text, LogLevel* level) {
  static const char* const kWords[] = {"debug", "info", "warn", "error"};
  for (int i = 0; i < 4; ++i) {
    if (strcasecmp(text, kWords[i]) == 0) {
      *level = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

void log_to_syslog(const char* ident) {
  openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
  g_syslog.store(true, std::memory_order_release);
}

bool log_to(const char* where, const char* ident, std::string* error) {
  const std::string w = where;
  if (w == "stderr") {
    g_stderr = true;
    return true;
  }
  if (w == "syslog" || w == "auto") {
    const bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
    if (w == "auto" && (isatty(STDERR_FILENO) || journal)) return true;
    log_to_syslog(ident);
    g_stderr = w == "auto";
    return true;
  }
  const int fd = open_log_file(w, error);
  if (fd < 0) return false;
  g_file_path = w;
  g_file.store(fd, std::memory_order_release);
  g_stderr = false;
  return true;
}

bool reopen_log_file(std::string* error) {
  const int fd = g_file.load(std::memory_order_acquire);
  if (fd < 0) return true;
  const int fresh = open_log_file(g_file_path, error);
  if (fresh < 0) return false;
  // dup3 swaps the file behind the same descriptor number in one step: a line being
  // written goes to one file or the other.
  const bool ok = dup3(fresh, fd, O_CLOEXEC) >= 0;
  if (!ok) *error = "log file " + g_file_path + ": " + std::strerror(errno);
  close(fresh);
  return ok;
}

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
  // One fwrite per line: stdio locks the stream, so concurrent lines stay whole; one
  // write(2) per line to an O_APPEND file does the same.
  if (g_stderr.load(std::memory_order_relaxed)) std::fwrite(line, 1, len, stderr);
  if (const int fd = g_file.load(std::memory_order_acquire); fd >= 0) {
    ssize_t written = write(fd, line, len);
    (void)written;  // a full disk loses log lines, not the call that logs
  }
  if (g_syslog.load(std::memory_order_acquire)) {
    static const int kPriorities[] = {LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR};
    // syslog stamps the time itself: the message alone, without the newline.
    syslog(kPriorities[static_cast<int>(level)], "%.*s", static_cast<int>(len - 1 - n), line + n);
  }
}

}  // namespace odafs
