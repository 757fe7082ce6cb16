// The XDR routines of odafs_name and odafs_path, in place of rpcgen's (CMakeLists.txt
// renames those): the same wire form, but a string that holds a NUL byte decodes as the
// empty string. A C string would otherwise end at the NUL, and "f\0/../x" would reach the
// server as "f". No procedure accepts an empty name, link target or mount path, so such a
// string is answered INVAL.
#include <cstdlib>
#include <cstring>

#include "proto/odafs_prot.h"

namespace {

bool_t xdr_string_without_nul(XDR* xdrs, char** sp, u_int max) {
  if (xdrs->x_op != XDR_DECODE) return xdr_string(xdrs, sp, max);  // encode, free
  u_int size = 0;
  if (!xdr_u_int(xdrs, &size) || size > max) return FALSE;
  // Like xdr_string: allocate when the caller gave no buffer; xdr_free releases it.
  if (*sp == nullptr) {
    *sp = static_cast<char*>(std::malloc(size + 1));
    if (*sp == nullptr) return FALSE;
  }
  (*sp)[size] = '\0';
  if (!xdr_opaque(xdrs, *sp, size)) return FALSE;
  if (std::memchr(*sp, '\0', size) != nullptr) (*sp)[0] = '\0';
  return TRUE;
}

}  // namespace

extern "C" bool_t xdr_odafs_name(XDR* xdrs, odafs_name* objp) {
  return xdr_string_without_nul(xdrs, objp, ODAFS_MAXNAMLEN);
}

extern "C" bool_t xdr_odafs_path(XDR* xdrs, odafs_path* objp) {
  return xdr_string_without_nul(xdrs, objp, ODAFS_MAXPATHLEN);
}
