// The C API: a thin shell over odafs::Client that turns exceptions into errno.
#include <dirent.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "client/client.h"
#include "client/io_queue.h"
#include "client/odafs.h"

struct odafs_client {
  std::unique_ptr<odafs::Client> impl;
};
struct odafs_file {
  odafs::File impl;
  uint32_t block_size;  // the mount's, for st_blksize
};
struct odafs_ioq {
  // A request submitted and not yet reaped. The queue knows it by its index here (the tag
  // it was given); the reap puts back the caller's tag and turns a stat's Attr into a
  // struct stat and a create's File into an odafs_file, in C terms.
  struct Pending {
    uint64_t user_tag = 0;
    odafs::Attr attr;
    struct stat* st = nullptr;   // a stat's result goes here
    odafs_file* file = nullptr;  // a create's, handed to *file_out at reap (freed on failure)
    odafs_file** file_out = nullptr;
  };
  // Before impl: destroyed after it, whose destructor waits for the calls in flight.
  std::vector<Pending> pending;  // depth entries
  std::vector<uint32_t> free;    // free entries of pending
  odafs::IoQueue impl;
  uint32_t block_size;
  std::vector<odafs::Completion> out;  // depth entries: what one reap can return
  odafs_ioq(odafs::Client& c, size_t depth)
      : pending(depth <= 65536 ? depth : 0),
        impl(c, depth),
        block_size(c.limits().block_size),
        out(depth) {
    free.reserve(depth);
    for (size_t i = depth; i-- > 0;) free.push_back(static_cast<uint32_t>(i));
  }
  ~odafs_ioq() {
    for (Pending& p : pending) delete p.file;  // created, never reaped
  }
};

namespace {

// Runs fn, mapping any exception to -1 with errno; returns fn's value otherwise.
template <class Fn>
auto guarded(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const odafs::Error& e) {
    errno = e.errno_value();
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
  } catch (const std::system_error& e) {
    errno = e.code().value() ? e.code().value() : EIO;
  } catch (...) {
    errno = EIO;
  }
  return static_cast<decltype(fn())>(-1);
}

unsigned char dtype(odafs::FileType t) {
  switch (t) {
    case odafs::FileType::kDirectory:
      return DT_DIR;
    case odafs::FileType::kSymlink:
      return DT_LNK;
    case odafs::FileType::kBlock:
      return DT_BLK;
    case odafs::FileType::kChar:
      return DT_CHR;
    case odafs::FileType::kSocket:
      return DT_SOCK;
    case odafs::FileType::kFifo:
      return DT_FIFO;
    default:
      return DT_REG;
  }
}

// The queue's completions, as the C API's.
ssize_t copy_out(odafs_ioq* q, size_t n, odafs_completion* out) {
  for (size_t i = 0; i < n; ++i) {
    const odafs::Completion& c = q->out[i];
    odafs_ioq::Pending& p = q->pending[c.user_tag];
    out[i].user_tag = p.user_tag;
    out[i].bytes = c.bytes;
    out[i].error = c.error;
    if (p.st != nullptr && c.error == 0) *p.st = odafs::to_stat(p.attr, q->block_size);
    if (p.file_out != nullptr) {
      if (c.error != 0) {
        delete p.file;
        p.file = nullptr;
      }
      *p.file_out = p.file;
    }
    p = odafs_ioq::Pending{};
    q->free.push_back(static_cast<uint32_t>(c.user_tag));
  }
  return static_cast<ssize_t>(n);
}

// Submits one request to q through fn(entry, tag), the entry taken for it (given back if
// fn throws); 0, or -1 with errno (EBUSY: depth requests outstanding).
template <class Fn>
int submit(odafs_ioq* q, uint64_t user_tag, Fn&& fn) {
  if (q->free.empty()) return errno = EBUSY, -1;
  const uint32_t tag = q->free.back();
  odafs_ioq::Pending& p = q->pending[tag];
  p.user_tag = user_tag;
  int rc = guarded([&] {
    fn(p, uint64_t{tag});
    return 0;
  });
  if (rc != 0) {
    delete p.file;
    p = odafs_ioq::Pending{};
  } else {
    q->free.pop_back();
  }
  return rc;
}

