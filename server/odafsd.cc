// odafsd: the odafs file server. Exports one directory over ONC RPC.
//
//   odafsd --export DIR --listen HOST:PORT [--cache-mb N] [--block-size N] [--threads N]
//          [--max-io N] [--max-nodes N] [--max-open-files N] [--max-connections N]
//          [--clients SPEC]... [--read-only] [--identity caller|server]
//          [--anon-uid N] [--anon-gid N]
//          [--max-connections-per-address N] [--idle-timeout SECONDS]
//          [--engine-max-connections N] [--engine-handshake-timeout MS]
//          [--engine-listen HOST:PORT] [--engine-threads N] [--no-ordma]
//          [--max-rings N] [--no-local-rings] [--max-direct-writes N]
//          [--max-input-mb N] [--max-backlog-mb N] [--lease-ms MS] [--no-delegations]
//          [--grace-ms MS] [--state-dir DIR]
//
// Once ready it prints one line on stdout,
//   "odafsd ready rpc=HOST:PORT engine=HOST:PORT|none export=DIR backend=NAME threads=N
//   engine_threads=N",
// which scripts and tests wait for. SIGTERM or SIGINT shut it down cleanly.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/log.h"
#include "proto/odafs_prot.h"
#include "rpc/server.h"
#include "server/cpu_accounting.h"
#include "server/file_env.h"
#include "server/file_service.h"

