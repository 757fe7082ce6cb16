#include "server/daemon_setup.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "base/log.h"
#include "server/private_files.h"

namespace odafs::server {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

void raise_fd_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  unsigned char addr[16];
  if (inet_pton(AF_INET, host.c_str(), addr) == 1) return addr[0] == 127;
  return inet_pton(AF_INET6, host.c_str(), addr) == 1 && IN6_IS_ADDR_LOOPBACK(addr);
}

Result<ExportRules> rules_from_flags(const AccessFlags& flags, const std::string& listen_host) {
  ExportRules rules;
  try {
    for (const std::string& spec : flags.clients) rules.add(spec, flags.anon_uid, flags.anon_gid);
  } catch (const std::invalid_argument& e) {
    return Status(EINVAL, std::string("--clients ") + e.what());
  }
  if (flags.clients.empty()) {
    if (!is_loopback_host(listen_host)) {
      return Status(EINVAL, "--listen " +
                                (listen_host.empty() ? std::string("0.0.0.0") : listen_host) +
                                " is reachable from other hosts: say who may use the export, "
                                "e.g. --clients 10.0.0.0/8(rw,root_squash), or give an "
                                "--exports file");
    }
    rules.add_loopback_default(flags.anon_uid, flags.anon_gid);
  }
  return rules;
}

Result<std::vector<ExportLine>> load_exports(const std::string& file, const AccessFlags& flags) {
  ODAFS_ASSIGN_OR_RETURN(std::vector<ExportLine> lines,
                         read_exports_file(file, flags.anon_uid, flags.anon_gid));
  if (lines.empty()) return Status(EINVAL, file + " exports nothing");
  for (const ExportLine& e : lines) {
    struct stat st;
    const bool found = stat(e.path.c_str(), &st) == 0;
    if (!found || !S_ISDIR(st.st_mode)) {
      const bool missing = !found && errno == ENOENT;
      return Status(missing ? ENOENT : ENOTDIR, file + ":" + std::to_string(e.line) + ": " +
                                                    e.path + " is not a directory" +
                                                    (missing ? " (it does not exist)" : ""));
    }
  }
  return lines;
}

Status configure_identity(const AccessFlags& flags, bool remote_store, FileService::Options* fs) {
  fs->access.read_only = flags.read_only;
  const bool root = geteuid() == 0;
  const bool can_act = root || remote_store;
  if (flags.identity == "caller" && !can_act) {
    return Status(EPERM, "--identity caller needs root: only root can act as each caller");
  }
  fs->act_as_callers = flags.identity.empty() ? can_act : flags.identity == "caller";
  if (!fs->act_as_callers && root) {
    ODAFS_LOG_WARN("--identity server: every caller acts as root over the export");
  } else if (!fs->act_as_callers) {
    ODAFS_LOG_INFO("not root: every caller acts as uid %u over the export", geteuid());
  }
  return Status();
}

std::string tls_rules_problem(const ExportRules& rules, bool have_tls,
                              const TlsIdentities::Files& files) {
  for (size_t i = 0; i < rules.size(); ++i) {
    const ClientRule& rule = rules.rule(i);
    if (rule.tls && !have_tls) return "client " + rule.spec + " says tls: give --tls-cert";
    if (rule.mtls && files.tls.ca.empty()) {
      return "client " + rule.spec + " says mtls: give --tls-ca";
    }
  }
  return "";
}

Result<std::string> prepare_recovery_record(const std::string& state_dir_flag,
                                            const std::string& key) {
  std::string state_dir = state_dir_flag;
  if (state_dir.empty()) {
    const char* xdg = std::getenv("XDG_STATE_HOME");
    const char* home = std::getenv("HOME");
    if (geteuid() == 0) {
      state_dir = "/var/lib/odafs";
    } else if (xdg != nullptr && *xdg == '/') {
      state_dir = std::string(xdg) + "/odafs";
    } else if (home != nullptr && *home == '/') {
      state_dir = std::string(home) + "/.local/state/odafs";
    } else {
      ODAFS_LOG_WARN("no state directory (no HOME): no write delegations; see --state-dir");
      return std::string();
    }
  }
  // Named by the export's real path: two spellings of one directory share one record.
  char* real = realpath(key.c_str(), nullptr);
  const std::string named = real != nullptr ? real : key;
  std::free(real);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(named.data()), named.size(), digest);
  char name[32];
  std::snprintf(name, sizeof name, "recovery-%02x%02x%02x%02x%02x%02x%02x%02x", digest[0],
                digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7]);
  Result<int> opened = open_private_dir(state_dir, true);
  if (!opened.ok()) {
    return Status(opened.errno_value(),
                  "--state-dir " + state_dir + ": " + opened.status().message());
  }
  close(*opened);
  return state_dir + "/" + name;
}

namespace {

// The uuid a session file holds: 32 lowercase hex digits, else "".
std::string uuid_in(int fd) {
  char buf[33] = {};
  const ssize_t n = pread(fd, buf, 32, 0);
  if (n != 32) return "";
  for (char c : std::string(buf, 32)) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return "";
  }
  return std::string(buf, 32);
}

}  // namespace

