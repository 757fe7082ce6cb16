// odafs, the command-line tool: whole files between the local system and a server. `get`
// and `put` replace their target whole or not at all: the bytes go to a temporary beside
// it, made durable, then renamed over it; on any failure the target is as it was and the
// temporary removed (a put killed outright leaves its hidden temporary behind).
//
// Thread-safety: one thread. REQUIRES: the Client outlives every call.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

namespace odafs {
class Client;

namespace cli {

// What `put` reads: LOCAL, or standard input for "-", opened and checked (a directory, or
// what cannot be opened, is refused) before the server is touched. Throws Error.
class Source;
struct SourceDeleter {
  void operator()(Source* s) const;
};
using SourcePtr = std::unique_ptr<Source, SourceDeleter>;
SourcePtr open_source(const std::string& local);

// The remote file at path to fd, front to back, 8 READs of up to 1 MiB in flight.
void cat(Client& client, const std::string& path, int fd);
// The remote file at path to LOCAL ("-": standard output, written straight through; a
// device or FIFO likewise), created with 0644 less umask or keeping an existing LOCAL's
// mode.
void get(Client& client, const std::string& path, const std::string& local, mode_t umask);
// source to the remote path (`url` names it in messages); in_place: truncate it and write
// into it instead of replacing it.
void put(Client& client, Source& source, const std::string& path, const std::string& url,
         bool in_place, mode_t umask);

}  // namespace cli
}  // namespace odafs
