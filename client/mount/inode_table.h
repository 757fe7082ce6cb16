// odafs-mount: FUSE inode numbers ⇄ paths in the mount.
//
// libodafs is path-based (Client::open("a/b")), FUSE names everything by inode number. This
// table is the one place that turns one into the other. Each node is (parent, name): a
// path is built by walking parents, so a rename moves one node and everything under it
// follows without rewriting any string.
//
// Lifetime follows the FUSE protocol: every reply that hands the kernel an inode (lookup,
// create, mkdir, symlink) counts one lookup; FORGET gives n of them back. A node lives while
// the kernel holds lookups on it or while nodes below it live (their paths need it).
//
// Inode numbers are never reused (a 64-bit counter), so entries need no generation.
// A node whose name went away (unlink, rmdir, renamed over, or found to name another file)
// is *detached*: it lives on until forgotten, but has no path and path() fails ESTALE.
//
// Thread-safety: every member may be called from any thread at once (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace odafs::mount {

using Ino = uint64_t;
constexpr Ino kRootIno = 1;  // FUSE_ROOT_ID

class InodeTable {
 public:
  // root_fileid: the server's file id of the mount root (reported as its st_ino).
  explicit InodeTable(uint64_t root_fileid);
  InodeTable(const InodeTable&) = delete;
  InodeTable& operator=(const InodeTable&) = delete;

  // The kernel now knows `name` in directory `parent` as the file `fileid`: returns its
  // node (the existing one when the name still names the same file, else a new one; an old
  // node at the name is detached) with one more lookup counted.
  // Throws Error(ESTALE) if parent is unknown or detached.
  Ino add_lookup(Ino parent, const std::string& name, uint64_t fileid);
  // FORGET: the kernel gives back n lookups of ino. Unknown inodes are ignored.
  void forget(Ino ino, uint64_t n);

  // The node's path relative to the mount ("" for the root, "a/b" below it).
  // Throws Error(ESTALE) if ino is unknown or detached (or under a detached directory).
  std::string path(Ino ino) const;
  // path(parent) + "/" + name.
  std::string child_path(Ino parent, const std::string& name) const;
  // The server's file id the node was found as; 0 if unknown.
  uint64_t fileid(Ino ino) const;
  // The file id of the node's parent directory (the root's own for the root); 0 if
  // unknown or detached.
  uint64_t parent_fileid(Ino ino) const;

  // After a successful rename of parent/name to new_parent/new_name: the node at the old
  // name (if known) takes the new one; a node at the new name is detached.
  void renamed(Ino parent, const std::string& name, Ino new_parent, const std::string& new_name);
  // After a successful unlink/rmdir of parent/name: its node (if known) is detached.
  void removed(Ino parent, const std::string& name);
  // The node (a non-root one) turned out to name another file than it was found as:
  // detach it, so that the kernel's next lookup makes a fresh node.
  void detach(Ino ino);

  // Open files. The server forgets a file with its last name, so a file removed (or
  // renamed over) while open is instead renamed to a hidden name in its directory (NFS's
  // "silly rename") and removed at its last release; these count the opens that decides.
  void add_open(Ino ino);
  // Gives back one open; true when it was the last and the node is hidden: the caller
  // then removes the node's (hidden) name.
  bool release_open(Ino ino);
  // The node at parent/name if it has open files, else 0.
  Ino open_node_at(Ino parent, const std::string& name) const;
  // After renaming an open node to a hidden name: true if it is still open (its last
  // release removes it); false if it was closed meanwhile (the caller removes it now).
  bool mark_hidden(Ino ino);

  // What the kernel's cached pages of a file were validated against: its modification and
  // change times and size as an open found them. Equal at the next open: nobody changed
  // the file in between (the rule libodafs's own block cache revalidates by).
  struct PageVersion {
    int64_t mtime_sec = 0, mtime_nsec = 0, ctime_sec = 0, ctime_nsec = 0;
    uint64_t size = 0;
    bool operator==(const PageVersion&) const = default;
  };
  // An open of ino found the file at version v: returns whether the kernel's pages
  // (validated at the last such open) may be kept, and records v. False for a node never
  // opened (or unknown).
  bool pages_still_valid(Ino ino, const PageVersion& v);

  // For tests and statistics: how many nodes are alive (the root included).
  size_t size() const;

 private:
  struct Node {
    Ino parent = 0;  // 0: detached (no name), or the root
    std::string name;
    uint64_t fileid = 0;
    uint64_t lookups = 0;
    uint64_t children = 0;  // live nodes whose parent this is
    uint64_t opens = 0;     // open files (add_open .. release_open)
    bool detached = false;
    bool hidden = false;       // renamed to a hidden name instead of being removed
    bool pages_known = false;  // page_version holds an open's
    PageVersion page_version;
  };
  using Key = std::pair<Ino, std::string>;

  // REQUIRES: mu_ held. Take the node off its name (it keeps living until forgotten).
  void detach_locked(Ino ino, Node& node);
  // REQUIRES: mu_ held. Erase the node if nothing holds it, then its parent likewise.
  void maybe_erase_locked(Ino ino);
  // REQUIRES: mu_ held. Throws Error(ESTALE) unless ino names a live, attached node.
  std::string path_locked(Ino ino) const;

  mutable std::mutex mu_;
  std::unordered_map<Ino, Node> nodes_;
  std::map<Key, Ino> by_name_;  // attached nodes by (parent, name)
  Ino next_ino_ = kRootIno + 1;
};

}  // namespace odafs::mount
