// The server's table of exported file system objects and the file handles that name them.
//
// Every object a client has reached (by MOUNT, LOOKUP, CREATE, ...) gets a node, deduplicated
// by its ObjectId (server/store.h: (device, inode) on a local export, the inode number on
// CephFS). The objects themselves are the store's: the table holds them (an Object, a
// descriptor on POSIX) and asks the store to find, open and check them. A handle is the node's slot
// and generation plus a MAC under a key drawn at server start, so handles cannot be forged, and
// handles from an earlier server instance are STALE. Nodes are bounded by max_nodes: a clock sweep
// drops unused nodes, whose handles then turn STALE (clients look the object up again).
//
// Why descriptors are a cache: a node used to own an open descriptor for as long as it
// lived, so every handle ever issued held one, and ordinary creates ran the server out of
// RLIMIT_NOFILE for good (EIO on every call, `ls /` included). Now a node may or may not
// hold a descriptor; the table keeps at most max_open_files of them (the export root's,
// which never closes, included) and closes the least recently used beyond that.
//
// Reopening: a node whose descriptor was closed is reopened on demand from how the table
// last reached it: its parent node and its name there (never "." or ".."), recorded by
// LOOKUP, CREATE and RENAME, which all pass through the table. A directory's children name
// their parent node, so renaming a directory keeps every path below it right. The walk
// starts at the nearest ancestor still open (the root always is) and opens one component
// at a time through the store (never following a symlink, never leaving the export).
// Every step must reach the very object its node names: the same ObjectId and the same
// durable key (Store::durable_key: on POSIX the kernel file handle, which needs no
// privilege and, unlike the inode number, is not reused when a file is deleted and another
// created). Otherwise (removed or replaced behind the table's back) the handle is STALE,
// never another file. open_by_handle_at is not used: it needs CAP_DAC_READ_SEARCH.
//
// Limits of that: an object whose recorded name was removed while it keeps another hard
// link (made behind the server's back: the protocol has no LINK) cannot be reopened until
// a LOOKUP reaches it by its other name; reopening needs search permission on the
// directories walked, which holding a descriptor did not; on a file system without
// kernel file handles a reused inode number is not told apart from the original.
//
// Using a descriptor: open() returns an OpenNode, a pin that keeps the node's descriptor
// open (and its number unchanged) for as long as it lives; eviction only closes
// descriptors nobody has pinned, so the bound can be exceeded by what calls in progress
// have pinned at once. Unlinked-but-open objects keep today's rule: forget_if_unlinked
// drops the node (its handles turn STALE), and a pinned descriptor closes when its last
// pin goes.
//
// Failures: calls that can fail return a Status or a Result (base/status.h) whose errno
// says why; ESTALE means the handle's object is gone, replaced or forgotten, kBadHandle
// that the handle is not one of ours. errno itself is never part of a contract here.
//
// Thread-safety: every member function is thread-safe. One mutex guards the slots, the
// ObjectId index, each node's path and object, and the LRU list; it is held for
// table bookkeeping and a few cheap system calls (closing an evicted descriptor,
// make_writable's reopen), never across a path walk. open() of a node whose descriptor is
// cached (the READ/WRITE hot path) takes the mutex once, allocates nothing and moves the
// node to the front of the LRU list.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/counter_sink.h"
#include "base/keyed_mac.h"
#include "base/status.h"
#include "server/file_node_state.h"
#include "server/lease_node_state.h"
#include "server/store.h"

namespace odafs::server {

inline constexpr size_t kHandleSize = 40;
using WireHandle = std::array<unsigned char, kHandleSize>;

// The default bound on the descriptors the table keeps open (see NodeTable()).
inline constexpr size_t kDefaultMaxOpenFiles = 1024;
// odafsd's default over a shared store (CephFS), whose open objects take no descriptor: a
// LeaseKeeper holds three quarters of them, and a working set past that makes every new
// lease cost an old one's recall (PostMark's 1,000 files at 1,024: about half the
// read-only transactions/s of 8,192, each file's kept commit recalled).
inline constexpr size_t kDefaultSharedOpenFiles = 8192;

struct Node;
using NodeRef = std::shared_ptr<Node>;

// A node's object as the store opened it (Store::open_at: files for reading and writing
// where allowed, directories for reading, anything else held). Released when the last
// holder lets go.
struct OpenFile {
  OpenFile(Object object, Store::Access access, std::atomic<size_t>* open_count);
  ~OpenFile();
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;

