// odafsd's exports file (--exports FILE, default /etc/odafs/exports when present), in
// exports(5) syntax, so an administrator's NFS lines carry over:
//
//   # comment (to the end of the line)
//   /srv/a   10.0.0.0/8(rw,no_root_squash) *.lab.example(ro) 192.168.1.7
//   /srv/b   -ro,all_squash  client1(rw) client2      # "-OPTIONS": the line's defaults
//   "/srv/with space"  *(ro,tls)                      # quoted: a path with blanks
//
// A line ending in a backslash goes on on the next line.
//
// Each line is one export: an absolute path (quoted if it holds spaces), then clients in
// export_rules.h's SPEC syntax. A client's own options come after the line's "-" defaults,
// so they win. A client with no options gets the defaults of export_rules.h (rw,
// root_squash, insecure, nodev). Unlike exportfs, a line that names no client is an error
// (it would export to the world), and so is "host (rw)" with a space (exports(5)'s classic
// slip: it gives `host` the defaults and everyone else rw).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/export_rules.h"

namespace odafs::server {

struct ExportLine {
  std::string path;  // absolute and normalized: no "//", ".", ".." or trailing '/'
  ExportRules rules;
  std::vector<std::string> clients;  // the client fields as written, for messages
  int line = 0;                      // where the export starts in its file, from 1
};

// Parses the text of an exports file; `name` (the file's path) starts every error message,
// "NAME:LINE: what is wrong". Host names are resolved as export_rules.h says. anon_uid
// and anon_gid: the anonymous ids of rules that set none. EINVAL on any error: a file is
// taken whole or not at all.
Result<std::vector<ExportLine>> parse_exports(std::string_view text, std::string_view name,
                                              uint32_t anon_uid, uint32_t anon_gid);

// Reads and parses the file at path (errno of the read on failure).
Result<std::vector<ExportLine>> read_exports_file(const std::string& path, uint32_t anon_uid,
                                                  uint32_t anon_gid);

// The exports as `odafsd --check-exports` prints them: per export its path, then one line
// per client rule with every option spelled out.
std::string describe_exports(const std::vector<ExportLine>& exports);

}  // namespace odafs::server
