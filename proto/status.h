// Mapping between errno values and the protocol's status codes, both directions.
#pragma once

#include <cerrno>

#include "proto/odafs_prot.h"

namespace odafs {

inline odafs_stat status_from_errno(int err) {
  switch (err) {
    case 0:
      return ODAFS_OK;
    case EPERM:
      return ODAFS_ERR_PERM;
    case ENOENT:
      return ODAFS_ERR_NOENT;
    case ENXIO:
      return ODAFS_ERR_NXIO;
    case EACCES:
      return ODAFS_ERR_ACCES;
    case EEXIST:
      return ODAFS_ERR_EXIST;
    case EXDEV:
      return ODAFS_ERR_XDEV;
    case ENODEV:
      return ODAFS_ERR_NODEV;
    case ENOTDIR:
      return ODAFS_ERR_NOTDIR;
    case EISDIR:
      return ODAFS_ERR_ISDIR;
    case EINVAL:
      return ODAFS_ERR_INVAL;
    case EFBIG:
      return ODAFS_ERR_FBIG;
    case ENOSPC:
      return ODAFS_ERR_NOSPC;
    case EROFS:
      return ODAFS_ERR_ROFS;
    case EMLINK:
      return ODAFS_ERR_MLINK;
    case ENAMETOOLONG:
      return ODAFS_ERR_NAMETOOLONG;
    case ENOTEMPTY:
      return ODAFS_ERR_NOTEMPTY;
    case EDQUOT:
      return ODAFS_ERR_DQUOT;
    case ESTALE:
      return ODAFS_ERR_STALE;
    case ELOOP:
      return ODAFS_ERR_LOOP;
    case EOPNOTSUPP:
      return ODAFS_ERR_NOTSUPP;
    default:
      return ODAFS_ERR_IO;
  }
}

// The errno a client call reports for a status. BADHANDLE reads as ESTALE to callers
// (their handle is no good either way), SERVERFAULT and unknown codes as EIO.
inline int errno_from_status(int status) {
  switch (status) {
    case ODAFS_OK:
      return 0;
    case ODAFS_ERR_PERM:
      return EPERM;
    case ODAFS_ERR_NOENT:
      return ENOENT;
    case ODAFS_ERR_IO:
      return EIO;
    case ODAFS_ERR_NXIO:
      return ENXIO;
    case ODAFS_ERR_ACCES:
      return EACCES;
    case ODAFS_ERR_EXIST:
      return EEXIST;
    case ODAFS_ERR_XDEV:
      return EXDEV;
    case ODAFS_ERR_NODEV:
      return ENODEV;
    case ODAFS_ERR_NOTDIR:
      return ENOTDIR;
    case ODAFS_ERR_ISDIR:
      return EISDIR;
    case ODAFS_ERR_INVAL:
      return EINVAL;
    case ODAFS_ERR_FBIG:
      return EFBIG;
    case ODAFS_ERR_NOSPC:
      return ENOSPC;
    case ODAFS_ERR_ROFS:
      return EROFS;
    case ODAFS_ERR_MLINK:
      return EMLINK;
    case ODAFS_ERR_NAMETOOLONG:
      return ENAMETOOLONG;
    case ODAFS_ERR_NOTEMPTY:
      return ENOTEMPTY;
    case ODAFS_ERR_DQUOT:
      return EDQUOT;
    case ODAFS_ERR_STALE:
      return ESTALE;
    case ODAFS_ERR_LOOP:
      return ELOOP;
    case ODAFS_ERR_BADHANDLE:
      return ESTALE;
    case ODAFS_ERR_BADCOOKIE:
      return EINVAL;
    case ODAFS_ERR_NOTSUPP:
      return EOPNOTSUPP;
    case ODAFS_ERR_DELAY:
    case ODAFS_ERR_GRACE:  // retried as DELAY is: the grace period ends within grace_ms
      return EAGAIN;
    case ODAFS_ERR_BAD_STATEID:
      return EIO;  // the bytes were lost with the delegation: as a failed write
    default:
      return EIO;
  }
}

}  // namespace odafs
