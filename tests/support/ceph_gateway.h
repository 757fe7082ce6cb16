// Test support for the CephFS gateway suites (test_ceph_gateway, test_ceph_writes): the
// suite's cluster (tests/support/ceph_cluster.h), gateways on it, and the steps those
// suites share. Uses doctest's checks: test binaries only.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/support/ceph_cluster.h"
#include "tests/support/client_util.h"
#include "tests/support/mounted.h"
#include "tests/support/server_process.h"

namespace odafs::test {

inline bool no_cluster() { return !cluster().why_not.empty(); }
inline const char* cluster_skip_reason() { return no_cluster() ? cluster().why_not.c_str() : ""; }
// For FUSE cases: the cluster, then FUSE with root.
inline const char* cluster_mount_skip_reason() {
  return no_cluster() ? cluster_skip_reason() : root_mount_skip();
}

// A gateway: odafsd exporting the root of the suite's CephFS.
inline std::unique_ptr<ServerProcess> gateway(std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"--ceph-conf", cluster().conf};
  args.insert(args.end(), more.begin(), more.end());
  return std::make_unique<ServerProcess>("ceph:/", args);
}

// odafs://A,B/: a mount that fails over from a to b.
inline std::string both_url(const ServerProcess& a, const ServerProcess& b) {
  return "odafs://127.0.0.1:" + std::to_string(a.port()) +
         ",127.0.0.1:" + std::to_string(b.port()) + "/";
}

// A directory of its own for each test, on the shared file system.
inline std::string fresh_top(Client& c, const char* what) {
  const std::string top = std::string("/") + what + "-" + std::to_string(getpid());
  c.mkdir(top, 0777);
  return top;
}

inline void write_file(Client& c, const std::string& path, const std::string& data) {
  File f = c.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(f.pwrite(data.data(), data.size(), 0) == data.size());
  f.close();
}

// No client data cache: every read goes to the server, one-sided where references allow.
inline MountOptions uncached() {
  MountOptions o;
  o.cache_blocks = 0;
  return o;
}

// Opens `path` through `reader` until an open is served by a delegation (no call), reading
// `expect` each time, for up to 30 s: the gateway grants one once it holds CephFS's, which
// CephFS grants no one while any client has the file open to write (a gateway closes a
// file it wrote a moment after its writes stop) and recalls early ones while its locks
// settle after a writer (seconds).
inline bool until_delegated(Client& reader, const std::string& path, const std::string& expect) {
  return eventually(
      [&] {
        const uint64_t opens = reader.stats().delegated_opens.load();
        File r = reader.open(path, O_RDONLY);
        CHECK(read_all(r, expect.size()) == expect);
        return reader.stats().delegated_opens.load() > opens;
      },
      30);
}

// A --handle-key-file of 48 bytes named `name` in dir, mode 0600.
inline std::string make_key_file(const TempDir& dir, const char* name) {
  const std::string path = dir.path() + "/" + name;
  write_local(path, pattern(48, std::hash<std::string>()(name)));
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  return path;
}

// Fences a dead gateway as a deployment would: the MDS evicts the CephFS session of process
// `pid` (libcephfs names its pid in its session's metadata), so the capabilities it held
// go now rather than at the session timeout.
inline void evict_session_of(pid_t pid) {
  const std::string command =
      "ceph --conf '" + cluster().conf +
      "' tell mds.a client evict client_metadata.pid=" + std::to_string(pid) + " >/dev/null 2>&1";
  CHECK(std::system(command.c_str()) == 0);
}

}  // namespace odafs::test
