#include "server/node_table.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace odafs::server {
namespace {

// FNV-1a over the durable key: stable across server instances and builds (clients compare
// it after a restart). Never 0, which says "cannot tell".
uint64_t file_generation_of(const std::string& durable) {
  if (durable.empty()) return 0;
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : durable) h = (h ^ c) * 0x100000001b3ull;
  return h != 0 ? h : 1;
}

// Whether two durable keys name the same object; without them the ObjectId must do.
bool same_object(const std::string& a, const std::string& b) {
  return a.empty() || b.empty() || a == b;
}

KeyedMac mac_for(const NodeTable::SharedKey* shared_key) {
  if (shared_key != nullptr) return KeyedMac(*shared_key);
  return KeyedMac();  // drawn now: handles die with this server
}

size_t effective_max_open_files(size_t wanted) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    wanted = std::min<size_t>(wanted, static_cast<size_t>(lim.rlim_cur / 2));
  }
  return std::max<size_t>(wanted, 2);  // the root and one more
}

}  // namespace

OpenFile::OpenFile(Object object_in, Store::Access access, std::atomic<size_t>* count)
    : object(std::move(object_in)),
      writable(access.writable),
      readable(access.readable),
      open_count(count) {
  open_count->fetch_add(1, std::memory_order_relaxed);
}

OpenFile::~OpenFile() { open_count->fetch_sub(1, std::memory_order_relaxed); }

NodeTable::NodeTable(Store& store, size_t max_nodes, size_t max_open_files,
                     const SharedKey* shared_key)
    : store_(store),
      portable_(shared_key != nullptr),
      mac_(mac_for(shared_key)),
      max_nodes_(std::max<size_t>(max_nodes, 16)),
      max_open_files_(effective_max_open_files(max_open_files)) {
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&instance_), sizeof instance_) != 1) {
    throw std::runtime_error("RAND_bytes failed: no entropy for the handle key");
  }
  if (portable_ && !store_.finds_by_id()) {
    throw std::invalid_argument(std::string("handles shared between servers need a store that "
                                            "finds objects by identity; ") +
                                store_.kind() + " does not");
  }
  Result<Object> root = store_.root();
  struct stat st;
  Status stated = root ? store_.stat(*root, &st) : root.status();
  if (!stated.ok()) {
    throw std::system_error(stated.errno_value(), std::generic_category(),
                            "the export's root: " + stated.message());
  }
  std::string durable = store_.durable_key(*root);
  auto file =
      std::make_shared<OpenFile>(std::move(root).value(), Store::Access{true, false}, &open_files_);
  std::lock_guard lock(mu_);
  root_ = insert_locked(st, std::move(durable));
  root_->file = std::move(file);  // never in the LRU list: the root stays open
}

NodeTable::~NodeTable() = default;

Result<NodeRef> NodeTable::node_of_portable(const ObjectId& key) {
  {
    std::lock_guard lock(mu_);
    auto it = by_key_.find(key);
    if (it != by_key_.end()) {
      slots_[it->second].referenced = true;
      return slots_[it->second].node;
    }
  }
  // Another server's handle, or one from before a restart: the store finds the object.
  struct stat st;
  Store::Access access;
  Result<Object> found = store_.find(key, &st, &access);
  if (!found) return std::move(found).status();
  if (store_.id_of(st) != key) return Status(ESTALE, "handle: found another object");
  std::string durable = store_.durable_key(*found);
  auto file = std::make_shared<OpenFile>(std::move(found).value(), access, &open_files_);
  std::lock_guard lock(mu_);  // released before `file` is destroyed if unused
  auto it = by_key_.find(key);
  if (it != by_key_.end()) return slots_[it->second].node;  // another call won the race
  NodeRef node = insert_locked(st, std::move(durable));     // no path: found by identity
  install_locked(*node, std::move(file));
  evict_files_locked();
  return node;
}

