#include "server/metrics_http.h"

#include <microhttpd.h>
#include <unistd.h>

#include <cstring>
#include <system_error>

#include "base/log.h"

namespace odafs::server {
namespace {

MHD_Result reply(MHD_Connection* connection, unsigned int code, const std::string& body,
                 const char* type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  const MHD_Result queued = MHD_queue_response(connection, code, response);
  MHD_destroy_response(response);
  return queued;
}

MHD_Result answer(void* cls, MHD_Connection* connection, const char* url, const char* method,
                  const char*, const char*, size_t* upload_size, void**) {
  auto* render = static_cast<std::function<std::string()>*>(cls);
  if (*upload_size != 0) {
    *upload_size = 0;  // a body is not read: the request is answered on its last call
    return MHD_YES;
  }
  const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0;
  if (!get && std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "GET /metrics\n", "text/plain");
  }
  if (std::strcmp(url, "/metrics") != 0) {
    return reply(connection, MHD_HTTP_NOT_FOUND, "odafsd serves /metrics only\n", "text/plain");
  }
  return reply(connection, MHD_HTTP_OK, (*render)(), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace

Result<std::unique_ptr<MetricsHttp>> MetricsHttp::start(const net::Endpoint& at,
                                                        std::function<std::string()> render) {
  std::unique_ptr<MetricsHttp> http(new MetricsHttp);
  http->render_ = std::move(render);
  Result<int> fd = net::listen_tcp(at, &http->bound_, 16);
  if (!fd.ok()) return Status(fd.errno_value(), "--metrics " + fd.status().message());
  http->listen_fd_ = *fd;
  http->daemon_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, 0, nullptr,
                                   nullptr, &answer, &http->render_, MHD_OPTION_LISTEN_SOCKET,
                                   http->listen_fd_, MHD_OPTION_CONNECTION_LIMIT, 16u,
                                   MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
  if (http->daemon_ == nullptr) {
    return Status(EIO, "--metrics " + at.to_string() + ": libmicrohttpd did not start");
  }
  http->listen_fd_ = -1;  // the daemon's now: MHD_stop_daemon closes it
  return http;
}

MetricsHttp::~MetricsHttp() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
  if (listen_fd_ >= 0) close(listen_fd_);
}

}  // namespace odafs::server
