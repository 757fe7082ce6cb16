// odafsd's CephFS export (--export ceph:PATH): its store, connected. Part of odafsd (built
// with it, where libcephfs decides what it can do), not of the server library.
#pragma once

#include <memory>

#include "base/status.h"
#include "server/store.h"
#include "server/store_impl/ceph_store.h"

namespace odafs::server {

// Connects options.path's CephFS. EINVAL (naming the flag) for a path that is not absolute,
// no conf, or an odafsd built without libcephfs: the caller's usage errors; else what
// libcephfs said.
Result<std::shared_ptr<Store>> open_ceph_export(const CephStore::Options& options);

}  // namespace odafs::server
