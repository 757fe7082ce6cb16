#include "bench/bdb/prefetch.h"

#include <fcntl.h>

#include <cstring>

namespace odafs::bdb {

Prefetcher::Prefetcher(Client& client, const std::string& path, size_t window, size_t io_size)
    : file_(client.open(path, O_RDONLY)),
      queue_(client, window == 0 ? 1 : window),
      io_size_(io_size),
      slots_(window),
      done_(window) {
  if (window == 0 || io_size == 0) throw Error(EINVAL, "prefetch: window and io_size must be > 0");
  for (Slot& s : slots_) s.buf.reset(new char[io_size]);
}

Prefetcher::~Prefetcher() {
  // Reads still in flight write into slots_, which is destroyed before queue_ (whose
  // destructor would wait for them): wait for them here.
  while (queue_.outstanding() > 0) {
    if (queue_.wait(done_, 1, -1) == 0) break;
  }
}

void Prefetcher::plan(std::vector<uint64_t> offsets) {
  while (in_window_ > 0) {
    wait_head();
    pop();
  }
  plan_ = std::move(offsets);
  next_ = 0;
  fill();
}

void Prefetcher::fill() {
  while (in_window_ < slots_.size() && next_ < plan_.size()) {
    size_t index = (head_ + in_window_) % slots_.size();
    Slot& s = slots_[index];
    s.offset = plan_[next_++];
    s.bytes = 0;
    s.error = 0;
    s.done = false;
    queue_.submit_read(file_, s.buf.get(), io_size_, s.offset, index);
    ++in_window_;
  }
}

void Prefetcher::wait_head() {
  Slot& head = slots_[head_];
  while (!head.done) {
    size_t n = queue_.wait(done_, 1, -1);
    if (n == 0) {  // nothing in flight: cannot happen while head is not done
      head.error = EIO;
      head.done = true;
    }
    for (size_t i = 0; i < n; ++i) {
      Slot& s = slots_[done_[i].user_tag];
      s.bytes = done_[i].bytes;
      s.error = done_[i].error;
      s.done = true;
    }
  }
}

void Prefetcher::pop() {
  head_ = (head_ + 1) % slots_.size();
  --in_window_;
}

bool Prefetcher::serve(void* buf, size_t len, uint64_t offset) {
  // Is the read in the window? Planned reads come in order, so look from the head.
  size_t k = 0;
  for (; k < in_window_; ++k) {
    const Slot& s = slots_[(head_ + k) % slots_.size()];
    if (offset >= s.offset && offset + len <= s.offset + io_size_) break;
  }
  if (k == in_window_) return false;
  for (; k > 0; --k) {  // skipped by the application: drop them
    wait_head();
    pop();
  }
  wait_head();
  Slot& s = slots_[head_];
  bool ok = s.error == 0 && offset + len <= s.offset + s.bytes;
  if (ok) {
    std::memcpy(buf, s.buf.get() + (offset - s.offset), len);
    ++served_;
  } else {
    ++failed_;
  }
  pop();
  fill();
  return ok;
}

}  // namespace odafs::bdb