bool null_arg(const void* p) {
  if (p != nullptr) return false;
  errno = EINVAL;
  return true;
}

}  // namespace

extern "C" {

odafs_client* odafs_mount(const char* url) {
  if (null_arg(url)) return nullptr;
  odafs_client* c = nullptr;
  guarded([&] {
    c = new odafs_client{odafs::Client::mount(url)};
    return 0;
  });
  return c;
}

void odafs_unmount(odafs_client* client) { delete client; }

int odafs_set_read_mode(odafs_client* client, enum odafs_read_mode mode) {
  if (null_arg(client)) return -1;
  switch (mode) {
    case ODAFS_READ_INLINE:
      client->impl->set_read_mode(odafs::ReadMode::kInline);
      break;
    case ODAFS_READ_PREPOSTED:
      client->impl->set_read_mode(odafs::ReadMode::kPrePosted);
      break;
    case ODAFS_READ_ORDMA:
      client->impl->set_read_mode(odafs::ReadMode::kOrdma);
      break;
    default:
      errno = EINVAL;
      return -1;
  }
  return 0;
}

odafs_file* odafs_open(odafs_client* client, const char* path, int flags, mode_t mode) {
  if (null_arg(client) || null_arg(path)) return nullptr;
  odafs_file* f = nullptr;
  guarded([&] {
    f = new odafs_file{client->impl->open(path, flags, mode), client->impl->limits().block_size};
    return 0;
  });
  return f;
}

int odafs_close(odafs_file* file) {
  if (null_arg(file)) return -1;
  int rc = guarded([&] {
    file->impl.close();
    return 0;
  });
  int saved = errno;
  delete file;
  errno = saved;
  return rc;
}

ssize_t odafs_pread(odafs_file* file, void* buf, size_t len, off_t offset) {
  if (null_arg(file) || (len > 0 && null_arg(buf))) return -1;
  if (offset < 0) return errno = EINVAL, -1;
  return guarded([&] {
    return static_cast<ssize_t>(file->impl.pread(buf, len, static_cast<uint64_t>(offset)));
  });
}

ssize_t odafs_pwrite(odafs_file* file, const void* buf, size_t len, off_t offset) {
  if (null_arg(file) || (len > 0 && null_arg(buf))) return -1;
  if (offset < 0) return errno = EINVAL, -1;
  return guarded([&] {
    return static_cast<ssize_t>(file->impl.pwrite(buf, len, static_cast<uint64_t>(offset)));
  });
}

int odafs_fsync(odafs_file* file) {
  if (null_arg(file)) return -1;
  return guarded([&] {
    file->impl.fsync();
    return 0;
  });
}

int odafs_ftruncate(odafs_file* file, off_t size) {
  if (null_arg(file)) return -1;
  if (size < 0) return errno = EINVAL, -1;
  return guarded([&] {
    file->impl.truncate(static_cast<uint64_t>(size));
    return 0;
  });
}

int odafs_fstat(odafs_file* file, struct stat* st) {
  if (null_arg(file) || null_arg(st)) return -1;
  return guarded([&] {
    *st = odafs::to_stat(file->impl.stat(), file->block_size);
    return 0;
  });
}

int odafs_stat(odafs_client* client, const char* path, struct stat* st) {
  if (null_arg(client) || null_arg(path) || null_arg(st)) return -1;
  return guarded([&] {
    *st = odafs::to_stat(client->impl->stat(path), client->impl->limits().block_size);
    return 0;
  });
}

int odafs_lstat(odafs_client* client, const char* path, struct stat* st) {
  if (null_arg(client) || null_arg(path) || null_arg(st)) return -1;
  return guarded([&] {
    *st = odafs::to_stat(client->impl->lstat(path), client->impl->limits().block_size);
    return 0;
  });
}

#define ODAFS_PATH_CALL(call)                        \
  if (null_arg(client) || null_arg(path)) return -1; \
  return guarded([&] {                               \
    call;                                            \
    return 0;                                        \
  })

int odafs_mkdir(odafs_client* client, const char* path, mode_t mode) {
  ODAFS_PATH_CALL(client->impl->mkdir(path, mode));
}
int odafs_rmdir(odafs_client* client, const char* path) {
  ODAFS_PATH_CALL(client->impl->rmdir(path));
}
int odafs_unlink(odafs_client* client, const char* path) {
  ODAFS_PATH_CALL(client->impl->unlink(path));
}
int odafs_truncate(odafs_client* client, const char* path, off_t size) {
  if (size < 0) return errno = EINVAL, -1;
  ODAFS_PATH_CALL(client->impl->truncate(path, static_cast<uint64_t>(size)));
}
int odafs_chmod(odafs_client* client, const char* path, mode_t mode) {
  ODAFS_PATH_CALL(client->impl->chmod(path, mode));
}
int odafs_lchown(odafs_client* client, const char* path, uid_t uid, gid_t gid) {
  ODAFS_PATH_CALL(client->impl->chown(path, uid, gid));
}
int odafs_access(odafs_client* client, const char* path, int mode) {
  if (null_arg(client) || null_arg(path)) return -1;
  if ((mode & ~(R_OK | W_OK | X_OK)) != 0) return errno = EINVAL, -1;
  return guarded([&] {
    if (client->impl->access(path, mode) != mode) return errno = EACCES, -1;
    return 0;
  });
}
int odafs_utimens(odafs_client* client, const char* path, const struct timespec times[2]) {
  if (null_arg(times)) return -1;
  ODAFS_PATH_CALL(client->impl->utimens(path, times));
}
int odafs_symlink(odafs_client* client, const char* target, const char* path) {
  if (null_arg(target)) return -1;
  ODAFS_PATH_CALL(client->impl->symlink(target, path));
}
int odafs_mknod(odafs_client* client, const char* path, mode_t mode, dev_t dev) {
  ODAFS_PATH_CALL(client->impl->mknod(path, mode, dev));
}
int odafs_link(odafs_client* client, const char* existing, const char* new_path) {
  if (null_arg(client) || null_arg(existing) || null_arg(new_path)) return -1;
  return guarded([&] {
    client->impl->link(existing, new_path);
    return 0;
  });
}
int odafs_rename(odafs_client* client, const char* from, const char* to) {
  if (null_arg(client) || null_arg(from) || null_arg(to)) return -1;
  return guarded([&] {
    client->impl->rename(from, to);
    return 0;
  });
}

ssize_t odafs_readlink(odafs_client* client, const char* path, char* buf, size_t len) {
  if (null_arg(client) || null_arg(path) || null_arg(buf)) return -1;
  return guarded([&] {
    std::string target = client->impl->readlink(path);
    size_t n = std::min(len, target.size());
    std::memcpy(buf, target.data(), n);
    return static_cast<ssize_t>(n);
  });
}

odafs_ioq* odafs_ioq_create(odafs_client* client, size_t depth) {
  if (null_arg(client)) return nullptr;
  odafs_ioq* q = nullptr;
  guarded([&] {
    q = new odafs_ioq(*client->impl, depth);
    return 0;
  });
  return q;
}

void odafs_ioq_destroy(odafs_ioq* q) { delete q; }

int odafs_ioq_submit_read(odafs_ioq* q, odafs_file* file, void* buf, size_t len, off_t offset,
                          uint64_t user_tag) {
  if (null_arg(q) || null_arg(file) || (len > 0 && null_arg(buf))) return -1;
  if (offset < 0) return errno = EINVAL, -1;
  return submit(q, user_tag, [&](odafs_ioq::Pending&, uint64_t tag) {
    q->impl.submit_read(file->impl, buf, len, static_cast<uint64_t>(offset), tag);
  });
}

int odafs_ioq_submit_write(odafs_ioq* q, odafs_file* file, const void* buf, size_t len,
                           off_t offset, uint64_t user_tag) {
  if (null_arg(q) || null_arg(file) || (len > 0 && null_arg(buf))) return -1;
  if (offset < 0) return errno = EINVAL, -1;
  return submit(q, user_tag, [&](odafs_ioq::Pending&, uint64_t tag) {
    q->impl.submit_write(file->impl, buf, len, static_cast<uint64_t>(offset), tag);
  });
}

int odafs_ioq_submit_stat(odafs_ioq* q, odafs_file* file, struct stat* st, uint64_t user_tag) {
  if (null_arg(q) || null_arg(file) || null_arg(st)) return -1;
  return submit(q, user_tag, [&](odafs_ioq::Pending& p, uint64_t tag) {
    p.st = st;
    q->impl.submit_stat(file->impl, &p.attr, tag);
  });
}

int odafs_ioq_submit_lstat(odafs_ioq* q, const char* path, struct stat* st, uint64_t user_tag) {
  if (null_arg(q) || null_arg(path) || null_arg(st)) return -1;
  return submit(q, user_tag, [&](odafs_ioq::Pending& p, uint64_t tag) {
    p.st = st;
    q->impl.submit_lstat(path, &p.attr, tag);
  });
}

int odafs_ioq_submit_access(odafs_ioq* q, const char* path, int mode, int* granted,
                            uint64_t user_tag) {
  if (null_arg(q) || null_arg(path) || null_arg(granted)) return -1;
  return submit(q, user_tag, [&](odafs_ioq::Pending&, uint64_t tag) {
    q->impl.submit_access(path, mode, granted, tag);
  });
}

int odafs_ioq_submit_create(odafs_ioq* q, const char* path, int flags, mode_t mode,
                            odafs_file** file, uint64_t user_tag) {
  if (null_arg(q) || null_arg(path) || null_arg(file)) return -1;
  return submit(q, user_tag, [&](odafs_ioq::Pending& p, uint64_t tag) {
    p.file = new odafs_file{odafs::File(), q->block_size};
    p.file_out = file;
    q->impl.submit_create(path, flags, mode, &p.file->impl, tag);
  });
}

int odafs_ioq_submit_unlink(odafs_ioq* q, const char* path, uint64_t user_tag) {
  if (null_arg(q) || null_arg(path)) return -1;
  return submit(q, user_tag,
                [&](odafs_ioq::Pending&, uint64_t tag) { q->impl.submit_unlink(path, tag); });
}

int odafs_ioq_submit_chmod(odafs_ioq* q, const char* path, mode_t mode, uint64_t user_tag) {
  if (null_arg(q) || null_arg(path)) return -1;
  return submit(q, user_tag,
                [&](odafs_ioq::Pending&, uint64_t tag) { q->impl.submit_chmod(path, mode, tag); });
}

ssize_t odafs_ioq_reap(odafs_ioq* q, struct odafs_completion* out, size_t max) {
  if (null_arg(q) || (max > 0 && null_arg(out))) return -1;
  return guarded([&] {
    size_t n = q->impl.reap(std::span(q->out.data(), std::min(max, q->out.size())));
    return copy_out(q, n, out);
  });
}

ssize_t odafs_ioq_wait(odafs_ioq* q, struct odafs_completion* out, size_t max, size_t min,
                       int timeout_ms) {
  if (null_arg(q) || (max > 0 && null_arg(out))) return -1;
  if (min > max) return errno = EINVAL, -1;
  return guarded([&] {
    // No more than depth completions can be there at once.
    size_t room = std::min(max, q->out.size());
    size_t n = q->impl.wait(std::span(q->out.data(), room), std::min(min, room), timeout_ms);
    return copy_out(q, n, out);
  });
}

int odafs_readdir(odafs_client* client, const char* path, odafs_dir_fn fn, void* ctx) {
  if (null_arg(client) || null_arg(path) || null_arg(reinterpret_cast<const void*>(fn))) {
    return -1;
  }
  return guarded([&] {
    for (const odafs::DirEntry& e : client->impl->readdir(path)) {
      int rc = fn(ctx, e.name.c_str(), dtype(e.type), e.fileid);
      if (rc != 0) return rc;
    }
    return 0;
  });
}

}  // extern "C"