Result<NodeTable::Slot*> NodeTable::slot_locked(const ParsedHandle& h) const {
  if (h.slot >= slots_.size()) return Status(kBadHandle, "handle: no such slot");
  auto& s = const_cast<Slot&>(slots_[h.slot]);
  if (s.generation != h.generation || !s.node || s.node->key.ino != h.ino) {
    return Status(ESTALE, "handle: node dropped");
  }
  s.referenced = true;
  return &s;
}

Result<NodeRef> NodeTable::resolve(const unsigned char* h) const {
  if (portable_) {
    Result<ObjectId> key = parse_portable(h);
    if (!key) return std::move(key).status();
    // Finding an object the table lacks adds a node: the table, not the handle, changes.
    return const_cast<NodeTable*>(this)->node_of_portable(*key);
  }
  Result<ParsedHandle> parsed = parse_handle(h);
  if (!parsed) return std::move(parsed).status();
  std::lock_guard lock(mu_);
  Result<Slot*> s = slot_locked(*parsed);
  if (!s) return std::move(s).status();
  return (*s)->node;
}

Result<OpenNode> NodeTable::open(const unsigned char* h) {
  if (portable_) {
    Result<NodeRef> node = resolve(h);
    if (!node) return std::move(node).status();
    return open(*node);
  }
  Result<ParsedHandle> parsed = parse_handle(h);
  if (!parsed) return std::move(parsed).status();
  NodeRef node;
  {
    std::lock_guard lock(mu_);
    Result<Slot*> slot = slot_locked(*parsed);
    if (!slot) return std::move(slot).status();
    Slot* s = *slot;
    if (s->node->file) return OpenNode(s->node, touch_locked(*s->node));  // the hot path
    node = s->node;
  }
  return reopen(node);
}

Result<OpenNode> NodeTable::open(const NodeRef& node) {
  {
    std::lock_guard lock(mu_);
    if (node->file) return OpenNode(node, touch_locked(*node));
  }
  return reopen(node);
}

Result<OpenNode> NodeTable::reopen(const NodeRef& node) {
  // What to open below the nearest open ancestor, innermost first. Copies: once the mutex
  // is released the parent chain may change.
  struct Step {
    ObjectId key;
    std::string durable;
    std::string name;
  };
  if (portable_) return reopen_by_id(node);
  std::vector<Step> steps;
  std::shared_ptr<OpenFile> base;
  {
    std::lock_guard lock(mu_);
    if (node->file) return OpenNode(node, touch_locked(*node));
    if (!in_table_locked(*node)) {
      return Status(ESTALE, "reopen: node dropped");  // forgotten or evicted
    }
    for (Node* p = node.get(); !base; p = p->parent.get()) {
      if (p->file) {
        base = touch_locked(*p);  // pinned: stays open while we walk from it
      } else if (!p->parent) {
        return Status(ESTALE, "reopen: ancestor dropped");  // no way back
      } else {
        steps.push_back(Step{p->key, p->durable, p->name});
      }
    }
  }
  // Walk down one component at a time, never following a symlink, checking that every
  // step reaches the object the table knows by that name. Directories on the way are only
  // held; the last step is opened as a node keeps it.
  const Object* dir = &base->object;
  Object owned;
  Store::Access access;
  for (size_t i = steps.size(); i-- > 0;) {
    const Step& s = steps[i];
    struct stat st;
    Result<Object> next = Status(ENOENT, "reopen");
    if (i != 0) {
      next = store_.lookup(*dir, s.name.c_str(), &st);
    } else if (Status seen = store_.stat_at(*dir, s.name.c_str(), &st); seen.ok()) {
      next = store_.open_at(*dir, s.name.c_str(), &st, &access);
    } else {
      next = std::move(seen);
    }
    if (next && (store_.id_of(st) != s.key || !same_object(s.durable, store_.durable_key(*next)))) {
      next = Status(ESTALE, "reopen: replaced");  // never hand out the newcomer
    }
    if (!next) {
      const int err = next.errno_value();
      return Status(err == ENOENT || err == ENOTDIR || err == ELOOP ? ESTALE : err, "reopen");
    }
    owned = std::move(next).value();
    dir = &owned;
  }
  auto file = std::make_shared<OpenFile>(std::move(owned), access, &open_files_);
  reopens_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mu_);  // released before `file` is destroyed if unused
  if (node->file) return OpenNode(node, touch_locked(*node));  // another call won the race
  if (!in_table_locked(*node)) return Status(ESTALE, "reopen: node dropped");  // as we walked
  install_locked(*node, std::move(file));
  OpenNode pinned(node, touch_locked(*node));
  evict_files_locked();
  return pinned;
}

