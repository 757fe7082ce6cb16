// libnfs, the user-space NFS client library, as a peer of libodafs in the benchmarks: a
// mount (sync calls), an in-flight read queue on libnfs's async API, and a PostMark
// backend. Written against libnfs 4 (Debian 12: nfs_pread(nfs, fh, offset, count, buf)).
//
// URL: nfs://HOST/EXPORT?version=3|4&nfsport=P&mountport=P (libnfs's own URL options;
// with both ports given no portmapper is asked).
//
// Errors are thrown as odafs::Error carrying the errno libnfs returned, with its message.
// Thread-safety: each object is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench/postmark/backend.h"

struct nfs_context;
struct nfsfh;

namespace odafs::peers {

class NfsMount {
 public:
  // Mounts url. Throws odafs::Error.
  explicit NfsMount(const std::string& url);
  ~NfsMount();
  NfsMount(const NfsMount&) = delete;
  NfsMount& operator=(const NfsMount&) = delete;

  nfs_context* context() const { return nfs_; }
  // Opens path (relative to the export's root). Throws odafs::Error.
  nfsfh* open(const std::string& path, int flags, int mode);
  void close(nfsfh* fh);
  // The same for destructors: errors ignored.
  void close_quietly(nfsfh* fh) noexcept;
  // Reads exactly len bytes at offset (libnfs splits what exceeds the server's rsize).
  // Throws odafs::Error, EIO for a short read.
  void read_exactly(nfsfh* fh, void* buf, size_t len, uint64_t offset);
  // rc < 0: throws odafs::Error(-rc) naming what and libnfs's message. Returns rc.
  int check(int rc, const char* what) const;

 private:
  nfs_context* nfs_ = nullptr;
};

// Up to `depth` reads in flight on one file through nfs_pread_async, driven by a poll()
// loop on the context's socket (nfs_service) in the calling thread.
// Memory: slots are allocated at construction; a steady stream allocates nothing here
// (libnfs itself allocates its PDUs per call).
class NfsReadQueue {
 public:
  // REQUIRES: mount and fh outlive the queue.
  NfsReadQueue(NfsMount& mount, nfsfh* fh, size_t depth);
  // Reads len bytes at offset into buf, completing as `tag`. REQUIRES: fewer than depth
  // outstanding; buf valid until the completion was returned by wait.
  void submit(void* buf, size_t len, uint64_t offset, size_t tag);
  // Waits until at least one read completed; moves the tags of those done into out and
  // returns how many. Throws odafs::Error for a failed or short read.
  size_t wait(std::span<size_t> out);
  size_t outstanding() const { return outstanding_; }

 private:
  struct Slot {
    NfsReadQueue* queue = nullptr;
    void* buf = nullptr;
    size_t len = 0;
    size_t tag = 0;
  };
  static void on_read(int status, nfs_context* nfs, void* data, void* slot);

  NfsMount& mount_;
  nfsfh* fh_;
  std::vector<Slot> slots_;
  std::vector<Slot*> free_;
  std::vector<size_t> done_;  // tags completed and not yet returned
  size_t outstanding_ = 0;
  int error_ = 0;
};

// PostMark (bench/postmark) on a libnfs mount: every open is a LOOKUP (and CREATE), every
// close drops the handle, as an application on libnfs would run it.
class NfsBackend final : public postmark::Backend {
 public:
  explicit NfsBackend(NfsMount& mount) : mount_(mount) {}
  ~NfsBackend() override;
  void mkdir(const std::string& path) override;
  void unlink(const std::string& path) override;
  void open(const std::string& path, int flags, mode_t mode) override;
  size_t pread(void* buf, size_t len, uint64_t offset) override;
  void pwrite(const void* buf, size_t len, uint64_t offset) override;
  void close() override;

 private:
  NfsMount& mount_;
  nfsfh* fh_ = nullptr;
};

}  // namespace odafs::peers
