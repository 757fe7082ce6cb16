// Files odafsd keeps for itself or reads as secrets (the recovery record in --state-dir,
// --handle-key-file), trusted as sshd trusts its keys: only when no user but root and
// odafsd's own could have put them there or changed them.
//
// Why: odafsd often runs as root. A directory another user may write lets that user plant
// a link where odafsd creates a file (root then writes through it, over any file), a FIFO
// where it reads one (the open waits for ever), or a forged record or key. So a directory
// is refused unless it and every directory above it are root's or odafsd's user's, and it
// is written by no one else (a sticky bit is not enough there: others could still add
// names); above it, a directory others may write is accepted only when sticky (as /tmp),
// where no one can rename or remove another's entries. Files are opened relative to the
// directory's descriptor, never through a link, never waiting, and only if regular.
//
// Thread-safety: the functions keep no state; safe from any thread.
#pragma once

#include <sys/stat.h>

#include <string>

#include "base/status.h"

namespace odafs::server {

// The directory part of a path ("." for a bare name, "/" for "/x") and its last part.
std::string dir_of(const std::string& path);
std::string base_of(const std::string& path);

// Opens directory `dir`, made (0700, its missing parents too) first when `make` is set,
// for files only root and this process's effective user may change: EPERM (the message
// names the directory and what is wrong) when it, resolved, or a directory above it is
// owned by another user, when group or others may write it, or when they may write a
// directory above it that is not sticky. Returns a descriptor (O_DIRECTORY | O_CLOEXEC)
// the caller owns.
Result<int> open_private_dir(const std::string& dir, bool make);

// Opens `name` in directory `dirfd` with access `flags` (O_RDONLY, ...) and O_NOFOLLOW |
// O_NONBLOCK | O_NOCTTY | O_CLOEXEC: never through a link (ELOOP), never waiting (a FIFO
// opens at once, then is refused). Refuses (EPERM) anything but a regular file owned by
// root or this process's effective user that group and others may not write. ENOENT when
// there is nothing at the name. *st: the open file's status. Returns a descriptor the
// caller owns.
Result<int> open_private_file(int dirfd, const std::string& name, int flags, struct stat* st);

// The bytes of private file `name` in `dirfd` (open_private_file), EFBIG if more than
// `max`. *st as there.
Result<std::string> read_private_file(int dirfd, const std::string& name, size_t max,
                                      struct stat* st);

}  // namespace odafs::server
