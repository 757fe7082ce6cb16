#include "client/url.h"

#include <stdexcept>
#include <vector>

namespace odafs {

int parse_timeout_ms(const std::string& text, const std::string& what) {
  bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  // Ten digits fit a long long with room to spare; more are absurd whatever they say.
  long long ms = digits && text.size() <= 10 ? std::stoll(text) : -1;
  std::string why;
  if (!digits) {
    why = "not a whole number of milliseconds";
  } else if (ms < 0 || ms > kMaxTimeoutMs) {
    why = "more than " + std::to_string(kMaxTimeoutMs) + " (an hour)";
  } else if (ms == 0) {
    why = "zero would fail every call at once";
  } else {
    return static_cast<int>(ms);
  }
  throw std::invalid_argument("bad " + what + " '" + text + "': " + why);
}

// Applies the URL's options (the text after '?': KEY=VALUE pairs joined by '&') to url.
static void parse_options(const std::string& query, const std::string& text, Url* url) {
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t end = query.find('&', pos);
    if (end == std::string::npos) end = query.size();
    std::string option = query.substr(pos, end - pos);
    pos = end + 1;
    size_t eq = option.find('=');
    std::string key = option.substr(0, eq);
    if (key != "timeout_ms" && key != "cache_policy") {
      throw std::invalid_argument("unknown odafs URL option '" + option +
                                  "' (known: timeout_ms=N, cache_policy=lru|mq): " + text);
    }
    if (eq == std::string::npos) {
      throw std::invalid_argument("odafs URL option " + key + " needs a value: " + text);
    }
    const std::string value = option.substr(eq + 1);
    if (key == "cache_policy") {
      if (url->cache_policy) throw std::invalid_argument("odafs URL repeats cache_policy: " + text);
      if (value == "lru") {
        url->cache_policy = CachePolicy::kLru;
      } else if (value == "mq") {
        url->cache_policy = CachePolicy::kMultiQueue;
      } else {
        throw std::invalid_argument("bad cache_policy '" + value + "': lru or mq in " + text);
      }
      continue;
    }
    if (url->timeout_ms) throw std::invalid_argument("odafs URL repeats timeout_ms: " + text);
    try {
      url->timeout_ms = parse_timeout_ms(value);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string(e.what()) + " in " + text);
    }
  }
}

Url parse_url(const std::string& text) {
  const std::string scheme = "odafs://";
  if (text.compare(0, scheme.size(), scheme) != 0) {
    throw std::invalid_argument("not an odafs URL (odafs://HOST:PORT/PATH): " + text);
  }
  std::string rest = text.substr(scheme.size());
  size_t question = rest.find('?');
  std::string query;
  if (question != std::string::npos) {
    query = rest.substr(question + 1);
    rest.resize(question);
  }
  size_t slash = rest.find('/', rest.find(']') == std::string::npos ? 0 : rest.find(']'));
  std::string authority = rest.substr(0, slash);
  Url url;
  url.path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (authority.find(':') == std::string::npos || authority.back() == ']') {
    throw std::invalid_argument("odafs URL needs HOST:PORT: " + text);
  }
  url.server = net::parse_endpoint(authority);
  if (url.server.host.empty()) throw std::invalid_argument("odafs URL needs a host: " + text);
  if (question != std::string::npos) parse_options(query, text, &url);
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
