// The one-node Ceph cluster of a test suite (scripts/ceph-cluster.sh): started on first
// use, stopped by PID when the process exits, even after a failed check, and by the
// script's watcher when the process is killed. Where it cannot
// start (libcephfs not built in, the daemons not installed), why_not says why, for the
// suite's doctest skip.
//
// Thread-safety: cluster() is safe from any thread (a function-local static).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "tests/support/server_process.h"

namespace odafs::test {

struct CephCluster {
  std::unique_ptr<TempDir> dir;
  std::string conf;     // the cluster's ceph.conf; empty when why_not is set
  std::string why_not;  // empty when the cluster runs

  CephCluster() {
#if !ODAFS_HAVE_CEPHFS
    why_not = "needs libcephfs-dev (bash scripts/deps.sh libcephfs-dev), not found at build";
#else
    dir = std::make_unique<TempDir>();
    const std::string out = dir->path() + "/start.out";
    const std::string command = std::string("bash ") + ODAFS_SOURCE_DIR +
                                "/scripts/ceph-cluster.sh start " + dir->path() + "/c " +
                                std::to_string(getpid()) + " >" + out +
                                " 2>" + dir->path() + "/start.err";
    const int status = std::system(command.c_str());
    const std::string err = read_local(dir->path() + "/start.err");
    if (status != 0) {
      const size_t said = err.rfind("ceph-cluster:");
      why_not =
          "no Ceph cluster could start here: " + err.substr(said == std::string::npos ? 0 : said);
      return;
    }
    std::string text = read_local(out);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    const size_t last = text.rfind('\n');
    conf = text.substr(last == std::string::npos ? 0 : last + 1);
#endif
  }
  ~CephCluster() {
    if (dir) {
      const std::string command = std::string("bash ") + ODAFS_SOURCE_DIR +
                                  "/scripts/ceph-cluster.sh stop " + dir->path() + "/c";
      [[maybe_unused]] int ignored = std::system(command.c_str());
    }
  }
};

inline CephCluster& cluster() {
  static CephCluster c;
  return c;
}

}  // namespace odafs::test
