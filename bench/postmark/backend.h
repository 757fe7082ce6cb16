// What PostMark needs of a file system, so that one PostMark algorithm (postmark.h) runs
// against libodafs (ClientBackend, here) and against other client libraries (libnfs:
// bench/peers/nfs_client.h) with the same seed, parameters and sequence of calls.
//
// Paths are relative to the file system's root ("pm/f12"). Errors are thrown as
// odafs::Error carrying the errno (EEXIST from mkdir is how PostMark finds its directory).
// One file is open at a time: PostMark opens a file, reads or writes it, closes it.
//
// Thread-safety: a Backend is used by one thread.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "client/client.h"

namespace odafs::postmark {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual void mkdir(const std::string& path) = 0;
  virtual void unlink(const std::string& path) = 0;
  // Opens path as the current file. A current file left open (an operation on it threw)
  // is closed first, its error ignored.
  virtual void open(const std::string& path, int flags, mode_t mode) = 0;
  // On the current file. REQUIRES: open succeeded and close has not been called since.
  // pread returns the bytes read (fewer only at the end of the file); pwrite writes all.
  virtual size_t pread(void* buf, size_t len, uint64_t offset) = 0;
  virtual void pwrite(const void* buf, size_t len, uint64_t offset) = 0;
  virtual void close() = 0;
};

// PostMark on a libodafs mount, through odafs::File (its open/close semantics: COMMIT at
// close, delegations, the client caches).
class ClientBackend final : public Backend {
 public:
  // REQUIRES: fs outlives the backend.
  explicit ClientBackend(Client& fs) : fs_(&fs) {}
  void mkdir(const std::string& path) override { fs_->mkdir(path); }
  void unlink(const std::string& path) override { fs_->unlink(path); }
  void open(const std::string& path, int flags, mode_t mode) override {
    file_.reset();  // File's destructor closes and swallows errors
    file_.emplace(fs_->open(path, flags, mode));
  }
  size_t pread(void* buf, size_t len, uint64_t offset) override {
    return file_->pread(buf, len, offset);
  }
  void pwrite(const void* buf, size_t len, uint64_t offset) override {
    file_->pwrite(buf, len, offset);
  }
  void close() override {
    file_->close();
    file_.reset();
  }

 private:
  Client* fs_;
  std::optional<File> file_;
};

}  // namespace odafs::postmark
