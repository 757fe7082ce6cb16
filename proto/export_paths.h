// Which export a path on the server belongs to: the rule that odafsd's MOUNT follows
// (server/export_router.h) and that clients follow to pick the export to mount for a path.
#pragma once

#include <string>
#include <string_view>

namespace odafs::wire {

// path with its empty and "." components dropped, always starting with '/': "/a//b/./c/"
// and "a/b/c" are "/a/b/c", "" is "/". A ".." stays (whoever walks it decides: MOUNT
// refuses it, an exports file too).
inline std::string normal_path(std::string_view path) {
  std::string normal;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view part = path.substr(0, slash);
    if (!part.empty() && part != ".") {
      normal.push_back('/');
      normal.append(part.data(), part.size());
    }
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
  }
  if (normal.empty()) normal.push_back('/');
  return normal;
}

// Whether a normal_path holds a ".." component.
inline bool climbs(std::string_view normal) {
  for (size_t at = normal.find("/.."); at != std::string_view::npos;
       at = normal.find("/..", at + 1)) {
    if (at + 3 == normal.size() || normal[at + 3] == '/') return true;
  }
  return false;
}

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
