// Which export a path on the server belongs to: the rule that odafsd's MOUNT follows
// (server/export_router.h) and that clients follow to pick the export to mount for a path.
#pragma once

#include <string_view>

namespace odafs::wire {

// Whether `path` lies in the export at `export_path`: the export is "/" or a prefix of the
// path ending at a component boundary ("/srv/a" holds "/srv/a" and "/srv/a/x", not
// "/srv/ab"). REQUIRES: both normalized (absolute, no empty or "." components, no
// trailing '/' but on "/").
inline bool within_export(std::string_view export_path, std::string_view path) {
  if (export_path == "/") return true;
  return path.substr(0, export_path.size()) == export_path &&
         (path.size() == export_path.size() || path[export_path.size()] == '/');
}

}  // namespace odafs::wire