namespace {

// The cores this process may run on (its affinity mask: taskset, cgroups' cpusets), at
// least one.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

[[noreturn]] void usage(const char* why) {
  if (why != nullptr) std::fprintf(stderr, "odafsd: %s\n", why);
  std::fprintf(stderr,
               "usage: odafsd --export DIR --listen HOST:PORT [--cache-mb N] [--block-size N]\n"
               "              [--threads N] [--max-io BYTES] [--max-nodes N]\n"
               "              [--max-open-files N] [--max-connections N]\n"
               "              [--clients SPEC]... [--read-only] [--identity caller|server]\n"
               "              [--anon-uid N] [--anon-gid N]\n"
               "              [--max-connections-per-address N] [--idle-timeout SECONDS]\n"
               "              [--engine-max-connections N] [--engine-handshake-timeout MS]\n"
               "              [--engine-listen HOST:PORT] [--engine-threads N] [--no-ordma]\n"
               "              [--max-rings N] [--no-local-rings] [--max-direct-writes N]\n"
               "              [--max-input-mb N] [--max-backlog-mb N]\n"
               "              [--lease-ms MS] [--no-delegations]\n"
               "              [--grace-ms MS] [--state-dir DIR]\n"
               "              [--engine soft|verbs] [--rdma-dev NAME]\n"
               "  --engine picks the one-sided engine's backend (default soft); verbs\n"
               "  needs an RDMA device (--rdma-dev names one; default: the one serving\n"
               "  --engine-listen's address).\n"
               "  --engine-listen defaults to the --listen host, port 0 (a free port).\n"
               "  --max-rings caps the shared-memory rings offered to same-host clients;\n"
               "  --no-local-rings offers none (those clients then read over TCP).\n"
               "  --threads sets the RPC event loops (default: one per usable core, from\n"
               "  the affinity mask); --engine-threads the engine's (default: one per two\n"
               "  usable cores). Calls that wait hand their loop to a spare thread (at\n"
               "  most max(8, 2 x --threads) spares).\n"
               "  --max-direct-writes caps direct writes waiting on clients (default:\n"
               "  half the spare threads; 0 turns them off); past it clients write by RPC.\n"
               "  --no-ordma serves RPC only: no one-sided engine, no references.\n"
               "  --max-nodes bounds the objects with valid handles (default 65536);\n"
               "  --max-open-files the descriptors kept open for them (default 1024,\n"
               "  never more than half of RLIMIT_NOFILE); others are reopened on use.\n"
               "  --listen 127.0.0.1:0 picks a free port; the ready line names it.\n"
               "  --clients SPEC (repeatable; first match wins): who may use the export,\n"
               "  SPEC = CIDR|address|host|*[(rw|ro,root_squash|no_root_squash|all_squash,\n"
               "  anonuid=N,anongid=N,secure|insecure)], defaults rw,root_squash,insecure.\n"
               "  Without it a loopback --listen admits this host's processes only (each\n"
               "  acting as the owner of its socket; root as anyone); any other --listen\n"
               "  needs it. --read-only refuses every change to the export (EROFS).\n"
               "  --identity caller (the default as root) acts as each call's uid/gid and\n"
               "  groups, after squashing (AUTH_NONE: --anon-uid/--anon-gid, default\n"
               "  65534); --identity server acts as odafsd's own user for every caller\n"
               "  (the only choice when not run as root). --auth-sys = --identity caller.\n"
               "  --simulate-crashes (testing only): SIGUSR1 drops every change not yet\n"
               "  synced, as a power loss would, and exits at once (status 86).\n"
               "  --lease-ms (default 5000): how long a client has to return a recalled\n"
               "  delegation before it is taken back; --no-delegations grants none.\n"
               "  --state-dir (default /var/lib/odafs as root, else\n"
               "  $XDG_STATE_HOME/odafs or ~/.local/state/odafs) keeps the recovery record:\n"
               "  the clients that may hold writes to reclaim after a restart. --grace-ms\n"
               "  (default 2 leases) bounds the grace period after a start in which they do.\n"
               "  --slow-writes US (testing only): each write lands in two halves US\n"
               "  microseconds apart, so that reads racing writes can be checked.\n"
               "  --max-connections-per-address (default 256; 0: none) keeps one host from\n"
               "  taking every connection; --idle-timeout (default 300; 0: never) closes RPC\n"
               "  connections that complete no call for that long.\n"
               "  --engine-max-connections (default 1024) caps engine connections; one that\n"
               "  does not authenticate within --engine-handshake-timeout (5000) is closed.\n"
               "  --max-input-mb (default 32) bounds the request records over 32 KiB being\n"
               "  received at once (others wait); --max-backlog-mb (default 32) the replies\n"
               "  queued for clients slow to read them, and the engine's answers likewise\n"
               "  (the slowest are disconnected).\n");
  std::exit(2);
}

unsigned long number(const char* flag, const char* text, unsigned long lo, unsigned long hi) {
  char* end = nullptr;
  errno = 0;
  unsigned long v = std::strtoul(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    std::string msg = std::string(flag) + " wants a number in " + std::to_string(lo) + ".." +
                      std::to_string(hi) + ", got '" + text + "'";
    usage(msg.c_str());
  }
  return v;
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

void configure_access(const AccessFlags& flags, const std::string& listen_host,
                      odafs::server::FileService::Options* fs) {
  fs->access.read_only = flags.read_only;
  try {
    for (const std::string& spec : flags.clients) {
      fs->access.rules.add(spec, flags.anon_uid, flags.anon_gid);
    }
  } catch (const std::invalid_argument& e) {
    usage(e.what());
  }
  if (flags.clients.empty()) {
    if (!is_loopback_host(listen_host)) {
      usage(("--listen " + (listen_host.empty() ? std::string("0.0.0.0") : listen_host) +
             " is reachable from other hosts: say who may use the export, e.g. --clients "
             "10.0.0.0/8(rw,root_squash)")
                .c_str());
    }
    fs->access.rules.add_loopback_default(flags.anon_uid, flags.anon_gid);
  }
  const bool root = geteuid() == 0;
  if (flags.identity == "caller" && !root) {
    usage("--identity caller needs root: only root can act as each caller");
  }
  fs->act_as_callers = flags.identity.empty() ? root : flags.identity == "caller";
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

void raise_fd_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

}  // namespace

int main(int argc, char** argv) {
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
  long max_direct_writes = -1;  // -1: half of the spare threads
  int grace_ms = -1;            // -1: two leases
  std::string state_dir;
  bool simulate_crashes = false;
  unsigned slow_write_us = 0;
  AccessFlags access;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((flag + " needs a value").c_str());
      return argv[++i];
    };
    if (flag == "--export") {
      fs.export_root = value();
    } else if (flag == "--listen") {
      listen = value();
    } else if (flag == "--cache-mb") {
      fs.cache_bytes = number("--cache-mb", value(), 1, 1u << 20) << 20;
    } else if (flag == "--block-size") {
      fs.block_size =
          static_cast<uint32_t>(number("--block-size", value(), ODAFS_MINBLOCK, ODAFS_MAXBLOCK));
      if ((fs.block_size & (fs.block_size - 1)) != 0) usage("--block-size must be a power of two");
    } else if (flag == "--threads") {
      threads = static_cast<int>(number("--threads", value(), 1, 256));
    } else if (flag == "--max-io") {
      fs.max_io = static_cast<uint32_t>(number("--max-io", value(), 4096, 16u << 20));
    } else if (flag == "--max-nodes") {
      fs.max_nodes = number("--max-nodes", value(), 16, 1u << 24);
    } else if (flag == "--max-open-files") {
      fs.max_open_files = number("--max-open-files", value(), 2, 1u << 24);
    } else if (flag == "--max-connections") {
      max_connections = number("--max-connections", value(), 1, 1u << 20);
    } else if (flag == "--max-connections-per-address") {
      max_per_address = number("--max-connections-per-address", value(), 0, 1u << 20);
    } else if (flag == "--idle-timeout") {
      idle_timeout_s = static_cast<int64_t>(number("--idle-timeout", value(), 0, 1u << 24));
    } else if (flag == "--max-input-mb") {
      max_input_mb = number("--max-input-mb", value(), 1, 1u << 20);
    } else if (flag == "--max-backlog-mb") {
      max_backlog_mb = number("--max-backlog-mb", value(), 1, 1u << 20);
    } else if (flag == "--engine-max-connections") {
      engine_options.max_connections = number("--engine-max-connections", value(), 1, 1u << 20);
    } else if (flag == "--engine-handshake-timeout") {
      engine_options.handshake_timeout_ms =
          static_cast<int>(number("--engine-handshake-timeout", value(), 10, 600000));
    } else if (flag == "--engine-listen") {
      engine_listen = value();
    } else if (flag == "--engine-threads") {
      engine_threads = static_cast<int>(number("--engine-threads", value(), 1, 64));
    } else if (flag == "--max-rings") {
      engine_options.max_rings = number("--max-rings", value(), 1, 1u << 16);
    } else if (flag == "--max-direct-writes") {
      max_direct_writes = static_cast<long>(number("--max-direct-writes", value(), 0, 1024));
    } else if (flag == "--engine") {
      engine_options.kind = value();
      std::string why;
      if (!odafs::ordma::backend_usable(engine_options.kind, &why)) {
        usage(("--engine " + engine_options.kind + ": " + why).c_str());
      }
    } else if (flag == "--rdma-dev") {
      engine_options.rdma_device = value();
    } else if (flag == "--no-local-rings") {
      engine_options.local_rings = false;
    } else if (flag == "--no-ordma") {
      fs.ordma = false;
    } else if (flag == "--simulate-crashes") {
      simulate_crashes = true;
    } else if (flag == "--lease-ms") {
      fs.lease_ms = static_cast<int>(number("--lease-ms", value(), 10, 600000));
    } else if (flag == "--no-delegations") {
      fs.delegations = false;
    } else if (flag == "--grace-ms") {
      grace_ms = static_cast<int>(number("--grace-ms", value(), 0, 3600000));
    } else if (flag == "--state-dir") {
      state_dir = value();
    } else if (flag == "--slow-writes") {
      slow_write_us = static_cast<unsigned>(number("--slow-writes", value(), 1, 1000000));
    } else if (flag == "--auth-sys") {
      access.identity = "caller";
    } else if (flag == "--identity") {
      access.identity = value();
      if (access.identity != "caller" && access.identity != "server") {
        usage("--identity wants caller or server");
      }
    } else if (flag == "--clients") {
      access.clients.emplace_back(value());
    } else if (flag == "--read-only") {
      access.read_only = true;
    } else if (flag == "--anon-uid") {
      access.anon_uid = static_cast<uint32_t>(number("--anon-uid", value(), 0, UINT32_MAX - 1));
    } else if (flag == "--anon-gid") {
      access.anon_gid = static_cast<uint32_t>(number("--anon-gid", value(), 0, UINT32_MAX - 1));
    } else if (flag == "--help" || flag == "-h") {
      usage(nullptr);
    } else {
      usage(("unknown option " + flag).c_str());
    }
  }
  if (fs.export_root.empty() || listen.empty()) usage("--export and --listen are required");
  odafs::net::Endpoint listen_at;
  try {
    listen_at = odafs::net::parse_endpoint(listen);
  } catch (const std::invalid_argument& e) {
    usage(e.what());
  }
  configure_access(access, listen_at.host, &fs);
  fs.grace_ms = grace_ms >= 0 ? grace_ms : 2 * fs.lease_ms;
  fs.recovery_record = recovery_record_path(state_dir, fs.export_root);
  if (threads < 0) threads = cores;
  if (engine_threads < 0) engine_threads = std::max(1, cores / 2);
  // Calls that wait (on clients, leases) hand their loop to a spare thread; they share the
  // spares, so that waits of one kind leave room for the other's and for disk flushes.
  const int spare_threads = std::max(8, 2 * threads);
  fs.max_delegation_waiters = spare_threads / 2;
  fs.max_direct_writes = max_direct_writes >= 0 ? static_cast<size_t>(max_direct_writes)
                                                : static_cast<size_t>(spare_threads / 2);

