#include "client/url.h"

#include <stdexcept>
#include <vector>

namespace odafs {

Url parse_url(const std::string& text) {
  const std::string scheme = "odafs://";
  if (text.compare(0, scheme.size(), scheme) != 0) {
    throw std::invalid_argument("not an odafs URL (odafs://HOST:PORT/PATH): " + text);
  }
  std::string rest = text.substr(scheme.size());
  size_t slash = rest.find('/', rest.find(']') == std::string::npos ? 0 : rest.find(']'));
  std::string authority = rest.substr(0, slash);
  Url url;
  url.path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (authority.find(':') == std::string::npos || authority.back() == ']') {
    throw std::invalid_argument("odafs URL needs HOST:PORT: " + text);
  }
  url.server = net::parse_endpoint(authority);
  if (url.server.host.empty()) throw std::invalid_argument("odafs URL needs a host: " + text);
  return url;
}

std::vector<std::string> split_path(const std::string& path, bool resolve_dotdot) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(pos, end - pos);
    pos = end + 1;
    if (part.empty() || part == ".") continue;
    if (part == ".." && resolve_dotdot) {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace odafs
