// What a server says about itself, without a mount: its exports (showmount -e) and, for
// root on the server's host, its connected clients. The odafs tool's `exports` and
// `clients` commands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/client.h"

namespace odafs {

// An export this host may mount: its path (MOUNT's, "/" on a server of one --export) and
// the options of the rule that admits this host ("rw,root_squash,insecure").
struct ExportInfo {
  std::string path;
  std::string options;
};

// The exports the server at url (its first server; the path is not used) lets this host
// mount (the EXPORTS procedure). Throws Error.
std::vector<ExportInfo> list_exports(const std::string& url, MountOptions options = {});

// A connection to the server, as CLIENTS describes it.
struct ClientInfo {
  std::string address;   // "HOST:PORT"
  std::string identity;  // "uid:N" (a local peer), "tls:N" (a mapped certificate), "host:ADDR"
  bool tls = false;
  std::string export_path;  // "" before its MOUNT
  uint32_t delegations = 0;
};

// The server's connections (the CLIENTS procedure). Only root on the server's host is
// answered; anyone else gets EPERM. Throws Error.
std::vector<ClientInfo> list_clients(const std::string& url, MountOptions options = {});

}  // namespace odafs
