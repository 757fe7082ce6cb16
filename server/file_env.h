// The server's file data I/O, behind an interface so that tests can inject faults (the
// idea of LevelDB's Env). Every read, write, truncation and sync of file data that the
// procedures do goes through a FileEnv; namespace operations (openat, renameat, ...) do
// not.
//
// Three implementations: PosixFileEnv, the real system calls; CrashSimulatingEnv, which
// remembers how to undo every change not yet made durable and undoes them all when asked
// to simulate a crash, as a power loss would drop them from the page cache (killing a
// process keeps the page cache, so without it a test cannot tell a missing fsync); and
// SlowWriteEnv, which widens the window in which a write is half done.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace odafs::server {

class FileEnv {
 public:
  virtual ~FileEnv() = default;
  // As the system calls of the same names: -1 with errno set on failure. Deliberately
  // not a Status (base/status.h): a FileEnv stands in for the system calls themselves, so
  // PosixFileEnv stays a bare pass-through, callers read errno at once as they would after
  // pread(2), and swapping in CrashSimulatingEnv changes nothing else.
  virtual ssize_t pread(int fd, void* buf, size_t len, off_t offset) = 0;
  virtual ssize_t pwrite(int fd, const void* buf, size_t len, off_t offset) = 0;
  virtual int ftruncate(int fd, off_t size) = 0;
  // Makes fd's data durable (fdatasync) or its data and metadata (fsync).
  virtual int fsync(int fd) = 0;
  virtual int fdatasync(int fd) = 0;
};

// The real system calls. Stateless; thread-safe.
FileEnv& posix_file_env();

// Thread-safety: all calls may come from any thread; one mutex serialises them (it is a
// test environment: correctness over speed).
class CrashSimulatingEnv final : public FileEnv {
 public:
  CrashSimulatingEnv() = default;
  ~CrashSimulatingEnv() override;

  ssize_t pread(int fd, void* buf, size_t len, off_t offset) override;
  ssize_t pwrite(int fd, const void* buf, size_t len, off_t offset) override;
  int ftruncate(int fd, off_t size) override;
  int fsync(int fd) override;
  int fdatasync(int fd) override;

  // Undoes every write and truncation not followed by a sync of its file, newest first,
  // leaving each file as it was at its last sync. Afterwards every call fails with EIO:
  // the process is to exit at once, as a crashed one would have.
  void crash();

  // Files with changes not yet synced.
  size_t unsynced_files() const;

 private:
  struct Undo {
    off_t offset;
    std::string before;  // the bytes the change overwrote (or cut off), from offset on
  };
  struct Pending {
    int fd = -1;            // a dup, so the undo can run after the server closed its fd
    off_t synced_size = 0;  // the size at the last sync
    std::vector<Undo> undo;
  };
  using Key = std::pair<dev_t, ino_t>;

  // The file's pending record, created at its first unsynced change, and its size now in
  // *size; nullptr with errno EIO after the crash, or when the file cannot be recorded.
  // REQUIRES: mu_ held.
  Pending* pending_for(int fd, off_t* size);
  int sync(int fd, bool data_only);

  mutable std::mutex mu_;
  std::map<Key, Pending> pending_;
  bool crashed_ = false;
};

// Writes each pwrite in two halves with a pause between; everything else as posix_file_env.
// The kernel does not make pread atomic against a pwrite of the same page (a read may copy
// a page the write has half filled); this makes that window wide enough for a test to hit
// it every time, so the server's own ordering of reads against writes can be checked.
// Thread-safety: stateless; thread-safe.
class SlowWriteEnv final : public FileEnv {
 public:
  explicit SlowWriteEnv(unsigned pause_us) : pause_us_(pause_us) {}
  ssize_t pread(int fd, void* buf, size_t len, off_t offset) override;
  ssize_t pwrite(int fd, const void* buf, size_t len, off_t offset) override;
  int ftruncate(int fd, off_t size) override;
  int fsync(int fd) override;
  int fdatasync(int fd) override;

 private:
  const unsigned pause_us_;
};

}  // namespace odafs::server
