// odafs: the command-line tool. Options and subcommands are CLI11's (a Debian package,
// header-only): an unknown option or an extra argument is an error with a hint, options may
// come before or after the command, and every command has --help.
//
//   odafs [OPTIONS] ls [-l] URL | stat URL | cat URL | mkdir URL | rmdir URL | df URL
//   odafs [OPTIONS] rm [-r] URL...      odafs [OPTIONS] mv URL URL2   (same server)
//   odafs [OPTIONS] put [--in-place] LOCAL|- URL      odafs [OPTIONS] get URL LOCAL|-
//   odafs [OPTIONS] ping URL | stats URL | exports URL | clients URL
//
// On a server of several exports (odafsd --exports) a URL's path is the export's path and
// then the path inside it, odafs://HOST:PORT/srv/a/dir/file; each command mounts the export
// that holds it.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/admin.h"
#include "client/cli/remove.h"
#include "client/cli/transfer.h"
#include "client/client.h"
#include "client/io_queue.h"
#include "client/url.h"
#include "proto/export_paths.h"

namespace {

// What the options say for every mount; a URL's own options win over them.
struct Settings {
  std::string timeout;  // --timeout, checked by parse_timeout_ms
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key;
  // The timeout the last mount used, for the message when a call runs out of it.
  int effective_timeout_ms = odafs::MountOptions{}.timeout_ms;
  // The process's umask, read once at start: `get` creates LOCAL with 0644 minus it, as
  // open(O_CREAT, 0644) would.
  mode_t umask = 022;
};
Settings g_settings;

struct Target {
  std::unique_ptr<odafs::Client> client;
  std::string path;         // inside the mounted export
  std::string server;       // HOST:PORT
  std::string export_path;  // the export mounted: "/" on a server of one --export
};

// path with empty, "." and ".." components resolved: "/a//b/../c" is "/a/c".
std::string normalized(const std::string& path) {
  std::string normal;
  for (const std::string& part : odafs::split_path(path)) normal += "/" + part;
  return normal.empty() ? "/" : normal;
}

// Where path (a URL's) is inside the target's export: itself on a server of one --export.
std::string inside_export(const std::string& export_path, const std::string& path) {
  if (export_path == "/") return path;
  const std::string normal = normalized(path);
  return normal.size() > export_path.size() ? normal.substr(export_path.size()) : "/";
}

// The export of a server of several (odafsd --exports) that holds path: the longest export
// path that is a prefix of it, as the server's MOUNT picks. Throws ENOENT naming the
// exports when none does.
std::string export_holding(const std::vector<odafs::ExportInfo>& exports, const std::string& path,
                           const std::string& server) {
  std::string best;
  for (const odafs::ExportInfo& e : exports) {
    if (odafs::wire::within_export(e.path, path) && e.path.size() > best.size()) best = e.path;
  }
  if (best.empty()) {
    std::string names;
    for (const odafs::ExportInfo& e : exports) names += " " + e.path;
    throw odafs::Error(ENOENT, "odafs://" + server + path + ": in no export this host may mount (" +
                                   (names.empty() ? std::string(" none") : names) + " )");
  }
  return best;
}

// The mount options the command's options say (a URL's own options win over them later).
odafs::MountOptions mount_options() {
  // No data cache: a command reads a file once, front to back, and keeping each block
  // cost a copy of every byte (ClientCache::store, 5% of get's CPU) and the cache's memory.
  odafs::MountOptions options;
  options.cache_blocks = 0;
  if (!g_settings.timeout.empty()) {
    options.timeout_ms = odafs::or_throw(odafs::parse_timeout_ms(g_settings.timeout, "--timeout"));
  }
  const bool tls_files =
      !g_settings.tls_ca.empty() || !g_settings.tls_cert.empty() || !g_settings.tls_key.empty();
  options.tls = g_settings.tls || tls_files;  // a TLS file implies --tls
  options.tls_ca = g_settings.tls_ca;
  options.tls_cert = g_settings.tls_cert;
  options.tls_key = g_settings.tls_key;
  return options;
}

Target open_target(const std::string& url) {
  odafs::Url parsed = odafs::or_throw(odafs::parse_url(url));
  odafs::MountOptions options = mount_options();
  odafs::apply_url_options(parsed, &options);
  g_settings.effective_timeout_ms = options.timeout_ms;
  Target t;
  t.server = parsed.server.to_string();
  try {
    t.client = odafs::Client::mount("odafs://" + t.server + "/", options);
    t.export_path = "/";
    t.path = parsed.path;
  } catch (const odafs::Error& e) {
    if (e.code().value() != ENOENT) throw;
    // No export at "/": a server of several exports, each mounted by its own path.
    t.export_path = export_holding(odafs::list_exports("odafs://" + t.server + "/", options),
                                   normalized(parsed.path), t.server);
    t.client = odafs::Client::mount("odafs://" + t.server + t.export_path, options);
    t.path = inside_export(t.export_path, parsed.path);
  }
  return t;
}

const char* type_name(odafs::FileType t) {
  switch (t) {
    case odafs::FileType::kDirectory:
      return "directory";
    case odafs::FileType::kSymlink:
      return "symlink";
    case odafs::FileType::kRegular:
      return "file";
    default:
      return "special";
  }
}

// "2026-11-29 12:00:00.123456789 +0000": t in local time, as stat(1) prints it.
std::string readable_time(const struct timespec& t) {
  struct tm tm {};
  localtime_r(&t.tv_sec, &tm);
  char day[64], zone[16];
  std::strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &tm);
  std::strftime(zone, sizeof zone, "%z", &tm);
  char out[128];
  std::snprintf(out, sizeof out, "%s.%09ld %s", day, t.tv_nsec, zone);
  return out;
}

