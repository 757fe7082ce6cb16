// odafs: command-line client.
//
//   odafs [--timeout MS] COMMAND ...
//   odafs ls|stat|cat|mkdir|rm|rmdir URL
//   odafs mv URL URL2            (same server)
//   odafs put LOCAL URL          odafs get URL LOCAL
//   odafs stats URL              (server counters)   odafs df URL     odafs ping URL
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/url.h"

namespace {

[[noreturn]] void usage(FILE* out = stderr, int status = 2) {
  std::fprintf(out,
               "usage: odafs [OPTIONS] ls|stat|cat|mkdir|rm|rmdir|df|ping|stats URL\n"
               "       odafs [OPTIONS] mv URL URL2\n"
               "       odafs [OPTIONS] put LOCAL URL\n"
               "       odafs [OPTIONS] get URL LOCAL\n"
               "URL is odafs://HOST:PORT/PATH[?timeout_ms=N][&cache_policy=lru|mq][&tls=1]\n"
               "       [&tls_ca=FILE][&tls_cert=FILE&tls_key=FILE]\n"
               "OPTIONS:\n"
               "  --timeout MS      give up on a server that does not answer within MS ms\n"
               "  --tls             RPC-with-TLS (RFC 9289); the server's certificate must\n"
               "                    name URL's host\n"
               "  --tls-ca FILE     CA (PEM) to trust (default: the system's store)\n"
               "  --tls-cert FILE   this client's certificate, with --tls-key FILE (mutual\n"
               "                    TLS); each --tls-* file implies --tls\n");
  std::exit(status);
}

// --timeout, if given; a URL's ?timeout_ms wins over it, as in Client::mount.
std::optional<int> g_timeout_ms;
// --tls and its files; a URL's tls options win over them.
odafs::MountOptions g_options;
// The timeout the last mount used, for the message when a call runs out of it.
int g_effective_timeout_ms = odafs::MountOptions{}.timeout_ms;
// The process's umask, read once at start: `get` creates LOCAL with 0644 minus it, as
// open(O_CREAT, 0644) would.
mode_t g_umask = 022;

struct Target {
  std::unique_ptr<odafs::Client> client;
  std::string path;
  std::string server;
};

Target open_target(const std::string& url) {
  odafs::Url parsed = odafs::or_throw(odafs::parse_url(url));
  odafs::MountOptions options = g_options;
  if (g_timeout_ms) options.timeout_ms = *g_timeout_ms;
  odafs::apply_url_options(parsed, &options);
  g_effective_timeout_ms = options.timeout_ms;
  Target t;
  t.server = parsed.server.to_string();
  t.client = odafs::Client::mount("odafs://" + t.server + "/", options);
  t.path = parsed.path;
  return t;
}

const char* type_name(odafs::FileType t) {
  switch (t) {
    case odafs::FileType::kDirectory:
      return "directory";
    case odafs::FileType::kSymlink:
      return "symlink";
    case odafs::FileType::kRegular:
      return "file";
    default:
      return "special";
  }
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw odafs::Error(errno, "write");
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// Copies the whole remote file to fd.
void copy_out(odafs::File& f, int fd) {
  std::vector<char> buf(1 << 20);
  uint64_t off = 0;
  for (;;) {
    size_t n = f.pread(buf.data(), buf.size(), off);
    if (n == 0) break;
    write_all(fd, buf.data(), n);
    off += n;
  }
}

// Where `get` writes: LOCAL is replaced whole or not at all. The bytes go to a temporary
// file in LOCAL's directory (so the rename cannot cross file systems), which commit()
// fsyncs and renames over LOCAL; until then, and on every failure, LOCAL is untouched and
// the destructor removes the temporary. A LOCAL that exists and is not a regular file (a
// device or a FIFO, like /dev/stdout) cannot be replaced: the bytes go straight to it.
class LocalOutput {
 public:
  explicit LocalOutput(const std::string& local) {
    struct stat st;
    mode_t mode = 0644 & ~g_umask;
    if (::stat(local.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) throw odafs::Error(EISDIR, "get: " + local);
      if (!S_ISREG(st.st_mode)) {
        target_ = local;
        fd_ = ::open(local.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd_ < 0) throw odafs::Error(errno, "open " + local);
        return;
      }
      // Through a symlink, replace the file it names, which is what writing through it did.
      char* real = realpath(local.c_str(), nullptr);
      if (real == nullptr) throw odafs::Error(errno, "realpath " + local);
      target_ = real;
      std::free(real);
      mode = st.st_mode & 07777;
      existing_ = st;
    } else {
      target_ = local;
    }
    size_t slash = target_.rfind('/');
    dir_ = slash == std::string::npos ? "." : slash == 0 ? "/" : target_.substr(0, slash);
    std::string base = slash == std::string::npos ? target_ : target_.substr(slash + 1);
    temp_ = dir_ + "/." + base + ".odafs-XXXXXX";
    fd_ = mkostemp(temp_.data(), O_CLOEXEC);
    if (fd_ < 0) {
      int err = errno;
      temp_.clear();
      throw odafs::Error(err, "get: cannot create a temporary file in " + dir_);
    }
    // The replacement looks like the file it replaces (mkostemp made it 0600, ours).
    if (fchmod(fd_, mode) != 0) {
      odafs::Error e(errno, "fchmod " + temp_);
      discard();  // a constructor that throws gets no destructor
      throw e;
    }
    if (existing_ && (existing_->st_uid != geteuid() || existing_->st_gid != getegid())) {
      [[maybe_unused]] int rc = fchown(fd_, existing_->st_uid, existing_->st_gid);  // if allowed
    }
  }
  ~LocalOutput() { discard(); }
  LocalOutput(const LocalOutput&) = delete;
  LocalOutput& operator=(const LocalOutput&) = delete;

  int fd() const { return fd_; }

  // The copy is complete: make it durable and put it in LOCAL's place.
  void commit() {
    if (temp_.empty()) {  // a device or FIFO: nothing to rename
      int rc = ::close(fd_);
      fd_ = -1;
      if (rc != 0) throw odafs::Error(errno, "close " + target_);
      return;
    }
    if (fsync(fd_) != 0) throw odafs::Error(errno, "fsync " + temp_);
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) throw odafs::Error(errno, "close " + temp_);
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
      throw odafs::Error(errno, "rename " + temp_ + " to " + target_);
    }
    temp_.clear();
    // The rename itself is durable once the directory is (some file systems refuse to
    // fsync a directory; the data is safe either way).
    int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  // Closes and removes the temporary file, if there still is one.
  void discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!temp_.empty()) ::unlink(temp_.c_str());
    temp_.clear();
  }

  std::string target_;  // the file to replace (LOCAL, or what its symlink names)
  std::string dir_;     // target_'s directory
  std::string temp_;    // the temporary file; empty once renamed, or when writing direct
  std::optional<struct stat> existing_;
  int fd_ = -1;
};