Result<OpenNode> NodeTable::reopen_by_id(const NodeRef& node) {
  {
    std::lock_guard lock(mu_);
    if (node->file) return OpenNode(node, touch_locked(*node));
    if (!in_table_locked(*node)) return Status(ESTALE, "reopen: node dropped");
  }
  struct stat st;
  Store::Access access;
  Result<Object> found = store_.find(node->key, &st, &access);
  if (!found) return std::move(found).status();
  if ((st.st_mode & S_IFMT) != node->type) return Status(ESTALE, "reopen: another object");
  auto file = std::make_shared<OpenFile>(std::move(found).value(), access, &open_files_);
  reopens_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mu_);  // released before `file` is destroyed if unused
  if (node->file) return OpenNode(node, touch_locked(*node));
  if (!in_table_locked(*node)) return Status(ESTALE, "reopen: node dropped");
  install_locked(*node, std::move(file));
  OpenNode pinned(node, touch_locked(*node));
  evict_files_locked();
  return pinned;
}

NodeRef NodeTable::insert_locked(const struct stat& st, std::string durable) {
  // Drop unused nodes down to the bound: after a burst of in-use nodes pushed the table
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
  node->key = store_.id_of(st);
  node->type = st.st_mode & S_IFMT;
  node->file_generation = file_generation_of(durable);
  node->durable = std::move(durable);
  slots_[slot].node = node;
  slots_[slot].referenced = true;
  by_key_[node->key] = slot;
  ++live_;
  return node;
}

bool NodeTable::evict_some_locked() {
  // Clock sweep: skip the root, nodes in use by a call or by a child's path (shared
  // elsewhere) and nodes used since the last sweep. If nothing qualifies the table grows
  // past max_nodes for now.
  size_t budget = 2 * slots_.size();
  while (budget-- > 0 && !slots_.empty()) {
    clock_hand_ = (clock_hand_ + 1) % slots_.size();
    Slot& s = slots_[clock_hand_];
    if (!s.node || s.node == root_ || s.node.use_count() > 1) continue;
    if (s.referenced) {
      s.referenced = false;
      continue;
    }
    drop_locked(s);
    return true;
  }
  return false;
}

void NodeTable::drop_locked(Slot& s) {
  Node& n = *s.node;
  by_key_.erase(n.key);
  if (n.in_lru) lru_unlink_locked(n);
  n.file.reset();  // closes now, or when the last call using it lets go
  n.parent.reset();
  n.name.clear();
  free_slots_.push_back(n.slot);
  s.node.reset();
  ++s.generation;
  --live_;
}

bool NodeTable::in_table_locked(const Node& node) const {
  return node.slot < slots_.size() && slots_[node.slot].node.get() == &node;
}

std::shared_ptr<OpenFile> NodeTable::touch_locked(Node& node) {
  if (node.in_lru && lru_head_ != &node) {
    lru_unlink_locked(node);
    lru_push_front_locked(node);
  }
  return node.file;
}

void NodeTable::install_locked(Node& node, std::shared_ptr<OpenFile> file) {
  node.file = std::move(file);
  if (&node != root_.get()) lru_push_front_locked(node);
}

void NodeTable::lru_unlink_locked(Node& node) {
  (node.lru_prev != nullptr ? node.lru_prev->lru_next : lru_head_) = node.lru_next;
  (node.lru_next != nullptr ? node.lru_next->lru_prev : lru_tail_) = node.lru_prev;
  node.lru_prev = node.lru_next = nullptr;
  node.in_lru = false;
  --lru_size_;
}

