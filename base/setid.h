// The setuid/setgid rule for a file whose bytes, size or owner change.
#pragma once

#include <sys/stat.h>

namespace odafs {

// The mode bits a change of a regular file's bytes, size or owner takes away when the
// changer lacks CAP_FSETID, as Linux does (should_remove_suid, setattr_should_drop_sgid):
// setuid always; setgid only together with group-execute (without it, setgid marks
// mandatory locking, not a privilege, and stays).
constexpr mode_t setid_bits_to_drop(mode_t mode) {
  mode_t drop = mode & S_ISUID;
  if ((mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP)) drop |= S_ISGID;
  return drop;
}

}  // namespace odafs