  const Object object;
  std::atomic<bool> writable;  // writes bytes; only make_writable changes it (in place)
  // Reads bytes (not merely held, as LOOKUP leaves an object its caller could not open;
  // make_readable changes it, in place).
  std::atomic<bool> readable;
  std::atomic<size_t>* const open_count;
};

// One exported object. The public fields never change after creation; the rest belongs to
// the table and is guarded by its mutex.
struct Node {
  uint64_t id = 0;  // unique for the server's lifetime: the block cache's file key
  uint32_t slot = 0;
  uint32_t generation = 0;
  // A digest of the store's durable key (odafs_fattr.file_generation: with the inode
  // number, this object and no other, across server instances too); 0 without one.
  uint64_t file_generation = 0;
  ObjectId key;     // the store's identity of the object (Store::id_of)
  mode_t type = 0;  // S_IFREG, S_IFDIR, ...
  // Per-file state of the components that serve the file, each declared and used by its
  // own (the table never touches them): the FileService's and the LeaseKeeper's.
  mutable FileNodeState data;
  mutable LeaseNodeState lease;

 private:
  friend class NodeTable;
  std::string durable;             // Store::durable_key of the object; immutable; may be empty
  NodeRef parent;                  // where the table last reached it; null for the root
  std::string name;                // its name in parent
  std::shared_ptr<OpenFile> file;  // the cached descriptor, if any
  Node* lru_prev = nullptr;        // in the LRU list iff in_lru
  Node* lru_next = nullptr;
  bool in_lru = false;
};

// A node with its object pinned open: eviction cannot release object() while this lives.
// Move-only; empty (false) only when default-constructed or reset(). REQUIRES: dies before
// its NodeTable.
class OpenNode {
 public:
  OpenNode() = default;
  OpenNode(OpenNode&&) noexcept = default;
  OpenNode& operator=(OpenNode&&) noexcept = default;
  OpenNode(const OpenNode&) = delete;
  OpenNode& operator=(const OpenNode&) = delete;

  explicit operator bool() const { return file_ != nullptr; }
  Node* operator->() const { return node_.get(); }
  Node& operator*() const { return *node_; }
  const NodeRef& node() const { return node_; }
  // The node's object, for the store's calls.
  const Object& object() const { return file_->object; }
  // Whether object() writes / reads bytes (make_writable and make_readable may turn it
  // so, in place).
  bool writable() const { return file_->writable.load(std::memory_order_relaxed); }
  bool readable() const { return file_->readable.load(std::memory_order_relaxed); }
  void reset() {
    file_.reset();
    node_.reset();
  }
  // Another pin on the same node and object. REQUIRES: *this is not empty.
  OpenNode another_pin() const { return OpenNode(node_, file_); }

 private:
  friend class NodeTable;
  OpenNode(NodeRef node, std::shared_ptr<OpenFile> file)
      : node_(std::move(node)), file_(std::move(file)) {}
  NodeRef node_;
  std::shared_ptr<OpenFile> file_;
};

// The errno of a handle that is not one of ours (wrong version, a MAC that does not
// verify, a slot that never existed): the protocol's BADHANDLE, which has no errno of its
// own. EBADF, a descriptor number that names nothing, is never what reopening an object
// fails with (the walk starts from an object it holds pinned), so it cannot be mistaken
// for a reopen failure.
inline constexpr int kBadHandle = EBADF;

class NodeTable {
 public:
  // Holds the store's root. Throws std::system_error if it cannot. max_nodes bounds the
  // nodes (and so the valid handles). The table keeps at most min(max_open_files,
  // RLIMIT_NOFILE soft limit / 2) objects open (at least 2), the limit measured here: the
  // other half stays free for connections, the engine's sockets and the transient
  // descriptors calls open (READDIR, a reopen walk). REQUIRES: store outlives the table.
  //
  // shared_key (null: none) makes handles portable: the object's ObjectId and a MAC under
  // this key, which every server of the same store given the same key accepts, across
  // restarts too (a node not in the table is found by identity, Store::find). Without it
  // a handle is a slot of this table under a key drawn at start. Throws
  // std::invalid_argument for a shared key over a store that cannot find by identity.
  using SharedKey = std::array<unsigned char, KeyedMac::kKeyBytes>;
  NodeTable(Store& store, size_t max_nodes, size_t max_open_files = kDefaultMaxOpenFiles,
            const SharedKey* shared_key = nullptr);
  ~NodeTable();
  NodeTable(const NodeTable&) = delete;
  NodeTable& operator=(const NodeTable&) = delete;

