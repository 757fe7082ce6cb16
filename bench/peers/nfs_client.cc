#include "bench/peers/nfs_client.h"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

// libnfs's headers need the fixed-width types and time_t declared first.
#include <nfsc/libnfs.h>

namespace odafs::peers {
namespace {

// libnfs resolves paths against its current directory, the export's root at mount; an
// absolute path says so. Reuses *scratch, so a warm call allocates nothing.
const char* rooted(const std::string& path, std::string* scratch) {
  if (!path.empty() && path[0] == '/') return path.c_str();
  scratch->assign(1, '/');
  *scratch += path;
  return scratch->c_str();
}

thread_local std::string path_scratch;

}  // namespace

NfsMount::NfsMount(const std::string& url) {
  nfs_ = nfs_init_context();
  if (nfs_ == nullptr) throw Error(ENOMEM, "libnfs: nfs_init_context failed");
  nfs_url* u = nfs_parse_url_dir(nfs_, url.c_str());
  if (u == nullptr) {
    std::string why = nfs_get_error(nfs_);
    nfs_destroy_context(nfs_);
    throw Error(EINVAL, "libnfs: bad URL " + url + ": " + why);
  }
  int rc = nfs_mount(nfs_, u->server, u->path);
  nfs_destroy_url(u);
  if (rc < 0) {
    std::string why = nfs_get_error(nfs_);
    nfs_destroy_context(nfs_);
    throw Error(-rc, "libnfs: mount " + url + ": " + why);
  }
}

NfsMount::~NfsMount() {
  nfs_destroy_context(nfs_);  // closes the socket; v3's UMNT is a courtesy we skip
}

int NfsMount::check(int rc, const char* what) const {
  if (rc < 0) throw Error(-rc, std::string("libnfs: ") + what + ": " + nfs_get_error(nfs_));
  return rc;
}

nfsfh* NfsMount::open(const std::string& path, int flags, int mode) {
  nfsfh* fh = nullptr;
  const char* p = rooted(path, &path_scratch);
  check((flags & O_CREAT) ? nfs_open2(nfs_, p, flags, mode, &fh) : nfs_open(nfs_, p, flags, &fh),
        "open");
  return fh;
}

void NfsMount::close(nfsfh* fh) { check(nfs_close(nfs_, fh), "close"); }

void NfsMount::close_quietly(nfsfh* fh) noexcept { nfs_close(nfs_, fh); }

void NfsMount::read_exactly(nfsfh* fh, void* buf, size_t len, uint64_t offset) {
  if (static_cast<size_t>(check(nfs_pread(nfs_, fh, offset, len, buf), "pread")) != len) {
    throw Error(EIO, "libnfs: short read");
  }
}

NfsReadQueue::NfsReadQueue(NfsMount& mount, nfsfh* fh, size_t depth)
    : mount_(mount), fh_(fh), slots_(depth) {
  free_.reserve(depth);
  done_.reserve(depth);
  for (Slot& s : slots_) {
    s.queue = this;
    free_.push_back(&s);
  }
}

void NfsReadQueue::submit(void* buf, size_t len, uint64_t offset, size_t tag) {
  if (free_.empty()) throw Error(EBUSY, "NfsReadQueue: full");
  Slot* s = free_.back();
  free_.pop_back();
  s->buf = buf;
  s->len = len;
  s->tag = tag;
  mount_.check(nfs_pread_async(mount_.context(), fh_, offset, len, &NfsReadQueue::on_read, s),
               "pread_async");
  ++outstanding_;
}

// libnfs 4 hands the reply's bytes in its own buffer: an application copies them out, as
// this does (libodafs's pre-posted and one-sided reads land in the caller's buffer).
void NfsReadQueue::on_read(int status, nfs_context*, void* data, void* slot) {
  Slot* s = static_cast<Slot*>(slot);
  NfsReadQueue* q = s->queue;
  if (status < 0) {
    q->error_ = -status;
  } else if (static_cast<size_t>(status) != s->len) {
    q->error_ = EIO;
  } else {
    std::memcpy(s->buf, data, s->len);
  }
  q->done_.push_back(s->tag);
  q->free_.push_back(s);
  --q->outstanding_;
}

size_t NfsReadQueue::wait(std::span<size_t> out) {
  nfs_context* nfs = mount_.context();
  while (done_.empty()) {
    if (outstanding_ == 0) return 0;
    pollfd p{nfs_get_fd(nfs), static_cast<short>(nfs_which_events(nfs)), 0};
    int n = ::poll(&p, 1, 1000);
    if (n < 0 && errno != EINTR) throw Error(errno, "poll");
    mount_.check(nfs_service(nfs, n > 0 ? p.revents : 0), "service");
  }
  if (error_ != 0) throw Error(error_, "libnfs: async read failed or came back short");
  size_t k = std::min(out.size(), done_.size());
  std::copy(done_.end() - static_cast<ptrdiff_t>(k), done_.end(), out.begin());
  done_.resize(done_.size() - k);
  return k;
}

NfsBackend::~NfsBackend() {
  if (fh_ != nullptr) mount_.close_quietly(fh_);
}

void NfsBackend::mkdir(const std::string& path) {
  mount_.check(nfs_mkdir(mount_.context(), rooted(path, &path_scratch)), "mkdir");
}

void NfsBackend::unlink(const std::string& path) {
  mount_.check(nfs_unlink(mount_.context(), rooted(path, &path_scratch)), "unlink");
}

void NfsBackend::open(const std::string& path, int flags, mode_t mode) {
  if (fh_ != nullptr) mount_.close_quietly(fh_);  // left open by a throw
  fh_ = nullptr;
  fh_ = mount_.open(path, flags, static_cast<int>(mode));
}

size_t NfsBackend::pread(void* buf, size_t len, uint64_t offset) {
  return static_cast<size_t>(
      mount_.check(nfs_pread(mount_.context(), fh_, offset, len, buf), "pread"));
}

void NfsBackend::pwrite(const void* buf, size_t len, uint64_t offset) {
  const char* p = static_cast<const char*>(buf);
  for (size_t done = 0; done < len;) {
    int n = mount_.check(nfs_pwrite(mount_.context(), fh_, offset + done, len - done, p + done),
                         "pwrite");
    if (n == 0) throw Error(EIO, "libnfs: pwrite wrote nothing");
    done += static_cast<size_t>(n);
  }
}

void NfsBackend::close() {
  nfsfh* fh = fh_;
  fh_ = nullptr;
  mount_.check(nfs_close(mount_.context(), fh), "close");
}

}  // namespace odafs::peers
