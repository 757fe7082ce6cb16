// The odafs program's procedures, one trait each: number, name, argument and result types
// with their rpcgen XDR functions, and what kind of call it is. The server registers its
// handlers from these (server/file_service.cc: a handler's argument type must be the
// trait's) and the client calls through them (client/call_util.h: call<P>, start<P>), so a
// procedure's wire types are written here once, beside proto/odafs_prot.x.
//
//   Procedure<ODAFSPROC_LOOKUP>::Args      diropargs
//   Procedure<ODAFSPROC_LOOKUP>::Result    dirop_res
//   Procedure<ODAFSPROC_LOOKUP>::kFlags    kIdempotent
//
// Procedures of no arguments (NULL, STATS, RECLAIM_COMPLETE, EXPORTS, CLIENTS) have Args
// void and no xargs: their callers send rpc::xdr_nothing.
#pragma once

#include <cstdint>

#include "proto/odafs_prot.h"

namespace odafs::wire {

// What a procedure is, for the server's checks before it runs and the client's retries.
enum ProcedureFlags : uint32_t {
  // Running it twice does what running it once does: the client sends it again on a new
  // connection when the first was lost before its reply.
  kIdempotent = 1,
  // Changes the export: a read-only client gets EROFS before its arguments are decoded.
  kChanges = 2,
  // Served in the grace period after a restart to every client, not only reclaimers.
  kServedInGrace = 4,
  // May take a file from its path (REMOVE, RMDIR, RENAME): refused GRACE to everyone in a
  // grace period, reclaimers included (server/file_service.cc says why).
  kMovesNames = 8,
};

template <uint32_t Proc>
struct Procedure;

// What every trait holds; ODAFS_PROCEDURE adds the arguments' type and XDR function.
#define ODAFS_PROCEDURE_COMMON(PROC, NAME, RESULT, FLAGS)            \
  static constexpr uint32_t kProc = PROC;                            \
  static constexpr const char* kName = NAME;                         \
  static constexpr uint32_t kFlags = FLAGS;                          \
  using Result = RESULT;                                             \
  static constexpr bool_t (*xres)(XDR*, Result*) = xdr_##RESULT
#define ODAFS_PROCEDURE(PROC, NAME, ARGS, RESULT, FLAGS)             \
  template <>                                                        \
  struct Procedure<PROC> {                                           \
    ODAFS_PROCEDURE_COMMON(PROC, NAME, RESULT, FLAGS);               \
    using Args = ARGS;                                               \
    static constexpr bool_t (*xargs)(XDR*, Args*) = xdr_##ARGS;      \
  }
#define ODAFS_PROCEDURE_NO_ARGS(PROC, NAME, RESULT, FLAGS)           \
  template <>                                                        \
  struct Procedure<PROC> {                                           \
    ODAFS_PROCEDURE_COMMON(PROC, NAME, RESULT, FLAGS);               \
    using Args = void;                                               \
  }

ODAFS_PROCEDURE(ODAFSPROC_MOUNT, "MOUNT", mount_args, mount_res, kIdempotent | kServedInGrace);
ODAFS_PROCEDURE(ODAFSPROC_GETATTR, "GETATTR", getattr_args, attr_res, kIdempotent);
ODAFS_PROCEDURE(ODAFSPROC_SETATTR, "SETATTR", setattr_args, attr_res, kIdempotent | kChanges);
ODAFS_PROCEDURE(ODAFSPROC_LOOKUP, "LOOKUP", diropargs, dirop_res, kIdempotent);
ODAFS_PROCEDURE(ODAFSPROC_CREATE, "CREATE", create_args, open_res, kChanges);
ODAFS_PROCEDURE(ODAFSPROC_MKDIR, "MKDIR", mkdir_args, dirop_res, kChanges);
ODAFS_PROCEDURE(ODAFSPROC_REMOVE, "REMOVE", diropargs, stat_res, kChanges | kMovesNames);
ODAFS_PROCEDURE(ODAFSPROC_RMDIR, "RMDIR", diropargs, stat_res, kChanges | kMovesNames);
ODAFS_PROCEDURE(ODAFSPROC_RENAME, "RENAME", rename_args, stat_res, kChanges | kMovesNames);
ODAFS_PROCEDURE(ODAFSPROC_READDIR, "READDIR", readdir_args, readdir_res, kIdempotent);
ODAFS_PROCEDURE(ODAFSPROC_READLINK, "READLINK", getattr_args, readlink_res, kIdempotent);
ODAFS_PROCEDURE(ODAFSPROC_SYMLINK, "SYMLINK", symlink_args, dirop_res, kChanges);
ODAFS_PROCEDURE(ODAFSPROC_READ, "READ", read_args, read_res, kIdempotent);
// At an offset, idempotent; at kAppendOffset not (the client does not send that again).
ODAFS_PROCEDURE(ODAFSPROC_WRITE, "WRITE", write_args, write_res, kIdempotent | kChanges);
ODAFS_PROCEDURE(ODAFSPROC_COMMIT, "COMMIT", commit_args, commit_res, kIdempotent);
ODAFS_PROCEDURE(ODAFSPROC_FSSTAT, "FSSTAT", getattr_args, fsstat_res, kIdempotent | kServedInGrace);
ODAFS_PROCEDURE_NO_ARGS(ODAFSPROC_STATS, "STATS", stats_res, kIdempotent | kServedInGrace);
ODAFS_PROCEDURE(ODAFSPROC_GETREFS, "GETREFS", getrefs_args, getrefs_res, kIdempotent);
ODAFS_PROCEDURE(ODAFSPROC_READ_DIRECT, "READ_DIRECT", read_direct_args, read_direct_res,
                kIdempotent);
// Checks a read-only client itself (it must cancel the client's wait on the engine).
ODAFS_PROCEDURE(ODAFSPROC_WRITE_DIRECT, "WRITE_DIRECT", write_direct_args, write_res, 0);
// Checks a read-only client itself: only an open to write changes anything.
ODAFS_PROCEDURE(ODAFSPROC_OPEN, "OPEN", open_args, open_res, kIdempotent);
ODAFS_PROCEDURE(ODAFSPROC_DELEGRETURN, "DELEGRETURN", delegreturn_args, stat_res,
                kIdempotent | kServedInGrace);
ODAFS_PROCEDURE(ODAFSPROC_LINK, "LINK", link_args, attr_res, kChanges);
ODAFS_PROCEDURE(ODAFSPROC_ACCESS, "ACCESS", access_args, access_res, kIdempotent);
ODAFS_PROCEDURE(ODAFSPROC_CLIENT_ID, "CLIENT_ID", client_id_args, client_id_res,
                kIdempotent | kServedInGrace);
ODAFS_PROCEDURE_NO_ARGS(ODAFSPROC_RECLAIM_COMPLETE, "RECLAIM_COMPLETE", stat_res,
                        kIdempotent | kServedInGrace);
ODAFS_PROCEDURE(ODAFSPROC_MKNOD, "MKNOD", mknod_args, dirop_res, kChanges);
ODAFS_PROCEDURE_NO_ARGS(ODAFSPROC_EXPORTS, "EXPORTS", exports_res, kIdempotent | kServedInGrace);
ODAFS_PROCEDURE_NO_ARGS(ODAFSPROC_CLIENTS, "CLIENTS", clients_res, kIdempotent | kServedInGrace);

#undef ODAFS_PROCEDURE
#undef ODAFS_PROCEDURE_COMMON
#undef ODAFS_PROCEDURE_NO_ARGS

template <uint32_t Proc>
inline constexpr bool kIdempotentProc = (Procedure<Proc>::kFlags & kIdempotent) != 0;

}  // namespace odafs::wire
