#include "server/export_router.h"

#include <chrono>
#include <stdexcept>

#include "base/log.h"
#include "proto/export_paths.h"
#include "server/reply_util.h"

namespace odafs::server {

ExportRouter::ExportRouter(std::vector<Export> exports) : exports_(std::move(exports)) {
  if (exports_.empty()) throw std::invalid_argument("ExportRouter: no export");
  if (exports_.size() == 1 && exports_[0].path == "/") implicit_export_ = 0;
}

const ExportRouter::Export* ExportRouter::export_for(const std::string& path,
                                                     std::string* inside) const {
  // A ".." stays in it, and the export's mount refuses it (paths never climb out).
  const std::string normal = wire::normal_path(path);
  const Export* best = nullptr;
  size_t best_length = 0;
  for (const Export& e : exports_) {
    const size_t length = e.path == "/" ? 0 : e.path.size();
    if (wire::within_export(e.path, normal) && (best == nullptr || length > best_length)) {
      best = &e;
      best_length = length;
    }
  }
  if (best != nullptr) {
    inside->assign(normal, best_length, std::string::npos);
    if (inside->empty()) inside->push_back('/');
  }
  return best;
}

uint32_t ExportRouter::export_of(const rpc::CallContext& ctx) const {
  const uint32_t bound = ctx.connection_tag != nullptr
                             ? ctx.connection_tag->load(std::memory_order_acquire)
                             : kUnbound;
  return bound != kUnbound ? bound : implicit_export_;
}

rpc::Admission ExportRouter::admit(int fd, const sockaddr_storage& peer) const {
  // The first export that admits the peer takes the connection in (the owner of a local
  // socket, its port); which export's rules its calls answer to is its MOUNT's choice.
  for (const Export& e : exports_) {
    if (e.service->authority().admits(peer)) return e.service->authority().admit(fd, peer);
  }
  return exports_[0].service->authority().admit(fd, peer);  // refused: counted and logged once
}

auth_stat ExportRouter::authorize(const rpc::CallContext& ctx, rpc::CallerCred* cred) const {
  const uint32_t e = export_of(ctx);
  if (e != kUnbound) return exports_[e].service->authority().authorize(ctx, cred);
  if (ctx.proc == ODAFSPROC_NULL) return AUTH_OK;
  if (ctx.proc == ODAFSPROC_MOUNT || ctx.proc == ODAFSPROC_EXPORTS ||
      ctx.proc == ODAFSPROC_CLIENTS) {
    // MOUNT authorizes the credential by the export it chooses; EXPORTS names no file and
    // lists only what the caller's address is admitted to; CLIENTS checks for itself.
    for (const Export& x : exports_) {
      if (x.service->authority().admits(ctx.admission->address)) return AUTH_OK;
    }
  }
  return AUTH_TOOWEAK;
}

void ExportRouter::configure(rpc::Server::Options* options) const {
  options->admit = [this](int fd, const sockaddr_storage& peer) { return admit(fd, peer); };
  options->authorize = [this](const rpc::CallContext& ctx, rpc::CallerCred* cred) {
    return authorize(ctx, cred);
  };
  // The TLS identity map is the server's, one for every export.
  options->on_tls = [this](const tls::Session& session, const std::string& peer,
                           rpc::Admission* admission) {
    exports_[0].service->authority().on_tls(session, peer, admission);
  };
  options->on_connection_closed = [this](uint64_t connection, uint32_t tag) {
    const uint32_t e = tag != kUnbound ? tag : implicit_export_;
    if (e != kUnbound) exports_[e].service->connection_closed(connection);
  };
}

void ExportRouter::register_procedures(rpc::Server* server) {
  std::vector<const char*>& names = names_;
  procedures_.resize(exports_.size());
  for (size_t i = 0; i < exports_.size(); ++i) times_.push_back(std::make_unique<CallTimes>());
  for (size_t i = 0; i < exports_.size(); ++i) {
    exports_[i].service->register_procedures(
        server, [this, i, &names](uint32_t proc, const char* name, rpc::ProcedureFn fn) {
          if (procedures_[i].size() <= proc) procedures_[i].resize(proc + 1);
          if (names.size() <= proc) names.resize(proc + 1);
          procedures_[i][proc] = std::move(fn);
          names[proc] = name;
        });
  }
  for (uint32_t proc = 0; proc < names.size(); ++proc) {
    if (names[proc] == nullptr) continue;
    server->add_procedure(
        proc, names[proc], [this, proc](const rpc::CallContext& ctx, XDR* in, rpc::Reply& r) {
          const uint32_t e = export_of(ctx);
          if (e == kUnbound) {  // authorize refuses these: fail closed anyway
            reply_status<stat_res>(r, xp(xdr_stat_res), ODAFS_ERR_BADHANDLE);
            return true;
          }
          const auto start = std::chrono::steady_clock::now();
          const bool decoded = procedures_[e][proc](ctx, in, r);
          // Every result but NULL's and STATS' starts with its status.
          if (uint32_t status; proc != ODAFSPROC_NULL && proc != ODAFSPROC_STATS &&
                               r.first_result_word(&status) && status != ODAFS_OK) {
            exports_[e].service->note_reply(ctx, names_[proc], status);
          }
          times_[e]->record(
              proc, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now() - start)
                                              .count()));
          return decoded;
        });
  }
  server->add_procedure(ODAFSPROC_MOUNT, "MOUNT",
                        rpc::typed_procedure<mount_args>(
                            xp(xdr_mount_args), [this](const rpc::CallContext& ctx, mount_args& a,
                                                       rpc::Reply& r) { mount(ctx, a, r); }));
  server_ = server;
  server->add_procedure(ODAFSPROC_CLIENTS, "CLIENTS",
                        [this](const rpc::CallContext& ctx, XDR*, rpc::Reply& r) {
                          do_clients(ctx, r);
                          return true;
                        });
  server->add_procedure(ODAFSPROC_EXPORTS, "EXPORTS",
                        [this](const rpc::CallContext& ctx, XDR*, rpc::Reply& r) {
                          do_exports(ctx, r);
                          return true;
                        });
}

