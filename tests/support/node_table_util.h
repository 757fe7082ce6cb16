// Test support: calling the server's node table (server/node_table.h) the way the file
// service does, with failures turned into what a test checks (an errno, a null node).
#pragma once

#include <sys/stat.h>

#include <string>

#include "server/node_table.h"

namespace odafs::test {

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
