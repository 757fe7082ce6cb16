// odafs-mount: FUSE inode numbers ⇄ paths in the mount.
//
// libodafs is path-based (Client::open("a/b")), FUSE names everything by inode number. This
// table is the one place that turns one into the other. A node is one object: a directory
// has one name (parent, name), a file one per hard link the kernel has looked up, all on
// one node (found by its file id), so a change through one name is seen through every
// other at once. A path is built by walking parents (a file's first name: the one found
// last), so a rename moves one name and everything under it follows without rewriting any
// string.
//
// Lifetime follows the FUSE protocol: every reply that hands the kernel an inode (lookup,
// create, mkdir, symlink) counts one lookup; FORGET gives n of them back. A node lives while
// the kernel holds lookups on it or while nodes below it live (their paths need it).
//
// Inode numbers are never reused (a 64-bit counter), so entries need no generation.
// A node whose last name went away (unlink, rmdir, renamed over, or found to name another
// file) is *detached*: it lives on until forgotten, but has no path and path() fails
// ESTALE; it is no longer found by its file id (the server may give the id to a new file).
//
// Thread-safety: every member may be called from any thread at once (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace odafs::mount {

using Ino = uint64_t;
constexpr Ino kRootIno = 1;  // FUSE_ROOT_ID

class InodeTable {
 public:
  // root_fileid: the server's file id of the mount root (reported as its st_ino).
  explicit InodeTable(uint64_t root_fileid);
  InodeTable(const InodeTable&) = delete;
  InodeTable& operator=(const InodeTable&) = delete;

  // The kernel now knows `name` in directory `parent` as the object `fileid`: returns its
  // node with one more lookup counted: the one at the name when it still names that
  // object; else, for a non-directory, the node another name of it has (the name joins
  // it); else a new one. A node the name named before loses the name.
  // Throws Error(ESTALE) if parent is unknown or detached.
  Ino add_lookup(Ino parent, const std::string& name, uint64_t fileid, bool directory);
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
  // name (if known) takes the new one in its place; a node at the new name loses it.
  // Two names of one file: nothing changes (rename(2) does nothing then).
  void renamed(Ino parent, const std::string& name, Ino new_parent, const std::string& new_name);
  // After a successful unlink/rmdir of parent/name: its node (if known) loses the name.
  void removed(Ino parent, const std::string& name);
  // The node (a non-root one) turned out to name another file than it was found as:
  // detach it from all its names, so that the kernel's next lookup makes a fresh node.
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
  // Whether the node was hidden (mark_hidden): one of the file's links on the server is
  // then the hidden name, which a program must not see (its nlink is one less).
  bool hidden(Ino ino) const;

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
  struct Name {
    Ino parent = 0;
    std::string name;
  };
  struct Node {
    // The node's names, the one paths use first. Empty: detached, or the root.
    std::vector<Name> names;
    uint64_t fileid = 0;
    bool directory = false;
    uint64_t lookups = 0;
    uint64_t children = 0;     // names of live nodes in this directory
    uint64_t opens = 0;        // open files (add_open .. release_open)
    bool hidden = false;       // renamed to a hidden name instead of being removed
    bool pages_known = false;  // page_version holds an open's
    PageVersion page_version;
  };
  using Key = std::pair<Ino, std::string>;

  // REQUIRES: mu_ held. Gives node ino the name parent/name (first, the one paths use).
  void add_name_locked(Ino ino, Node& node, Ino parent, const std::string& name);
  // REQUIRES: mu_ held. Takes name parent/name off node ino (which keeps living until
  // forgotten; detached once it has no name left), then erases what nothing holds.
  void remove_name_locked(Ino ino, Ino parent, const std::string& name);
  // REQUIRES: mu_ held. Takes every name off the node (see remove_name_locked).
  void detach_locked(Ino ino);
  // REQUIRES: mu_ held. Erase the node if nothing holds it, then its parents likewise.
  void maybe_erase_locked(Ino ino);
  // REQUIRES: mu_ held. Throws Error(ESTALE) unless ino names a live, attached node.
  std::string path_locked(Ino ino) const;

  mutable std::mutex mu_;
  std::unordered_map<Ino, Node> nodes_;
  std::map<Key, Ino> by_name_;                   // attached nodes by (parent, name)
  std::unordered_map<uint64_t, Ino> by_fileid_;  // attached non-directories by file id
  Ino next_ino_ = kRootIno + 1;
};

}  // namespace odafs::mount
