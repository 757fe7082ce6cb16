// odafs rm: pipelined removals through IoQueue (client/cli/remove.h).
#include "client/cli/remove.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/io_queue.h"

namespace odafs::cli {
namespace {

// Removals in flight at once: enough to fill the server's receive per wake-up
// (docs/PERFORMANCE.md, "Metadata calls in flight"), few enough to stay polite.
constexpr size_t kInFlight = 32;

void say(const std::string& shown, const char* why) {
  std::fprintf(stderr, "odafs: rm %s: %s\n", shown.c_str(), why);
}

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

class Remover::Impl {
 public:
  explicit Impl(Client& client) : client_(client), queue_(client, kInFlight) {
    done_.resize(kInFlight);
  }

  // Queues the unlink of path (shown as `shown`); reaps first when the queue is full.
  void unlink(const std::string& path, const std::string& shown) {
    if (queue_.outstanding() == queue_.depth()) reap(1);
    shown_.push_back(shown);
    queue_.submit_unlink(path, shown_.size() - 1);
  }

  // Waits for every queued unlink; reports the failed ones.
  void finish() {
    while (queue_.outstanding() > 0) reap(1);
    shown_.clear();
  }

  // A directory and what is under it: the names in it queued, its subdirectories first,
  // then (the queue drained) the directory.
  void tree(const std::string& path, const std::string& shown) {
    std::vector<DirEntry> entries;
    try {
      entries = client_.readdir(path);
    } catch (const Error& e) {
      return failed(shown, e.errno_value());
    }
    for (const DirEntry& e : entries) {
      if (e.type == FileType::kDirectory) tree(join(path, e.name), join(shown, e.name));
    }
    for (const DirEntry& e : entries) {
      if (e.type != FileType::kDirectory) unlink(join(path, e.name), join(shown, e.name));
    }
    finish();
    try {
      client_.rmdir(path);
    } catch (const Error& e) {
      failed(shown, e.errno_value());
    }
  }

  bool ok() const { return ok_; }
  void failed(const std::string& shown, int err) {
    say(shown, std::strerror(err));
    ok_ = false;
  }
  Client& client() { return client_; }

 private:
  void reap(size_t min) {
    const size_t n = queue_.wait(done_, min, -1);
    for (size_t i = 0; i < n; ++i) {
      if (done_[i].error != 0) failed(shown_[done_[i].user_tag], done_[i].error);
    }
  }

  Client& client_;
  IoQueue queue_;
  std::vector<Completion> done_;
  std::vector<std::string> shown_;  // by tag, for messages (cleared once all are reaped)
  bool ok_ = true;
};

Remover::Remover(Client& client) : impl_(std::make_unique<Impl>(client)) {}
Remover::~Remover() = default;

void Remover::remove(const std::string& path, const std::string& shown, bool recursive) {
  if (recursive) {
    Result<Attr> a = impl_->client().try_lstat(path);
    if (!a.ok()) return impl_->failed(shown, a.errno_value());
    if (a->type == FileType::kDirectory) return impl_->tree(path, shown);
  }
  impl_->unlink(path, shown);
}

bool Remover::finish() {
  impl_->finish();
  return impl_->ok();
}

}  // namespace odafs::cli
