// odafsd: the odafs file server. Serves one directory (--export DIR) or each export of an
// exports file (--exports FILE) over ONC RPC. Every flag: odafsd --help, docs/usage.md.
//
// Once ready it prints one line on stdout,
//   "odafsd ready rpc=HOST:PORT engine=HOST:PORT|none export=DIR[,DIR...] backend=NAME
//   threads=N engine_threads=N [metrics=HOST:PORT]",
// which scripts and tests wait for. SIGTERM or SIGINT shut it down cleanly.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/log.h"
#include "proto/odafs_prot.h"
#include "rpc/server.h"
#include "server/cpu_accounting.h"
#include "server/daemon_setup.h"
#include "server/export_router.h"
#include "server/exports_file.h"
#include "server/file_env.h"
#include "server/file_service.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/record_writer.h"
#include "server/stop_watchdog.h"
#include "server/tls_identities.h"
#if ODAFS_HAVE_CEPHFS
#include "server/ceph_export.h"
#endif

namespace {

constexpr const char* kDefaultExports = "/etc/odafs/exports";

// The usage text, made from the flag table in main (odafs::Flags).
std::string usage_text;

[[noreturn]] void usage(const char* why) {
  if (why != nullptr) std::fprintf(stderr, "odafsd: %s\n", why);
  std::fputs(usage_text.c_str(), stderr);
  std::exit(2);
}

// The CephFS path of an export "ceph:PATH", or empty for a local directory.
std::string ceph_path(const std::string& export_spec) {
  return export_spec.rfind("ceph:", 0) == 0 ? export_spec.substr(5) : std::string();
}

// Exits with usage when a start-up decision failed (server/daemon_setup.h).
void or_usage(const odafs::Status& s) {
  if (!s.ok()) usage(s.message().c_str());
}
template <class T>
T or_usage(odafs::Result<T> r) {
  or_usage(r.status());
  return std::move(r).value();
}

// Every flag's value as given; the defaults are docs/usage.md's.
struct Settings {
  Settings() { fs.max_open_files = 0; }    // by the store (plan_exports)
  odafs::server::FileService::Options fs;  // what every export shares
  std::string listen;
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
  odafs::server::AccessFlags access;
  size_t cache_mb = odafs::server::FileService::Options{}.cache_bytes >> 20;
  bool no_ordma = false, no_delegations = false, auth_sys = false;
  // The backends' own settings given (ordma::backend_settings), with their values.
  std::vector<std::pair<odafs::ordma::BackendSetting, std::string>> backend_given;
  std::string ceph_conf, ceph_id, handle_key_file;
  odafs::server::TlsIdentities::Files tls_files;
  std::string exports_file, check_exports;
  std::string log_where = "auto", log_level;
  std::string metrics_listen;
};

// What is exported, to whom, and on what terms (TLS).
void add_export_flags(odafs::Flags& flags, Settings& s) {
  flags.add("--export", &s.fs.export_root,
            "the directory to export (served at /), or ceph:PATH for a directory of a CephFS");
  flags.add("--exports", &s.exports_file,
            "an exports(5)-style file of exports and their clients (default /etc/odafs/exports "
            "when present and no --export is given); SIGHUP reads it again");
  flags.add("--check-exports", &s.check_exports,
            "parse an exports file, print its rules and exit (0: good, 2: not)");
  flags.add("--ceph-conf", &s.ceph_conf,
            "the CephFS cluster's ceph.conf (with --export ceph:PATH)");
  flags.add("--ceph-id", &s.ceph_id, "the cephx user to connect as, without \"client.\" (admin)");
  flags.add_each("--ceph-peer", "HOST:PORT",
                 "another gateway of the CephFS export (repeatable): one that refuses "
                 "connections for 3 s has its CephFS sessions evicted (docs/ceph.md)",
                 [&s](const std::string& v) {
                   odafs::Result<odafs::net::Endpoint> at = odafs::net::try_parse_endpoint(v);
                   if (at) s.fs.peers.push_back(*at);
                   return at ? std::string() : at.status().message();
                 });
  flags.add("--handle-key-file", &s.handle_key_file,
            "32+ secret bytes shared by the odafsd of one CephFS: their handles are then "
            "good on each (failover); mode 0600, in a directory no other user may write");
  flags.add_each("--clients", "SPEC", "who may use the export (repeatable; first match wins)",
                 [&s](const std::string& v) {
                   s.access.clients.push_back(v);
                   return std::string();
                 });
  flags.add("--read-only", &s.access.read_only, "refuse every change to the export (EROFS)");
  flags.add_each("--identity", "caller|server",
                 "act as each caller (default as root) or as odafsd's own user",
                 [&s](const std::string& v) {
                   if (v != "caller" && v != "server") return std::string("caller or server");
                   s.access.identity = v;
                   return std::string();
                 });
  flags.add("--auth-sys", &s.auth_sys, "the same as --identity caller");
  flags.add("--anon-uid", &s.access.anon_uid, "uid of squashed callers", 0, UINT32_MAX - 1);
  flags.add("--anon-gid", &s.access.anon_gid, "gid of squashed callers", 0, UINT32_MAX - 1);
  flags.add("--tls-cert", &s.tls_files.tls.cert,
            "certificate chain (PEM) for RPC-with-TLS and the engine's TCP path");
  flags.add("--tls-key", &s.tls_files.tls.key, "the certificate's private key (PEM)");
  flags.add("--tls-ca", &s.tls_files.tls.ca,
            "CA (PEM) that client certificates must chain to (mtls rules need it)");
  flags.add("--tls-identity-map", &s.tls_files.identity_map,
            "client certificate -> uid:gid[:groups] or trust, one per line");
}

// The RPC server's, the cache's and the process's (logs, metrics, the stop).
void add_service_flags(odafs::Flags& flags, Settings& s) {
  flags.add("--listen", &s.listen,
            "RPC address; port 0 picks a free one (the ready line names it)");
  flags.add("--cache-mb", &s.cache_mb, "block cache size", 1, 1u << 20);
  flags.add("--block-size", &s.fs.block_size, "cache block size, a power of two", ODAFS_MINBLOCK,
            ODAFS_MAXBLOCK);
  flags.add("--threads", &s.threads,
            "RPC event loops (-1: one per usable core, from the affinity mask)", -1, 256);
  flags.add("--max-io", &s.fs.max_io, "largest READ/WRITE payload", 4096, 16u << 20);
  flags.add("--max-nodes", &s.fs.max_nodes, "objects with valid handles", 16, 1u << 24);
  flags.add("--max-open-files", &s.fs.max_open_files,
            "objects kept open for them (0: 1024 descriptors, or 8192 over CephFS, where they "
            "take none; never more than half of RLIMIT_NOFILE)",
            0, 1u << 24);
  flags.add("--max-connections", &s.max_connections, "RPC connections of admitted clients in all",
            1, 1u << 20);
  flags.add("--max-connections-per-address", &s.max_per_address,
            "RPC connections from one host (0: no limit)", 0, 1u << 20);
  flags.add("--idle-timeout", &s.idle_timeout_s,
            "seconds after which a connection that completes no call is closed (0: never)", 0,
            1u << 24);
  flags.add("--max-input-mb", &s.max_input_mb, "request records over 32 KiB received at once", 1,
            1u << 20);
  flags.add("--max-backlog-mb", &s.max_backlog_mb,
            "replies (and engine answers) queued for clients slow to read them", 1, 1u << 20);
  flags.add("--log", &s.log_where,
            "stderr, syslog, auto (stderr; and syslog when stderr is neither a terminal nor the "
            "journal) or a FILE to append to (reopened at SIGHUP)");
  flags.add("--log-level", &s.log_level,
            "debug, info, warn or error (default info, or $ODAFS_LOG)");
  flags.add("--metrics", &s.metrics_listen,
            "serve Prometheus metrics at http://HOST:PORT/metrics (no authentication: bind it to "
            "loopback or a management network)");
  flags.add("--stop-timeout-ms", &s.stop_timeout_ms,
            "after SIGTERM, the longest the stop may take before odafsd exits anyway (status 3)",
            100, 600000);
  flags.add("--simulate-crashes", &s.simulate_crashes,
            "(testing) SIGUSR1 drops every unsynced change and exits 86, as a power loss");
  flags.add("--slow-writes", &s.slow_write_us,
            "(testing) each write lands in two halves this many us apart", 0, 1000000);
  flags.hide("--simulate-crashes");  // the test suites' own: not for a deployment
  flags.hide("--slow-writes");
}

// The one-sided engine's, delegations' and the recovery record's.
void add_engine_flags(odafs::Flags& flags, Settings& s) {
  flags.add("--engine", &s.engine_options.kind, "the one-sided engine's backend: soft or verbs");
  flags.add("--engine-listen", &s.engine_listen,
            "engine address (default: the --listen host, a free port)");
  flags.add("--engine-threads", &s.engine_threads, "engine threads (-1: one per two usable cores)",
            -1, 64);
  flags.add("--engine-max-connections", &s.engine_options.max_connections, "engine connections", 1,
            1u << 20);
  flags.add("--engine-handshake-timeout", &s.engine_options.handshake_timeout_ms,
            "ms an engine connection has to authenticate", 10, 600000);
  // Each built backend's own, as it declares them; the backend checks their values.
  for (const odafs::ordma::BackendSetting& b : odafs::ordma::backend_settings()) {
    flags.add_each(b.flag, b.value_name, b.help, [&s, b](const std::string& value) {
      s.backend_given.emplace_back(b, b.value_name != nullptr ? value : b.switch_value);
      return std::string();
    });
  }
  flags.add("--no-ordma", &s.no_ordma, "RPC only: no one-sided engine, no references");
  flags.add("--max-direct-writes", &s.max_direct_writes,
            "direct writes waiting on clients (-1: a quarter of the spare threads; 0: none)", -1,
            1024);
  flags.add("--lease-ms", &s.fs.lease_ms, "time to return a recalled delegation", 10, 600000);
  flags.add("--no-delegations", &s.no_delegations, "grant no delegations");
  flags.add("--space-margin-mb", &s.space_margin_mb,
            "write delegations' space is held by accounting while this much is free beyond "
            "it, else by fallocate (-1: the larger of 64 MiB and 1 % of the file system)",
            -1, INT32_MAX);
  flags.add("--grace-ms", &s.grace_ms, "grace period after a start (-1: two leases)", -1, 3600000);
  flags.add("--state-dir", &s.state_dir,
            "where the recovery record is kept (default /var/lib/odafs as root, else "
            "$XDG_STATE_HOME/odafs or ~/.local/state/odafs); no other user may own or write it");
}

// Parses the command line into s (usage and exit 2 on a bad flag).
void parse_flags(int argc, char** argv, Settings& s) {
  odafs::Flags flags("odafsd", "--export DIR --listen HOST:PORT [flags]");
  add_export_flags(flags, s);
  add_service_flags(flags, s);
  add_engine_flags(flags, s);
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
}

// Checks what the flags say together and folds it into s.fs and s.engine_options; sets up
// the log. Exits with usage on a bad combination.
void settle(Settings& s) {
  s.fs.cache_bytes = s.cache_mb << 20;
  if (s.threads == 0 || s.engine_threads == 0) usage("--threads and --engine-threads: 1 or more");
  if ((s.fs.block_size & (s.fs.block_size - 1)) != 0) usage("--block-size must be a power of two");
  if (std::string why; !odafs::ordma::backend_usable(s.engine_options.kind, &why)) {
    usage(("--engine " + s.engine_options.kind + ": " + why).c_str());
  }
  // A backend's own setting given for another backend is an error, not ignored.
  for (const auto& [setting, value] : s.backend_given) {
    if (s.engine_options.kind != setting.backend) {
      usage((std::string(setting.flag) + " is the " + setting.backend + " engine's; --engine is " +
             s.engine_options.kind)
                .c_str());
    }
    s.engine_options.backend.emplace_back(setting.name, value);
  }
  if (s.no_ordma) s.fs.ordma = false;
  if (s.no_delegations) s.fs.delegations = false;
  if (s.space_margin_mb >= 0) s.fs.space_margin_bytes = s.space_margin_mb << 20;
  if (s.auth_sys) s.access.identity = "caller";
  if (odafs::LogLevel level; !s.log_level.empty()) {
    if (!odafs::parse_log_level(s.log_level.c_str(), &level)) {
      usage("--log-level: debug, info, warn or error");
    }
    odafs::set_log_level(level);
  }
  if (std::string why; !odafs::log_to(s.log_where.c_str(), "odafsd", &why)) usage(why.c_str());
  if (!s.metrics_listen.empty() && !odafs::net::try_parse_endpoint(s.metrics_listen).ok()) {
    usage(("--metrics " + s.metrics_listen + ": want HOST:PORT").c_str());
  }
  if (!s.exports_file.empty() && !s.fs.export_root.empty()) {
    usage("--export and --exports: give one (an exports file names each export)");
  }
  if (s.fs.export_root.empty() && s.exports_file.empty() && ::access(kDefaultExports, F_OK) == 0) {
    s.exports_file = kDefaultExports;
  }
  if ((s.fs.export_root.empty() && s.exports_file.empty()) || s.listen.empty()) {
    usage("--listen and one of --export or --exports are required");
  }
  if (!s.exports_file.empty() && !s.access.clients.empty()) {
    usage("--clients goes with --export: an exports file names each export's clients");
  }
}

// One export as odafsd will serve it.
struct ExportPlan {
  std::string path;  // the export's path in MOUNT: "/" for --export
  std::string root;  // its directory (or ceph:PATH)
  odafs::server::ExportRules rules;
  std::string recovery_record;
};

// What odafsd serves and how, decided before anything starts.
struct Plan {
  odafs::net::Endpoint listen_at;
  std::vector<ExportPlan> exports;
  std::unique_ptr<odafs::server::TlsIdentities> tls;  // null without --tls-cert
  int cores = 1;
  int spare_threads = 16;
};

// The exports (one at "/" for --export, each line of an exports file), their store, rules,
// TLS and recovery records. Exits with usage on a problem.
Plan plan_exports(Settings& s) {
  Plan p;
  try {
    p.listen_at = odafs::net::parse_endpoint(s.listen);
  } catch (const std::invalid_argument& e) {
    usage(e.what());
  }
  odafs::server::FileService::Options& fs = s.fs;
  const std::string ceph = ceph_path(fs.export_root);
  // The key is checked first: a bad one is named whatever else is wrong.
  if (!s.handle_key_file.empty()) {
    fs.handle_key = or_usage(odafs::server::read_handle_key(s.handle_key_file, fs.export_root));
    if (ceph.empty()) usage("--handle-key-file needs --export ceph:PATH (handles by identity)");
  }
  if (!ceph.empty()) {  // its session's identity beside its recovery record, if it has one
    const std::string record = or_usage(
        odafs::server::prepare_recovery_record(s.state_dir, fs.export_root + "@" + s.ceph_conf));
    odafs::Result<std::shared_ptr<odafs::server::Store>> store = odafs::server::open_ceph_export(
        {.conf = s.ceph_conf,
         .client_id = s.ceph_id,
         .path = ceph,
         .session_uuid =
             record.empty() ? "" : or_usage(odafs::server::claim_ceph_session(record)).uuid,
         .gateway_name = p.listen_at.port != 0 ? s.listen : ""});  // its peers fence it by it
    if (!store && store.errno_value() == EINVAL) usage(store.status().message().c_str());
    if (!store) {
      std::fprintf(stderr, "odafsd: %s\n", store.status().to_string().c_str());
      std::exit(1);
    }
    fs.store = std::move(store).value();
  }
  if (!fs.peers.empty() && ceph.empty()) usage("--ceph-peer needs --export ceph:PATH");
  // Over CephFS an open object takes no descriptor, and each lease holds one open.
  using odafs::server::kDefaultMaxOpenFiles, odafs::server::kDefaultSharedOpenFiles;
  if (fs.max_open_files == 0)
    fs.max_open_files = ceph.empty() ? kDefaultMaxOpenFiles : kDefaultSharedOpenFiles;
  or_usage(odafs::server::configure_identity(s.access, fs.store != nullptr, &fs));
  if (s.exports_file.empty()) {
    p.exports.push_back({"/", fs.export_root,
                         or_usage(odafs::server::rules_from_flags(s.access, p.listen_at.host)),
                         ""});
  } else {
    if (!ceph.empty() || !s.handle_key_file.empty()) {
      usage("an exports file serves local directories; a CephFS export takes --export ceph:PATH");
    }
    for (odafs::server::ExportLine& line :
         or_usage(odafs::server::load_exports(s.exports_file, s.access))) {
      p.exports.push_back({line.path, line.path, std::move(line.rules), ""});
    }
  }
  const odafs::server::TlsIdentities::Files& tls_files = s.tls_files;
  if (!tls_files.tls.cert.empty() || !tls_files.tls.key.empty()) {
    p.tls = or_usage(odafs::server::TlsIdentities::load(tls_files));
    fs.access.tls = p.tls.get();
  } else if (!tls_files.tls.ca.empty() || !tls_files.identity_map.empty()) {
    usage("--tls-ca and --tls-identity-map need --tls-cert and --tls-key");
  }
  for (ExportPlan& e : p.exports) {
    const std::string why = odafs::server::tls_rules_problem(e.rules, p.tls != nullptr, tls_files);
    if (!why.empty()) usage(why.c_str());
    // A CephFS export is named by its cluster's conf too: one state directory may serve
    // several clusters.
    e.recovery_record = or_usage(odafs::server::prepare_recovery_record(
        s.state_dir, ceph.empty() ? e.root : e.root + "@" + s.ceph_conf));
  }
  fs.grace_ms = s.grace_ms >= 0 ? s.grace_ms : 2 * fs.lease_ms;
  fs.recovery_max_owners = s.max_connections;
  p.cores = odafs::server::usable_cores();
  if (s.threads < 0) s.threads = p.cores;
  if (s.engine_threads < 0) s.engine_threads = std::max(1, p.cores / 2);
  // Calls that wait (on clients, leases) hand their loop to a spare thread. The waits on
  // other parties that the file service bounds (delegation holders, clients' engines for
  // direct writes) take at most half the spares together: the rest stay for disk flushes
  // and lease waits, so that a loop finds a spare. A loop that finds none waits with its
  // call, and every connection it owns goes unserved meanwhile, holders returning the
  // delegations others wait for included (such a wait is answered DELAY at once instead:
  // rpc::before_blocking). Measured with the 64-client soak on a disk export:
  // docs/PERFORMANCE.md, "The soak's throughput".
  p.spare_threads = std::max(16, 2 * s.threads);
  fs.max_delegation_waiters = p.spare_threads / 4;
  fs.max_direct_writes = s.max_direct_writes >= 0 ? static_cast<size_t>(s.max_direct_writes)
                                                  : static_cast<size_t>(p.spare_threads / 4);
  return p;
}

// The RPC server's options for the plan (its hooks: the router's, set by the caller).
odafs::rpc::Server::Options rpc_options(const Settings& s, const Plan& p,
                                        const odafs::server::FileService& first,
                                        odafs::server::CpuAccounting& cpu) {
  odafs::rpc::Server::Options ro;
  ro.listen = p.listen_at;
  ro.threads = s.threads;
  ro.max_blocked_threads = p.spare_threads;
  ro.max_record = first.max_request_record();
  ro.max_reply = first.max_reply_record();
  ro.max_connections = s.max_connections;
  ro.max_connections_per_address = s.max_per_address;
  ro.idle_timeout_ms = s.idle_timeout_s * 1000;
  ro.max_input_bytes = s.max_input_mb << 20;
  ro.max_total_backlog = s.max_backlog_mb << 20;
  ro.program = ODAFS_PROGRAM;
  ro.version = ODAFS_V3;
  ro.on_thread_start = [&cpu] { cpu.join("rpc"); };
  ro.on_thread_exit = [&cpu] { cpu.leave(); };
  if (p.tls) ro.tls_context = [tls = p.tls.get()] { return tls->context(); };
  return ro;
}

// Starts each export's one-sided engine over its cache: the first on --engine-listen (or
// a free port of the --listen host), the others on free ports of that host.
void start_engines(const Settings& s, const Plan& p,
                   const std::vector<std::unique_ptr<odafs::server::FileService>>& services,
                   odafs::server::CpuAccounting& cpu) {
  for (size_t i = 0; i < services.size(); ++i) {
    odafs::ordma::EngineOptions eo = s.engine_options;
    eo.max_total_backlog = s.max_backlog_mb << 20;
    eo.listen = s.engine_listen.empty() || i > 0 ? odafs::net::Endpoint{p.listen_at.host, 0}
                                                 : odafs::net::parse_endpoint(s.engine_listen);
    eo.threads = s.engine_threads;
    eo.on_thread_start = [&cpu] { cpu.join("engine"); };
    eo.on_thread_exit = [&cpu] { cpu.leave(); };
    const odafs::server::CallAuthority& authority = services[i]->authority();
    eo.admit_peer = [&authority](const sockaddr_storage& peer) { return authority.admits(peer); };
    if (p.tls) eo.tls_context = [tls = p.tls.get()] { return tls->context(); };
    services[i]->start_engine(eo);
  }
}

// Waits for a stop signal (SIGTERM, SIGINT; SIGUSR1 with --simulate-crashes), and answers
// each SIGHUP on the way: the TLS files, the log file and the exports file read again.
int wait_for_stop(const Settings& s, const Plan& p, const sigset_t& signals,
                  const odafs::server::ExportRouter& router) {
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    if (!p.tls) {
      ODAFS_LOG_INFO("SIGHUP: no TLS files to read again");
    } else if (odafs::Status st = p.tls->reload(); !st.ok()) {
      ODAFS_LOG_ERROR("SIGHUP: TLS files not reloaded, the old ones serve on: %s",
                      st.message().c_str());
    } else {
      ODAFS_LOG_INFO("SIGHUP: TLS certificate, CA and identity map reloaded");
    }
    if (std::string why; !odafs::reopen_log_file(&why)) {
      ODAFS_LOG_ERROR("SIGHUP: %s; logging on to the old file", why.c_str());
    }
    if (!s.exports_file.empty()) {
      (void)odafs::server::reload_exports(s.exports_file, s.access, p.tls != nullptr, s.tls_files,
                                          router);
    }
  }
  return sig;
}