void ExportRouter::mount(const rpc::CallContext& ctx, const mount_args& a, rpc::Reply& r) const {
  // An empty path is what a path holding a NUL byte decodes to.
  const std::string path = a.path != nullptr ? a.path : "";
  std::string inside;
  const Export* chosen = path.empty() ? nullptr : export_for(path, &inside);
  if (chosen == nullptr) {
    ODAFS_LOG_DEBUG("MOUNT %s from %s: no export serves that path", path.c_str(),
                    ctx.peer->c_str());
    reply_status<mount_res>(r, xp(xdr_mount_res), path.empty() ? ODAFS_ERR_INVAL : ODAFS_ERR_NOENT);
    return;
  }
  const uint32_t index = static_cast<uint32_t>(chosen - exports_.data());
  const uint32_t bound = export_of(ctx);
  if (bound != kUnbound) {
    // The credential is authorized already, by the rules of the connection's export.
    if (bound != index) {
      ODAFS_LOG_WARN_THROTTLED("MOUNT %s from %s: its connection belongs to export %s",
                               path.c_str(), ctx.peer->c_str(), exports_[bound].path.c_str());
      reply_status<mount_res>(r, xp(xdr_mount_res), ODAFS_ERR_XDEV);
      return;
    }
    if (chosen->service->mount(ctx, inside.c_str(), r)) ctx.connection_tag->store(index);
    return;
  }
  rpc::CallerCred cred = *ctx.cred;
  if (auth_stat why = chosen->service->authority().authorize(ctx, &cred); why != AUTH_OK) {
    return r.refuse(why);
  }
  rpc::CallContext as = ctx;
  as.cred = &cred;
  if (chosen->service->mount(as, inside.c_str(), r)) {
    ctx.connection_tag->store(index, std::memory_order_release);
  }
}

void ExportRouter::do_exports(const rpc::CallContext& ctx, rpc::Reply& r) const {
  std::vector<std::string> options;
  std::vector<export_entry> entries;
  options.reserve(exports_.size());
  entries.reserve(exports_.size());
  for (const Export& e : exports_) {
    const ExportRules& rules = e.service->authority().rules();
    const uint32_t rule = rules.match(ctx.admission->address);
    if (rule == rpc::Admission::kNone) continue;
    options.push_back(rules.rule(rule).options_text());
    entries.push_back(export_entry{const_cast<char*>(e.path.c_str()), options.back().data()});
  }
  exports_res res{};
  res.status = ODAFS_OK;
  res.exports_res_u.ok.exports.exports_len = static_cast<u_int>(entries.size());
  res.exports_res_u.ok.exports.exports_val = entries.data();
  r.send(xp(xdr_exports_res), &res);
}

void ExportRouter::do_clients(const rpc::CallContext& ctx, rpc::Reply& r) const {
  // Root of this host only, as the kernel names the socket's owner: the list tells who is
  // connected from where, which no client needs to know of another.
  const rpc::Admission& a = *ctx.admission;
  if (!a.local || !a.owner_known || a.owner.uid != 0) {
    ODAFS_LOG_WARN_THROTTLED(
        "CLIENTS from %s refused: only root on the server's host may list "
        "clients",
        ctx.peer->c_str());
    reply_status<clients_res>(r, xp(xdr_clients_res), ODAFS_ERR_PERM);
    return;
  }
  const std::vector<rpc::Server::ConnectionInfo> connections = server_->connections();
  std::vector<std::string> identities;
  std::vector<client_entry> entries;
  identities.reserve(connections.size());
  entries.reserve(connections.size());
  for (const rpc::Server::ConnectionInfo& c : connections) {
    const uint32_t e = c.tag != kUnbound ? c.tag : implicit_export_;
    rpc::CallContext as;
    as.peer = &c.peer;
    as.admission = &c.admission;
    const FileService* service = e != kUnbound ? exports_[e].service : exports_[0].service;
    identities.push_back(service->authority().principal(as));
    client_entry entry{};
    entry.address = const_cast<char*>(c.peer.c_str());
    entry.identity = identities.back().data();
    entry.tls = c.admission.tls;
    entry.export_path = const_cast<char*>(e != kUnbound ? exports_[e].path.c_str() : "");
    entry.delegations =
        e != kUnbound ? static_cast<u_int>(exports_[e].service->delegations_held_by(c.id)) : 0;
    entries.push_back(entry);
  }
  clients_res res{};
  res.status = ODAFS_OK;
  res.clients_res_u.ok.clients.clients_len = static_cast<u_int>(entries.size());
  res.clients_res_u.ok.clients.clients_val = entries.data();
  r.send(xp(xdr_clients_res), &res);
}

}  // namespace odafs::server
