#include "client/attr.h"

#include <sys/stat.h>

namespace odafs {

mode_t type_bits(FileType t) {
  switch (t) {
    case FileType::kRegular:
      return S_IFREG;
    case FileType::kDirectory:
      return S_IFDIR;
    case FileType::kSymlink:
      return S_IFLNK;
    case FileType::kBlock:
      return S_IFBLK;
    case FileType::kChar:
      return S_IFCHR;
    case FileType::kSocket:
      return S_IFSOCK;
    case FileType::kFifo:
      return S_IFIFO;
  }
  return S_IFREG;
}

struct stat to_stat(const Attr& a, uint32_t block_size) {
  struct stat st {};
  st.st_ino = a.fileid;
  st.st_mode = type_bits(a.type) | (a.mode & 07777);
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blocks = static_cast<blkcnt_t>((a.used + 511) / 512);
  st.st_blksize = static_cast<blksize_t>(block_size);
  st.st_atim = a.atime;
  st.st_mtim = a.mtime;
  st.st_ctim = a.ctime;
  st.st_rdev = a.rdev;
  return st;
}

}  // namespace odafs