// A counter as people read it: bytes in binary units, CPU microseconds in seconds, counts
// with thousands separators ("12,345"), each with the exact value after it when rounded.
std::string readable_counter(const std::string& name, uint64_t value) {
  char text[96];
  const auto exact = static_cast<unsigned long long>(value);
  if (name.find("bytes") != std::string::npos && value >= 1024) {
    static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = static_cast<double>(value) / 1024;
    int unit = 0;
    while (v >= 1024 && unit < 4) v /= 1024, ++unit;
    std::snprintf(text, sizeof text, "%.1f %s (%llu)", v, kUnits[unit], exact);
    return text;
  }
  if (name.rfind("cpu_us.", 0) == 0) {
    std::snprintf(text, sizeof text, "%.3f s", static_cast<double>(value) / 1e6);
    return text;
  }
  std::string digits = std::to_string(exact);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

// ls -l's first column: "drwxr-xr-x".
std::string mode_string(const odafs::Attr& a) {
  std::string s = "?---------";
  switch (a.type) {
    case odafs::FileType::kDirectory:
      s[0] = 'd';
      break;
    case odafs::FileType::kSymlink:
      s[0] = 'l';
      break;
    case odafs::FileType::kRegular:
      s[0] = '-';
      break;
    case odafs::FileType::kBlock:
      s[0] = 'b';
      break;
    case odafs::FileType::kChar:
      s[0] = 'c';
      break;
    case odafs::FileType::kSocket:
      s[0] = 's';
      break;
    case odafs::FileType::kFifo:
      s[0] = 'p';
      break;
  }
  static constexpr char kRwx[] = "rwx";
  for (int i = 0; i < 9; ++i) {
    if (a.mode & (0400u >> i)) s[1 + i] = kRwx[i % 3];
  }
  if (a.mode & S_ISUID) s[3] = (a.mode & S_IXUSR) ? 's' : 'S';
  if (a.mode & S_ISGID) s[6] = (a.mode & S_IXGRP) ? 's' : 'S';
  if (a.mode & S_ISVTX) s[9] = (a.mode & S_IXOTH) ? 't' : 'T';
  return s;
}

void print_long(const odafs::Attr& a, const std::string& name) {
  struct tm tm {};
  localtime_r(&a.mtime.tv_sec, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
  std::printf("%s %3u %5u %5u %10llu %s %s\n", mode_string(a).c_str(), a.nlink, a.uid, a.gid,
              static_cast<unsigned long long>(a.size), when, name.c_str());
}

// ls: the names of a directory (directories with a trailing /), or with `long_form` one
// line each as ls -l. Attributes the listing could not vouch for are fetched with
// pipelined LOOKUPs (IoQueue::submit_lstat), not one round trip each.
void list(const std::string& url, bool long_form) {
  Target t = open_target(url);
  odafs::Client& c = *t.client;
  const odafs::Attr a = c.stat(t.path);
  if (a.type != odafs::FileType::kDirectory) {
    if (long_form) {
      print_long(c.lstat(t.path), t.path);
    } else {
      std::printf("%s\n", t.path.c_str());
    }
    return;
  }
  std::vector<odafs::DirEntry> entries = c.readdir(t.path, long_form);
  if (long_form) {
    constexpr size_t kInFlight = 32;
    odafs::IoQueue q(c, kInFlight);
    std::vector<odafs::Completion> done(kInFlight);
    std::vector<odafs::Attr> fetched(entries.size());
    int failed = 0;
    auto reap = [&](size_t min) {
      const size_t n = q.wait(done, min, -1);
      for (size_t i = 0; i < n; ++i) {
        if (done[i].error == 0) {
          entries[done[i].user_tag].attr = fetched[done[i].user_tag];
        } else {
          failed = done[i].error;
        }
      }
    };
    const std::string dir = t.path.empty() || t.path.back() == '/' ? t.path : t.path + "/";
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].attr) continue;
      if (q.outstanding() == q.depth()) reap(1);
      q.submit_lstat(dir + entries[i].name, &fetched[i], i);
    }
    while (q.outstanding() > 0) reap(1);
    for (const odafs::DirEntry& e : entries) {
      if (e.attr) print_long(*e.attr, e.name);  // one removed meanwhile is left out
    }
    if (failed != 0 && failed != ENOENT) throw odafs::Error(failed, "ls -l " + url);
    return;
  }
  for (const odafs::DirEntry& e : entries) {
    std::printf("%s%s\n", e.name.c_str(), e.type == odafs::FileType::kDirectory ? "/" : "");
  }
}

