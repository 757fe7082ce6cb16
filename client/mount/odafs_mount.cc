// odafs-mount: mounts an odafs export through FUSE (libfuse3's low-level API, served by
// several threads). docs/mount.md is the manual.
//
//   odafs-mount [-f] [-d] [-s] [-o OPTIONS] odafs://HOST:PORT/[PATH] MOUNTPOINT
//
// This file parses the options, connects the Client, mounts and runs the session loop;
// FuseFs (fuse_ops.h) answers the kernel.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "base/log.h"
#include "client/client.h"
#include "client/mount/fuse_ops.h"
#include "client/mount/request_loop.h"

namespace {

// What -o sets besides the options libfuse and mount(8) know (ro, allow_other,
// default_permissions... travel on to fuse_session_new).
struct Config {
  char* url = nullptr;  // the first non-option argument
  unsigned long cache_blocks = 2048;
  // Bytes of consecutive writes gathered into one WRITE (MountOptions::write_behind_bytes).
  // The kernel hands over a cp's write(2)s of 128 KiB one at a time, each waiting for its
  // reply: gathered up to the server's max_write (1 MiB), 8 of them cost one round trip,
  // not 8 (bench/stream: cp into the mount). A failure to send them comes back from the
  // next write, fsync or close, as for the small writes gathered before. The default stays
  // the library's 64 KiB: with 1 MiB runs test_fsx lost acknowledged bytes across a server
  // SIGKILL (2 runs in 5; docs/RELIABILITY.md, "Not yet defended") until that is found.
  unsigned long write_behind = 64u << 10;
  char* read_mode = nullptr;
  int no_ordma = 0;
  int timeout_ms = 60000;
  int reconnect_ms = 0;
  int unmount_wait_ms = -1;  // as long as it takes (a hard mount)
  char* rescue_dir = nullptr;
  int dir_cache_ms = 3000;
  double attr_timeout = 1.0;
  double entry_timeout = 1.0;
  double negative_timeout = 1.0;
  int no_readdirplus = 0;
  int tls = 0;
  char* tls_ca = nullptr;
  char* tls_cert = nullptr;
  char* tls_key = nullptr;
  char* log = nullptr;  // stderr|syslog|auto|FILE (base/log.h's log_to); default stderr+syslog
  int show_help = 0;
  // Seen among libfuse's options (kept for it): with allow_other, default_permissions is
  // added unless nodefault_permissions says otherwise (see kMultiUser below).
  int allow_other = 0;
  int default_permissions = 0;
  int no_default_permissions = 0;