// The ready line scripts and tests wait for (see the top of this file).
void print_ready(const Settings& s, const Plan& p, const odafs::rpc::Server& server,
                 odafs::server::FileService& first, const odafs::server::MetricsHttp* metrics) {
  std::string exported;
  for (const ExportPlan& e : p.exports) exported += (exported.empty() ? "" : ",") + e.root;
  ODAFS_LOG_INFO(
      "serving %s on %s: %d rpc loops (up to %d spare threads), %d engine threads for %d "
      "usable cores, cache %zu MiB in %u-byte blocks per export, %zu open files",
      exported.c_str(), server.bound().to_string().c_str(), s.threads, p.spare_threads,
      s.fs.ordma ? s.engine_threads : 0, p.cores, s.fs.cache_bytes >> 20, s.fs.block_size,
      first.nodes().max_open_files());
  const odafs::ordma::Engine* engine = first.engine();
  const std::string engine_at = engine ? engine->endpoint() : "none";
  const std::string metrics_at = metrics ? " metrics=" + metrics->bound().to_string() : "";
  std::printf("odafsd ready rpc=%s engine=%s export=%s backend=%s threads=%d engine_threads=%d%s\n",
              server.bound().to_string().c_str(), engine_at.c_str(), exported.c_str(),
              engine ? engine->kind() : "none", s.threads, s.fs.ordma ? s.engine_threads : 0,
              metrics_at.c_str());
  std::fflush(stdout);
}