Result<CephSession> claim_ceph_session(const std::string& record) {
  const std::string name = base_of(record) + ".ceph-session";
  auto refuse = [&](int err, const std::string& why) {
    return Status(err, "--state-dir " + dir_of(record) + ": " + name + ": " + why);
  };
  Result<int> dir = open_private_dir(dir_of(record), false);
  if (!dir.ok()) return refuse(dir.errno_value(), dir.status().message());
  struct stat st;
  Result<int> file = open_private_file(*dir, name, O_RDWR, &st);
  if (file.errno_value() == ENOENT) {
    // Made here, or by a racing start (then opened as it is).
    const int made =
        openat(*dir, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (made >= 0) close(made);
    file = open_private_file(*dir, name, O_RDWR, &st);
  }
  if (!file.ok()) {
    close(*dir);
    return refuse(file.errno_value(), file.status().message());
  }
  CephSession session{"", *file};
  if (flock(session.lock_fd, LOCK_EX | LOCK_NB) != 0) {
    close(session.lock_fd);
    close(*dir);
    return refuse(EBUSY,
                  "another odafsd serves this export with this state directory (each gateway "
                  "needs its own --state-dir: the second would evict the first's CephFS "
                  "session)");
  }
  session.uuid = uuid_in(session.lock_fd);
  if (session.uuid.empty()) {
    unsigned char bytes[16];
    if (RAND_bytes(bytes, sizeof bytes) != 1) {
      close(session.lock_fd);
      close(*dir);
      return refuse(EIO, "no random bytes for a session uuid");
    }
    char hex[33];
    for (size_t i = 0; i < sizeof bytes; ++i) std::snprintf(hex + 2 * i, 3, "%02x", bytes[i]);
    session.uuid.assign(hex, 32);
    const bool kept = pwrite(session.lock_fd, hex, 32, 0) == 32 &&
                      ftruncate(session.lock_fd, 32) == 0 && fsync(session.lock_fd) == 0 &&
                      fsync(*dir) == 0;
    if (!kept) {
      const int err = errno;
      close(session.lock_fd);
      close(*dir);
      return refuse(err, std::string("cannot keep the session uuid: ") + std::strerror(err));
    }
  }
  close(*dir);
  return session;
}

Result<NodeTable::SharedKey> read_handle_key(const std::string& path,
                                             const std::string& export_spec) {
  auto refuse = [&path](int err, const std::string& why) {
    return Status(err, "--handle-key-file " + path + ": " + why);
  };
  Result<int> dir = open_private_dir(dir_of(path), false);
  if (!dir.ok()) return refuse(dir.errno_value(), dir.status().message());
  struct stat st;
  Result<std::string> bytes = read_private_file(*dir, base_of(path), 1 << 16, &st);
  close(*dir);
  if (!bytes.ok()) return refuse(bytes.errno_value(), bytes.status().message());
  if ((st.st_mode & 077) != 0) return refuse(EPERM, "may be read by others: chmod 600 it");
  if (bytes->size() < 32) {
    return refuse(EINVAL, "holds " + std::to_string(bytes->size()) +
                              " bytes, 32 or more are needed (head -c 32 /dev/urandom > FILE)");
  }
  const std::string keyed = *bytes + '\0' + export_spec;
  NodeTable::SharedKey key;
  SHA256(reinterpret_cast<const unsigned char*>(keyed.data()), keyed.size(), key.data());
  return key;
}

Status reload_exports(const std::string& file, const AccessFlags& flags, bool have_tls,
                      const TlsIdentities::Files& tls_files, const ExportRouter& router) {
  Result<std::vector<ExportLine>> lines = read_exports_file(file, flags.anon_uid, flags.anon_gid);
  if (!lines.ok()) {
    ODAFS_LOG_ERROR("SIGHUP: exports not reloaded, the old rules serve on: %s",
                    lines.status().message().c_str());
    return lines.status();
  }
  for (const ExportLine& line : *lines) {
    if (std::string why = tls_rules_problem(line.rules, have_tls, tls_files); !why.empty()) {
      const std::string where = file + ":" + std::to_string(line.line) + ": " + why;
      ODAFS_LOG_ERROR("SIGHUP: exports not reloaded, the old rules serve on: %s", where.c_str());
      return Status(EINVAL, where);
    }
  }
  for (const ExportRouter::Export& e : router.exports()) {
    auto line = std::find_if(lines->begin(), lines->end(),
                             [&e](const ExportLine& l) { return l.path == e.path; });
    if (line == lines->end()) {
      ODAFS_LOG_WARN("SIGHUP: %s is no longer in %s: it admits no client from now on",
                     e.path.c_str(), file.c_str());
      e.service->authority().replace_rules({});
    } else {
      e.service->authority().replace_rules(std::move(line->rules));
      ODAFS_LOG_INFO("SIGHUP: %s: %zu client rule(s) from %s:%d", e.path.c_str(),
                     e.service->authority().rules().size(), file.c_str(), line->line);
    }
  }
  for (const ExportLine& line : *lines) {
    const auto& served = router.exports();
    if (std::none_of(served.begin(), served.end(),
                     [&line](const auto& e) { return e.path == line.path; })) {
      ODAFS_LOG_WARN("SIGHUP: %s:%d: %s is new: it is served from odafsd's next start",
                     file.c_str(), line.line, line.path.c_str());
    }
  }
  return Status();
}

}  // namespace odafs::server
