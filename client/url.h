// odafs URLs: odafs://HOST:PORT/PATH (HOST may be [v6]; PATH defaults to "/").
#pragma once

#include <string>
#include <vector>

#include "base/net.h"

namespace odafs {

struct Url {
  net::Endpoint server;
  std::string path;  // always starts with '/'
};

// Throws std::invalid_argument with a readable message for anything else.
Url parse_url(const std::string& text);

// Splits a path into its components, dropping empty ones and ".". With resolve_dotdot,
// ".." removes the previous component and stops at the root (paths never leave the mount);
// without, ".." stays a component (symlink targets: the server resolves it, clamped at the
// export root).
std::vector<std::string> split_path(const std::string& path, bool resolve_dotdot = true);

}  // namespace odafs
