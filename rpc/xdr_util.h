// Glue between typed XDR routines and libtirpc's untyped xdrproc_t.
#pragma once

#include <rpc/rpc.h>

namespace odafs::rpc {

// libtirpc's xdrproc_t is `bool_t (*)(XDR*, ...)`, while rpcgen's routines take a typed
// pointer. The detour through a plain function pointer type is the sanctioned way to
// convert between function pointer types; every routine is called with (XDR*, T*).
template <class T>
xdrproc_t to_xdrproc(bool_t (*fn)(XDR*, T*)) {
  return reinterpret_cast<xdrproc_t>(reinterpret_cast<void (*)()>(fn));
}

// Encodes/decodes nothing (void arguments or results).
inline bool_t xdr_nothing(XDR*, void*) { return TRUE; }

}  // namespace odafs::rpc