void show_stat(const std::string& url) {
  Target t = open_target(url);
  const odafs::Attr a = t.client->lstat(t.path);
  std::printf(
      "path: %s\ntype: %s\nsize: %llu\nmode: %04o\nnlink: %u\nuid: %u\ngid: %u\n"
      "fileid: %llu\natime: %s\nmtime: %s\nctime: %s\n",
      t.path.c_str(), type_name(a.type), static_cast<unsigned long long>(a.size), a.mode, a.nlink,
      a.uid, a.gid, static_cast<unsigned long long>(a.fileid), readable_time(a.atime).c_str(),
      readable_time(a.mtime).c_str(), readable_time(a.ctime).c_str());
}

// odafs rm [-r] URL...: every operand tried, its REMOVEs pipelined (client/cli/remove.h);
// one mount per run of operands on the same server. Exit status 1 if any failed.
int remove_operands(const std::vector<std::string>& urls, bool recursive) {
  bool ok = true;
  Target t;
  std::unique_ptr<odafs::cli::Remover> remover;
  for (const std::string& url : urls) {
    odafs::Url parsed = odafs::or_throw(odafs::parse_url(url));
    if (!remover || parsed.server.to_string() != t.server ||
        !odafs::wire::within_export(t.export_path, normalized(parsed.path))) {
      if (remover) ok = remover->finish() && ok;
      remover.reset();
      t = open_target(url);
      remover = std::make_unique<odafs::cli::Remover>(*t.client);
    }
    remover->remove(inside_export(t.export_path, parsed.path), url, recursive);
  }
  ok = remover->finish() && ok;
  return ok ? 0 : 1;
}

void show_df(const std::string& url) {
  Target t = open_target(url);
  const odafs::FsStat s = t.client->statfs();
  std::printf(
      "total_bytes: %llu\nfree_bytes: %llu\navail_bytes: %llu\nfiles: %llu\nfree_files: %llu\n",
      static_cast<unsigned long long>(s.total_bytes), static_cast<unsigned long long>(s.free_bytes),
      static_cast<unsigned long long>(s.avail_bytes),
      static_cast<unsigned long long>(s.total_files),
      static_cast<unsigned long long>(s.free_files));
}

