// odafs-mount's InodeTable: FUSE inode numbers ⇄ paths, lookup counts, forget, rename.
#include <doctest/doctest.h>

#include <cerrno>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/mount/inode_table.h"
#include "tests/support/server_process.h"

using odafs::mount::Ino;
using odafs::mount::InodeTable;
using odafs::mount::kRootIno;
using odafs::test::errno_of;

TEST_CASE("paths are built from parents; a lookup of the same file reuses its node") {
  InodeTable t(100);
  CHECK(t.path(kRootIno).empty());
  CHECK(t.fileid(kRootIno) == 100);
  Ino d = t.add_lookup(kRootIno, "d", 200, true);
  Ino f = t.add_lookup(d, "f", 300, false);
  CHECK(t.path(d) == "d");
  CHECK(t.path(f) == "d/f");
  CHECK(t.child_path(f, "x") == "d/f/x");
  CHECK(t.child_path(kRootIno, "y") == "y");
  CHECK(t.add_lookup(d, "f", 300, false) == f);  // same name, same file: same node
  CHECK(t.parent_fileid(f) == 200);
  CHECK(t.parent_fileid(kRootIno) == 100);
  CHECK(t.size() == 3);
}

TEST_CASE("forget frees a node when its lookups are given back and nothing below it lives") {
  InodeTable t(1);
  Ino d = t.add_lookup(kRootIno, "d", 2, true);
  Ino f = t.add_lookup(d, "f", 3, false);
  t.add_lookup(d, "f", 3, false);
  t.forget(d, 1);  // d stays: f's path needs it
  CHECK(t.path(f) == "d/f");
  t.forget(f, 1);
  CHECK(t.path(f) == "d/f");  // one lookup left
  t.forget(f, 1);
  CHECK(t.size() == 1);  // f gone, and d with it
  CHECK(errno_of([&] { t.path(f); }) == ESTALE);
  CHECK(errno_of([&] { t.path(d); }) == ESTALE);
  t.forget(12345, 1);     // unknown: ignored
  t.forget(kRootIno, 1);  // the root is never forgotten
  CHECK(t.path(kRootIno).empty());
  // A new lookup gets a new number (numbers are never reused).
  Ino d2 = t.add_lookup(kRootIno, "d", 2, true);
  CHECK(d2 != d);
  CHECK(d2 > f);
}

TEST_CASE("rename moves a node and everything below it; the node it replaces is detached") {
  InodeTable t(1);
  Ino a = t.add_lookup(kRootIno, "a", 2, true);
  Ino inner = t.add_lookup(a, "inner", 3, false);
  Ino b = t.add_lookup(kRootIno, "b", 4, true);
  Ino target = t.add_lookup(b, "t", 5, false);
  t.renamed(kRootIno, "a", b, "t");
  CHECK(t.path(a) == "b/t");
  CHECK(t.path(inner) == "b/t/inner");
  CHECK(errno_of([&] { t.path(target); }) == ESTALE);
  CHECK(t.add_lookup(b, "t", 2, true) == a);
  // The detached node lives until forgotten, then goes.
  size_t before = t.size();
  t.forget(target, 1);
  CHECK(t.size() == before - 1);
  // Renaming a name the kernel never looked up only detaches the target.
  Ino c = t.add_lookup(kRootIno, "c", 6, false);
  t.renamed(kRootIno, "never-seen", kRootIno, "c");
  CHECK(errno_of([&] { t.path(c); }) == ESTALE);
  // Within one directory.
  t.renamed(b, "t", b, "u");
  CHECK(t.path(inner) == "b/u/inner");
}

TEST_CASE("removed and replaced names detach their nodes") {
  InodeTable t(1);
  Ino f = t.add_lookup(kRootIno, "f", 2, false);
  t.removed(kRootIno, "f");
  CHECK(errno_of([&] { t.path(f); }) == ESTALE);
  CHECK(errno_of([&] { t.add_lookup(f, "x", 9, false); }) == ESTALE);
  // Another file at the name (another client replaced it): a fresh node.
  Ino g = t.add_lookup(kRootIno, "g", 3, false);
  Ino g2 = t.add_lookup(kRootIno, "g", 4, false);
  CHECK(g2 != g);
  CHECK(errno_of([&] { t.path(g); }) == ESTALE);
  CHECK(t.path(g2) == "g");
  t.detach(g2);
  CHECK(errno_of([&] { t.path(g2); }) == ESTALE);
  t.forget(f, 1);
  t.forget(g, 1);
  t.forget(g2, 1);
  CHECK(t.size() == 1);
}