void NodeTable::lru_push_front_locked(Node& node) {
  node.lru_prev = nullptr;
  node.lru_next = lru_head_;
  (lru_head_ != nullptr ? lru_head_->lru_prev : lru_tail_) = &node;
  lru_head_ = &node;
  node.in_lru = true;
  ++lru_size_;
}

bool NodeTable::close_unpinned(Node& node) {
  std::lock_guard lock(mu_);
  if (!node.file) return true;
  // Pins are taken under mu_ only: a use count of 1 (the node's own) cannot rise meanwhile.
  if (&node == root_.get() || node.file.use_count() != 1) return false;
  if (node.in_lru) lru_unlink_locked(node);
  node.file.reset();
  return true;
}

void NodeTable::evict_files_locked() {
  // From the least recently used end, close descriptors no call has pinned. Pins are only
  // taken under mu_ (OpenNode is move-only), so a use count of 1 (the node's own) cannot
  // rise while we hold it. The root's descriptor is the one outside the list.
  for (Node* n = lru_tail_; n != nullptr && lru_size_ + 1 > max_open_files_;) {
    Node* prev = n->lru_prev;
    if (n->file.use_count() == 1) {
      lru_unlink_locked(*n);
      n->file.reset();
    }
    n = prev;
  }
}

void NodeTable::set_path_locked(Node& node, const NodeRef& parent, const char* name) {
  if (&node == root_.get() || !parent || !in_table_locked(*parent)) return;
  if (node.parent == parent && node.name == name) return;
  // A directory moved behind our back can make a recorded chain disagree with the tree;
  // never let the chain loop (the walk would not end, nor would the nodes be freed).
  for (const Node* p = parent.get(); p != nullptr; p = p->parent.get()) {
    if (p == &node) return;
  }
  node.parent = parent;
  node.name = name;
}

Result<NodeRef> NodeTable::lookup(const OpenNode& dir, const char* name, struct stat* st) {
  const NodeRef& d = dir.node();
  bool dotdot = std::strcmp(name, "..") == 0;
  if (std::strcmp(name, ".") == 0 || (dotdot && d == root_)) {
    if (Status s = store_.stat(dir.object(), st); !s.ok()) return s;
    std::lock_guard lock(mu_);
    if (!in_table_locked(*d)) return Status(ESTALE, "lookup: directory dropped");
    return d;
  }
  if (Status s = store_.stat_at(dir.object(), name, st); !s.ok()) return s;
  {
    // A node whose object is open is certainly this object: its ObjectId cannot have been
    // reused. Without one, open the object below to tell (admit()).
    std::lock_guard lock(mu_);
    auto it = by_key_.find(store_.id_of(*st));
    if (it != by_key_.end() && slots_[it->second].node->file) {
      Slot& s = slots_[it->second];
      s.referenced = true;
      if (!dotdot) set_path_locked(*s.node, d, name);
      return s.node;
    }
    if (it == by_key_.end() && dotdot) {
      // Every directory's parent node stays in the table while it has child nodes, so
      // this one moved behind our back (perhaps out of the export): do not follow it.
      return Status(ESTALE, "lookup: .. moved");
    }
  }
  // ESTALE from open_at: replaced between stat and open; the client retries.
  Store::Access access;
  Result<Object> opened = store_.open_at(dir.object(), name, st, &access);
  if (!opened) return std::move(opened).status();
  return admit(dir, dotdot ? nullptr : name, std::move(opened).value(), *st, access);
}

NodeRef NodeTable::adopt(const OpenNode& dir, const char* name, Object object,
                         const struct stat& st, Store::Access access) {
  // With a name, admit cannot fail.
  return admit(dir, name, std::move(object), st, access).value();
}

