// Attributes on the wire (odafs_fattr) and their local forms: the one place that maps file
// types and times between struct stat / timespec and the protocol, for the server (which
// fills attributes from stat) and the client (which reads them into its Attr).
#pragma once

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <ctime>

#include "proto/enums.h"
#include "proto/odafs_prot.h"

namespace odafs {

inline odafs_time wire_time(const timespec& t) {
  return odafs_time{t.tv_sec, static_cast<u_int>(t.tv_nsec)};
}

inline timespec timespec_of(const odafs_time& t) {
  return timespec{static_cast<time_t>(t.seconds), static_cast<long>(t.nseconds)};
}

// The wire type of a file from its st_mode.
inline odafs_ftype wire_type(mode_t st_mode) {
  switch (st_mode & S_IFMT) {
    case S_IFREG:
      return ODAFS_REG;
    case S_IFDIR:
      return ODAFS_DIR;
    case S_IFLNK:
      return ODAFS_LNK;
    case S_IFBLK:
      return ODAFS_BLK;
    case S_IFCHR:
      return ODAFS_CHR;
    case S_IFSOCK:
      return ODAFS_SOCK;
    default:
      return ODAFS_FIFO;
  }
}

// The wire attributes of a file from its stat (set-id and permission bits in mode; the
// type apart) and its file_generation (odafs_fattr; 0 where the caller cannot tell).
inline void fill_attr(const struct stat& st, uint64_t file_generation, odafs_fattr* a) {
  a->type = wire_type(st.st_mode);
  a->mode = st.st_mode & 07777;
  a->nlink = static_cast<u_int>(st.st_nlink);
  a->uid = st.st_uid;
  a->gid = st.st_gid;
  a->size = static_cast<u_quad_t>(st.st_size);
  a->used = static_cast<u_quad_t>(st.st_blocks) * 512u;
  a->fileid = st.st_ino;
  a->file_generation = file_generation;
  a->atime = wire_time(st.st_atim);
  a->mtime = wire_time(st.st_mtim);
  a->ctime = wire_time(st.st_ctim);
  const bool device = S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode);
  a->rdev.major = device ? major(st.st_rdev) : 0;
  a->rdev.minor = device ? minor(st.st_rdev) : 0;
}

}  // namespace odafs
