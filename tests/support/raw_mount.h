// Test support: a raw connection to odafsd that has mounted the export, for calls no library
// client would make (a chosen client owner, a delegation held by hand). Uses doctest's
// REQUIRE: test binaries only.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "proto/odafs_prot.h"
#include "rpc/client_channel.h"
#include "rpc/xdr_util.h"
#include "tests/support/rpc_calls.h"

namespace odafs::test {

struct RawMount {
  explicit RawMount(uint16_t port, const char* path = "/")
      : ch(open_channel({"127.0.0.1", port}, [] {
          rpc::Channel::Options o;
          o.program = ODAFS_PROGRAM;
          o.version = ODAFS_V3;
          o.timeout_ms = 10000;
          return o;
        }())) {
    mount_args a{};
    a.path = const_cast<char*>(path);
    mount_res res{};
    REQUIRE_OK(ch->call(ODAFSPROC_MOUNT, rpc::to_xdrproc(xdr_mount_args), &a,
                        rpc::to_xdrproc(xdr_mount_res), &res));
    REQUIRE(res.status == ODAFS_OK);
    std::memcpy(root, res.mount_res_u.ok.root, sizeof root);
    xdr_free(rpc::to_xdrproc(xdr_mount_res), reinterpret_cast<char*>(&res));
  }
  // CLIENT_ID with an owner of all `fill` bytes; the status, and *reclaim and *kept.
  int client_id(unsigned char fill, bool* reclaim = nullptr, bool* kept = nullptr) {
    client_id_args a{};
    std::memset(a.owner, fill, sizeof a.owner);
    client_id_res res{};
    REQUIRE_OK(ch->call(ODAFSPROC_CLIENT_ID, rpc::to_xdrproc(xdr_client_id_args), &a,
                        rpc::to_xdrproc(xdr_client_id_res), &res));
    if (reclaim != nullptr) *reclaim = res.status == ODAFS_OK && res.client_id_res_u.ok.reclaim;
    if (kept != nullptr) *kept = res.status == ODAFS_OK && res.client_id_res_u.ok.kept;
    return res.status;
  }
  int getattr_root() { return getattr(root); }
  int getattr(const char (&fh)[ODAFS_FHSIZE]) {
    getattr_args a{};
    std::memcpy(a.fh, fh, sizeof a.fh);
    attr_res res{};
    REQUIRE_OK(ch->call(ODAFSPROC_GETATTR, rpc::to_xdrproc(xdr_getattr_args), &a,
                        rpc::to_xdrproc(xdr_attr_res), &res));
    return res.status;
  }
  // CREATE of `name` in the root, for reading and writing (so it may come with a write
  // delegation): the status; the handle into fh, the delegation's kind into *kind (-1: none).
  int create(const char* name, char (&fh)[ODAFS_FHSIZE], int* kind) {
    create_args a{};
    std::memcpy(a.dir, root, sizeof root);
    a.name = const_cast<char*>(name);
    a.mode = 0644;
    a.how = ODAFS_CREATE_UNCHECKED;
    a.access = ODAFS_OPEN_READ | ODAFS_OPEN_WRITE;
    open_res res{};
    REQUIRE_OK(ch->call(ODAFSPROC_CREATE, rpc::to_xdrproc(xdr_create_args), &a,
                        rpc::to_xdrproc(xdr_open_res), &res));
    *kind = -1;
    if (res.status == ODAFS_OK) {
      std::memcpy(fh, res.open_res_u.ok.fh, sizeof fh);
      if (res.open_res_u.ok.delegation != 0) *kind = res.open_res_u.ok.delegation_kind;
    }
    return res.status;
  }
  // Names this client with owner id `owner` (all bytes `owner`), then creates `name` in the
  // root and REQUIREs a write delegation on it; its handle into fh. A RawMount has no
  // callback handler: it answers no recall, so a conflicting access waits for the lease.
  void create_write_held(unsigned char owner, const char* name, char (&fh)[ODAFS_FHSIZE]) {
    REQUIRE(client_id(owner) == ODAFS_OK);  // only a named client gets a write delegation
    int kind = -1;
    REQUIRE(create(name, fh, &kind) == ODAFS_OK);
    REQUIRE(kind == ODAFS_DELEG_WRITE);
  }
  // A stable WRITE of `data` at `offset`: the status.
  int write(const char (&fh)[ODAFS_FHSIZE], uint64_t offset, const std::string& data) {
    write_args a{};
    std::memcpy(a.fh, fh, sizeof a.fh);
    a.offset = offset;
    a.stable = ODAFS_FILE_SYNC;
    a.data.data_len = static_cast<u_int>(data.size());
    a.data.data_val = const_cast<char*>(data.data());
    write_res res{};
    REQUIRE_OK(ch->call(ODAFSPROC_WRITE, rpc::to_xdrproc(xdr_write_args), &a,
                        rpc::to_xdrproc(xdr_write_res), &res));
    return res.status;
  }
  // REMOVE of `name` in the root: the status.
  int remove(const char* name) {
    diropargs a{};
    std::memcpy(a.dir, root, sizeof root);
    a.name = const_cast<char*>(name);
    return call_for_status(ODAFSPROC_REMOVE, rpc::to_xdrproc(xdr_diropargs), &a);
  }
  // RENAME of `from` to `to`, both in the root: the status.
  int rename(const char* from, const char* to) {
    rename_args a{};
    std::memcpy(a.from_dir, root, sizeof root);
    std::memcpy(a.to_dir, root, sizeof root);
    a.from_name = const_cast<char*>(from);
    a.to_name = const_cast<char*>(to);
    return call_for_status(ODAFSPROC_RENAME, rpc::to_xdrproc(xdr_rename_args), &a);
  }
  // RECLAIM_COMPLETE: the status.
  int reclaim_complete() {
    return call_for_status(ODAFSPROC_RECLAIM_COMPLETE, rpc::to_xdrproc(rpc::xdr_nothing), nullptr);
  }
  // A call whose results are a stat_res: its status.
  int call_for_status(uint32_t proc, xdrproc_t xargs, const void* args) {
    stat_res res{};
    REQUIRE_OK(ch->call(proc, xargs, args, rpc::to_xdrproc(xdr_stat_res), &res));
    return res.status;
  }
  std::unique_ptr<rpc::Channel> ch;
  char root[ODAFS_FHSIZE];
};

}  // namespace odafs::test
