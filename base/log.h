// Process-wide logging to stderr, syslog or a file (log_to): one line per event, with a level
// and a timestamp.
//
// Thread-safety: every function may be called from any thread; lines never interleave.
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <string>

namespace odafs {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo; ODAFS_LOG=debug|info|warn|error overrides.
void set_log_level(LogLevel level);
LogLevel log_level();

void log_line(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The level a user names ("debug", "info", "warn", "error"); false for another word.
bool parse_log_level(const char* text, LogLevel* level);

// From now on every line logged also goes to syslog, as log_to("syslog") sends them, and
// still to stderr. Call once, before other threads log.
void log_to_syslog(const char* ident);

// Where lines go, as a daemon's --log says:
//   "stderr"  stderr only (the default before this is called);
//   "syslog"  syslog only (facility LOG_DAEMON, the level as its priority, `ident` with the
//             process id; systemd's journal takes them);
//   "auto"    stderr, and syslog too when stderr is neither a terminal nor the journal
//             ($JOURNAL_STREAM): a daemon started by hand logs where it was started, one
//             whose stderr goes nowhere (a background mount) still reaches syslog;
//   a path    appended to that file (made 0640 if new), which reopen_log_file opens again
//             (after logrotate moved it: odafsd does at SIGHUP).
// false, with *error saying why, if the file cannot be opened. Call before other threads
// log.
bool log_to(const char* where, const char* ident, std::string* error);
// Opens the log file again at its path (no-op without one). Lines logged meanwhile go to
// the old file or the new, never lost to a closed descriptor. false, *error, if the file
// cannot be opened (the old one stays in use).
bool reopen_log_file(std::string* error);

// Lets one line through per interval and counts the rest, so that a flood of bad input
// (refused connections, garbage records, forged handshakes) cannot flood the log. Keep one
// per kind of line. Thread-safe; allow() is a couple of atomic operations.
class LogThrottle {
 public:
  explicit LogThrottle(int64_t interval_ms = 1000) : interval_ms_(interval_ms) {}
  // True when a line may be logged now; then *dropped (if given) is how many were held
  // back since the last one.
  bool allow(uint64_t* dropped = nullptr);

 private:
  const int64_t interval_ms_;
  std::atomic<int64_t> next_ms_{0};
  std::atomic<uint64_t> held_{0};
};

}  // namespace odafs

#define ODAFS_LOG_DEBUG(...) ::odafs::log_line(::odafs::LogLevel::kDebug, __VA_ARGS__)
#define ODAFS_LOG_INFO(...) ::odafs::log_line(::odafs::LogLevel::kInfo, __VA_ARGS__)
#define ODAFS_LOG_WARN(...) ::odafs::log_line(::odafs::LogLevel::kWarn, __VA_ARGS__)
#define ODAFS_LOG_ERROR(...) ::odafs::log_line(::odafs::LogLevel::kError, __VA_ARGS__)

// A warning about something a peer can repeat at will (bad input, refused connections):
// at most one line a second from this call site, saying how many were held back.
#define ODAFS_LOG_WARN_THROTTLED(fmt, ...)                                                 \
  do {                                                                                     \
    static ::odafs::LogThrottle odafs_throttle_;                                           \
    uint64_t odafs_dropped_ = 0;                                                           \
    if (odafs_throttle_.allow(&odafs_dropped_)) {                                          \
      ::odafs::log_line(::odafs::LogLevel::kWarn, fmt " [%llu more like this not logged]", \
                        __VA_ARGS__, static_cast<unsigned long long>(odafs_dropped_));     \
    }                                                                                      \
  } while (0)