Result<NodeRef> NodeTable::admit(const OpenNode& dir, const char* name, Object object,
                                 const struct stat& st, Store::Access access) {
  std::string durable = store_.durable_key(object);
  auto file = std::make_shared<OpenFile>(std::move(object), access, &open_files_);
  std::lock_guard lock(mu_);  // released before `file` is destroyed if unused
  NodeRef node;
  auto it = by_key_.find(store_.id_of(st));
  if (it != by_key_.end()) {  // known already (or another thread won a race)
    Slot& s = slots_[it->second];
    if (s.node->file || same_object(s.node->durable, durable)) {
      s.referenced = true;
      node = s.node;
    } else {
      drop_locked(s);  // its object is gone and its inode number reused: handles STALE
    }
  }
  if (!node) {
    if (name == nullptr) return Status(ESTALE, "lookup: .. has no node");  // see lookup
    node = insert_locked(st, std::move(durable));
  }
  if (name != nullptr) set_path_locked(*node, dir.node(), name);
  if (!node->file) {
    install_locked(*node, std::move(file));
    evict_files_locked();
  }
  return node;
}

void NodeTable::renamed(const OpenNode& dir, const char* name, const ObjectId& key) {
  std::lock_guard lock(mu_);
  auto it = by_key_.find(key);
  if (it != by_key_.end()) set_path_locked(*slots_[it->second].node, dir.node(), name);
}

Status NodeTable::make_writable(const OpenNode& node) {
  if (node.file_->writable.load(std::memory_order_relaxed)) return {};
  return reopen_in_place(node, true);
}

Status NodeTable::make_readable(const OpenNode& node) {
  if (node.file_->readable.load(std::memory_order_relaxed)) return {};
  return reopen_in_place(node, false);
}

Status NodeTable::reopen_in_place(const OpenNode& node, bool write) {
  std::lock_guard lock(mu_);
  OpenFile& f = *node.file_;
  if (f.writable.load(std::memory_order_relaxed) ||
      (!write && f.readable.load(std::memory_order_relaxed))) {
    return {};  // another thread got here first
  }
  if (!S_ISREG(node->type)) return Status(EISDIR, "reopening in place: not a file");
  Store::Access access;
  if (Status s = store_.reopen_in_place(f.object, write, &access); !s.ok()) return s;
  f.readable.store(access.readable, std::memory_order_relaxed);
  if (access.writable) f.writable.store(true, std::memory_order_relaxed);
  return {};
}

uint64_t NodeTable::node_id_of(const ObjectId& key) const {
  std::lock_guard lock(mu_);
  auto it = by_key_.find(key);
  return it == by_key_.end() ? 0 : slots_[it->second].node->id;
}

uint64_t NodeTable::forget_if_unlinked(const ObjectId& key, nlink_t links_left) {
  std::lock_guard lock(mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return 0;
  Slot& s = slots_[it->second];
  if (s.node->file) {
    struct stat st;
    if (!store_.stat(s.node->file->object, &st).ok()) return 0;
    links_left = st.st_nlink;
  }
  if (links_left > 0) return 0;
  uint64_t id = s.node->id;
  drop_locked(s);
  return id;
}

std::vector<NodeTable::Unlinked> NodeTable::drop_unlinked() {
  std::vector<std::pair<ObjectId, std::shared_ptr<OpenFile>>> open;  // each cached object
  {
    std::lock_guard lock(mu_);
    open.reserve(lru_size_);
    for (Node* n = lru_head_; n != nullptr; n = n->lru_next) {
      if (n->file) open.emplace_back(n->key, n->file);
    }
  }
  std::vector<Unlinked> dropped;
  for (const auto& [key, file] : open) {
    struct stat st;
    if (!store_.stat(file->object, &st).ok() || st.st_nlink > 0) continue;
    std::lock_guard lock(mu_);
    auto it = by_key_.find(key);
    // Still the node of that object, with that descriptor: not dropped or reopened since.
    if (it == by_key_.end() || slots_[it->second].node->file != file) continue;
    dropped.push_back({slots_[it->second].node->id, static_cast<uint64_t>(st.st_size),
                       static_cast<mode_t>(st.st_mode & S_IFMT)});
    drop_locked(slots_[it->second]);
  }
  return dropped;
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

void NodeTable::report_counters(const CounterSink& add) const {
  add("live", size());
  add("open_fds", open_files());
  add("max_open_fds", max_open_files());
  add("reopens", reopens());
}

}  // namespace odafs::server
