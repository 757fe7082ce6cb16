// Test support: calling the server's node table (server/node_table.h) the way the file
// service does, with failures turned into what a test checks (an errno, a null node).
#pragma once

#include <sys/stat.h>

#include <memory>
#include <string>

#include "server/node_table.h"
#include "server/store_impl/posix_store.h"

namespace odafs::test {

// The local store of a directory, opened first (a base of LocalNodeTable). Throws
// std::system_error when the directory cannot be opened, as odafsd's start does.
struct LocalStoreHolder {
  explicit LocalStoreHolder(const std::string& root);
  std::unique_ptr<server::PosixStore> store;
};

// A node table over a local directory, as odafsd builds one.
class LocalNodeTable : public LocalStoreHolder, public server::NodeTable {
 public:
  LocalNodeTable(const std::string& root, size_t max_nodes,
                 size_t max_open_files = server::kDefaultMaxOpenFiles)
      : LocalStoreHolder(root), NodeTable(*store, max_nodes, max_open_files) {}
};

// The descriptor a pinned node of a local table holds.
inline int fd_of(const server::OpenNode& node) { return server::PosixStore::fd_of(node.object()); }

// The node handle h names, or nullptr; *err is the failure's errno (0 on success).
server::NodeRef resolve(const server::NodeTable& t, const server::WireHandle& h, int* err);

// Opens handle h as the server does: the pinned node, or an empty one with *err set.
server::OpenNode open_handle(server::NodeTable& t, const server::WireHandle& h, int* err);

// Pins node open; the test fails if it cannot be.
server::OpenNode pin(server::NodeTable& t, const server::NodeRef& node);

// Looks name up in dir, with dir pinned open for the call as the server does. nullptr on
// failure, with its errno in *err if err is given.
server::NodeRef lookup(server::NodeTable& t, const server::NodeRef& dir, const char* name,
                       struct stat* st, int* err = nullptr);

// lstat of a local path; the test fails if there is nothing there.
struct stat lstat_of(const std::string& path);

}  // namespace odafs::test
