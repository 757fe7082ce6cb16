#include "client/url.h"

#include <vector>

#include "base/status.h"

namespace odafs {
namespace {

// Every refusal: EINVAL and the readable message.
Status invalid(std::string message) { return Status(EINVAL, std::move(message)); }

}  // namespace

Result<int> parse_timeout_ms(const std::string& text, const std::string& what) {
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
  return invalid("bad " + what + " '" + text + "': " + why);
}

// Applies the URL's options (the text after '?': KEY=VALUE pairs joined by '&') to url.
static Status parse_options(const std::string& query, const std::string& text, Url* url) {
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t end = query.find('&', pos);
    if (end == std::string::npos) end = query.size();
    std::string option = query.substr(pos, end - pos);
    pos = end + 1;
    size_t eq = option.find('=');
    const std::string key = option.substr(0, eq);
    std::optional<std::string>* file = key == "tls_ca"     ? &url->tls_ca
                                       : key == "tls_cert" ? &url->tls_cert
                                       : key == "tls_key"  ? &url->tls_key
                                                           : nullptr;
    if (key != "timeout_ms" && key != "cache_policy" && key != "tls" && file == nullptr) {
      return invalid("unknown odafs URL option '" + option +
                     "' (known: timeout_ms=N, cache_policy=lru|mq, tls=0|1, tls_ca=FILE, "
                     "tls_cert=FILE, tls_key=FILE): " +
                     text);
    }
    if (eq == std::string::npos || (file != nullptr && eq + 1 == option.size())) {
      return invalid("odafs URL option " + key + " needs a value: " + text);
    }
    const std::string value = option.substr(eq + 1);
    const bool repeated = file != nullptr         ? file->has_value()
                          : key == "tls"          ? url->tls.has_value()
                          : key == "cache_policy" ? url->cache_policy.has_value()
                                                  : url->timeout_ms.has_value();
    if (repeated) return invalid("odafs URL repeats " + key + ": " + text);
    if (file != nullptr) {
      *file = value;
    } else if (key == "tls") {
      if (value != "0" && value != "1") {
        return invalid("bad tls '" + value + "': 0 or 1 in " + text);
      }
      url->tls = value == "1";
    } else if (key == "cache_policy") {
      if (value == "lru") {
        url->cache_policy = CachePolicy::kLru;
      } else if (value == "mq") {
        url->cache_policy = CachePolicy::kMultiQueue;
      } else {
        return invalid("bad cache_policy '" + value + "': lru or mq in " + text);
      }
    } else {
      Result<int> ms = parse_timeout_ms(value);
      if (!ms.ok()) return invalid(ms.status().message() + " in " + text);
      url->timeout_ms = *ms;
    }
  }
  return Status();
}

void apply_url_options(const Url& url, MountOptions* options) {
  if (url.timeout_ms) options->timeout_ms = *url.timeout_ms;
  if (url.cache_policy) options->cache_policy = *url.cache_policy;
  if (url.tls_ca) options->tls_ca = *url.tls_ca;
  if (url.tls_cert) options->tls_cert = *url.tls_cert;
  if (url.tls_key) options->tls_key = *url.tls_key;
  if (url.tls_ca || url.tls_cert || url.tls_key) options->tls = true;
  if (url.tls) options->tls = *url.tls;
}

Result<Url> parse_url(const std::string& text) {
  const std::string scheme = "odafs://";
  if (text.compare(0, scheme.size(), scheme) != 0) {
    return invalid("not an odafs URL (odafs://HOST:PORT/PATH): " + text);
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
    return invalid("odafs URL needs HOST:PORT: " + text);
  }
  for (size_t pos = 0; pos <= authority.size();) {
    size_t comma = authority.find(',', pos);
    if (comma == std::string::npos) comma = authority.size();
    const std::string one = authority.substr(pos, comma - pos);
    pos = comma + 1;
    if (one.find(':') == std::string::npos || one.back() == ']') {
      return invalid("odafs URL needs HOST:PORT for each server: " + text);
    }
    ODAFS_ASSIGN_OR_RETURN(net::Endpoint server, net::try_parse_endpoint(one));
    if (server.host.empty()) return invalid("odafs URL needs a host: " + text);
    url.servers.push_back(std::move(server));
  }
  url.server = url.servers.front();
  if (question != std::string::npos) ODAFS_RETURN_IF_ERROR(parse_options(query, text, &url));
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

bool push_link_target(const std::string& target, std::vector<std::string>* todo) {
  std::vector<std::string> more = split_path(target, /*resolve_dotdot=*/false);
  for (auto it = more.rbegin(); it != more.rend(); ++it) todo->push_back(std::move(*it));
  return !target.empty() && target[0] == '/';
}

}  // namespace odafs
