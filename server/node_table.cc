#include "server/node_table.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace odafs::server {
namespace {

constexpr unsigned char kHandleVersion = 1;
constexpr size_t kHandleBody = 24;  // version..ino; the MAC covers these bytes
constexpr size_t kHandleMac = kHandleSize - kHandleBody;

void put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (24 - 8 * i));
}
void put64(unsigned char* p, uint64_t v) {
  put32(p, static_cast<uint32_t>(v >> 32));
  put32(p + 4, static_cast<uint32_t>(v));
}
uint32_t get32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
uint64_t get64(const unsigned char* p) { return (uint64_t{get32(p)} << 32) | get32(p + 4); }

// Opens `name` in dirfd as the node wants it: files read-write if allowed, directories
// readable, anything else as a bare O_PATH reference. Never follows a final symlink.
int open_object(int dirfd, const char* name, mode_t type, bool* writable) {
  *writable = false;
  const int common = O_CLOEXEC | O_NOFOLLOW | O_NOCTTY;
  int fd = -1;
  if (S_ISREG(type)) {
    fd = openat(dirfd, name, O_RDWR | common);
    if (fd >= 0) {
      *writable = true;
      return fd;
    }
    if (errno != EACCES && errno != EROFS && errno != ETXTBSY && errno != EPERM) return -1;
    fd = openat(dirfd, name, O_RDONLY | common);
    if (fd >= 0 || (errno != EACCES && errno != EPERM)) return fd;
  } else if (S_ISDIR(type)) {
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | common);
    if (fd >= 0 || (errno != EACCES && errno != EPERM)) return fd;
  }
  return openat(dirfd, name, O_PATH | common);
}

}  // namespace

Node::~Node() {
  if (fd >= 0) close(fd);
}

NodeTable::NodeTable(const std::string& export_root, size_t max_nodes)
    : max_nodes_(std::max<size_t>(max_nodes, 16)) {
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&instance_), sizeof instance_) != 1) {
    throw std::runtime_error("RAND_bytes failed: no entropy for the handle key");
  }
  int fd = open(export_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open export " + export_root);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    throw std::system_error(err, std::generic_category(), "stat export " + export_root);
  }
  std::lock_guard lock(mu_);
  root_ = insert_locked(fd, st);
  root_->writable = true;
}

NodeTable::~NodeTable() = default;

WireHandle NodeTable::handle_of(const Node& node) const {
  WireHandle h{};
  h[0] = kHandleVersion;
  put32(&h[4], instance_);
  put32(&h[8], node.slot);
  put32(&h[12], node.generation);
  put64(&h[16], static_cast<uint64_t>(node.ino));
  mac_.compute(h.data(), kHandleBody, &h[kHandleBody], kHandleMac);
  return h;
}

NodeRef NodeTable::resolve(const unsigned char* h, HandleError* error) const {
  *error = HandleError::kBad;
  if (h[0] != kHandleVersion || h[1] != 0 || h[2] != 0 || h[3] != 0) return nullptr;
  if (get32(&h[4]) != instance_) {
    *error = HandleError::kStale;  // minted by an earlier server instance
    return nullptr;
  }
  if (!mac_.verify(h, kHandleBody, &h[kHandleBody], kHandleMac)) return nullptr;
  uint32_t slot = get32(&h[8]);
  uint32_t generation = get32(&h[12]);
  std::lock_guard lock(mu_);
  if (slot >= slots_.size()) return nullptr;
  const Slot& s = slots_[slot];
  if (s.generation != generation || !s.node || s.node->ino != static_cast<ino_t>(get64(&h[16]))) {
    *error = HandleError::kStale;
    return nullptr;
  }
  const_cast<Slot&>(s).referenced = true;
  *error = HandleError::kNone;
  return s.node;
}

NodeRef NodeTable::insert_locked(int fd, const struct stat& st) {
  // Close unused nodes down to the bound: after a burst of in-use nodes pushed the table
  // past it, one eviction per insert would keep it there for good.
  while (live_ >= max_nodes_ && evict_some_locked()) {
  }
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  auto node = std::make_shared<Node>();
  node->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  node->slot = slot;
  node->generation = slots_[slot].generation;
  node->dev = st.st_dev;
  node->ino = st.st_ino;
  node->type = st.st_mode & S_IFMT;
  node->fd = fd;
  slots_[slot].node = node;
  slots_[slot].referenced = true;
  by_inode_[Key{st.st_dev, st.st_ino}] = slot;
  ++live_;
  return node;
}

