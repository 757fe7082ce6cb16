#include "bench/bdb/bdb_odafs.h"

#include <db.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <unordered_map>

#include "base/log.h"
#include "bench/bdb/prefetch.h"

namespace odafs::bdb {
namespace {

struct OpenFile {
  File file;
  uint64_t pos = 0;  // for BDB's seek + read/write
  Prefetcher* prefetcher = nullptr;
};

struct State {
  Client* client = nullptr;
  std::string standins;  // local directory mirroring the server paths created (file ids)
  std::mutex mu;         // guards files, prefetchers
  std::unordered_map<int, std::unique_ptr<OpenFile>> files;
  std::unordered_map<std::string, Prefetcher*> prefetchers;
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> prefetched{0};
};

State& state() {
  static State s;
  return s;
}

// Runs fn; a failure sets errno (libodafs's errno, ENOMEM, EIO) and returns `failed`.
template <class T, class Fn>
T guarded(const char* op, T failed, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    ODAFS_LOG_DEBUG("bdb hook %s: %s", op, e.what());
    errno = e.errno_value();
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
  } catch (const std::exception& e) {
    ODAFS_LOG_WARN("bdb hook %s: %s", op, e.what());
    errno = EIO;
  }
  return failed;
}

OpenFile& file_of(int fd) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.files.find(fd);
  if (it == s.files.end()) throw Error(EBADF, "not a descriptor of the odafs hooks");
  return *it->second;
}

std::string standin_of(const char* path) { return state().standins + path; }

// An empty local file at the server path's mirror: stat(2) of it gives BDB a distinct id.
void make_standin(const char* path) {
  std::filesystem::path p = standin_of(path);
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  int fd = ::open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
}

// The stand-ins' directory is where BDB's paths point: strip it to get the server path.
std::string server_path(const char* path) {
  const std::string& root = state().standins;
  if (std::strncmp(path, root.c_str(), root.size()) != 0 ||
      (path[root.size()] != '/' && path[root.size()] != '\0')) {
    throw Error(ENOENT, std::string("outside the odafs hooks' root: ") + path);
  }
  return path[root.size()] == '\0' ? "/" : std::string(path + root.size());
}

int hook_open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & O_CREAT) {
    va_list ap;
    va_start(ap, flags);
    mode = static_cast<mode_t>(va_arg(ap, int));
    va_end(ap);
  }
  return guarded("open", -1, [&] {
    State& s = state();
    constexpr int kPassed = O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND;
    std::string sp = server_path(path);
    auto of = std::make_unique<OpenFile>();
    of->file = s.client->open(sp, flags & kPassed, mode & 07777);
    if (flags & O_CREAT) make_standin(sp.c_str());
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(errno, "open /dev/null");
    std::lock_guard<std::mutex> lock(s.mu);
    auto p = s.prefetchers.find(sp);
    if (p != s.prefetchers.end()) of->prefetcher = p->second;
    s.files[fd] = std::move(of);
    return fd;
  });
}

int hook_close(int fd) {
  return guarded("close", -1, [&] {
    std::unique_ptr<OpenFile> of;
    {
      State& s = state();
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.files.find(fd);
      if (it == s.files.end()) throw Error(EBADF, "close: not a descriptor of the hooks");
      of = std::move(it->second);
      s.files.erase(it);
    }
    ::close(fd);
    of->file.close();  // reports a failed unstable write
    return 0;
  });
}

ssize_t read_at(OpenFile& of, void* buf, size_t len, uint64_t offset) {
  State& s = state();
  s.reads.fetch_add(1, std::memory_order_relaxed);
  if (of.prefetcher != nullptr && of.prefetcher->serve(buf, len, offset)) {
    s.prefetched.fetch_add(1, std::memory_order_relaxed);
    return static_cast<ssize_t>(len);
  }
  return static_cast<ssize_t>(of.file.pread(buf, len, offset));
}

ssize_t hook_pread(int fd, void* buf, size_t len, off_t offset) {
  return guarded("pread", ssize_t{-1},
                 [&] { return read_at(file_of(fd), buf, len, static_cast<uint64_t>(offset)); });
}

ssize_t hook_pwrite(int fd, const void* buf, size_t len, off_t offset) {
  return guarded("pwrite", ssize_t{-1}, [&] {
    return static_cast<ssize_t>(file_of(fd).file.pwrite(buf, len, static_cast<uint64_t>(offset)));
  });
}

ssize_t hook_read(int fd, void* buf, size_t len) {
  return guarded("read", ssize_t{-1}, [&] {
    OpenFile& of = file_of(fd);
    ssize_t n = read_at(of, buf, len, of.pos);
    of.pos += static_cast<uint64_t>(n);
    return n;
  });
}

ssize_t hook_write(int fd, const void* buf, size_t len) {
  return guarded("write", ssize_t{-1}, [&] {
    OpenFile& of = file_of(fd);
    size_t n = of.file.pwrite(buf, len, of.pos);
    of.pos += n;
    return static_cast<ssize_t>(n);
  });
}

// BDB's seek, ioinfo, exists and dirlist hooks return the errno value itself.
int errno_result(int rc) { return rc == 0 ? 0 : errno; }

