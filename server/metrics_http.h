// odafsd's --metrics HOST:PORT: a small HTTP server (libmicrohttpd, Debian's
// libmicrohttpd-dev, on one thread of its own) that answers `GET /metrics` with what
// `render` returns, as Prometheus scrapes it. Any other path: 404; a method other than GET
// or HEAD: 405; at most 16 clients at once, each closed after 10 s without a request.
//
// Who may read it: anyone who can reach HOST:PORT. It shows counters and export paths,
// never a file name, a client's identity or data, and takes no input; bind it to loopback
// or a management network (docs/metrics.md).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/net.h"
#include "base/status.h"

struct MHD_Daemon;

namespace odafs::server {

class MetricsHttp {
 public:
  // Listens on `at` (port 0: a free one) and serves until destroyed. render is called on
  // the HTTP thread, once per scrape.
  static Result<std::unique_ptr<MetricsHttp>> start(const net::Endpoint& at,
                                                    std::function<std::string()> render);
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  const net::Endpoint& bound() const { return bound_; }

 private:
  MetricsHttp() = default;
  std::function<std::string()> render_;
  net::Endpoint bound_;
  MHD_Daemon* daemon_ = nullptr;
  int listen_fd_ = -1;
};

}  // namespace odafs::server
