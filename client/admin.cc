#include "client/admin.h"

#include "client/call_util.h"
#include "client/server_channel.h"
#include "client/url.h"
#include "proto/odafs_prot.h"

namespace odafs {
namespace {

// Calls procedure P (of no arguments) on a fresh channel to url's server and hands its
// decoded reply to take, freeing it after. Throws Error, naming `what`.
template <uint32_t P, class Take>
void call_server(const std::string& url, MountOptions options, const std::string& what, Take take) {
  using Res = typename wire::Procedure<P>::Result;
  Url parsed = or_throw(parse_url(url));
  apply_url_options(parsed, &options);
  std::shared_ptr<rpc::Channel> channel = or_throw(server_channel(parsed, options));
  Res res{};
  XdrFree<Res> guard{to_xdrproc(wire::Procedure<P>::xres), &res};
  or_throw(in_context(call<P>(*channel, &res), what + " of " + url));
  or_throw(status_of(res.status, what + " of " + url));
  take(res);
}

}  // namespace

std::vector<ExportInfo> list_exports(const std::string& url, MountOptions options) {
  std::vector<ExportInfo> exports;
  call_server<ODAFSPROC_EXPORTS>(url, std::move(options), "exports", [&](const exports_res& res) {
    const auto& list = res.exports_res_u.ok.exports;
    for (u_int i = 0; i < list.exports_len; ++i) {
      exports.push_back({list.exports_val[i].path, list.exports_val[i].options});
    }
  });
  return exports;
}

std::vector<ClientInfo> list_clients(const std::string& url, MountOptions options) {
  std::vector<ClientInfo> clients;
  call_server<ODAFSPROC_CLIENTS>(url, std::move(options), "clients", [&](const clients_res& res) {
    const auto& list = res.clients_res_u.ok.clients;
    for (u_int i = 0; i < list.clients_len; ++i) {
      const client_entry& c = list.clients_val[i];
      clients.push_back({c.address, c.identity, c.tls != 0, c.export_path, c.delegations});
    }
  });
  return clients;
}

}  // namespace odafs
