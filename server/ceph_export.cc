#include "server/ceph_export.h"

#include <cerrno>
#include <utility>

namespace odafs::server {

Result<std::shared_ptr<Store>> open_ceph_export(const CephStore::Options& options) {
  if (options.path.empty() || options.path[0] != '/') {
    return Status(EINVAL, "--export ceph:PATH needs an absolute PATH");
  }
  if (options.conf.empty()) return Status(EINVAL, "--export ceph:PATH needs --ceph-conf FILE");
#if ODAFS_HAVE_CEPHFS
  Result<std::unique_ptr<CephStore>> store = CephStore::connect(options);
  if (!store) {
    return Status(store.errno_value() == EINVAL ? EIO : store.errno_value(),
                  "CephFS " + options.path + ": " + store.status().message());
  }
  return std::shared_ptr<Store>(std::move(store).value());
#else
  return Status(EINVAL,
                "--export ceph:PATH: this odafsd was built without libcephfs (scripts/deps.sh "
                "libcephfs-dev, then rebuild)");
#endif
}

}  // namespace odafs::server
