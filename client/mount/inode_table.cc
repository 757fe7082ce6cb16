#include "client/mount/inode_table.h"

#include <algorithm>
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

Ino InodeTable::add_lookup(Ino parent, const std::string& name, uint64_t fileid, bool directory) {
  std::lock_guard lock(mu_);
  path_locked(parent);  // throws ESTALE for a parent that is gone
  auto it = by_name_.find(Key{parent, name});
  if (it != by_name_.end()) {
    const Ino at = it->second;
    Node& old = nodes_.at(at);
    if (old.fileid == fileid) {
      ++old.lookups;
      add_name_locked(at, old, parent, name);  // first now: found there last
      return at;
    }
    // Another client replaced the file at this name: the old node loses the name (and
    // answers ESTALE once it has none, for the kernel to forget).
    remove_name_locked(at, parent, name);
  }
  if (!directory) {
    if (auto same = by_fileid_.find(fileid); same != by_fileid_.end()) {
      Node& node = nodes_.at(same->second);  // another name of the same file
      ++node.lookups;
      add_name_locked(same->second, node, parent, name);
      return same->second;
    }
  }
  Ino ino = next_ino_++;
  Node& node = nodes_[ino];
  node.fileid = fileid;
  node.directory = directory;
  node.lookups = 1;
  add_name_locked(ino, node, parent, name);  // files it by id too (not a directory)
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
  if (it->second.names.empty()) return 0;
  auto parent = nodes_.find(it->second.names.front().parent);
  return parent == nodes_.end() ? 0 : parent->second.fileid;
}

void InodeTable::renamed(Ino parent, const std::string& name, Ino new_parent,
                         const std::string& new_name) {
  std::lock_guard lock(mu_);
  auto src = by_name_.find(Key{parent, name});
  auto dst = by_name_.find(Key{new_parent, new_name});
  if (src != by_name_.end() && dst != by_name_.end() && src->second == dst->second) return;
  if (dst != by_name_.end()) remove_name_locked(dst->second, new_parent, new_name);
  src = by_name_.find(Key{parent, name});
  if (src == by_name_.end()) return;  // the kernel never looked it up: nothing to move
  const Ino ino = src->second;
  Node& node = nodes_.at(ino);
  // Hold the node while its name moves: without names or lookups it would be erased
  // between taking the old name off and giving it the new one.
  ++node.lookups;
  remove_name_locked(ino, parent, name);
  if (nodes_.count(new_parent) != 0) add_name_locked(ino, node, new_parent, new_name);
  --node.lookups;
  maybe_erase_locked(ino);
}

void InodeTable::removed(Ino parent, const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = by_name_.find(Key{parent, name});
  if (it != by_name_.end()) remove_name_locked(it->second, parent, name);
}

void InodeTable::detach(Ino ino) {
  std::lock_guard lock(mu_);
  if (ino == kRootIno) return;
  if (nodes_.count(ino) != 0) detach_locked(ino);
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
  return --it->second.opens == 0 && it->second.hidden && !it->second.names.empty();
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

bool InodeTable::hidden(Ino ino) const {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(ino);
  return it != nodes_.end() && it->second.hidden;
}

size_t InodeTable::size() const {
  std::lock_guard lock(mu_);
  return nodes_.size();
}

void InodeTable::add_name_locked(Ino ino, Node& node, Ino parent, const std::string& name) {
  auto same = std::find_if(node.names.begin(), node.names.end(),
                           [&](const Name& n) { return n.parent == parent && n.name == name; });
  if (same != node.names.end()) {
    std::rotate(node.names.begin(), same, same + 1);
    return;
  }
  if (node.names.empty() && !node.directory) by_fileid_[node.fileid] = ino;  // attached again
  node.names.insert(node.names.begin(), Name{parent, name});
  ++nodes_.at(parent).children;
  by_name_[Key{parent, name}] = ino;
}

void InodeTable::remove_name_locked(Ino ino, Ino parent, const std::string& name) {
  Node& node = nodes_.at(ino);
  auto it = std::find_if(node.names.begin(), node.names.end(),
                         [&](const Name& n) { return n.parent == parent && n.name == name; });
  if (it == node.names.end()) return;
  node.names.erase(it);
  by_name_.erase(Key{parent, name});
  if (node.names.empty() && !node.directory) {
    auto f = by_fileid_.find(node.fileid);
    if (f != by_fileid_.end() && f->second == ino) by_fileid_.erase(f);
  }
  // The node first, then the directory it left: erasing the node may take the directory's
  // last child, never the other way round.
  maybe_erase_locked(ino);
  --nodes_.at(parent).children;
  maybe_erase_locked(parent);
}

void InodeTable::detach_locked(Ino ino) {
  // Held while its names go: erasing it midway would leave the loop a dangling node.
  Node& node = nodes_.at(ino);
  ++node.lookups;
  while (!node.names.empty()) {
    const Name first = node.names.front();
    remove_name_locked(ino, first.parent, first.name);
  }
  --node.lookups;
  maybe_erase_locked(ino);
}

void InodeTable::maybe_erase_locked(Ino ino) {
  std::vector<Ino> todo{ino};
  while (!todo.empty()) {
    const Ino at = todo.back();
    todo.pop_back();
    if (at == kRootIno) continue;
    auto it = nodes_.find(at);
    if (it == nodes_.end()) continue;
    Node& node = it->second;
    if (node.lookups != 0 || node.children != 0 || node.opens != 0) continue;
    for (const Name& n : node.names) {
      by_name_.erase(Key{n.parent, n.name});
      --nodes_.at(n.parent).children;
      todo.push_back(n.parent);
    }
    if (!node.directory) {
      auto f = by_fileid_.find(node.fileid);
      if (f != by_fileid_.end() && f->second == at) by_fileid_.erase(f);
    }
    nodes_.erase(it);
  }
}

std::string InodeTable::path_locked(Ino ino) const {
  std::vector<const std::string*> names;
  while (ino != kRootIno) {
    auto it = nodes_.find(ino);
    if (it == nodes_.end() || it->second.names.empty()) {
      throw Error(ESTALE, "odafs-mount: inode " + std::to_string(ino) + " has no name");
    }
    names.push_back(&it->second.names.front().name);
    ino = it->second.names.front().parent;
  }
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (!path.empty()) path += '/';
    path += **it;
  }
  return path;
}

}  // namespace odafs::mount
