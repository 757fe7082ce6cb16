#include "client/mount/inode_table.h"

#include <cerrno>
#include <vector>

#include "client/client.h"

namespace odafs::mount {

InodeTable::InodeTable(uint64_t root_fileid) {
  Node root;
  root.fileid = root_fileid;
  root.lookups = 1;  // never forgotten: the kernel does not count lookups of the root
  nodes_.emplace(kRootIno, std::move(root));
}

Ino InodeTable::add_lookup(Ino parent, const std::string& name, uint64_t fileid) {
  std::lock_guard lock(mu_);
  path_locked(parent);  // throws ESTALE for a parent that is gone
  auto it = by_name_.find(Key{parent, name});
  if (it != by_name_.end()) {
    Node& old = nodes_.at(it->second);
    if (old.fileid == fileid) {
      ++old.lookups;
      return it->second;
    }
    // Another client replaced the file at this name: the old node stays for the kernel
    // to forget, and answers ESTALE from now on.
    detach_locked(it->second, old);
  }
  Ino ino = next_ino_++;
  Node node;
  node.parent = parent;
  node.name = name;
  node.fileid = fileid;
  node.lookups = 1;
  nodes_.emplace(ino, std::move(node));
  ++nodes_.at(parent).children;
  by_name_.emplace(Key{parent, name}, ino);
  return ino;
}

void InodeTable::forget(Ino ino, uint64_t n) {
  std::lock_guard lock(mu_);
  if (ino == kRootIno) return;
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  Node& node = it->second;
  node.lookups = n >= node.lookups ? 0 : node.lookups - n;
  maybe_erase_locked(ino);
}

std::string InodeTable::path(Ino ino) const {
  std::lock_guard lock(mu_);
  return path_locked(ino);
}

std::string InodeTable::child_path(Ino parent, const std::string& name) const {
  std::lock_guard lock(mu_);
  std::string p = path_locked(parent);
  return p.empty() ? name : p + "/" + name;
}

uint64_t InodeTable::fileid(Ino ino) const {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(ino);
  return it == nodes_.end() ? 0 : it->second.fileid;
}

uint64_t InodeTable::parent_fileid(Ino ino) const {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return 0;
  if (ino == kRootIno) return it->second.fileid;
  auto parent = nodes_.find(it->second.parent);
  return parent == nodes_.end() ? 0 : parent->second.fileid;
}

void InodeTable::renamed(Ino parent, const std::string& name, Ino new_parent,
                         const std::string& new_name) {
  std::lock_guard lock(mu_);
  auto dst = by_name_.find(Key{new_parent, new_name});
  if (dst != by_name_.end()) detach_locked(dst->second, nodes_.at(dst->second));
  auto src = by_name_.find(Key{parent, name});
  if (src == by_name_.end()) return;  // the kernel never looked it up: nothing to move
  Ino ino = src->second;
  by_name_.erase(src);
  Node& node = nodes_.at(ino);
  auto np = nodes_.find(new_parent);
  if (np == nodes_.end()) {  // cannot happen while the kernel holds new_parent; be safe
    node.detached = true;
    node.parent = 0;
    --nodes_.at(parent).children;
    maybe_erase_locked(parent);
    maybe_erase_locked(ino);
    return;
  }
  node.name = new_name;
  if (new_parent != parent) {
    ++np->second.children;
    node.parent = new_parent;
    --nodes_.at(parent).children;
    maybe_erase_locked(parent);
  }
  by_name_.emplace(Key{new_parent, new_name}, ino);
}

void InodeTable::removed(Ino parent, const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = by_name_.find(Key{parent, name});
  if (it != by_name_.end()) detach_locked(it->second, nodes_.at(it->second));
}

void InodeTable::detach(Ino ino) {
  std::lock_guard lock(mu_);
  if (ino == kRootIno) return;
  auto it = nodes_.find(ino);
  if (it != nodes_.end() && !it->second.detached) detach_locked(ino, it->second);
}

void InodeTable::add_open(Ino ino) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(ino);
  if (it != nodes_.end()) ++it->second.opens;
}

bool InodeTable::release_open(Ino ino) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end() || it->second.opens == 0) return false;
  return --it->second.opens == 0 && it->second.hidden && !it->second.detached;
}

bool InodeTable::pages_still_valid(Ino ino, const PageVersion& v) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return false;
  Node& node = it->second;
  const bool valid = node.pages_known && node.page_version == v;
  node.pages_known = true;
  node.page_version = v;
  return valid;
}

Ino InodeTable::open_node_at(Ino parent, const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = by_name_.find(Key{parent, name});
  if (it == by_name_.end()) return 0;
  return nodes_.at(it->second).opens > 0 ? it->second : 0;
}

bool InodeTable::mark_hidden(Ino ino) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end() || it->second.opens == 0) return false;
  it->second.hidden = true;
  return true;
}

size_t InodeTable::size() const {
  std::lock_guard lock(mu_);
  return nodes_.size();
}

void InodeTable::detach_locked(Ino ino, Node& node) {
  by_name_.erase(Key{node.parent, node.name});
  Ino parent = node.parent;
  node.parent = 0;
  node.detached = true;
  node.name.clear();
  // Erase the node first: erasing the parent cannot invalidate `node`, but keep the order
  // child-then-parent anyway, as maybe_erase_locked walks upwards.
  maybe_erase_locked(ino);
  if (parent != 0) {
    --nodes_.at(parent).children;
    maybe_erase_locked(parent);
  }
}

void InodeTable::maybe_erase_locked(Ino ino) {
  while (ino != kRootIno) {
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) return;
    Node& node = it->second;
    if (node.lookups != 0 || node.children != 0 || node.opens != 0) return;
    Ino parent = node.parent;
    if (!node.detached) by_name_.erase(Key{node.parent, node.name});
    nodes_.erase(it);
    if (parent == 0) return;
    --nodes_.at(parent).children;
    ino = parent;
  }
}

std::string InodeTable::path_locked(Ino ino) const {
  std::vector<const std::string*> names;
  while (ino != kRootIno) {
    auto it = nodes_.find(ino);
    if (it == nodes_.end() || it->second.detached) {
      throw Error(ESTALE, "odafs-mount: inode " + std::to_string(ino) + " has no name");
    }
    names.push_back(&it->second.name);
    ino = it->second.parent;
  }
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (!path.empty()) path += '/';
    path += **it;
  }
  return path;
}

}  // namespace odafs::mount
