// Fixed-size parts of odafs messages as they sit on the wire, as types.
//
// Only what someone must know the byte size of without decoding: the client posts a READ
// reply's payload straight into the caller's buffer and so must know where it begins, and
// the server sizes its reply buffer for the references a READ carries. Encoding and
// decoding stay with rpcgen's XDR routines; these structs only pin the sizes, and
// tests/test_xdr_replies.cc checks each against what those routines actually produce.
#pragma once

#include <cstddef>

#include "base/endian.h"
#include "proto/odafs_prot.h"

namespace odafs::wire {

struct Time {  // odafs_time
  Be64 seconds;
  Be32 nseconds;
};

struct Fattr {  // odafs_fattr
  Be32 type, mode, nlink, uid, gid;
  Be64 size, used, fileid, file_generation;
  Time atime, mtime, ctime;
  Be32 rdev_major, rdev_minor;
};

struct Ref {  // odafs_ref
  Be32 segment, generation, offset, length, rights;
  Be64 session;
  unsigned char capability[ODAFS_CAPSIZE];
  unsigned char token[ODAFS_TOKENSIZE];
  Be64 block;
};

// A successful READ reply (read_res) up to its payload: what precedes the data bytes.
struct ReadReplyPrefix {
  Be32 status;
  Fattr attr;
  Be32 eof;
  Be32 count;  // the payload's length word
};

static_assert(sizeof(Time) == 12);
static_assert(sizeof(Fattr) == 96);
static_assert(sizeof(Ref) == 68);
static_assert(sizeof(ReadReplyPrefix) == 108);

}  // namespace odafs::wire
