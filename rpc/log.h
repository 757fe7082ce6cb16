// Process-wide logging to stderr: one line per event, with a level and a timestamp.
//
// Thread-safety: every function may be called from any thread; lines never interleave.
#pragma once

#include <cstdarg>

namespace odafs {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo; ODAFS_LOG=debug|info|warn|error overrides.
void set_log_level(LogLevel level);
LogLevel log_level();

void log_line(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace odafs

#define ODAFS_LOG_DEBUG(...) ::odafs::log_line(::odafs::LogLevel::kDebug, __VA_ARGS__)
#define ODAFS_LOG_INFO(...) ::odafs::log_line(::odafs::LogLevel::kInfo, __VA_ARGS__)
#define ODAFS_LOG_WARN(...) ::odafs::log_line(::odafs::LogLevel::kWarn, __VA_ARGS__)
#define ODAFS_LOG_ERROR(...) ::odafs::log_line(::odafs::LogLevel::kError, __VA_ARGS__)
