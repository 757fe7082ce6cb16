// A file's attributes as libodafs gives them (Attr, from the protocol's odafs_fattr), a
// directory entry, a file system's figures, and the one conversion to struct stat.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>

namespace odafs {

enum class FileType { kRegular, kDirectory, kSymlink, kBlock, kChar, kSocket, kFifo };

struct Attr {
  FileType type = FileType::kRegular;
  uint32_t mode = 0;  // permission bits only
  uint32_t nlink = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  uint64_t used = 0;
  uint64_t fileid = 0;
  uint64_t file_generation = 0;  // with fileid, this file and no other; 0: the server cannot tell
  struct timespec atime {};
  struct timespec mtime {};
  struct timespec ctime {};
  dev_t rdev = 0;  // a device's numbers (makedev); 0 for every other type
};

// t in nanoseconds since the epoch: one number to store and compare.
inline int64_t nanoseconds(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// The S_IF* bits of t.
mode_t type_bits(FileType t);
// a as stat(2) reports it: st_mode the type and permission bits (setuid, setgid and sticky
// included), st_ino the file id, st_blksize `block_size` (the server's block: the size
// reads go best in). The one conversion the C API and odafs-mount both answer with.
struct stat to_stat(const Attr& a, uint32_t block_size);

struct DirEntry {
  std::string name;
  FileType type = FileType::kRegular;
  uint64_t fileid = 0;
  // With Client::readdir's attributes: the entry's (not following a symlink), as lstat
  // would answer now; absent where the listing cannot vouch for them.
  std::optional<Attr> attr;
};

struct FsStat {
  uint64_t total_bytes = 0, free_bytes = 0, avail_bytes = 0;
  uint64_t total_files = 0, free_files = 0;
  uint32_t block_size = 0, max_name = 0;
};

}  // namespace odafs
