// The server's table of exported file system objects and the file handles that name them.
//
// Every object a client has reached (by MOUNT, LOOKUP, CREATE, ...) gets a node holding an
// open descriptor of it, so later calls never walk paths again: renames do not break
// handles, and nothing a client sends can name an object outside the export root. A
// handle is the node's slot and generation plus a MAC under a key drawn at server start,
// so handles cannot be forged, and handles from an earlier server instance are STALE.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ordma/keyed_mac.h"

namespace odafs::server {

inline constexpr size_t kHandleSize = 40;
using WireHandle = std::array<unsigned char, kHandleSize>;

// One exported object. Immutable after creation except `writable_fd` upgrades, which are
// guarded by the table. Holders keep the descriptor open by holding the shared_ptr.
struct Node {
  ~Node();
  uint64_t id = 0;  // unique for the server's lifetime: the block cache's file key
  uint32_t slot = 0;
  uint32_t generation = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  mode_t type = 0;  // S_IFREG, S_IFDIR, ...
  int fd = -1;      // O_RDWR or O_RDONLY for files, O_DIRECTORY for dirs, O_PATH otherwise
  bool writable = false;
};
using NodeRef = std::shared_ptr<Node>;

// Why a handle did not resolve.
enum class HandleError { kNone, kBad, kStale };

class NodeTable {
 public:
  // Opens the export root. Throws std::system_error if it is not a readable directory.
  // max_nodes bounds open descriptors; unused nodes beyond it are closed (their handles
  // turn STALE and clients look the object up again).
  NodeTable(const std::string& export_root, size_t max_nodes);
  ~NodeTable();

  NodeRef root() const { return root_; }
  uint32_t instance() const { return instance_; }

  WireHandle handle_of(const Node& node) const;

  // REQUIRES: handle points at kHandleSize bytes. Thread-safe.
  NodeRef resolve(const unsigned char* handle, HandleError* error) const;

  // Finds or creates the node of `name` in directory `dir`. Returns nullptr and sets
  // errno on failure. Never follows a symlink in the last component; ".." of the root is
  // the root. REQUIRES: name passed valid_name() or is "." / "..". Thread-safe.
  NodeRef lookup(const Node& dir, const char* name, struct stat* st);

  // Takes ownership of fd, an object just created in the export (CREATE), and returns
  // its node; if the inode already has a node, closes fd and returns that one.
  NodeRef adopt(int fd, const struct stat& st, bool writable);

  // Reopens a regular file read-write (after a chmod, say). Returns false, errno set.
  bool make_writable(Node& node);

  // Drops the node of (dev, ino), if present and no longer linked anywhere: its handles
  // turn STALE. Returns the dropped node's id (0 if none) so caches can forget it.
  uint64_t forget_if_unlinked(dev_t dev, ino_t ino);

  size_t size() const;

  // A single path component: not empty, no '/', no NUL, not "." or "..", <= 255 bytes.
  static bool valid_name(const char* name);

 private:
  struct Slot {
    NodeRef node;
    uint32_t generation = 0;
    bool referenced = false;  // clock bit for eviction
  };
  struct Key {
    dev_t dev;
    ino_t ino;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.ino * 31 + k.dev); }
  };

  NodeRef insert_locked(int fd, const struct stat& st);
  bool evict_some_locked();  // false when no node can be evicted
  ordma::KeyedMac mac_;
  uint32_t instance_;
  size_t max_nodes_;
  NodeRef root_;

  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::unordered_map<Key, uint32_t, KeyHash> by_inode_;
  size_t live_ = 0;
  size_t clock_hand_ = 0;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace odafs::server
