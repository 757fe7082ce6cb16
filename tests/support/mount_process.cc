#include "tests/support/mount_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/support/server_process.h"

extern char** environ;

namespace odafs::test {

const char* mount_binary() {
#ifdef ODAFS_MOUNT_PATH
  return ODAFS_MOUNT_PATH;
#else
  return "";
#endif
}

namespace {

// Unescapes mountinfo's octal escapes (\040 for a space).
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      out += static_cast<char>(std::strtol(s.substr(i + 1, 3).c_str(), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// As root: a bare FUSE mount(2) on a temporary directory, undone at once (the kernel never
// gets an answer to its INIT; closing the device aborts the connection).
std::string probe_root_mount() {
  char tmpl[] = "/tmp/odafs-fuse-probe-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return std::string("mkdtemp: ") + std::strerror(errno);
  std::string reason;
  int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    reason = std::string("cannot open /dev/fuse: ") + std::strerror(errno);
  } else {
    std::string opts = "fd=" + std::to_string(fd) + ",rootmode=40000,user_id=0,group_id=0";
    if (::mount("odafs-probe", tmpl, "fuse.odafs-probe", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
      reason = std::string("mounting a FUSE file system is not permitted here: mount: ") +
               std::strerror(errno);
      close(fd);
    } else {
      close(fd);
      umount2(tmpl, MNT_DETACH);
    }
  }
  rmdir(tmpl);
  return reason;
}

std::string decide() {
  if (*mount_binary() == '\0') return "odafs-mount was not built (libfuse3 missing)";
  if (access("/dev/fuse", R_OK | W_OK) != 0) {
    return std::string("/dev/fuse is absent or not accessible: ") + std::strerror(errno);
  }
  if (access("/usr/bin/fusermount3", X_OK) != 0 && access("/bin/fusermount3", X_OK) != 0) {
    return "fusermount3 is not installed (apt install fuse3)";
  }
  if (geteuid() == 0) return probe_root_mount();
  struct stat st {};
  if ((stat("/usr/bin/fusermount3", &st) != 0 && stat("/bin/fusermount3", &st) != 0) ||
      !(st.st_mode & S_ISUID)) {
    return "not root, and fusermount3 is not setuid: cannot mount FUSE file systems";
  }
  return "";
}

}  // namespace

const std::string& fuse_unavailable_reason() {
  static const std::string reason = [] {
    std::string r = decide();
    if (!r.empty()) std::fprintf(stderr, "FUSE mount tests skipped: %s\n", r.c_str());
    return r;
  }();
  return reason;
}

bool is_odafs_mounted(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
    std::istringstream fields(line);
    std::string id, parent, dev, root, mp;
    fields >> id >> parent >> dev >> root >> mp;
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    if (unescape(mp) == dir && fstype == "fuse.odafs-mount") return true;
  }
  return false;
}

int fusermount(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s = {"fusermount3"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv = argv_of(argv_s);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, "fusermount3", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

MountProcess::MountProcess(std::string url, std::string mountpoint,
                           std::vector<std::string> options)
    : mountpoint_(std::move(mountpoint)) {
  char tmpl[] = "/tmp/odafs-mount-log-XXXXXX";
  int log = mkstemp(tmpl);
  if (log < 0) throw std::runtime_error("mkstemp failed");
  log_path_ = tmpl;
  std::vector<std::string> argv_s = {mount_binary(), "-f"};
  for (const std::string& o : options) {
    argv_s.push_back("-o");
    argv_s.push_back(o);
  }
  argv_s.push_back(url);
  argv_s.push_back(mountpoint_);
  std::vector<char*> argv = argv_of(argv_s);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, log, 1);
  posix_spawn_file_actions_adddup2(&fa, log, 2);
  // SIGINT/SIGTERM at their defaults, whatever the test runner ignores: libfuse installs
  // its handlers only over default dispositions.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t def;
  sigemptyset(&def);
  sigaddset(&def, SIGINT);
  sigaddset(&def, SIGTERM);
  sigaddset(&def, SIGHUP);
  sigaddset(&def, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &def);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  int rc = posix_spawn(&pid_, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  close(log);
  if (rc != 0) {
    pid_ = -1;
    throw std::runtime_error(std::string("cannot start odafs-mount: ") + std::strerror(rc));
  }
  bool exited = false;
  const bool mounted = eventually(
      [&] {
        int status = 0;
        exited = waitpid(pid_, &status, WNOHANG) == pid_;
        return exited || is_odafs_mounted(mountpoint_);
      },
      10);
  if (exited) {
    pid_ = -1;
    throw std::runtime_error("odafs-mount exited before mounting: " + stderr_text());
  }
  if (!mounted) {
    std::string text = stderr_text();
    unmount();
    throw std::runtime_error("odafs-mount did not mount within 10 s: " + text);
  }
}

MountProcess::~MountProcess() {
  unmount();
  unlink(log_path_.c_str());
}

int MountProcess::unmount() {
  // Lazy (-z): a test that failed with a file still open must not leave the mount behind.
  if (is_odafs_mounted(mountpoint_)) fusermount({"-u", "-z", mountpoint_});
  if (pid_ <= 0) return 0;
  int status = wait_exit(pid_, std::chrono::seconds(5));
  if (status == -1) {
    ::kill(pid_, SIGTERM);
    status = wait_exit(pid_, std::chrono::seconds(5));
  }
  if (status == -1) {
    ::kill(pid_, SIGKILL);
    wait_exit(pid_, std::chrono::seconds(5));
  }
  pid_ = -1;
  // A killed odafs-mount leaves its mount (the kernel answers ENOTCONN): take it away.
  if (is_odafs_mounted(mountpoint_)) fusermount({"-u", "-z", mountpoint_});
  return status;
}

std::string MountProcess::stderr_text() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace odafs::test
