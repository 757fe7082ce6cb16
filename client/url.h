// odafs URLs: odafs://HOST:PORT/PATH[?OPTION[&OPTION...]] (HOST may be [v6]; PATH defaults
// to "/"). Everything after the first '?' is options, KEY=VALUE joined by '&' in any order,
// so a PATH cannot contain '?'. Options: timeout_ms=N, cache_policy=lru|mq, tls=0|1,
// tls_ca=FILE, tls_cert=FILE, tls_key=FILE (any tls_ file implies tls=1).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/net.h"
#include "base/status.h"
#include "client/client.h"

namespace odafs {

// The largest timeout a URL or `odafs --timeout` may set: an hour. Anything longer is a
// mistake (a unit slip), not a wait anyone means.
inline constexpr int kMaxTimeoutMs = 3600 * 1000;

struct Url {
  // odafs://HOST:PORT[,HOST:PORT...]/PATH: the servers to mount, tried in this order when
  // one cannot be reached (failover between gateways of one file system); server is the
  // first.
  net::Endpoint server;
  std::vector<net::Endpoint> servers;
  std::string path;               // always starts with '/'
  std::optional<int> timeout_ms;  // ?timeout_ms=N: overrides MountOptions::timeout_ms
  // ?cache_policy=lru|mq: overrides MountOptions::cache_policy
  std::optional<CachePolicy> cache_policy;
  // ?tls=1 and the PEM files: override MountOptions' (tls, tls_ca, tls_cert, tls_key).
  std::optional<bool> tls;
  std::optional<std::string> tls_ca;
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
};

// Applies a URL's options to options: the URL's word wins.
void apply_url_options(const Url& url, MountOptions* options);

// EINVAL with a readable message for anything else, including an unknown or repeated
// option, a timeout_ms that parse_timeout_ms refuses, a cache_policy other than lru or mq,
// a tls other than 0 or 1, and an empty file name.
Result<Url> parse_url(const std::string& text);

// A timeout in milliseconds as a user writes it: decimal digits only, 1..kMaxTimeoutMs.
// EINVAL with a message naming `what` (e.g. "timeout_ms") and the bad value.
Result<int> parse_timeout_ms(const std::string& text, const std::string& what = "timeout_ms");

// Splits a path into its components, dropping empty ones and ".". With resolve_dotdot,
// ".." removes the previous component and stops at the root (paths never leave the mount);
// without, ".." stays a component (symlink targets: the server resolves it, clamped at the
// export root).
std::vector<std::string> split_path(const std::string& path, bool resolve_dotdot = true);

// The most symbolic links one path walk follows before it fails ELOOP (as Linux's 40).
inline constexpr int kMaxSymlinkHops = 40;

// A walk met a symbolic link whose target is `target`: pushes the target's components onto
// `todo` (a stack of the components still to walk: back() is the next), and returns whether
// the walk goes on from the mount root (an absolute target) rather than the link's directory.
bool push_link_target(const std::string& target, std::vector<std::string>* todo);

}  // namespace odafs