int hook_seek(int fd, off_t offset, int whence) {
  return errno_result(guarded("seek", -1, [&] {
    OpenFile& of = file_of(fd);
    int64_t base = 0;
    if (whence == SEEK_CUR) base = static_cast<int64_t>(of.pos);
    if (whence == SEEK_END) base = static_cast<int64_t>(of.file.stat().size);
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END) {
      throw Error(EINVAL, "seek: bad whence");
    }
    if (base + offset < 0) throw Error(EINVAL, "seek before the start");
    of.pos = static_cast<uint64_t>(base + offset);
    return 0;
  }));
}

int hook_fsync(int fd) {
  return guarded("fsync", -1, [&] {
    file_of(fd).file.fsync();
    return 0;
  });
}

int hook_ftruncate(int fd, off_t size) {
  return guarded("ftruncate", -1, [&] {
    file_of(fd).file.truncate(static_cast<uint64_t>(size));
    return 0;
  });
}

int hook_ioinfo(const char* path, int fd, u_int32_t* mbytes, u_int32_t* bytes, u_int32_t* iosize) {
  return errno_result(guarded("ioinfo", -1, [&] {
    State& s = state();
    uint64_t size = fd >= 0 ? file_of(fd).file.stat().size : s.client->stat(server_path(path)).size;
    constexpr uint64_t kMega = 1024 * 1024;
    if (mbytes != nullptr) *mbytes = static_cast<u_int32_t>(size / kMega);
    if (bytes != nullptr) *bytes = static_cast<u_int32_t>(size % kMega);
    if (iosize != nullptr) {
      uint32_t bs = s.client->limits().block_size;
      *iosize = bs != 0 ? bs : 8192;
    }
    return 0;
  }));
}

int hook_exists(const char* path, int* isdir) {
  return errno_result(guarded("exists", -1, [&] {
    Attr a = state().client->stat(server_path(path));
    if (isdir != nullptr) *isdir = a.type == FileType::kDirectory;
    return 0;
  }));
}

int hook_rename(const char* from, const char* to) {
  return guarded("rename", -1, [&] {
    std::string f = server_path(from), t = server_path(to);
    state().client->rename(f, t);
    std::error_code ec;  // the stand-in follows, if there is one
    std::filesystem::rename(standin_of(f.c_str()), standin_of(t.c_str()), ec);
    return 0;
  });
}

int hook_unlink(const char* path) {
  return guarded("unlink", -1, [&] {
    std::string p = server_path(path);
    state().client->unlink(p);
    ::unlink(standin_of(p.c_str()).c_str());
    return 0;
  });
}

void hook_dirfree(char** names, int count) {
  for (int i = 0; i < count; ++i) std::free(names[i]);
  std::free(names);
}

int hook_dirlist(const char* dir, char*** names, int* count) {
  *names = nullptr;
  *count = 0;
  return errno_result(guarded("dirlist", -1, [&] {
    std::vector<DirEntry> entries = state().client->readdir(server_path(dir));
    char** out = static_cast<char**>(std::calloc(entries.size() + 1, sizeof(char*)));
    if (out == nullptr) throw std::bad_alloc();
    int n = 0;
    for (const DirEntry& e : entries) {
      out[n] = strdup(e.name.c_str());
      if (out[n] == nullptr) {
        hook_dirfree(out, n);
        throw std::bad_alloc();
      }
      ++n;
    }
    *names = out;
    *count = n;
    return 0;
  }));
}

// Installs (or, with null, removes) every hook; BDB's setters fail only on bad arguments.
void set_all(bool on) {
  db_env_set_func_open(on ? hook_open : nullptr);
  db_env_set_func_close(on ? hook_close : nullptr);
  db_env_set_func_read(on ? hook_read : nullptr);
  db_env_set_func_write(on ? hook_write : nullptr);
  db_env_set_func_pread(on ? hook_pread : nullptr);
  db_env_set_func_pwrite(on ? hook_pwrite : nullptr);
  db_env_set_func_seek(on ? hook_seek : nullptr);
  db_env_set_func_fsync(on ? hook_fsync : nullptr);
  db_env_set_func_ftruncate(on ? hook_ftruncate : nullptr);
  db_env_set_func_ioinfo(on ? hook_ioinfo : nullptr);
  db_env_set_func_exists(on ? hook_exists : nullptr);
  db_env_set_func_rename(on ? hook_rename : nullptr);
  db_env_set_func_unlink(on ? hook_unlink : nullptr);
  db_env_set_func_dirlist(on ? hook_dirlist : nullptr);
  db_env_set_func_dirfree(on ? hook_dirfree : nullptr);
}

}  // namespace

std::string Hooks::install(Client* client) {
  State& s = state();
  char tmpl[] = "/tmp/odafs-bdb-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw Error(errno, "bdb hooks: mkdtemp");
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.client = client;
    s.standins = tmpl;
  }
  set_all(true);
  return s.standins;
}

void Hooks::uninstall() {
  State& s = state();
  set_all(false);
  std::lock_guard<std::mutex> lock(s.mu);
  std::error_code ec;
  if (!s.standins.empty()) std::filesystem::remove_all(s.standins, ec);
  s.standins.clear();
  s.client = nullptr;
  s.files.clear();
}

void Hooks::attach_prefetcher(const std::string& path, Prefetcher* p) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (p == nullptr) {
    s.prefetchers.erase(path);
  } else {
    s.prefetchers[path] = p;
  }
  for (auto& [fd, of] : s.files) {
    if (of->file.path() == path) of->prefetcher = p;
  }
}

Hooks::Counters Hooks::counters() {
  State& s = state();
  return {s.reads.load(), s.prefetched.load()};
}

}  // namespace odafs::bdb
