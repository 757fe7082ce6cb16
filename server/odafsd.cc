// odafsd: the odafs file server. Serves one directory (--export DIR) or each export of an
// exports file (--exports FILE) over ONC RPC. Every flag: odafsd --help, docs/usage.md.
//
// Once ready it prints one line on stdout,
//   "odafsd ready rpc=HOST:PORT engine=HOST:PORT|none export=DIR[,DIR...] backend=NAME
//   threads=N engine_threads=N [metrics=HOST:PORT]",
// which scripts and tests wait for. SIGTERM or SIGINT shut it down cleanly.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/log.h"
#include "proto/odafs_prot.h"
#include "rpc/server.h"
#include "server/cpu_accounting.h"
#include "server/export_router.h"
#include "server/exports_file.h"
#include "server/file_env.h"
#include "server/file_service.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/private_files.h"
#include "server/record_writer.h"
#include "server/stop_watchdog.h"
#include "server/tls_identities.h"
#if ODAFS_HAVE_CEPHFS
#include "server/store_impl/ceph_store.h"
#endif

namespace {

constexpr const char* kDefaultExports = "/etc/odafs/exports";

// The cores this process may run on (its affinity mask: taskset, cgroups' cpusets), at
// least one.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// The usage text, made from the flag table in main (odafs::Flags).
std::string usage_text;

[[noreturn]] void usage(const char* why) {
  if (why != nullptr) std::fprintf(stderr, "odafsd: %s\n", why);
  std::fputs(usage_text.c_str(), stderr);
  std::exit(2);
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  unsigned char addr[16];
  if (inet_pton(AF_INET, host.c_str(), addr) == 1) return addr[0] == 127;
  return inet_pton(AF_INET6, host.c_str(), addr) == 1 && IN6_IS_ADDR_LOOPBACK(addr);
}

// Who may call and as whom calls run, from the flags. Calls usage() on a bad combination.
struct AccessFlags {
  std::vector<std::string> clients;
  bool read_only = false;
  std::string identity;  // "", "caller" or "server"
  uint32_t anon_uid = 65534;
  uint32_t anon_gid = 65534;
};

// The CephFS path of an export "ceph:PATH", or empty for a local directory.
std::string ceph_path(const std::string& export_spec) {
  return export_spec.rfind("ceph:", 0) == 0 ? export_spec.substr(5) : std::string();
}

// The store of a CephFS export (--export ceph:PATH), connected; exits on failure.
std::shared_ptr<odafs::server::Store> open_ceph_store(const std::string& path,
                                                      const std::string& conf,
                                                      const std::string& id) {
#if ODAFS_HAVE_CEPHFS
  if (path.empty() || path[0] != '/') usage("--export ceph:PATH needs an absolute PATH");
  if (conf.empty()) usage("--export ceph:PATH needs --ceph-conf FILE");
  odafs::Result<std::unique_ptr<odafs::server::CephStore>> store =
      odafs::server::CephStore::connect({conf, id, path});
  if (!store) {
    std::fprintf(stderr, "odafsd: CephFS %s: %s\n", path.c_str(),
                 store.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(store).value();
#else
  (void)path, (void)conf, (void)id;
  usage(
      "--export ceph:PATH: this odafsd was built without libcephfs (scripts/deps.sh "
      "libcephfs-dev, then rebuild)");
#endif
}

// The key of --handle-key-file: SHA-256 of the file's bytes, of which there must be 32 or
// more, in a file no one but its owner may read (it lets its holder forge handles), and of
// the export: gateways of different directories of one CephFS never take each other's
// handles (a handle would otherwise reach past the export it was given for). The file and
// its directory must be private (server/private_files.h): a key another user could swap
// would let that user forge handles.
odafs::server::NodeTable::SharedKey read_handle_key(const std::string& path,
                                                    const std::string& export_spec) {
  auto refuse = [&path](const std::string& why) {
    usage(("--handle-key-file " + path + ": " + why).c_str());
  };
  odafs::Result<int> dir = odafs::server::open_private_dir(odafs::server::dir_of(path), false);
  if (!dir.ok()) refuse(dir.status().message());
  struct stat st;
  odafs::Result<std::string> bytes =
      odafs::server::read_private_file(*dir, odafs::server::base_of(path), 1 << 16, &st);
  close(*dir);
  if (!bytes.ok()) refuse(bytes.status().message());
  if ((st.st_mode & 077) != 0) refuse("may be read by others: chmod 600 it");
  if (bytes->size() < 32) {
    refuse("holds " + std::to_string(bytes->size()) +
           " bytes, 32 or more are needed (head -c 32 /dev/urandom > FILE)");
  }
  const std::string keyed = *bytes + '\0' + export_spec;
  odafs::server::NodeTable::SharedKey key;
  SHA256(reinterpret_cast<const unsigned char*>(keyed.data()), keyed.size(), key.data());
  return key;
}

// The rules of a single --export, from --clients (or, on a loopback --listen without them,
// this host's processes).
odafs::server::ExportRules rules_from_flags(const AccessFlags& flags,
                                            const std::string& listen_host) {
  odafs::server::ExportRules rules;
  try {
    for (const std::string& spec : flags.clients) rules.add(spec, flags.anon_uid, flags.anon_gid);
  } catch (const std::invalid_argument& e) {
    usage((std::string("--clients ") + e.what()).c_str());
  }
  if (flags.clients.empty()) {
    if (!is_loopback_host(listen_host)) {
      usage(("--listen " + (listen_host.empty() ? std::string("0.0.0.0") : listen_host) +
             " is reachable from other hosts: say who may use the export, e.g. --clients "
             "10.0.0.0/8(rw,root_squash), or give an --exports file")
                .c_str());
    }
    rules.add_loopback_default(flags.anon_uid, flags.anon_gid);
  }
  return rules;
}

// The exports of an exports file, each an existing directory; exits with the file's error
// otherwise.
std::vector<odafs::server::ExportLine> load_exports(const std::string& file,
                                                    const AccessFlags& flags) {
  odafs::Result<std::vector<odafs::server::ExportLine>> lines =
      odafs::server::read_exports_file(file, flags.anon_uid, flags.anon_gid);
  if (!lines.ok()) {
    std::fprintf(stderr, "odafsd: %s\n", lines.status().message().c_str());
    std::exit(2);
  }
  if (lines->empty()) {
    std::fprintf(stderr, "odafsd: %s exports nothing\n", file.c_str());
    std::exit(2);
  }
  for (const odafs::server::ExportLine& e : *lines) {
    struct stat st;
    if (stat(e.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      std::fprintf(stderr, "odafsd: %s:%d: %s is not a directory%s\n", file.c_str(), e.line,
                   e.path.c_str(), errno == ENOENT ? " (it does not exist)" : "");
      std::exit(2);
    }
  }
  return std::move(lines).value();
}

// As whom calls act on the store. remote_store: a store that takes on callers without
// privileges of this process (CephFS: a UserPerm per call), where a local export needs root
// (setfsuid).
void configure_identity(const AccessFlags& flags, bool remote_store,
                        odafs::server::FileService::Options* fs) {
  fs->access.read_only = flags.read_only;
  const bool root = geteuid() == 0;
  const bool can_act = root || remote_store;
  if (flags.identity == "caller" && !can_act) {
    usage("--identity caller needs root: only root can act as each caller");
  }
  fs->act_as_callers = flags.identity.empty() ? can_act : flags.identity == "caller";
  if (!fs->act_as_callers && root) {
    ODAFS_LOG_WARN("--identity server: every caller acts as root over the export");
  } else if (!fs->act_as_callers) {
    ODAFS_LOG_INFO("not root: every caller acts as uid %u over the export", geteuid());
  }
}

// Where the recovery record of this export lives (server/recovery.h): one file per export
// directory in the state directory, so servers of other exports share it safely (two
// servers of one export at once each need a --state-dir of their own).
std::string recovery_record_path(std::string state_dir, const std::string& export_root) {
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
      return "";
    }
  }
  char* real = realpath(export_root.c_str(), nullptr);
  std::string key = real != nullptr ? real : export_root;
  std::free(real);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  char name[32];
  std::snprintf(name, sizeof name, "recovery-%02x%02x%02x%02x%02x%02x%02x%02x", digest[0],
                digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7]);
  return state_dir + "/" + name;
}

// Why the rules cannot be served ("" when they can): a tls rule without a certificate to
// serve, an mtls rule without a CA.
std::string tls_rules_problem(const odafs::server::ExportRules& rules, bool have_tls,
                              const odafs::server::TlsIdentities::Files& files) {
  for (size_t i = 0; i < rules.size(); ++i) {
    const odafs::server::ClientRule& rule = rules.rule(i);
    if (rule.tls && !have_tls) return "client " + rule.spec + " says tls: give --tls-cert";
    if (rule.mtls && files.tls.ca.empty())
      return "client " + rule.spec + " says mtls: give --tls-ca";
  }
  return "";
}

// SIGHUP with an exports file: the file read again, and each export's rules replaced by its
// line's, from every connection's next call on (CallAuthority::replace_rules). A file that
// does not parse, or whose rules cannot be served, changes nothing. An export whose line
// is gone admits no one from now on; a new line needs a restart to be served (its cache,
// engine and recovery record are made at start).
void reload_exports(const std::string& file, const AccessFlags& flags, bool have_tls,
                    const odafs::server::TlsIdentities::Files& tls_files,
                    const odafs::server::ExportRouter& router) {
  odafs::Result<std::vector<odafs::server::ExportLine>> lines =
      odafs::server::read_exports_file(file, flags.anon_uid, flags.anon_gid);
  if (!lines.ok()) {
    ODAFS_LOG_ERROR("SIGHUP: exports not reloaded, the old rules serve on: %s",
                    lines.status().message().c_str());
    return;
  }
  for (const odafs::server::ExportLine& line : *lines) {
    if (std::string why = tls_rules_problem(line.rules, have_tls, tls_files); !why.empty()) {
      ODAFS_LOG_ERROR("SIGHUP: exports not reloaded, the old rules serve on: %s:%d: %s",
                      file.c_str(), line.line, why.c_str());
      return;
    }
  }
  for (const odafs::server::ExportRouter::Export& e : router.exports()) {
    auto line = std::find_if(lines->begin(), lines->end(),
                             [&e](const odafs::server::ExportLine& l) { return l.path == e.path; });
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
  for (const odafs::server::ExportLine& line : *lines) {
    const auto& served = router.exports();
    if (std::none_of(served.begin(), served.end(),
                     [&line](const auto& e) { return e.path == line.path; })) {
      ODAFS_LOG_WARN("SIGHUP: %s:%d: %s is new: it is served from odafsd's next start",
                     file.c_str(), line.line, line.path.c_str());
    }
  }
}

// Exits unless the rules can be served (tls_rules_problem).
void check_tls_rules(const odafs::server::ExportRules& rules, bool have_tls,
                     const odafs::server::TlsIdentities::Files& files) {
  if (std::string why = tls_rules_problem(rules, have_tls, files); !why.empty()) {
    usage(why.c_str());
  }
}

// The recovery record of an export (its directory made private), or "" for none.
std::string prepare_recovery_record(const std::string& state_dir, const std::string& key) {
  const std::string record = recovery_record_path(state_dir, key);
  if (!record.empty()) {
    // The record's directory must be private (server/private_files.h), or another user
    // could make odafsd write through a link, block on a FIFO, or forge the record.
    const std::string dir = odafs::server::dir_of(record);
    odafs::Result<int> opened = odafs::server::open_private_dir(dir, true);
    if (!opened.ok()) usage(("--state-dir " + dir + ": " + opened.status().message()).c_str());
    close(*opened);
  }
  return record;
}

void raise_fd_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Objects are made with the mode the client asked for: its side applied its umask (the
  // kernel, for the mount), so a second one here would take bits off twice. odafsd's own
  // files (the recovery record, its directory) are made with explicit private modes.
  umask(0);
  odafs::server::FileService::Options fs;
  std::string listen;
  const int cores = usable_cores();
  int threads = -1;  // -1: one event loop per usable core
  size_t max_connections = 1024;
  size_t max_per_address = 256;
  int64_t idle_timeout_s = 300;
  size_t max_input_mb = 32;
  size_t max_backlog_mb = 32;
  std::string engine_listen;
  int engine_threads = -1;  // -1: one per two usable cores, at least one
  odafs::ordma::EngineOptions engine_options;
  int max_direct_writes = -1;  // -1: a quarter of the spare threads
  int grace_ms = -1;           // -1: two leases
  int64_t space_margin_mb = -1;
  std::string state_dir;
  bool simulate_crashes = false;
  uint32_t slow_write_us = 0;
  int stop_timeout_ms = 1500;
  AccessFlags access;
  size_t cache_mb = fs.cache_bytes >> 20;
  bool no_local_rings = false, no_ordma = false, no_delegations = false, auth_sys = false;
  size_t max_rings = 256;   // the soft backend's
  std::string rdma_device;  // the verbs backend's
  std::string ceph_conf, ceph_id, handle_key_file;
  odafs::server::TlsIdentities::Files tls_files;
  odafs::Flags flags("odafsd", "--export DIR --listen HOST:PORT [flags]");
  flags.add("--export", &fs.export_root,
            "the directory to export (served at /), or ceph:PATH for a directory of a CephFS");
  std::string exports_file, check_exports;
  flags.add("--exports", &exports_file,
            "an exports(5)-style file of exports and their clients (default /etc/odafs/exports "
            "when present and no --export is given); SIGHUP reads it again");
  std::string log_where = "auto", log_level;
  flags.add("--log", &log_where,
            "stderr, syslog, auto (stderr; and syslog when stderr is neither a terminal nor the "
            "journal) or a FILE to append to (reopened at SIGHUP)");
  flags.add("--log-level", &log_level, "debug, info, warn or error (default info, or $ODAFS_LOG)");
  std::string metrics_listen;
  flags.add("--metrics", &metrics_listen,
            "serve Prometheus metrics at http://HOST:PORT/metrics (no authentication: bind it to "
            "loopback or a management network)");
  flags.add("--check-exports", &check_exports,
            "parse an exports file, print its rules and exit (0: good, 2: not)");
  flags.add("--ceph-conf", &ceph_conf, "the CephFS cluster's ceph.conf (with --export ceph:PATH)");
  flags.add("--ceph-id", &ceph_id, "the cephx user to connect as, without \"client.\" (admin)");
  flags.add("--handle-key-file", &handle_key_file,
            "32+ secret bytes shared by the odafsd of one CephFS: their handles are then "
            "good on each (failover); mode 0600, in a directory no other user may write");
  flags.add("--listen", &listen, "RPC address; port 0 picks a free one (the ready line names it)");
  flags.add("--cache-mb", &cache_mb, "block cache size", 1, 1u << 20);
  flags.add("--block-size", &fs.block_size, "cache block size, a power of two", ODAFS_MINBLOCK,
            ODAFS_MAXBLOCK);
  flags.add("--threads", &threads,
            "RPC event loops (-1: one per usable core, from the affinity mask)", -1, 256);
  flags.add("--max-io", &fs.max_io, "largest READ/WRITE payload", 4096, 16u << 20);
  flags.add("--max-nodes", &fs.max_nodes, "objects with valid handles", 16, 1u << 24);
  flags.add("--max-open-files", &fs.max_open_files,
            "descriptors kept open for them (never more than half of RLIMIT_NOFILE)", 2, 1u << 24);
  flags.add("--max-connections", &max_connections, "RPC connections of admitted clients in all", 1,
            1u << 20);
  flags.add("--max-connections-per-address", &max_per_address,
            "RPC connections from one host (0: no limit)", 0, 1u << 20);
  flags.add("--idle-timeout", &idle_timeout_s,
            "seconds after which a connection that completes no call is closed (0: never)", 0,
            1u << 24);
  flags.add("--max-input-mb", &max_input_mb, "request records over 32 KiB received at once", 1,
            1u << 20);
  flags.add("--max-backlog-mb", &max_backlog_mb,
            "replies (and engine answers) queued for clients slow to read them", 1, 1u << 20);
  flags.add_each("--clients", "SPEC", "who may use the export (repeatable; first match wins)",
                 [&access](const std::string& v) {
                   access.clients.push_back(v);
                   return std::string();
                 });
  flags.add("--read-only", &access.read_only, "refuse every change to the export (EROFS)");
  flags.add_each("--identity", "caller|server",
                 "act as each caller (default as root) or as odafsd's own user",
                 [&access](const std::string& v) {
                   if (v != "caller" && v != "server") return std::string("caller or server");
                   access.identity = v;
                   return std::string();
                 });
  flags.add("--auth-sys", &auth_sys, "the same as --identity caller");
  flags.add("--anon-uid", &access.anon_uid, "uid of squashed callers", 0, UINT32_MAX - 1);
  flags.add("--anon-gid", &access.anon_gid, "gid of squashed callers", 0, UINT32_MAX - 1);
  flags.add("--tls-cert", &tls_files.tls.cert,
            "certificate chain (PEM) for RPC-with-TLS and the engine's TCP path");
  flags.add("--tls-key", &tls_files.tls.key, "the certificate's private key (PEM)");
  flags.add("--tls-ca", &tls_files.tls.ca,
            "CA (PEM) that client certificates must chain to (mtls rules need it)");
  flags.add("--tls-identity-map", &tls_files.identity_map,
            "client certificate -> uid:gid[:groups] or trust, one per line");
  flags.add("--engine", &engine_options.kind, "the one-sided engine's backend: soft or verbs");
  flags.add("--rdma-dev", &rdma_device,
            "RDMA device for --engine verbs (default: the one serving --engine-listen)");
  flags.add("--engine-listen", &engine_listen,
            "engine address (default: the --listen host, a free port)");
  flags.add("--engine-threads", &engine_threads, "engine threads (-1: one per two usable cores)",
            -1, 64);
  flags.add("--engine-max-connections", &engine_options.max_connections, "engine connections", 1,
            1u << 20);
  flags.add("--engine-handshake-timeout", &engine_options.handshake_timeout_ms,
            "ms an engine connection has to authenticate", 10, 600000);
  flags.add("--max-rings", &max_rings, "shared-memory rings offered to same-host clients", 1,
            1u << 16);
  flags.add("--no-local-rings", &no_local_rings, "offer no rings (same-host clients use TCP)");
  flags.add("--no-ordma", &no_ordma, "RPC only: no one-sided engine, no references");
  flags.add("--max-direct-writes", &max_direct_writes,
            "direct writes waiting on clients (-1: a quarter of the spare threads; 0: none)", -1,
            1024);
  flags.add("--lease-ms", &fs.lease_ms, "time to return a recalled delegation", 10, 600000);
  flags.add("--no-delegations", &no_delegations, "grant no delegations");
  flags.add("--space-margin-mb", &space_margin_mb,
            "write delegations' space is held by accounting while this much is free beyond "
            "it, else by fallocate (-1: the larger of 64 MiB and 1 % of the file system)",
            -1, INT32_MAX);
  flags.add("--grace-ms", &grace_ms, "grace period after a start (-1: two leases)", -1, 3600000);
  flags.add("--stop-timeout-ms", &stop_timeout_ms,
            "after SIGTERM, the longest the stop may take before odafsd exits anyway (status 3)",
            100, 600000);
  flags.add("--state-dir", &state_dir,
            "where the recovery record is kept (default /var/lib/odafs as root, else "
            "$XDG_STATE_HOME/odafs or ~/.local/state/odafs); no other user may own or write it");
  flags.add("--simulate-crashes", &simulate_crashes,
            "(testing) SIGUSR1 drops every unsynced change and exits 86, as a power loss");
  flags.add("--slow-writes", &slow_write_us,
            "(testing) each write lands in two halves this many us apart", 0, 1000000);
  flags.hide("--simulate-crashes");  // the test suites' own: not for a deployment
  flags.hide("--slow-writes");
  flags.set_epilog(
      "SPEC = CIDR|address|host|*[(rw|ro,root_squash|no_root_squash|all_squash,anonuid=N,\n"
      "  anongid=N,secure|insecure,devices|nodev,tls,mtls)], defaults rw,root_squash,\n"
      "  insecure,nodev. tls: calls only over TLS; mtls: and with a client certificate\n"
      "  from --tls-ca, run as --tls-identity-map maps it. SIGHUP reads the TLS files again.\n"
      "  Without --clients a loopback --listen admits this host's processes only (each\n"
      "  acting as the owner of its socket; root as anyone, device nodes included); any\n"
      "  other --listen needs it.\n"
      "Calls that wait (on a client, a lease, a disk flush) hand their event loop to a spare\n"
      "  thread, at most max(16, 2 x --threads) of them.\n");
  usage_text = flags.usage();
  if (!flags.parse(argc, argv).empty()) usage("no arguments besides flags");
  fs.cache_bytes = cache_mb << 20;
  if (threads == 0 || engine_threads == 0) usage("--threads and --engine-threads want 1 or more");
  if ((fs.block_size & (fs.block_size - 1)) != 0) usage("--block-size must be a power of two");
  if (std::string why; !odafs::ordma::backend_usable(engine_options.kind, &why)) {
    usage(("--engine " + engine_options.kind + ": " + why).c_str());
  }
  // The backends' own settings (each checks its own: a name another backend takes is an
  // error at start, not ignored).
  if (engine_options.kind == "soft") {
    engine_options.backend.emplace_back("max_rings", std::to_string(max_rings));
    if (no_local_rings) engine_options.backend.emplace_back("local_rings", "0");
  }
  if (!rdma_device.empty()) engine_options.backend.emplace_back("rdma_device", rdma_device);
  if (no_ordma) fs.ordma = false;
  if (no_delegations) fs.delegations = false;
  if (space_margin_mb >= 0) fs.space_margin_bytes = space_margin_mb << 20;
  if (auth_sys) access.identity = "caller";
  if (odafs::LogLevel level; !log_level.empty()) {
    if (!odafs::parse_log_level(log_level.c_str(), &level)) {
      usage("--log-level: debug, info, warn or error");
    }
    odafs::set_log_level(level);
  }
  if (std::string why; !odafs::log_to(log_where.c_str(), "odafsd", &why)) usage(why.c_str());
  if (!metrics_listen.empty() && !odafs::net::try_parse_endpoint(metrics_listen).ok()) {
    usage(("--metrics " + metrics_listen + ": want HOST:PORT").c_str());
  }
  if (!check_exports.empty()) {
    std::fputs(odafs::server::describe_exports(load_exports(check_exports, access)).c_str(),
               stdout);
    return 0;
  }
  if (!exports_file.empty() && !fs.export_root.empty()) {
    usage("--export and --exports: give one (an exports file names each export)");
  }
  if (fs.export_root.empty() && exports_file.empty() && ::access(kDefaultExports, F_OK) == 0) {
    exports_file = kDefaultExports;
  }
  if ((fs.export_root.empty() && exports_file.empty()) || listen.empty()) {
    usage("--listen and one of --export or --exports are required");
  }
  if (!exports_file.empty() && !access.clients.empty()) {
    usage("--clients goes with --export: an exports file names each export's clients");
  }
  odafs::net::Endpoint listen_at;
  try {
    listen_at = odafs::net::parse_endpoint(listen);
  } catch (const std::invalid_argument& e) {
    usage(e.what());
  }
  const std::string ceph = ceph_path(fs.export_root);
  // The key is checked first: a bad one is named whatever else is wrong.
  if (!handle_key_file.empty()) {
    fs.handle_key = read_handle_key(handle_key_file, fs.export_root);
    if (ceph.empty()) usage("--handle-key-file needs --export ceph:PATH (handles by identity)");
  }
  if (!ceph.empty()) fs.store = open_ceph_store(ceph, ceph_conf, ceph_id);
  configure_identity(access, fs.store != nullptr, &fs);
  // What odafsd serves: one export at "/" (--export) or each line of the exports file.
  struct ExportPlan {
    std::string path;  // the export's path in MOUNT: "/" for --export
    std::string root;  // its directory (or ceph:PATH)
    odafs::server::ExportRules rules;
    std::string recovery_record;
  };
  std::vector<ExportPlan> plans;
  if (exports_file.empty()) {
    plans.push_back({"/", fs.export_root, rules_from_flags(access, listen_at.host), ""});
  } else {
    if (!ceph.empty() || !handle_key_file.empty()) {
      usage("an exports file serves local directories; a CephFS export takes --export ceph:PATH");
    }
    for (odafs::server::ExportLine& line : load_exports(exports_file, access)) {
      plans.push_back({line.path, line.path, std::move(line.rules), ""});
    }
  }
  std::unique_ptr<odafs::server::TlsIdentities> tls;
  if (!tls_files.tls.cert.empty() || !tls_files.tls.key.empty()) {
    odafs::Result<std::unique_ptr<odafs::server::TlsIdentities>> loaded =
        odafs::server::TlsIdentities::load(tls_files);
    if (!loaded.ok()) usage(loaded.status().message().c_str());
    tls = std::move(*loaded);
    fs.access.tls = tls.get();
  } else if (!tls_files.tls.ca.empty() || !tls_files.identity_map.empty()) {
    usage("--tls-ca and --tls-identity-map need --tls-cert and --tls-key");
  }
  for (const ExportPlan& plan : plans) check_tls_rules(plan.rules, tls != nullptr, tls_files);
  fs.grace_ms = grace_ms >= 0 ? grace_ms : 2 * fs.lease_ms;
  fs.recovery_max_owners = max_connections;
  for (ExportPlan& plan : plans) {
    // A CephFS export is named by its cluster's conf too: one state directory may serve
    // several clusters.
    plan.recovery_record =
        prepare_recovery_record(state_dir, ceph.empty() ? plan.root : plan.root + "@" + ceph_conf);
  }
  if (threads < 0) threads = cores;
  if (engine_threads < 0) engine_threads = std::max(1, cores / 2);
  // Calls that wait (on clients, leases) hand their loop to a spare thread. The waits on
  // other parties that the file service bounds (delegation holders, clients' engines for
  // direct writes) take at most half the spares together: the rest stay for disk flushes
  // and lease waits, so that a loop finds a spare. A loop that finds none waits with its
  // call, and every connection it owns goes unserved meanwhile, holders returning the
  // delegations others wait for included (such a wait is answered DELAY at once instead:
  // rpc::before_blocking). Measured with the 64-client soak on a disk export:
  // docs/PERFORMANCE.md, "The soak's throughput".
  const int spare_threads = std::max(16, 2 * threads);
  fs.max_delegation_waiters = spare_threads / 4;
  fs.max_direct_writes = max_direct_writes >= 0 ? static_cast<size_t>(max_direct_writes)
                                                : static_cast<size_t>(spare_threads / 4);

  // Signals go to the main thread's sigwait only; pool threads inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  if (simulate_crashes) sigaddset(&stop_signals, SIGUSR1);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();

  // With --simulate-crashes file data goes through an environment that can undo every
  // unsynced change: a SIGKILL keeps the page cache, so only this shows a missing fsync.
  odafs::server::CrashSimulatingEnv crash_env;
  if (simulate_crashes) fs.env = &crash_env;
  odafs::server::SlowWriteEnv slow_env(slow_write_us);
  if (slow_write_us > 0) fs.env = &slow_env;

  try {
    // Declared first, so destroyed last: it times the destructors below too.
    std::optional<odafs::server::StopWatchdog> stop_watchdog;
    odafs::server::CpuAccounting cpu;
    std::vector<std::unique_ptr<odafs::server::FileService>> services;
    std::vector<odafs::server::ExportRouter::Export> routes;
    for (ExportPlan& plan : plans) {
      odafs::server::FileService::Options o = fs;
      o.export_root = plan.root;
      o.access.rules = std::move(plan.rules);
      o.recovery_record = plan.recovery_record;
      services.push_back(std::make_unique<odafs::server::FileService>(o, &cpu));
      routes.push_back({plan.path, services.back().get()});
    }
    odafs::server::ExportRouter router(std::move(routes));
    // Destroyed between the rpc server's destructor and the services': the stop's log then
    // tells the two apart.
    struct StageWhenDestroyed {
      std::optional<odafs::server::StopWatchdog>& watchdog;
      const char* what;
      ~StageWhenDestroyed() {
        if (watchdog) watchdog->stage(what);
      }
    } service_stage{stop_watchdog, "closing files and freeing the cache"};
    odafs::rpc::Server::Options ro;
    ro.listen = listen_at;
    ro.threads = threads;
    ro.max_blocked_threads = spare_threads;
    ro.max_record = services[0]->max_request_record();
    ro.max_reply = services[0]->max_reply_record();
    ro.max_connections = max_connections;
    ro.max_connections_per_address = max_per_address;
    ro.idle_timeout_ms = idle_timeout_s * 1000;
    ro.max_input_bytes = max_input_mb << 20;
    ro.max_total_backlog = max_backlog_mb << 20;
    ro.program = ODAFS_PROGRAM;
    ro.version = ODAFS_V3;
    ro.on_thread_start = [&cpu] { cpu.join("rpc"); };
    ro.on_thread_exit = [&cpu] { cpu.leave(); };
    router.configure(&ro);
    if (tls) ro.tls_context = [&tls] { return tls->context(); };
    odafs::rpc::Server server(ro);
    router.register_procedures(&server);
    if (fs.ordma) {
      for (size_t i = 0; i < services.size(); ++i) {
        odafs::ordma::EngineOptions eo = engine_options;
        eo.max_total_backlog = max_backlog_mb << 20;
        // Each export has an engine over its own cache; --engine-listen is the first's.
        eo.listen = engine_listen.empty() || i > 0 ? odafs::net::Endpoint{ro.listen.host, 0}
                                                   : odafs::net::parse_endpoint(engine_listen);
        eo.threads = engine_threads;
        eo.on_thread_start = [&cpu] { cpu.join("engine"); };
        eo.on_thread_exit = [&cpu] { cpu.leave(); };
        const odafs::server::CallAuthority& authority = services[i]->authority();
        eo.admit_peer = [&authority](const sockaddr_storage& peer) {
          return authority.admits(peer);
        };
        if (tls) eo.tls_context = [&tls] { return tls->context(); };
        services[i]->start_engine(eo);
      }
    }
    server.start();
    std::unique_ptr<odafs::server::MetricsHttp> metrics;
    if (!metrics_listen.empty()) {
      odafs::Result<std::unique_ptr<odafs::server::MetricsHttp>> started =
          odafs::server::MetricsHttp::start(odafs::net::parse_endpoint(metrics_listen),
                                            [&router] { return render_metrics(router); });
      if (!started.ok()) throw std::runtime_error(started.status().message());
      metrics = std::move(started).value();
    }
    std::string exported;
    for (const ExportPlan& plan : plans) exported += (exported.empty() ? "" : ",") + plan.root;
    ODAFS_LOG_INFO(
        "serving %s on %s: %d rpc loops (up to %d spare threads), %d engine threads for %d "
        "usable cores, cache %zu MiB in %u-byte blocks per export, %zu open files",
        exported.c_str(), server.bound().to_string().c_str(), threads, spare_threads,
        fs.ordma ? engine_threads : 0, cores, fs.cache_bytes >> 20, fs.block_size,
        services[0]->nodes().max_open_files());
    const odafs::ordma::Engine* first_engine = services[0]->engine();
    std::string engine = first_engine ? first_engine->endpoint() : "none";
    const std::string metrics_at = metrics ? " metrics=" + metrics->bound().to_string() : "";
    std::printf(
        "odafsd ready rpc=%s engine=%s export=%s backend=%s threads=%d engine_threads=%d%s\n",
        server.bound().to_string().c_str(), engine.c_str(), exported.c_str(),
        first_engine ? first_engine->kind() : "none", threads, fs.ordma ? engine_threads : 0,
        metrics_at.c_str());
    std::fflush(stdout);
    int sig = 0;
    while (sigwait(&stop_signals, &sig) == 0 && sig == SIGHUP) {
      if (!tls) {
        ODAFS_LOG_INFO("SIGHUP: no TLS files to read again");
      } else if (odafs::Status s = tls->reload(); !s.ok()) {
        ODAFS_LOG_ERROR("SIGHUP: TLS files not reloaded, the old ones serve on: %s",
                        s.message().c_str());
      } else {
        ODAFS_LOG_INFO("SIGHUP: TLS certificate, CA and identity map reloaded");
      }
      if (std::string why; !odafs::reopen_log_file(&why)) {
        ODAFS_LOG_ERROR("SIGHUP: %s; logging on to the old file", why.c_str());
      }
      if (!exports_file.empty()) {
        reload_exports(exports_file, access, tls != nullptr, tls_files, router);
      }
    }
    if (sig == SIGUSR1) {
      ODAFS_LOG_WARN("simulated crash: dropping %zu file(s) of unsynced changes",
                     crash_env.unsynced_files());
      crash_env.crash();
      std::fflush(stderr);
      _exit(86);  // no cleanup: a crash
    }
    ODAFS_LOG_INFO("signal %d: shutting down", sig);
    metrics.reset();  // no scrape reads a service while it stops
    stop_watchdog.emplace(stop_timeout_ms);
    for (auto& service : services) service->stopping();
    stop_watchdog->stage("stopping the one-sided engine");
    for (auto& service : services) service->stop_engine();
    stop_watchdog->stage("waiting for the rpc threads' calls to end");
    server.stop();
    stop_watchdog->stage("freeing the rpc server's connections and buffers");
  } catch (const std::exception& e) {
    ODAFS_LOG_ERROR("odafsd: %s", e.what());
    return 1;
  }
  if (odafs::server::RecordWriter::left_a_write()) {
    // That thread sleeps in the disk: exit handlers that stop every thread (a sanitizer's
    // leak check) would wait on it for good. The stop is done; end here.
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);
  }
  return 0;
}
