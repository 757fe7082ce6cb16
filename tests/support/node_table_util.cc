#include "tests/support/node_table_util.h"

#include <doctest/doctest.h>

#include <system_error>
#include <utility>

namespace odafs::test {

using server::NodeRef;
using server::NodeTable;
using server::OpenNode;
using server::WireHandle;

LocalStoreHolder::LocalStoreHolder(const std::string& root) {
  Result<std::unique_ptr<server::PosixStore>> opened = server::PosixStore::open_export(root);
  if (!opened) {
    throw std::system_error(opened.errno_value(), std::generic_category(),
                            opened.status().message());
  }
  store = std::move(opened).value();
}

NodeRef resolve(const NodeTable& t, const WireHandle& h, int* err) {
  Result<NodeRef> r = t.resolve(h.data());
  *err = r.errno_value();
  return r ? *r : nullptr;
}

OpenNode open_handle(NodeTable& t, const WireHandle& h, int* err) {
  Result<OpenNode> r = t.open(h.data());
  *err = r.errno_value();
  return r ? std::move(r).value() : OpenNode();
}

OpenNode pin(NodeTable& t, const NodeRef& node) {
  Result<OpenNode> r = t.open(node);
  REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  return std::move(r).value();
}

NodeRef lookup(NodeTable& t, const NodeRef& dir, const char* name, struct stat* st, int* err) {
  OpenNode d = pin(t, dir);
  Result<NodeRef> r = t.lookup(d, name, st);
  if (err != nullptr) *err = r.errno_value();
  return r ? *r : nullptr;
}

struct stat lstat_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st;
}

}  // namespace odafs::test