  // libfuse's %s options are malloc'd strings, the Config's to free.
  Config() = default;
  Config(const Config&) = delete;
  Config& operator=(const Config&) = delete;
  ~Config() {
    for (char* s : {url, read_mode, rescue_dir, tls_ca, tls_cert, tls_key, log}) free(s);
  }
};

enum OptionKey { kKeyAllowOther = 1, kKeyDefaultPermissions = 2 };

#define ODAFS_OPT(templ, field, value) \
  fuse_opt { templ, offsetof(Config, field), value }

const fuse_opt kSpec[] = {ODAFS_OPT("cache_blocks=%lu", cache_blocks, 0),
                          ODAFS_OPT("write_behind=%lu", write_behind, 0),
                          ODAFS_OPT("read_mode=%s", read_mode, 0),
                          ODAFS_OPT("noordma", no_ordma, 1),
                          ODAFS_OPT("timeout_ms=%d", timeout_ms, 0),
                          ODAFS_OPT("reconnect_ms=%d", reconnect_ms, 0),
                          ODAFS_OPT("unmount_wait_ms=%d", unmount_wait_ms, 0),
                          ODAFS_OPT("rescue_dir=%s", rescue_dir, 0),
                          ODAFS_OPT("dir_cache_ms=%d", dir_cache_ms, 0),
                          ODAFS_OPT("attr_timeout=%lf", attr_timeout, 0),
                          ODAFS_OPT("entry_timeout=%lf", entry_timeout, 0),
                          ODAFS_OPT("negative_timeout=%lf", negative_timeout, 0),
                          ODAFS_OPT("noreaddirplus", no_readdirplus, 1),
                          ODAFS_OPT("tls", tls, 1),
                          ODAFS_OPT("tls_ca=%s", tls_ca, 0),
                          ODAFS_OPT("tls_cert=%s", tls_cert, 0),
                          ODAFS_OPT("tls_key=%s", tls_key, 0),
                          ODAFS_OPT("log=%s", log, 0),
                          ODAFS_OPT("nodefault_permissions", no_default_permissions, 1),
                          FUSE_OPT_KEY("allow_other", kKeyAllowOther),
                          FUSE_OPT_KEY("default_permissions", kKeyDefaultPermissions),
                          ODAFS_OPT("-h", show_help, 1),
                          ODAFS_OPT("--help", show_help, 1),
                          FUSE_OPT_END};

// The first non-option is the URL (taken out); everything else stays for libfuse.
int keep_or_take_url(void* data, const char* arg, int key, fuse_args* outargs) {
  (void)outargs;
  auto* c = static_cast<Config*>(data);
  if (key == kKeyAllowOther) c->allow_other = 1;
  if (key == kKeyDefaultPermissions) c->default_permissions = 1;
  if (key == FUSE_OPT_KEY_NONOPT && c->url == nullptr) {
    c->url = strdup(arg);
    return 0;
  }
  return 1;
}

void usage(const char* prog) {
  std::printf(
      "usage: %s [-f] [-d] [-s] [-o OPTIONS] odafs://HOST:PORT/[PATH] MOUNTPOINT\n"
      "\n"
      "odafs options (-o):\n"
      "    cache_blocks=N         client data cache, in server blocks (default 2048; 0: off)\n"
      "    write_behind=N         bytes of consecutive writes sent as one WRITE (default\n"
      "                           65536, at most the server's max_write; 0: each at once)\n"
      "    read_mode=MODE         ordma (default) | preposted | inline | direct\n"
      "    noordma                no one-sided reads: read_mode=preposted\n"
      "    timeout_ms=N           bound on every call to the server (default 60000)\n"
      "    reconnect_ms=N         keep re-connecting to a restarting server this long (0)\n"
      "    unmount_wait_ms=N      at unmount, wait at most N ms for an unreachable server\n"
      "                           to take the bytes closes kept, then save them in rescue\n"
      "                           files and exit 1 (default: wait until it answers; a\n"
      "                           SIGINT or SIGTERM then gives up the same way)\n"
      "    rescue_dir=DIR         where rescue files go (default: $TMPDIR, else /var/tmp)\n"
      "    dir_cache_ms=N         libodafs directory handle cache (default 3000; 0: off)\n"
      "    attr_timeout=S         seconds the kernel trusts attributes (default 1)\n"
      "    entry_timeout=S        seconds the kernel trusts name lookups (default 1)\n"
      "    negative_timeout=S     seconds the kernel trusts that a name does not exist\n"
      "                           (default 1; 0: not kept)\n"
      "    noreaddirplus          list directories without attributes (ls -l then\n"
      "                           looks each name up)\n"
      "    tls                    RPC-with-TLS (RFC 9289) to the server, and TLS on the\n"
      "                           one-sided engine's TCP path\n"
      "    tls_ca=FILE            CA (PEM) the server's certificate must chain to (default:\n"
      "                           the system's store); implies tls\n"
      "    tls_cert=FILE,tls_key=FILE  this client's certificate and key (mutual TLS)\n"
      "    log=stderr|syslog|auto|FILE  where its log goes (default: stderr and syslog;\n"
      "                           auto: syslog when stderr is neither a terminal nor the\n"
      "                           journal; FILE: appended to FILE)\n"
      "    max_threads=N          requests served at once (default 10; -s: one, libfuse's\n"
      "                           single-threaded loop); clone_fd and max_idle_threads\n"
      "                           (libfuse's own loop's) do not apply\n"
      "    nodefault_permissions  with allow_other: leave permission checks on the way to\n"
      "                           the server alone (allow_other adds default_permissions\n"
      "                           otherwise: the kernel then checks every component)\n"
      "    ro, allow_other, default_permissions, ...: as for any FUSE file system\n"
      "\n"
      "Unmount with: fusermount3 -u MOUNTPOINT (or SIGINT/SIGTERM to a -f odafs-mount)\n\n",
      prog);
  fuse_cmdline_help();
  fuse_lowlevel_help();
}

bool parse_read_mode(const char* s, odafs::ReadMode* mode) {
  std::string m = s;
  if (m == "ordma") {
    *mode = odafs::ReadMode::kOrdma;
  } else if (m == "preposted" || m == "pre-posted") {
    *mode = odafs::ReadMode::kPrePosted;
  } else if (m == "inline") {
    *mode = odafs::ReadMode::kInline;
  } else if (m == "direct") {
    *mode = odafs::ReadMode::kDirect;
  } else {
    return false;
  }
  return true;
}

// In the background, the process forks before any thread exists (libodafs starts
// threads, which fork would lose) and the child does the work; the parent waits for the
// child's word that the mount is up and exits 0, or 1 when the child failed (its error
// went to the terminal first). In the foreground this is all a no-op.
class Backgrounder {
 public:
  explicit Backgrounder(bool foreground) {
    if (foreground) return;
    int p[2];
    if (pipe(p) != 0) {
      std::perror("odafs-mount: pipe");
      std::exit(1);
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("odafs-mount: fork");
      std::exit(1);
    }
    if (pid > 0) {
      close(p[1]);
      char ok = 1;
      ssize_t n;
      do n = read(p[0], &ok, 1);
      while (n < 0 && errno == EINTR);
      _exit(n == 1 && ok == 0 ? 0 : 1);
    }
    close(p[0]);
    ready_fd_ = p[1];
    setsid();
  }
  // The mount is up: let the parent exit 0 and leave the terminal.
  void ready() {
    if (ready_fd_ < 0) return;
    if (chdir("/") != 0) std::perror("odafs-mount: chdir /");
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
      if (null > 2) close(null);
    }
    char ok = 0;
    if (write(ready_fd_, &ok, 1) != 1) _exit(1);
    close(ready_fd_);
    ready_fd_ = -1;
  }