void add_global_options(CLI::App& app) {
  app.set_version_flag("--version", "odafs " ODAFS_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // the options below are taken after the command too
  app.add_option("--timeout", g_settings.timeout,
                 "give up on a server that does not answer within MS ms (1..3600000; "
                 "default 60000)")
      ->type_name("MS");
  app.add_flag("--tls", g_settings.tls,
               "RPC-with-TLS (RFC 9289); the server's certificate must name URL's host");
  app.add_option("--tls-ca", g_settings.tls_ca,
                 "CA (PEM) to trust (default: the system's store); implies --tls")
      ->type_name("FILE");
  app.add_option("--tls-cert", g_settings.tls_cert,
                 "this client's certificate, with --tls-key (mutual TLS); implies --tls")
      ->type_name("FILE");
  app.add_option("--tls-key", g_settings.tls_key, "the key of --tls-cert")->type_name("FILE");
}

// The command line's operands and command options, as CLI11 fills them in.
struct Words {
  std::string url, url2, local;
  std::vector<std::string> urls;
  bool long_form = false, recursive = false, in_place = false, raw_stats = false;
};

// A command: its subcommand, and what it does once the line is parsed (the exit status).
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// The commands that name one file or directory.
void add_file_commands(CLI::App& app, Words& w, std::vector<Command>* commands) {
  auto one_url = [&](const char* name, const char* what, std::function<int()> run) {
    CLI::App* c = app.add_subcommand(name, what);
    c->add_option("URL", w.url, "odafs://HOST:PORT/PATH")->required();
    commands->push_back({c, std::move(run)});
    return c;
  };
  auto on_target = [&w](void (*fn)(Target&, Words&)) {
    return [&w, fn] {
      Target t = open_target(w.url);
      fn(t, w);
      return 0;
    };
  };
  one_url("ls", "list a directory (a file: its name)", [&w] {
    list(w.url, w.long_form);
    return 0;
  })->add_flag("-l", w.long_form, "one line each: mode, links, owner, group, size, time");
  one_url("stat", "a file's attributes", [&w] {
    show_stat(w.url);
    return 0;
  });
  one_url("cat", "a file's bytes to standard output",
          on_target([](Target& t, Words&) { odafs::cli::cat(*t.client, t.path, 1); }));
  one_url("mkdir", "make a directory",
          on_target([](Target& t, Words&) { t.client->mkdir(t.path); }));
  one_url("rmdir", "remove an empty directory",
          on_target([](Target& t, Words&) { t.client->rmdir(t.path); }));
  CLI::App* rm = app.add_subcommand(
      "rm", "remove files (every URL given; each failure said, the rest still go)");
  rm->add_flag("-r,-R,--recursive", w.recursive, "directories too, with all they hold");
  rm->add_option("URL", w.urls, "odafs://HOST:PORT/PATH ...")->required();
  commands->push_back({rm, [&w] { return remove_operands(w.urls, w.recursive); }});
  CLI::App* mv = app.add_subcommand("mv", "rename (both URLs on the same server)");
  mv->add_option("URL", w.url, "from")->required();
  mv->add_option("URL2", w.url2, "to")->required();
  commands->push_back({mv, [&w] {
                         Target from = open_target(w.url);
                         odafs::Url to = odafs::or_throw(odafs::parse_url(w.url2));
                         if (to.server.to_string() != from.server ||
                             !odafs::wire::within_export(from.export_path, normalized(to.path))) {
                           throw odafs::Error(EXDEV,
                                              "mv: both URLs must name the same server and export");
                         }
                         from.client->rename(from.path, inside_export(from.export_path, to.path));
                         return 0;
                       }});
  CLI::App* get = app.add_subcommand(
      "get", "copy a remote file to LOCAL (- : standard output), replacing it whole or not at all");
  get->add_option("URL", w.url, "the remote file")->required();
  get->add_option("LOCAL", w.local, "the local file, or -")->required();
  commands->push_back({get, on_target([](Target& t, Words& w) {
                         odafs::cli::get(*t.client, t.path, w.local, g_settings.umask);
                       })});
  CLI::App* put = app.add_subcommand(
      "put",
      "copy LOCAL (- : standard input) to a remote file: written beside it, made durable, then "
      "renamed over it (the remote file is replaced whole or not at all)");
  put->add_flag("--in-place", w.in_place, "truncate the remote file and write into it instead");
  put->add_option("LOCAL", w.local, "the local file, or -")->required();
  put->add_option("URL", w.url, "the remote file")->required();
  commands->push_back({put, [&w] {
                         odafs::cli::SourcePtr source = odafs::cli::open_source(w.local);  // first
                         Target t = open_target(w.url);
                         odafs::cli::put(*t.client, *source, t.path, w.url, w.in_place,
                                         g_settings.umask);
                         return 0;
                       }});
}

// The commands about the server and its exports.
void add_server_commands(CLI::App& app, Words& w, std::vector<Command>* commands) {
  auto one_url = [&](const char* name, const char* what, std::function<int()> run) {
    CLI::App* c = app.add_subcommand(name, what);
    c->add_option("URL", w.url, "odafs://HOST:PORT/PATH")->required();
    commands->push_back({c, std::move(run)});
    return c;
  };
  one_url("df", "the export's space and files", [&w] {
    show_df(w.url);
    return 0;
  });
  one_url("exports", "what this host may mount of URL's server (showmount -e)", [&w] {
    for (const odafs::ExportInfo& e : odafs::list_exports(w.url, mount_options())) {
      std::printf("%-32s %s\n", e.path.c_str(), e.options.c_str());
    }
    return 0;
  });
  one_url("clients", "the server's connected clients (root on the server's host only)", [&w] {
    const std::vector<odafs::ClientInfo> all = odafs::list_clients(w.url, mount_options());
    std::printf("%-28s %-20s %-4s %-6s %s\n", "ADDRESS", "IDENTITY", "TLS", "DELEGS", "EXPORT");
    for (const odafs::ClientInfo& c : all) {
      std::printf("%-28s %-20s %-4s %-6u %s\n", c.address.c_str(), c.identity.c_str(),
                  c.tls ? "yes" : "no", c.delegations,
                  c.export_path.empty() ? "-" : c.export_path.c_str());
    }
    return 0;
  });
  one_url("ping", "one NULL call's round trip", [&w] {
    Target t = open_target(w.url);
    const auto start = std::chrono::steady_clock::now();
    t.client->ping();
    const auto us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start);
    std::printf("NULL round trip: %.1f us\n", us.count());
    return 0;
  });
  one_url("stats", "the server's counters, in human units", [&w] {
    Target t = open_target(w.url);
    for (const auto& [name, value] : t.client->server_stats()) {
      if (w.raw_stats) {
        std::printf("%-24s %llu\n", name.c_str(), static_cast<unsigned long long>(value));
      } else {
        std::printf("%-32s %s\n", name.c_str(), readable_counter(name, value).c_str());
      }
    }
    return 0;
  })->add_flag("--raw", w.raw_stats, "every counter's exact value only (for scripts)");
}

