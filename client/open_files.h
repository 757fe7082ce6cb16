// OpenFiles: what a Client's Files of one file share (client/shared_file.h): the size the
// client knows, the unstable writes awaiting COMMIT, and the bytes written behind. One
// SharedFile per file the client has open, keyed by the file's cache key, so that what one
// open writes or truncates reaches the reads of another at once, as POSIX has a process
// see its own writes through every descriptor (Berkeley DB writes its log through one
// descriptor and reads it back through another), and a close commits every open's writes.
//
// Thread-safety: thread-safe. acquire/release/find take a mutex (at open, close and
// GETATTR, which make calls anyway).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "client/attr.h"

namespace odafs {

struct SharedFile;

class OpenFiles {
 public:
  using Ref = std::shared_ptr<SharedFile>;

  // The shared state of file `key`, its size and server mtime set from `at_open` (the
  // server's, fresh from the open: close-to-open makes it the truth, also for the other
  // opens). A new one is named by path and at_open.fileid (SharedFile::path).
  Ref acquire(uint64_t key, const Attr& at_open, const std::string& path);
  // Gives back what acquire(key) returned (reset); the entry goes with the last File.
  void release(uint64_t key, Ref& ref);
  // The shared state of file `key` if the client has it open, else null.
  Ref find(uint64_t key) const;
  size_t files() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Ref> files_;
};

}  // namespace odafs
