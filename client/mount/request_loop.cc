#include "client/mount/request_loop.h"

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "base/log.h"
#include "rpc/client_channel.h"

namespace odafs::mount {
namespace {

thread_local bool this_thread_reads = false;

// A thread's request buffer (libfuse allocates it at the first read): freed also when the
// thread is cancelled in read(2), whose unwinding runs destructors.
struct RequestBuffer {
  fuse_buf buf{};
  RequestBuffer() = default;
  RequestBuffer(const RequestBuffer&) = delete;
  RequestBuffer& operator=(const RequestBuffer&) = delete;
  ~RequestBuffer() { std::free(buf.mem); }
};

}  // namespace

bool connection_ended(int err) { return err == ENODEV || err == ECONNABORTED; }

RequestLoop::RequestLoop(fuse_session* se, unsigned max_threads)
    : se_(se), max_threads_(max_threads == 0 ? 1 : max_threads) {}

int RequestLoop::run() {
  std::unique_lock lock(mu_);
  {
    // Helpers inherit this mask: the signals go to this thread, whose waits they cut
    // short, and never interrupt a helper's request.
    sigset_t block, old;
    sigemptyset(&block);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&block, sig);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    start_helper_locked();
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  // libfuse's handlers mark the session exited: look every 100 ms (a signal also cuts the
  // wait short), and at once when a reader saw the unmount.
  while (!stopping_) {
    stopped_.wait_for(lock, std::chrono::milliseconds(100));
    if (fuse_session_exited(se_)) stopping_ = true;
  }
  turn_.notify_all();
  if (in_read_) pthread_cancel(reader_);
  std::vector<std::thread> helpers = std::move(helpers_);
  lock.unlock();
  for (std::thread& t : helpers) t.join();
  return error_;
}

void RequestLoop::start_helper_locked() {
  helpers_.emplace_back([this] { serve(); });
}

void RequestLoop::hand_over(void* self) {
  if (!this_thread_reads) return;
  auto* loop = static_cast<RequestLoop*>(self);
  std::lock_guard lock(loop->mu_);
  loop->release_reading_locked();
}

void RequestLoop::release_reading_locked() {
  this_thread_reads = false;
  reading_taken_ = false;
  if (stopping_) return;
  if (idle_ == 0 && helpers_.size() < max_threads_) start_helper_locked();
  turn_.notify_one();
}

void RequestLoop::serve() {
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
  rpc::set_before_blocking_hook(&RequestLoop::hand_over, this);
  RequestBuffer request;
  fuse_buf& buf = request.buf;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    ++idle_;
    turn_.wait(lock, [&] { return stopping_ || !reading_taken_; });
    --idle_;
    if (stopping_) break;
    reading_taken_ = true;
    reader_ = pthread_self();
    this_thread_reads = true;
    // Read and serve for as long as this thread keeps the reading (it gives it up only
    // to wait for the server, in hand_over).
    while (this_thread_reads && !stopping_) {
      in_read_ = true;
      lock.unlock();
      pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr);
      int res = fuse_session_receive_buf(se_, &buf);
      pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
      lock.lock();
      in_read_ = false;
      if (res == -EINTR) continue;
      if (res <= 0 || fuse_session_exited(se_)) {
        if (res < 0 && !connection_ended(-res)) {
          error_ = -res;
          ODAFS_LOG_ERROR("odafs-mount: reading /dev/fuse: errno %d", -res);
        }
        stopping_ = true;
        turn_.notify_all();
        stopped_.notify_all();
        break;
      }
      lock.unlock();
      fuse_session_process_buf(se_, &buf);
      lock.lock();
    }
    if (this_thread_reads) {
      this_thread_reads = false;
      reading_taken_ = false;
    }
  }
  lock.unlock();
  rpc::set_before_blocking_hook(nullptr, nullptr);
}

}  // namespace odafs::mount