  // The root's descriptor is always open.
  NodeRef root() const { return root_; }
  uint32_t instance() const { return instance_; }
  // Whether handles are portable (see the constructor).
  bool portable() const { return portable_; }

  WireHandle handle_of(const Node& node) const;

  // The node a handle names (never null), without opening anything. Fails with
  // kBadHandle or ESTALE. REQUIRES: handle points at kHandleSize bytes.
  Result<NodeRef> resolve(const unsigned char* handle) const;

  // Resolves a handle and pins its node's descriptor open, reopening it if it was
  // evicted. Fails with kBadHandle, ESTALE (also when the object is gone or was replaced)
  // or what reopening it failed with (EACCES, say).
  Result<OpenNode> open(const unsigned char* handle);
  // Pins node's descriptor open, reopening it if needed. Fails with ESTALE when the node
  // was dropped or its object is gone or replaced, or with what reopening it failed with.
  Result<OpenNode> open(const NodeRef& node);

  // Finds or creates the node of `name` in directory `dir` (never null), fills *st with
  // its attributes and records that name as the way to reach it. Fails with what the
  // store said (ENOENT, EACCES, ...), or ESTALE. Never follows a symlink in the
  // last component; ".." of the root is the root; ".." elsewhere must lead to a node the
  // table has (ESTALE otherwise). REQUIRES: name passed valid_name() or is "." / "..".
  Result<NodeRef> lookup(const OpenNode& dir, const char* name, struct stat* st);

  // Takes object, which `name` in `dir` just opened or created (CREATE), with attributes
  // st, and returns its node (never null: this cannot fail); if the object already has a
  // node, returns that one (keeping object as its open one if it had none, releasing it
  // otherwise).
  NodeRef adopt(const OpenNode& dir, const char* name, Object object, const struct stat& st,
                Store::Access access);

  // Records that object `key` is now `name` in `dir` (after a RENAME moved it there).
  // Unknown objects are ignored.
  void renamed(const OpenNode& dir, const char* name, const ObjectId& key);

  // Reopens a regular file read-write (after a chmod, say), in place
  // (Store::reopen_in_place). Ok at once if it already is. Fails with EISDIR for anything
  // but a regular file, ESTALE if the object is not the node's any more, or what the store
  // said.
  Status make_writable(const OpenNode& node);
  // The same for reading: a regular file merely held (opened for a caller who could not
  // read it) is reopened by the server, in place. Ok at once if it reads. The caller
  // checks the permission of whoever the bytes are for. REQUIRES: called as the server.
  Status make_readable(const OpenNode& node);
  // Closes node's object unless a call has it pinned (the next open() opens it again, as
  // a reopen after eviction does). Returns false only when it stays open for a pin. Used
  // to close a file the server opened to write once the writes stop (LeaseKeeper).
  bool close_unpinned(Node& node);

  // The store's identity of an object of attributes st (Store::id_of).
  ObjectId key_of(const struct stat& st) const { return store_.id_of(st); }
  // The id of the node of object `key`, 0 if the table has none.
  uint64_t node_id_of(const ObjectId& key) const;

  // Drops the node of object `key`, if present and no longer linked anywhere: its handles
  // turn STALE. The link count comes from the node's object if it is open, otherwise
  // links_left is believed (the caller's count from just before it unlinked, minus one).
  // Returns the dropped node's id (0 if none) so caches can forget it.
  uint64_t forget_if_unlinked(const ObjectId& key, nlink_t links_left = 0);

  // Drops every node whose open object has no link left (deleted on the server's disk
  // directly, or by another server of a shared store, where no REMOVE told this table), as
  // forget_if_unlinked would: its handles turn STALE and its descriptor closes as soon as
  // no call uses it, so the object's space is freed. Stats each open object outside the
  // table's lock. Returns the dropped nodes (id, size and type), for caches to forget.
  struct Unlinked {
    uint64_t id;
    uint64_t size;
    mode_t type;  // S_IFREG, S_IFDIR, ...
  };
  std::vector<Unlinked> drop_unlinked();