TEST_CASE("concurrent lookups, renames and forgets keep the counts straight") {
  InodeTable t(1);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&t, k] {
      for (int i = 0; i < 2000; ++i) {
        std::string dir = "d" + std::to_string(k);
        Ino d = t.add_lookup(kRootIno, dir, 10 + k, true);
        Ino f = t.add_lookup(d, "f" + std::to_string(i % 7), 100 + i % 7, false);
        if (i % 3 == 0) t.renamed(d, "f" + std::to_string(i % 7), d, "g");
        t.forget(f, 1);
        t.forget(d, 1);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(t.size() == 1);
}

TEST_CASE("open counts decide who removes a hidden node: its last release, or the hider") {
  InodeTable t(1);
  Ino f = t.add_lookup(kRootIno, "f", 2, false);
  CHECK(t.open_node_at(kRootIno, "f") == 0);
  t.add_open(f);
  t.add_open(f);
  CHECK(t.open_node_at(kRootIno, "f") == f);
  t.renamed(kRootIno, "f", kRootIno, ".hidden");
  CHECK(t.mark_hidden(f));         // still open: the last release removes it
  CHECK_FALSE(t.release_open(f));  // one open left
  CHECK(t.release_open(f));        // the last one
  CHECK_FALSE(t.release_open(f));  // nothing left to give back
  // Closed before it could be marked: the hider removes it.
  Ino g = t.add_lookup(kRootIno, "g", 3, false);
  t.add_open(g);
  CHECK_FALSE(t.release_open(g));  // not hidden: an ordinary close
  CHECK_FALSE(t.mark_hidden(g));
  // A node is not freed while open, even with no lookups left.
  Ino h = t.add_lookup(kRootIno, "h", 4, false);
  t.add_open(h);
  t.forget(h, 1);
  CHECK(t.path(h) == "h");
  t.release_open(h);
}

TEST_CASE("hard links: every name of a file is one node; directories are never shared") {
  InodeTable t(1);
  Ino d = t.add_lookup(kRootIno, "d", 2, true);
  Ino a = t.add_lookup(kRootIno, "a", 7, false);
  Ino b = t.add_lookup(d, "b", 7, false);  // a second name of file 7
  CHECK(b == a);
  CHECK(t.path(a) == "d/b");  // the name found last
  CHECK(t.add_lookup(kRootIno, "a", 7, false) == a);
  CHECK(t.path(a) == "a");
  // One name goes: the other still reaches the file.
  t.removed(kRootIno, "a");
  CHECK(t.path(a) == "d/b");
  // Renaming one link over another of the same file changes nothing (rename(2)).
  CHECK(t.add_lookup(d, "c", 7, false) == a);
  t.renamed(d, "b", d, "c");
  CHECK(t.open_node_at(d, "b") == 0);
  t.add_open(a);
  CHECK(t.open_node_at(d, "b") == a);
  CHECK(t.open_node_at(d, "c") == a);
  t.release_open(a);
  // The last name goes: detached, and no longer found by its file id (the server may give
  // the id to a new file).
  t.removed(d, "b");
  t.removed(d, "c");
  CHECK(errno_of([&] { t.path(a); }) == ESTALE);
  Ino again = t.add_lookup(kRootIno, "new", 7, false);
  CHECK(again != a);
  // Directories found at two names (another client renamed one) stay two nodes.
  Ino e1 = t.add_lookup(kRootIno, "e1", 30, true);
  Ino e2 = t.add_lookup(kRootIno, "e2", 30, true);
  CHECK(e1 != e2);
  // Forgetting all lookups frees everything but the root.
  t.forget(a, 4);
  t.forget(again, 1);
  t.forget(e1, 1);
  t.forget(e2, 1);
  t.forget(d, 1);
  CHECK(t.size() == 1);
}

TEST_CASE("a hidden open file: known as hidden until forgotten") {
  InodeTable t(1);
  Ino f = t.add_lookup(kRootIno, "f", 2, false);
  CHECK(!t.hidden(f));
  t.add_open(f);
  t.renamed(kRootIno, "f", kRootIno, ".odafs-hidden-f");
  CHECK(t.mark_hidden(f));
  CHECK(t.hidden(f));
  CHECK(t.release_open(f));  // the last release removes the hidden name
  t.removed(kRootIno, ".odafs-hidden-f");
  t.forget(f, 1);
  CHECK(t.size() == 1);
}