 private:
  int ready_fd_ = -1;  // closed unwritten when the child fails: the parent exits 1
};

// Set by SIGINT, SIGTERM or SIGHUP once the session is over: the unmount stops waiting
// for the server and saves what it keeps in rescue files.
std::atomic<bool> g_give_up{false};

void give_up_on_signal() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_give_up.store(true); };
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// The URL as a mount source: up to its options ('?'), with the commas and backslashes
// that fuse_opt_parse would split on escaped.
std::string fsname_escaped(const char* url) {
  std::string out;
  for (const char* p = url; *p != '\0' && *p != '?'; ++p) {
    if (*p == ',' || *p == '\\') out += '\\';
    out += *p;
  }
  return out;
}

// Whether an argument among args already sets `option` ("fsname=", "subtype=").
bool has_option(const fuse_args& args, std::string_view option) {
  for (int i = 0; i < args.argc; ++i) {
    if (std::string_view(args.argv[i]).find(option) != std::string_view::npos) return true;
  }
  return false;
}

// The arguments the options imply for libfuse: default_permissions with allow_other, and
// the mount's source and type names. False if libfuse could not take them.
bool add_implied_args(fuse_args& args, const Config& conf) {
  // A mount other users reach needs the kernel's permission checks: without them, a name
  // the kernel or libodafs resolved for one caller is not looked up again for another, so
  // search permission on a directory on the way is not checked for the second (the
  // server checks every call it gets, but gets none for those). Fail closed: allow_other
  // brings default_permissions unless asked not to.
  if (conf.allow_other && !conf.default_permissions && !conf.no_default_permissions) {
    if (fuse_opt_add_arg(&args, "-odefault_permissions") != 0) return false;
  }
  // The mount's source in df, findmnt and /proc/self/mountinfo: its URL without the
  // options (not the program's name), unless -o fsname= says otherwise.
  if (conf.url != nullptr && !has_option(args, "fsname=")) {
    const std::string source = "-ofsname=" + fsname_escaped(conf.url);
    if (fuse_opt_add_arg(&args, source.c_str()) != 0) return false;
    // libfuse names the type after the program only while it names the source so too: the
    // type stays fuse.odafs-mount (what scripts and the tests look for).
    if (!has_option(args, "subtype=") && fuse_opt_add_arg(&args, "-osubtype=odafs-mount") != 0) {
      return false;
    }
  }
  return true;
}

// The library's options from the mount's, or why they are refused (said on stderr).
std::optional<odafs::MountOptions> mount_options_of(const Config& conf) {
  odafs::MountOptions mo;
  mo.cache_blocks = conf.cache_blocks;
  mo.write_behind_bytes = conf.write_behind;
  mo.timeout_ms = conf.timeout_ms;
  mo.reconnect_window_ms = conf.reconnect_ms;
  mo.unmount_wait_ms = conf.unmount_wait_ms < 0 ? -1 : conf.unmount_wait_ms;
  if (conf.rescue_dir != nullptr) mo.rescue_dir = conf.rescue_dir;
  mo.dir_cache_ms = conf.dir_cache_ms;
  mo.tls = conf.tls != 0 || conf.tls_ca != nullptr || conf.tls_cert != nullptr ||
           conf.tls_key != nullptr;
  if (conf.tls_ca != nullptr) mo.tls_ca = conf.tls_ca;
  if (conf.tls_cert != nullptr) mo.tls_cert = conf.tls_cert;
  if (conf.tls_key != nullptr) mo.tls_key = conf.tls_key;
  if (conf.no_ordma) mo.read_mode = odafs::ReadMode::kPrePosted;
  if (conf.read_mode != nullptr && !parse_read_mode(conf.read_mode, &mo.read_mode)) {
    std::fprintf(stderr, "odafs-mount: read_mode must be ordma, preposted, inline or direct\n");
    return std::nullopt;
  }
  if (conf.timeout_ms <= 0 || conf.attr_timeout < 0 || conf.entry_timeout < 0 ||
      conf.negative_timeout < 0) {
    std::fprintf(stderr, "odafs-mount: timeouts must not be negative (timeout_ms > 0)\n");
    return std::nullopt;
  }
  return mo;
}

