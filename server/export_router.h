// Several exports behind one RPC listener, as knfsd serves every line of /etc/exports on one
// port: each export is a FileService of its own (its store, node table, cache, engine,
// delegations and rules), and a connection belongs to the export its MOUNT named.
//
// MOUNT takes a path on the server (odafs://HOST:PORT/srv/a/dir mounts "/srv/a/dir"): the
// export whose path is the longest prefix of it, on component boundaries, serves it, and
// the rest is walked inside that export. The connection is then bound to that export
// (rpc::CallContext::connection_tag) for good: every later call runs on its FileService,
// authorized by its rules, so a handle of another export is just a handle that export's
// MAC does not know (STALE), and an export's tls/mtls/secure rules hold for all its
// calls. A MOUNT on a bound connection may name only the same export.
//
// CLIENTS lists the server's connections, to root on the server's host only.
//
// Before its MOUNT a connection may call only NULL, MOUNT, EXPORTS and CLIENTS (anything else is
// refused AUTH_TOOWEAK), unless the server has one export served at "/" (odafsd --export
// DIR): there every connection belongs to it from the start, as before exports files.
// MOUNT and EXPORTS run on an unbound connection with the caller's claimed credential; the
// MOUNT authorizes it by the chosen export's rules before anything is walked.
//
// Thread-safety: after register_procedures, every member may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rpc/server.h"
#include "server/call_times.h"
#include "server/file_service.h"

namespace odafs::server {

class ExportRouter {
 public:
  struct Export {
    std::string path;                // absolute, normalized: "/" or "/a/b" (no trailing '/')
    FileService* service = nullptr;  // not owned; outlives the router's use
  };
  // REQUIRES: at least one export, paths distinct.
  explicit ExportRouter(std::vector<Export> exports);

  // Sets options' admit, authorize, on_tls and on_connection_closed hooks to the exports'.
  void configure(rpc::Server::Options* options) const;
  // Registers every procedure on server. REQUIRES: server not started.
  void register_procedures(rpc::Server* server);

  // The export serving `path` (longest prefix on component boundaries) and, in *inside,
  // the rest of the path from that export's root ("/" for the root itself); nullptr when
  // none does.
  const Export* export_for(const std::string& path, std::string* inside) const;

  const std::vector<Export>& exports() const { return exports_; }
  // How long export i's calls took, by procedure; the procedures' names by number (null:
  // none). REQUIRES: register_procedures done.
  const CallTimes& times(size_t i) const { return *times_[i]; }
  const std::vector<const char*>& procedure_names() const { return names_; }

 private:
  static constexpr uint32_t kUnbound = rpc::CallContext::kNoTag;

  // The export the call's connection belongs to (the only one, for a single "/" export),
  // or kUnbound.
  uint32_t export_of(const rpc::CallContext& ctx) const;
  auth_stat authorize(const rpc::CallContext& ctx, rpc::CallerCred* cred) const;
  rpc::Admission admit(int fd, const sockaddr_storage& peer) const;
  void mount(const rpc::CallContext& ctx, const mount_args& a, rpc::Reply& r) const;
  void do_exports(const rpc::CallContext& ctx, rpc::Reply& r) const;
  void do_clients(const rpc::CallContext& ctx, rpc::Reply& r) const;

  std::vector<Export> exports_;
  rpc::Server* server_ = nullptr;  // register_procedures'
  // procedures_[export][proc]: each service's own, as it registered them.
  std::vector<std::vector<rpc::ProcedureFn>> procedures_;
  std::vector<std::unique_ptr<CallTimes>> times_;  // by export
  std::vector<const char*> names_;                 // by procedure number
  uint32_t implicit_export_ = kUnbound;            // 0 for a single export at "/"
};

}  // namespace odafs::server
