// odafs, the command-line tool: moving whole files between the local system and a server
// (client/cli/transfer.h).
#include "client/cli/transfer.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/io_queue.h"

namespace odafs::cli {
namespace {

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

// What a long get or put says on a terminal, on stderr, at most ten times a second:
// "get big.iso: 123.4 of 256.0 MiB (48%), 512 MiB/s", each line over the last, and a
// newline at the end (or before an error's message). Silent when stderr is not a terminal,
// and for transfers under kMinBytes (or of unknown size under it).
// Thread-safety: one thread.
class Progress {
 public:
  // total: the bytes expected, 0 when unknown (standard input).
  Progress(const char* verb, const std::string& name, uint64_t total)
      : verb_(verb), name_(name), total_(total), on_(isatty(2) == 1) {}
  ~Progress() {
    if (shown_) std::fputc('\n', stderr);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(size_t n) {
    done_ += n;
    if (!on_ || (total_ != 0 && total_ < kMinBytes) || (total_ == 0 && done_ < kMinBytes)) {
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (shown_ && now - last_ < std::chrono::milliseconds(100) && done_ != total_) return;
    last_ = now;
    shown_ = true;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double mib = static_cast<double>(done_) / (1 << 20);
    if (total_ != 0) {
      std::fprintf(stderr, "\r%s %s: %.1f of %.1f MiB (%d%%), %.0f MiB/s   ", verb_, name_.c_str(),
                   mib, static_cast<double>(total_) / (1 << 20),
                   static_cast<int>(100 * done_ / total_), secs > 0 ? mib / secs : 0.0);
    } else {
      std::fprintf(stderr, "\r%s %s: %.1f MiB, %.0f MiB/s   ", verb_, name_.c_str(), mib,
                   secs > 0 ? mib / secs : 0.0);
    }
  }

 private:
  static constexpr uint64_t kMinBytes = 16u << 20;
  const char* verb_;
  std::string name_;
  const uint64_t total_;
  const bool on_;
  uint64_t done_ = 0;
  bool shown_ = false;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

// A whole file's bytes read through an IoQueue, kDepth READs of up to the server's max_read
// in flight: the server reads one chunk while the wire carries the next and this side
// writes a third out. One READ at a time left each side idle for the other's part of
// every round trip (get: 0.54 s to 0.44 s for 256 MiB, medians of 6 interleaved; bench/stream).
// Each chunk has its own buffer, slot i of the ring, allocated once.
// Thread-safety: one thread. REQUIRES: the Client outlives it.
class Stream {
 public:
  explicit Stream(odafs::Client& client)
      : chunk_(std::min<size_t>(kMaxChunk, client.limits().max_read)),
        ring_(kDepth * chunk_),
        queue_(client, kDepth) {}

  // Copies the remote file from offset 0 to fd, in order, until a read comes back short
  // (the end of the file as the client sees it, File::pread's contract). Throws Error.
  void to_fd(odafs::File& f, int fd, Progress* progress) {
    uint64_t next = 0;  // the next chunk to submit; chunk k lands in slot k % kDepth
    for (; next < kDepth; ++next) submit_read(f, next);
    for (uint64_t k = 0;; ++k) {
      const size_t n = wait_for(k);
      write_all(fd, slot(k), n);
      if (progress != nullptr) progress->advance(n);
      if (n < chunk_) return;  // the end: the reads past it (in flight) are dropped
      submit_read(f, next++);  // into the slot chunk k just left
    }
  }

 private:
  static constexpr size_t kDepth = 8;
  static constexpr size_t kMaxChunk = 1u << 20;

  char* slot(uint64_t k) { return ring_.data() + (k % kDepth) * chunk_; }

  void submit_read(odafs::File& f, uint64_t k) {
    queue_.submit_read(f, slot(k), chunk_, k * chunk_, k);
  }

  // Waits until chunk k has completed; returns its bytes. Throws Error on its (or an
  // earlier-reaped chunk's) failure.
  size_t wait_for(uint64_t k) {
    while (!done_[k % kDepth] || tag_[k % kDepth] != k) {
      odafs::Completion got[kDepth];
      const size_t n = queue_.wait(std::span(got, kDepth), 1, -1);
      if (n == 0) throw odafs::Error(EIO, "stream: chunk " + std::to_string(k) + " lost");
      for (size_t i = 0; i < n; ++i) {
        if (got[i].error != 0) {
          throw odafs::Error(got[i].error,
                             "chunk at offset " + std::to_string(got[i].user_tag * chunk_));
        }
        const size_t s = got[i].user_tag % kDepth;
        done_[s] = true;
        tag_[s] = got[i].user_tag;
        bytes_[s] = got[i].bytes;
      }
    }
    done_[k % kDepth] = false;
    return bytes_[k % kDepth];
  }

  const size_t chunk_;
  // Before queue_: destroyed after it, as the queue's destructor waits for the READs still
  // in flight (past the end of the file, or after a failure) that land in the ring.
  std::vector<char> ring_;
  odafs::IoQueue queue_;
  // Per slot: the chunk it last held, whether its completion was reaped and not yet
  // taken, and the bytes it came back with.
  uint64_t tag_[kDepth] = {};
  bool done_[kDepth] = {};
  size_t bytes_[kDepth] = {};
};

// Copies the whole remote file to fd.
void copy_out(odafs::Client& client, odafs::File& f, int fd, Progress* progress = nullptr) {
  Stream(client).to_fd(f, fd, progress);
}

// Where `get` writes: LOCAL is replaced whole or not at all. The bytes go to a temporary
// file in LOCAL's directory (so the rename cannot cross file systems), which commit()
// fsyncs and renames over LOCAL; until then, and on every failure, LOCAL is untouched and
// the destructor removes the temporary. A LOCAL that exists and is not a regular file (a
// device or a FIFO, like /dev/stdout) cannot be replaced: the bytes go straight to it.
class LocalOutput {
 public:
  // local "-": standard output, written straight through.
  LocalOutput(const std::string& local, mode_t umask) {
    if (local == "-") {
      target_ = "standard output";
      fd_ = 1;
      owned_ = false;
      return;
    }
    struct stat st;
    mode_t mode = 0644 & ~umask;
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
    if (!owned_) {  // standard output: the process closes it
      fd_ = -1;
      return;
    }
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
    if (fd_ >= 0 && owned_) ::close(fd_);
    fd_ = -1;
    if (!temp_.empty()) ::unlink(temp_.c_str());
    temp_.clear();
  }

  std::string target_;  // the file to replace (LOCAL, or what its symlink names)
  std::string dir_;     // target_'s directory
  std::string temp_;    // the temporary file; empty once renamed, or when writing direct
  std::optional<struct stat> existing_;
  int fd_ = -1;
  bool owned_ = true;  // false: standard output
};

// e's message without the error's text, which what() ends with (": " + strerror): for an
// Error that says e again in other words.
std::string message_of(const odafs::Error& e) {
  std::string what = e.what();
  const std::string text = std::string(": ") + std::strerror(e.errno_value());
  if (what.size() >= text.size() &&
      what.compare(what.size() - text.size(), text.size(), text) == 0) {
    what.resize(what.size() - text.size());
  }
  return what;
}

// What `put` reads: LOCAL, or standard input for "-". Opened and checked in the
// constructor, before the server is touched: a directory (or what cannot be opened) is
// refused there, so a bad LOCAL never costs the remote file anything. Regular files, FIFOs
// and devices are read to their end.
class LocalSource {
 public:
  explicit LocalSource(const std::string& local) : name_(local) {
    if (local == "-") {
      fd_ = 0;
      name_ = "standard input";
    } else {
      fd_ = ::open(local.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) throw odafs::Error(errno, "put: cannot open " + local);
      owned_ = true;
    }
    struct stat st;
    if (fstat(fd_, &st) != 0) throw odafs::Error(errno, "put: fstat " + name_);
    if (S_ISDIR(st.st_mode)) {
      throw odafs::Error(EISDIR, "put: " + name_ + " is a directory (nothing was sent)");
    }
    if (S_ISREG(st.st_mode)) size_ = static_cast<uint64_t>(st.st_size);
  }
  // The bytes a regular file holds; 0 for what is read to its end (a pipe, a device).
  uint64_t size() const { return size_; }
  const std::string& name() const { return name_; }
  ~LocalSource() {
    if (owned_) ::close(fd_);
  }
  LocalSource(const LocalSource&) = delete;
  LocalSource& operator=(const LocalSource&) = delete;

  // Writes everything left to read into f from offset 0, one WRITE of max_write at a time
  // (File::pwrite). Pipelined through an IoQueue (8 in flight) it was slower here, 0.59 s
  // against 0.37 s for 256 MiB, and cost more CPU (0.18 s against 0.13 s): on 2 busy
  // cores there is no idle time for the overlap to fill (docs/PERFORMANCE.md, "Streaming").
  void copy_to(odafs::File& f, Progress* progress = nullptr) {
    std::vector<char> buf(1 << 20);
    uint64_t off = 0;
    for (;;) {
      ssize_t n = ::read(fd_, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw odafs::Error(errno, "put: read " + name_);
      if (n == 0) break;
      f.pwrite(buf.data(), static_cast<size_t>(n), off);
      if (progress != nullptr) progress->advance(static_cast<size_t>(n));
      off += static_cast<uint64_t>(n);
    }
  }

 private:
  std::string name_;
  int fd_ = -1;
  bool owned_ = false;
  uint64_t size_ = 0;
};

// Where `put` writes: the remote file is replaced whole or not at all, as LocalOutput does
// for `get`. The bytes go to a hidden temporary in the target's directory,
// .NAME.odafs-put.XXXXXX, created exclusively (CREATE EXCLUSIVE: never another's file);
// commit() makes them durable on the server (fsync: the unstable writes COMMITted, nothing
// left kept under a write delegation) and RENAMEs the temporary over the target. Until then
// the target is untouched, and on every failure the destructor removes the temporary. A
// process killed outright (SIGKILL) cannot: its temporary stays, hidden, and the target is
// still whole.
//
// Mode: a new file gets 0644 less the umask (what open(O_CREAT, 0644) makes); a file that
// exists keeps its mode, and its owner and group where the server lets this user set them.
// A symlink at the target is followed (its file is replaced, as writing through it did).
// A target that is a directory or another kind of object is refused before anything is
// written.
class RemoteOutput {
 public:
  // url: the target as the user named it, for messages.
  RemoteOutput(odafs::Client& client, const std::string& path, const std::string& url, mode_t umask)
      : client_(client), url_(url) {
    std::optional<odafs::Attr> existing;
    target_ = follow_symlinks(path, &existing);
    mode_t mode = 0644 & ~umask;
    if (existing) {
      if (existing->type == odafs::FileType::kDirectory) {
        throw odafs::Error(EISDIR, "put: " + url_ + " is a directory");
      }
      if (existing->type != odafs::FileType::kRegular) {
        throw odafs::Error(EINVAL,
                           "put: " + url_ + " is not a regular file (--in-place writes into it)");
      }
      mode = existing->mode & 07777;
    }
    const size_t slash = target_.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : target_.substr(0, slash + 1);
    const std::string base = slash == std::string::npos ? target_ : target_.substr(slash + 1);
    // Writable by its owner while it is written, whatever the final mode.
    const mode_t create_mode = mode | S_IWUSR | S_IRUSR;
    for (int attempt = 0;; ++attempt) {
      std::string temp = dir + "." + base + ".odafs-put." + random_suffix();
      try {
        file_ = client_.open(temp, O_WRONLY | O_CREAT | O_EXCL, create_mode);
        temp_ = temp;
        break;
      } catch (const odafs::Error& e) {
        if (e.errno_value() != EEXIST || attempt == 16) {
          // A directory this user may not create in, holding a file it may write: the
          // old way still works, and the message says so.
          const bool refused = e.errno_value() == EACCES || e.errno_value() == EPERM;
          throw odafs::Error(
              e.errno_value(),
              "put " + url_ + ": cannot create a temporary file beside it (" + message_of(e) +
                  "; the remote file is unchanged" +
                  (refused && existing ? "; --in-place writes into it instead" : "") + ")");
        }
      }
    }
    fix_mode_ = mode != create_mode ? std::optional<mode_t>(mode) : std::nullopt;
    if (existing) owner_ = std::make_pair(existing->uid, existing->gid);
  }
  ~RemoteOutput() { discard(); }
  RemoteOutput(const RemoteOutput&) = delete;
  RemoteOutput& operator=(const RemoteOutput&) = delete;

  // Copies all of `in` into the temporary.
  void copy_from(LocalSource& in, Progress* progress) {
    try {
      in.copy_to(file_, progress);
    } catch (const odafs::Error& e) {
      throw unchanged(e);
    }
  }

  // The copy is complete: durable on the server, then in the target's place.
  void commit() {
    try {
      file_.fsync();
      file_.close();
      if (fix_mode_) client_.chmod(temp_, *fix_mode_);
      if (owner_) {
        const odafs::Attr now = client_.lstat(temp_);
        if (now.uid != owner_->first || now.gid != owner_->second) {
          // Only where allowed: a user may not give a file away (the server says EPERM).
          try {
            client_.chown(temp_, owner_->first, owner_->second);
          } catch (const odafs::Error&) {
          }
        }
      }
      client_.rename(temp_, target_);
      temp_.clear();
    } catch (const odafs::Error& e) {
      throw unchanged(e);
    }
  }

 private:
  static constexpr int kMaxSymlinks = 40;

  // e, said of this put (the destructor then removes the temporary).
  odafs::Error unchanged(const odafs::Error& e) const {
    return odafs::Error(e.errno_value(),
                        "put " + url_ + ": " + message_of(e) + " (the remote file is unchanged)");
  }

  // path with symlinks at its end followed (a relative target from the link's directory,
  // an absolute one from the mount's root, as the client's walk takes them); *attr: the
  // object there, if any.
  std::string follow_symlinks(std::string path, std::optional<odafs::Attr>* attr) {
    for (int hops = 0;; ++hops) {
      odafs::Result<odafs::Attr> a = client_.try_lstat(path);
      if (!a.ok()) {
        if (a.errno_value() == ENOENT) return path;
        throw odafs::Error(a.errno_value(), "put: " + url_ + ": " + a.status().message());
      }
      if (a->type != odafs::FileType::kSymlink) {
        *attr = *a;
        return path;
      }
      if (hops == kMaxSymlinks) throw odafs::Error(ELOOP, "put: " + url_);
      const std::string link = client_.readlink(path);
      const size_t slash = path.rfind('/');
      path = !link.empty() && link[0] == '/' ? link
             : slash == std::string::npos    ? link
                                             : path.substr(0, slash + 1) + link;
    }
  }

  static std::string random_suffix() {
    static constexpr char kChars[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char bytes[6];
    for (size_t got = 0; got < sizeof bytes;) {
      ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (errno != EINTR) {
        throw odafs::Error(errno, "getrandom");
      }
    }
    std::string s;
    for (unsigned char b : bytes) s += kChars[b % (sizeof kChars - 1)];
    return s;
  }

  // Removes the temporary, if there still is one. Its removal failing (the server gone) is
  // said, naming it: the user may want it removed.
  void discard() noexcept {
    if (temp_.empty()) return;
    try {
      if (file_.is_open()) file_ = odafs::File();
      client_.unlink(temp_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "odafs: put: could not remove the temporary file %s: %s\n",
                   temp_.c_str(), e.what());
    }
    temp_.clear();
  }

  odafs::Client& client_;
  std::string url_;
  std::string target_;  // the path replaced (the URL's, or what its symlinks name)
  std::string temp_;    // the temporary; empty once renamed
  odafs::File file_;
  std::optional<mode_t> fix_mode_;                // chmod before the rename
  std::optional<std::pair<uid_t, gid_t>> owner_;  // the replaced file's
};

}  // namespace

class Source {
 public:
  explicit Source(const std::string& local) : in(local) {}
  LocalSource in;
};

void SourceDeleter::operator()(Source* s) const { delete s; }

SourcePtr open_source(const std::string& local) { return SourcePtr(new Source(local)); }

void cat(Client& client, const std::string& path, int fd) {
  File f = client.open(path, O_RDONLY);
  copy_out(client, f, fd);
}

void get(Client& client, const std::string& path, const std::string& local, mode_t umask) {
  File f = client.open(path, O_RDONLY);  // a missing file fails here: no LOCAL is made
  LocalOutput out(local, umask);
  Progress progress("get", path, f.attributes_at_open().size);
  copy_out(client, f, out.fd(), &progress);
  out.commit();
}

void put(Client& client, Source& source, const std::string& path, const std::string& url,
         bool in_place, mode_t umask) {
  Progress progress("put", source.in.name(), source.in.size());
  if (in_place) {
    File f = client.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644 & ~umask);
    source.in.copy_to(f, &progress);
    f.close();
    return;
  }
  RemoteOutput out(client, path, url, umask);
  out.copy_from(source.in, &progress);
  out.commit();
}

}  // namespace odafs::cli
