// Wire attributes of a file (server/reply_util.h).
#include "server/reply_util.h"

namespace odafs::server {

void fill_attr(const struct stat& st, odafs_fattr* a) {
  switch (st.st_mode & S_IFMT) {
    case S_IFREG:
      a->type = ODAFS_REG;
      break;
    case S_IFDIR:
      a->type = ODAFS_DIR;
      break;
    case S_IFLNK:
      a->type = ODAFS_LNK;
      break;
    case S_IFBLK:
      a->type = ODAFS_BLK;
      break;
    case S_IFCHR:
      a->type = ODAFS_CHR;
      break;
    case S_IFSOCK:
      a->type = ODAFS_SOCK;
      break;
    default:
      a->type = ODAFS_FIFO;
      break;
  }
  a->mode = st.st_mode & 07777;
  a->nlink = static_cast<u_int>(st.st_nlink);
  a->uid = st.st_uid;
  a->gid = st.st_gid;
  a->size = static_cast<u_quad_t>(st.st_size);
  a->used = static_cast<u_quad_t>(st.st_blocks) * 512u;
  a->fileid = st.st_ino;
  a->atime = {st.st_atim.tv_sec, static_cast<u_int>(st.st_atim.tv_nsec)};
  a->mtime = {st.st_mtim.tv_sec, static_cast<u_int>(st.st_mtim.tv_nsec)};
  a->ctime = {st.st_ctim.tv_sec, static_cast<u_int>(st.st_ctim.tv_nsec)};
}

}  // namespace odafs::server