// Takes the options before the command off argv; returns the index of the command.
int parse_globals(int argc, char** argv) {
  int i = 1;
  while (i < argc && std::strncmp(argv[i], "--", 2) == 0) {
    std::string opt = argv[i++];
    if (opt == "--help") usage(stdout, 0);
    if (opt == "--tls") {
      g_options.tls = true;
      continue;
    }
    std::string value;
    const size_t eq = opt.find('=');
    if (eq != std::string::npos) {
      value = opt.substr(eq + 1);
      opt.resize(eq);
    } else if (i < argc) {
      value = argv[i++];
    } else {
      usage();
    }
    if (opt == "--tls-ca") {
      g_options.tls_ca = value;
    } else if (opt == "--tls-cert") {
      g_options.tls_cert = value;
    } else if (opt == "--tls-key") {
      g_options.tls_key = value;
    } else if (opt == "--timeout") {
      odafs::Result<int> ms = odafs::parse_timeout_ms(value, "--timeout");
      if (!ms.ok()) {
        std::fprintf(stderr, "odafs: %s\n", ms.status().message().c_str());
        std::exit(2);
      }
      g_timeout_ms = *ms;
      continue;
    } else {
      usage();
    }
    g_options.tls = true;  // a TLS file implies --tls
  }
  return i;
}