// Builds the services, the router and the RPC server from the plan, serves until a stop
// signal, and stops in order. Throws what fails at start.
void serve(Settings& s, Plan& p, const sigset_t& signals,
           odafs::server::CrashSimulatingEnv& crash_env) {
  // Declared first, so destroyed last: it times the destructors below too.
  std::optional<odafs::server::StopWatchdog> stop_watchdog;
  odafs::server::CpuAccounting cpu;
  std::vector<std::unique_ptr<odafs::server::FileService>> services;
  std::vector<odafs::server::ExportRouter::Export> routes;
  for (ExportPlan& e : p.exports) {
    odafs::server::FileService::Options o = s.fs;
    o.export_root = e.root;
    o.access.rules = std::move(e.rules);
    o.recovery_record = e.recovery_record;
    services.push_back(std::make_unique<odafs::server::FileService>(o, &cpu));
    routes.push_back({e.path, services.back().get()});
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
  odafs::rpc::Server::Options ro = rpc_options(s, p, *services[0], cpu);
  router.configure(&ro);
  odafs::Result<std::unique_ptr<odafs::rpc::Server>> listening = odafs::rpc::Server::listen(ro);
  if (!listening.ok()) throw std::runtime_error(listening.status().to_string());
  odafs::rpc::Server& server = **listening;
  router.register_procedures(&server);
  if (s.fs.ordma) start_engines(s, p, services, cpu);
  server.start();
  std::unique_ptr<odafs::server::MetricsHttp> metrics;
  if (!s.metrics_listen.empty()) {
    odafs::Result<std::unique_ptr<odafs::server::MetricsHttp>> started =
        odafs::server::MetricsHttp::start(odafs::net::parse_endpoint(s.metrics_listen),
                                          [&router] { return render_metrics(router); });
    if (!started.ok()) throw std::runtime_error(started.status().message());
    metrics = std::move(started).value();
  }
  print_ready(s, p, server, *services[0], metrics.get());
  const int sig = wait_for_stop(s, p, signals, router);
  if (sig == SIGUSR1) {
    ODAFS_LOG_WARN("simulated crash: dropping %zu file(s) of unsynced changes",
                   crash_env.unsynced_files());
    crash_env.crash();
    std::fflush(stderr);
    _exit(86);  // no cleanup: a crash
  }
  ODAFS_LOG_INFO("signal %d: shutting down", sig);
  metrics.reset();  // no scrape reads a service while it stops
  stop_watchdog.emplace(s.stop_timeout_ms);
  for (auto& service : services) service->stopping();
  stop_watchdog->stage("stopping the one-sided engine");
  for (auto& service : services) service->stop_engine();
  stop_watchdog->stage("waiting for the rpc threads' calls to end");
  server.stop();
  stop_watchdog->stage("freeing the rpc server's connections and buffers");
}

}  // namespace

int main(int argc, char** argv) {
  // Objects are made with the mode the client asked for: its side applied its umask (the
  // kernel, for the mount), so a second one here would take bits off twice. odafsd's own
  // files (the recovery record, its directory) are made with explicit private modes.
  umask(0);
  Settings s;
  parse_flags(argc, argv, s);
  if (!s.check_exports.empty()) {
    std::fputs(odafs::server::describe_exports(
                   or_usage(odafs::server::load_exports(s.check_exports, s.access)))
                   .c_str(),
               stdout);
    return 0;
  }
  settle(s);
  Plan p = plan_exports(s);

  // Signals go to the main thread's sigwait only; pool threads inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (s.simulate_crashes) sigaddset(&signals, SIGUSR1);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  odafs::server::raise_fd_limit();

  // With --simulate-crashes file data goes through an environment that can undo every
  // unsynced change: a SIGKILL keeps the page cache, so only this shows a missing fsync.
  odafs::server::CrashSimulatingEnv crash_env;
  if (s.simulate_crashes) s.fs.env = &crash_env;
  odafs::server::SlowWriteEnv slow_env(s.slow_write_us);
  if (s.slow_write_us > 0) s.fs.env = &slow_env;

  try {
    serve(s, p, signals, crash_env);
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
