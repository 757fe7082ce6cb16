// What every procedure file of FileService (file_service.cc, namespace_ops.cc,
// attribute_ops.cc, data_ops.cc) needs to encode its replies: the XDR function cast, the
// status-only reply, and a file's attributes in wire form (proto/attr.h). Internal to server/.
#pragma once

#include <sys/stat.h>

#include "proto/attr.h"
#include "proto/odafs_prot.h"
#include "rpc/server.h"
#include "rpc/xdr_util.h"
#include "server/node_table.h"

namespace odafs::server {

// An rpcgen XDR function as the xdrproc_t that rpc::Reply::send takes.
template <class T>
xdrproc_t xp(bool_t (*fn)(XDR*, T*)) {
  return rpc::to_xdrproc(fn);
}

// Replies with a Res holding nothing but `status` (every result type starts with it).
template <class Res>
void reply_status(rpc::Reply& r, xdrproc_t xres, odafs_stat status) {
  Res res{};
  res.status = status;
  r.send(xres, &res);
}

// Replies attr_res (GETATTR, SETATTR, LINK) with the attributes st of node's object.
inline void reply_attr(const Node& node, const struct stat& st, rpc::Reply& r) {
  attr_res res{};
  res.status = ODAFS_OK;
  fill_attr(st, node.file_generation, &res.attr_res_u.attr);
  r.send(xp(xdr_attr_res), &res);
}

}  // namespace odafs::server
