// Test support: a real `odafs-mount -f` process on a temporary mountpoint. No doctest.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace odafs::test {

// Why FUSE mounts cannot be tested here ("" when they can): no /dev/fuse, no permission to
// mount (checked with a real mount(2) as root, or a setuid fusermount3 otherwise), or no
// odafs-mount binary. Decided once, the first time it is asked.
const std::string& fuse_unavailable_reason();
inline bool fuse_available() { return fuse_unavailable_reason().empty(); }
// "needs FUSE: <the reason>", for a doctest skip's description. Lives for the process.
inline const char* fuse_skip_description() {
  static const std::string text = "needs FUSE: " + fuse_unavailable_reason();
  return text.c_str();
}
// A doctest TEST_CASE that reports a skip naming the reason when FUSE is unavailable (the
// including file includes doctest).
#define ODAFS_MOUNT_TEST(name)                                      \
  TEST_CASE(name* doctest::skip(!::odafs::test::fuse_available()) * \
            doctest::description(                                   \
                ::odafs::test::fuse_available() ? "" : ::odafs::test::fuse_skip_description()))

// The odafs-mount program's path ("" when it was not built).
const char* mount_binary();

// Whether `dir` is a mountpoint of a FUSE odafs-mount file system now (/proc/self/mountinfo).
bool is_odafs_mounted(const std::string& dir);

// Runs `fusermount3 ARGS...`, its output discarded; returns its exit status (-1 when it
// could not run or died of a signal).
int fusermount(const std::vector<std::string>& args);

// Starts `odafs-mount -f [-o OPTIONS] URL MOUNTPOINT` and waits (up to 10 s) until the mount
// shows in /proc/self/mountinfo. Throws std::runtime_error, with odafs-mount's stderr, if
// it exits or the mount does not show up in time. The destructor always unmounts
// (fusermount3 -u, lazily), then stops the process (SIGTERM, SIGKILL after 5 s), whatever
// state it is in, so a failing test leaves no mount behind.
class MountProcess {
 public:
  MountProcess(std::string url, std::string mountpoint, std::vector<std::string> options = {});
  ~MountProcess();
  MountProcess(const MountProcess&) = delete;
  MountProcess& operator=(const MountProcess&) = delete;

  const std::string& mountpoint() const { return mountpoint_; }
  std::string operator/(const std::string& name) const { return mountpoint_ + "/" + name; }
  pid_t pid() const { return pid_; }
  // Unmounts with fusermount3 -u and waits (up to 10 s) for odafs-mount to exit. Returns its
  // wait status (-1 if it had to be killed).
  int unmount();
  // What odafs-mount wrote on stderr so far.
  std::string stderr_text() const;

 private:
  std::string mountpoint_;
  std::string log_path_;
  pid_t pid_ = -1;
};

}  // namespace odafs::test