// Mounts fs at mountpoint and serves the kernel's requests until the mount ends: 0 for a
// clean stop (a signal's too), 1 otherwise. bg is told once the mount is there.
int serve(fuse_args& args, const fuse_cmdline_opts& opts, odafs::mount::FuseFs& fs,
          Backgrounder& bg) {
  const fuse_lowlevel_ops& ops = odafs::mount::FuseFs::ops();
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &fs);
  fuse_opt_free_args(&args);
  if (se == nullptr) return 1;
  fs.set_session(se);
  int rc = 1;
  if (fuse_set_signal_handlers(se) == 0) {
    if (fuse_session_mount(se, opts.mountpoint) == 0) {
      bg.ready();
      if (opts.singlethread) {
        rc = fuse_session_loop(se);
        if (rc < 0 && odafs::mount::connection_ended(-rc)) rc = 0;
      } else {
        // Our loop, not libfuse's (client/mount/request_loop.h says why); -o max_threads
        // bounds it as it would libfuse's (default 10).
        const unsigned threads = opts.max_threads != UINT_MAX ? opts.max_threads : 10;
        if (opts.clone_fd != 0 || opts.max_idle_threads != UINT_MAX) {
          std::fprintf(stderr,
                       "odafs-mount: clone_fd and max_idle_threads are libfuse's own loop's: "
                       "ignored\n");
        }
        rc = odafs::mount::RequestLoop(se, threads).run();
      }
      fuse_session_unmount(se);
    }
    fuse_remove_signal_handlers(se);
  }
  fuse_session_destroy(se);
  // A signal ends the loop with its number; that is a clean stop.
  return rc == 0 || rc == SIGINT || rc == SIGTERM || rc == SIGHUP ? 0 : 1;
}

int run(int argc, char** argv) {
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  // Freed on every way out, --version's and --help's too (fuse_opt_free_args may run twice).
  const std::unique_ptr<fuse_args, decltype(&fuse_opt_free_args)> free_args(&args,
                                                                            &fuse_opt_free_args);
  Config conf;
  if (fuse_opt_parse(&args, &conf, kSpec, keep_or_take_url) != 0) return 1;
  if (conf.show_help) {
    usage(argv[0]);
    return 0;
  }
  if (!add_implied_args(args, conf)) return 1;
  fuse_cmdline_opts opts{};
  if (fuse_parse_cmdline(&args, &opts) != 0) return 1;
  std::unique_ptr<char, decltype(&free)> mountpoint(opts.mountpoint, &free);
  if (opts.show_version) {
    std::printf("odafs-mount " ODAFS_VERSION ", FUSE library %s\n", fuse_pkgversion());
    fuse_lowlevel_version();
    return 0;
  }
  if (conf.url == nullptr || mountpoint == nullptr) {
    usage(argv[0]);
    return 1;
  }
  const std::optional<odafs::MountOptions> mo = mount_options_of(conf);
  if (!mo) return 1;

  // A background mount's stderr goes nowhere: what it logs (write-back failures, an
  // unmount waiting for its server) goes to syslog too, in the foreground as well, unless
  // log= says where.
  if (conf.log == nullptr) {
    odafs::log_to_syslog("odafs-mount");
  } else if (std::string why; !odafs::log_to(conf.log, "odafs-mount", &why)) {
    std::fprintf(stderr, "odafs-mount: %s\n", why.c_str());
    return 1;
  }
  Backgrounder bg(opts.foreground != 0);
  std::unique_ptr<odafs::Client> client;
  odafs::Attr root;
  try {
    client = odafs::Client::mount(conf.url, *mo);
    root = client->stat("/");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-mount: %s: %s\n", conf.url, e.what());
    return 1;
  }
  odafs::mount::FsOptions fo;
  fo.attr_timeout = conf.attr_timeout;
  fo.entry_timeout = conf.entry_timeout;
  fo.negative_timeout = conf.negative_timeout;
  fo.readdirplus = conf.no_readdirplus == 0;
  odafs::mount::FuseFs fs(*client, root, fo);
  int rc = serve(args, opts, fs, bg);
  // The kernel's mount is gone; bytes closes kept may not be on the server yet. They are
  // waited for (saying so), or saved in rescue files (a bounded wait, or a signal now).
  give_up_on_signal();
  fs.close_left_open();
  odafs::Status kept = client->try_unmount(&g_give_up);
  if (!kept.ok()) {
    ODAFS_LOG_ERROR("odafs-mount: %s", kept.message().c_str());  // stderr, syslog
    rc = 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