int run(int argc, char** argv) {
  CLI::App app(
      "odafs: files on an odafs server (odafsd), from the command line.\n"
      "URL is odafs://HOST:PORT/PATH[?timeout_ms=N][&cache_policy=lru|mq][&tls=1]\n"
      "    [&tls_ca=FILE][&tls_cert=FILE&tls_key=FILE]",
      "odafs");
  add_global_options(app);
  Words words;
  std::vector<Command> commands;
  add_file_commands(app, words, &commands);
  add_server_commands(app, words, &commands);
  try {
    app.parse(argc, argv);
    if (!g_settings.timeout.empty()) {
      odafs::Result<int> ms = odafs::parse_timeout_ms(g_settings.timeout, "--timeout");
      if (!ms.ok()) throw CLI::ValidationError(ms.status().message());
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "odafs: %s\n(usage: odafs --help, or odafs COMMAND --help)\n", e.what());
    return 2;
  }
  for (const Command& c : commands) {
    if (*c.app) return c.run();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  g_settings.umask = umask(022);
  umask(g_settings.umask);
  try {
    return run(argc, argv);
  } catch (const odafs::Error& e) {
    if (e.errno_value() == ETIMEDOUT) {
      std::fprintf(stderr,
                   "odafs: %s (no answer within the %d ms timeout; --timeout MS or "
                   "?timeout_ms=N in the URL changes it)\n",
                   e.what(), g_settings.effective_timeout_ms);
    } else {
      std::fprintf(stderr, "odafs: %s\n", e.what());
    }
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs: %s\n", e.what());
    return 1;
  }
}