  size_t size() const;
  // Objects of nodes open right now, pinned or cached, the root's included.
  size_t open_files() const { return open_files_.load(std::memory_order_relaxed); }
  // The effective bound on cached objects (see the constructor).
  size_t max_open_files() const { return max_open_files_; }
  // Times a node's object was reopened after eviction.
  uint64_t reopens() const { return reopens_.load(std::memory_order_relaxed); }
  // Its counters under their own names (base/counter_sink.h). Thread-safe.
  void report_counters(const CounterSink& add) const;

  // A single path component: not empty, no '/', no NUL, not "." or "..", <= 255 bytes.
  static bool valid_name(const char* name);

 private:
  struct Slot {
    NodeRef node;
    uint32_t generation = 0;
    bool referenced = false;  // clock bit for eviction
  };
  // What a handle says, once its MAC verified.
  struct ParsedHandle {
    uint32_t slot;
    uint32_t generation;
    uint64_t ino;
  };
  // Fails with kBadHandle, or ESTALE for a handle of an earlier server instance.
  // REQUIRES: !portable_.
  Result<ParsedHandle> parse_handle(const unsigned char* handle) const;
  // A portable handle's ObjectId; fails with kBadHandle. REQUIRES: portable_.
  Result<ObjectId> parse_portable(const unsigned char* handle) const;
  // The node of the object a portable handle names: the table's, or one made for the
  // object found by identity (Store::find; ESTALE when it is gone).
  Result<NodeRef> node_of_portable(const ObjectId& key);
  // The live slot a parsed handle names (marked referenced, never null). Fails with
  // kBadHandle (no such slot) or ESTALE.
  Result<Slot*> slot_locked(const ParsedHandle& h) const;
  NodeRef insert_locked(const struct stat& st, std::string durable);  // no object open yet
  bool evict_some_locked();   // false when no node can be evicted
  void drop_locked(Slot& s);  // the slot's node leaves the table
  bool in_table_locked(const Node& node) const;
  // Moves node to the front of the LRU list and returns its descriptor (a new pin).
  std::shared_ptr<OpenFile> touch_locked(Node& node);
  // Caches file as node's descriptor. Callers pin what they need, then evict_files_locked.
  void install_locked(Node& node, std::shared_ptr<OpenFile> file);
  void lru_unlink_locked(Node& node);
  void lru_push_front_locked(Node& node);
  void evict_files_locked();  // closes unpinned descriptors beyond the bound
  // Records (parent, name) as node's path unless that would make the parent chain a loop.
  void set_path_locked(Node& node, const NodeRef& parent, const char* name);
  // lookup and adopt: object is name's in dir (name null for "..": never a new node nor
  // a new path). A node of the same ObjectId whose object is another (the durable keys
  // differ) is dropped first. Fails (ESTALE) only for "..", when it has no node.
  Result<NodeRef> admit(const OpenNode& dir, const char* name, Object object, const struct stat& st,
                        Store::Access access);
  // Opens node's object by walking from its nearest open ancestor. Fails with ESTALE when
  // the node or an ancestor was dropped or an object on the way is gone or replaced, or
  // with what the store said.
  Result<OpenNode> reopen(const NodeRef& node);
  // reopen of a portable table: the store finds the object by identity.
  Result<OpenNode> reopen_by_id(const NodeRef& node);
  // make_writable and make_readable: Store::reopen_in_place of node's regular file.
  Status reopen_in_place(const OpenNode& node, bool write);

  Store& store_;
  const bool portable_;
  KeyedMac mac_;
  uint32_t instance_;
  size_t max_nodes_;
  size_t max_open_files_;
  std::atomic<size_t> open_files_{0};  // before every member holding an OpenFile
  std::atomic<uint64_t> reopens_{0};
  NodeRef root_;

  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::unordered_map<ObjectId, uint32_t, ObjectIdHash> by_key_;
  size_t live_ = 0;
  size_t clock_hand_ = 0;
  Node* lru_head_ = nullptr;  // most recently used
  Node* lru_tail_ = nullptr;
  size_t lru_size_ = 0;  // nodes in the list: every cached descriptor but the root's
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace odafs::server