  // Signals go to the main thread's sigwait only; pool threads inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  if (simulate_crashes) sigaddset(&stop_signals, SIGUSR1);
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
    odafs::server::CpuAccounting cpu;
    odafs::server::FileService service(fs, &cpu);
    odafs::rpc::Server::Options ro;
    ro.listen = listen_at;
    ro.threads = threads;
    ro.max_blocked_threads = spare_threads;
    ro.max_record = service.max_request_record();
    ro.max_reply = service.max_reply_record();
    ro.max_connections = max_connections;
    ro.max_connections_per_address = max_per_address;
    ro.idle_timeout_ms = idle_timeout_s * 1000;
    ro.max_input_bytes = max_input_mb << 20;
    ro.max_total_backlog = max_backlog_mb << 20;
    ro.program = ODAFS_PROGRAM;
    ro.version = ODAFS_V1;
    ro.on_thread_start = [&cpu] { cpu.join("rpc"); };
    ro.on_connection_closed = [&service](uint64_t c) { service.connection_closed(c); };
    ro.on_thread_exit = [&cpu] { cpu.leave(); };
    const odafs::server::CallAuthority& authority = service.authority();
    ro.admit = [&authority](int fd, const sockaddr_storage& peer) {
      return authority.admit(fd, peer);
    };
    ro.authorize = [&authority](const odafs::rpc::CallContext& ctx, odafs::rpc::CallerCred* c) {
      return authority.authorize(ctx, c);
    };
    odafs::rpc::Server server(ro);
    service.register_procedures(&server);
    if (fs.ordma) {
      odafs::ordma::EngineOptions eo = engine_options;
      eo.max_total_backlog = max_backlog_mb << 20;
      eo.listen = engine_listen.empty() ? odafs::net::Endpoint{ro.listen.host, 0}
                                        : odafs::net::parse_endpoint(engine_listen);
      eo.threads = engine_threads;
      eo.on_thread_start = [&cpu] { cpu.join("engine"); };
      eo.on_thread_exit = [&cpu] { cpu.leave(); };
      eo.admit_peer = [&authority](const sockaddr_storage& peer) { return authority.admits(peer); };
      service.start_engine(eo);
    }
    server.start();
    ODAFS_LOG_INFO(
        "serving %s on %s: %d rpc loops (up to %d spare threads), %d engine threads for %d "
        "usable cores, cache %zu MiB in %u-byte blocks, %zu open files",
        fs.export_root.c_str(), server.bound().to_string().c_str(), threads, spare_threads,
        fs.ordma ? engine_threads : 0, cores, fs.cache_bytes >> 20, fs.block_size,
        service.nodes().max_open_files());
    std::string engine = service.engine() ? service.engine()->endpoint() : "none";
    std::printf("odafsd ready rpc=%s engine=%s export=%s backend=%s threads=%d engine_threads=%d\n",
                server.bound().to_string().c_str(), engine.c_str(), fs.export_root.c_str(),
                service.engine() ? service.engine()->kind() : "none", threads,
                fs.ordma ? engine_threads : 0);
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (sig == SIGUSR1) {
      ODAFS_LOG_WARN("simulated crash: dropping %zu file(s) of unsynced changes",
                     crash_env.unsynced_files());
      crash_env.crash();
      std::fflush(stderr);
      _exit(86);  // no cleanup: a crash
    }
    ODAFS_LOG_INFO("signal %d: shutting down", sig);
    service.stopping();
    service.stop_engine();
    server.stop();
  } catch (const std::exception& e) {
    ODAFS_LOG_ERROR("odafsd: %s", e.what());
    return 1;
  }
  return 0;
}