int run(int argc, char** argv) {
  int first = parse_globals(argc, argv);
  argc -= first - 1;  // from here argv[1] is the command
  argv += first - 1;
  if (argc < 3) usage();
  std::string cmd = argv[1];
  constexpr size_t kChunk = 1 << 20;
  if (cmd == "ls") {
    Target t = open_target(argv[2]);
    odafs::Attr a = t.client->stat(t.path);
    if (a.type != odafs::FileType::kDirectory) {
      std::printf("%s\n", t.path.c_str());
      return 0;
    }
    for (const odafs::DirEntry& e : t.client->readdir(t.path)) {
      std::printf("%s%s\n", e.name.c_str(), e.type == odafs::FileType::kDirectory ? "/" : "");
    }
  } else if (cmd == "stat") {
    Target t = open_target(argv[2]);
    odafs::Attr a = t.client->lstat(t.path);
    std::printf(
        "path: %s\ntype: %s\nsize: %llu\nmode: %04o\nnlink: %u\nuid: %u\ngid: %u\n"
        "fileid: %llu\nmtime: %lld.%09ld\n",
        t.path.c_str(), type_name(a.type), static_cast<unsigned long long>(a.size), a.mode, a.nlink,
        a.uid, a.gid, static_cast<unsigned long long>(a.fileid),
        static_cast<long long>(a.mtime.tv_sec), a.mtime.tv_nsec);
  } else if (cmd == "cat") {
    Target t = open_target(argv[2]);
    odafs::File f = t.client->open(t.path, O_RDONLY);
    copy_out(f, 1);
  } else if (cmd == "get") {
    if (argc < 4) usage();
    Target t = open_target(argv[2]);
    odafs::File f = t.client->open(t.path, O_RDONLY);  // a missing file fails here: no LOCAL
    LocalOutput out(argv[3]);
    copy_out(f, out.fd());
    out.commit();
  } else if (cmd == "put") {
    if (argc < 4) usage();
    int in = ::open(argv[2], O_RDONLY | O_CLOEXEC);
    if (in < 0) throw odafs::Error(errno, std::string("open ") + argv[2]);
    Target t = open_target(argv[3]);
    odafs::File f = t.client->open(t.path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char> buf(kChunk);
    uint64_t off = 0;
    for (;;) {
      ssize_t n = ::read(in, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw odafs::Error(errno, "read");
      if (n == 0) break;
      f.pwrite(buf.data(), static_cast<size_t>(n), off);
      off += static_cast<uint64_t>(n);
    }
    ::close(in);
    f.close();
  } else if (cmd == "mkdir") {
    Target t = open_target(argv[2]);
    t.client->mkdir(t.path);
  } else if (cmd == "rm") {
    Target t = open_target(argv[2]);
    t.client->unlink(t.path);
  } else if (cmd == "rmdir") {
    Target t = open_target(argv[2]);
    t.client->rmdir(t.path);
  } else if (cmd == "mv") {
    if (argc < 4) usage();
    Target from = open_target(argv[2]);
    odafs::Url to = odafs::or_throw(odafs::parse_url(argv[3]));
    if (to.server.to_string() != from.server) {
      throw odafs::Error(EXDEV, "mv: both URLs must name the same server");
    }
    from.client->rename(from.path, to.path);
  } else if (cmd == "df") {
    Target t = open_target(argv[2]);
    odafs::FsStat s = t.client->statfs();
    std::printf(
        "total_bytes: %llu\nfree_bytes: %llu\navail_bytes: %llu\nfiles: %llu\n"
        "free_files: %llu\n",
        static_cast<unsigned long long>(s.total_bytes),
        static_cast<unsigned long long>(s.free_bytes),
        static_cast<unsigned long long>(s.avail_bytes),
        static_cast<unsigned long long>(s.total_files),
        static_cast<unsigned long long>(s.free_files));
  } else if (cmd == "ping") {
    Target t = open_target(argv[2]);
    auto start = std::chrono::steady_clock::now();
    t.client->ping();
    auto us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start);
    std::printf("NULL round trip: %.1f us\n", us.count());
  } else if (cmd == "stats") {
    Target t = open_target(argv[2]);
    for (const auto& [name, value] : t.client->server_stats()) {
      std::printf("%-24s %llu\n", name.c_str(), static_cast<unsigned long long>(value));
    }
  } else {
    usage();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  g_umask = umask(022);
  umask(g_umask);
  try {
    return run(argc, argv);
  } catch (const odafs::Error& e) {
    if (e.errno_value() == ETIMEDOUT) {
      std::fprintf(stderr,
                   "odafs: %s (no answer within the %d ms timeout; --timeout MS or "
                   "?timeout_ms=N in the URL changes it)\n",
                   e.what(), g_effective_timeout_ms);
    } else {
      std::fprintf(stderr, "odafs: %s\n", e.what());
    }
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs: %s\n", e.what());
    return 1;
  }
}