bool NodeTable::evict_some_locked() {
  // Clock sweep: skip the root, nodes in use by a call (shared elsewhere) and nodes used
  // since the last sweep. If nothing qualifies the table grows past max_nodes for now.
  size_t budget = 2 * slots_.size();
  while (budget-- > 0 && !slots_.empty()) {
    clock_hand_ = (clock_hand_ + 1) % slots_.size();
    Slot& s = slots_[clock_hand_];
    if (!s.node || s.node == root_ || s.node.use_count() > 1) continue;
    if (s.referenced) {
      s.referenced = false;
      continue;
    }
    by_inode_.erase(Key{s.node->dev, s.node->ino});
    s.node.reset();
    ++s.generation;
    free_slots_.push_back(static_cast<uint32_t>(clock_hand_));
    --live_;
    return true;
  }
  return false;
}

NodeRef NodeTable::lookup(const Node& dir, const char* name, struct stat* st) {
  bool dotdot = std::strcmp(name, "..") == 0;
  if (std::strcmp(name, ".") == 0 || (dotdot && dir.dev == root_->dev && dir.ino == root_->ino)) {
    if (fstat(dir.fd, st) != 0) return nullptr;
    std::lock_guard lock(mu_);
    auto it = by_inode_.find(Key{dir.dev, dir.ino});
    if (it == by_inode_.end()) {
      errno = ESTALE;
      return nullptr;
    }
    return slots_[it->second].node;
  }
  if (fstatat(dir.fd, name, st, AT_SYMLINK_NOFOLLOW) != 0) return nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = by_inode_.find(Key{st->st_dev, st->st_ino});
    if (it != by_inode_.end()) {
      slots_[it->second].referenced = true;
      return slots_[it->second].node;
    }
  }
  bool writable = false;
  int fd = open_object(dir.fd, name, st->st_mode & S_IFMT, &writable);
  if (fd < 0) return nullptr;
  struct stat opened;
  if (fstat(fd, &opened) != 0 || opened.st_ino != st->st_ino || opened.st_dev != st->st_dev) {
    close(fd);  // replaced between stat and open: let the client retry
    errno = ESTALE;
    return nullptr;
  }
  *st = opened;
  return adopt(fd, opened, writable);
}

NodeRef NodeTable::adopt(int fd, const struct stat& st, bool writable) {
  std::lock_guard lock(mu_);
  auto it = by_inode_.find(Key{st.st_dev, st.st_ino});
  if (it != by_inode_.end()) {  // known already (or another thread won a race)
    close(fd);
    slots_[it->second].referenced = true;
    return slots_[it->second].node;
  }
  NodeRef node = insert_locked(fd, st);
  node->writable = writable;
  return node;
}

bool NodeTable::make_writable(Node& node) {
  std::lock_guard lock(mu_);
  if (node.writable) return true;
  if (!S_ISREG(node.type)) {
    errno = EISDIR;
    return false;
  }
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", node.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_ino != node.ino) {
    close(fd);
    errno = ESTALE;
    return false;
  }
  // dup3 swaps the descriptor under the same number, so concurrent users never see a
  // closed fd.
  if (dup3(fd, node.fd, O_CLOEXEC) < 0) {
    int err = errno;
    close(fd);
    errno = err;
    return false;
  }
  close(fd);
  node.writable = true;
  return true;
}

uint64_t NodeTable::forget_if_unlinked(dev_t dev, ino_t ino) {
  std::lock_guard lock(mu_);
  auto it = by_inode_.find(Key{dev, ino});
  if (it == by_inode_.end()) return 0;
  Slot& s = slots_[it->second];
  struct stat st;
  if (fstat(s.node->fd, &st) != 0 || st.st_nlink > 0) return 0;
  uint64_t id = s.node->id;
  free_slots_.push_back(it->second);
  by_inode_.erase(it);
  s.node.reset();
  ++s.generation;
  --live_;
  return id;
}

size_t NodeTable::size() const {
  std::lock_guard lock(mu_);
  return live_;
}

bool NodeTable::valid_name(const char* name) {
  size_t len = strnlen(name, 256);
  if (len == 0 || len > 255) return false;
  if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) return false;
  return std::strchr(name, '/') == nullptr;
}

}  // namespace odafs::server
