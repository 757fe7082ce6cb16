// odafsd's start-up decisions that need no running server: who may call (from --clients or
// an exports file), as whom calls act, where each export's recovery record lives, the
// handle key of a shared store, and the exports file read again at SIGHUP. Each returns a
// Status or Result naming the flag and the problem (odafsd prints it with its usage and
// exits 2), so the decisions are tested without a process (test_exports, "daemon setup").
//
// Thread-safety: none needed; start-up and the SIGHUP handler's thread call these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/export_router.h"
#include "server/export_rules.h"
#include "server/exports_file.h"
#include "server/file_service.h"
#include "server/node_table.h"
#include "server/tls_identities.h"

namespace odafs::server {

// Who may call and as whom calls run, as the flags say.
struct AccessFlags {
  std::vector<std::string> clients;  // --clients SPEC, in order
  bool read_only = false;            // --read-only
  std::string identity;              // --identity: "", "caller" or "server"
  uint32_t anon_uid = 65534;
  uint32_t anon_gid = 65534;
};

// The cores this process may run on (its affinity mask: taskset, cgroups' cpusets), at
// least one.
int usable_cores();

// Raises the soft limit on open descriptors to the hard one.
void raise_fd_limit();

// Whether a --listen host reaches this host only ("localhost", 127.0.0.0/8, ::1).
bool is_loopback_host(const std::string& host);

// The rules of a single --export: --clients in order or, without any on a loopback
// --listen, this host's processes (ExportRules::add_loopback_default). EINVAL for a bad
// SPEC ("--clients SPEC: ...") and for a --listen other hosts reach without --clients.
Result<ExportRules> rules_from_flags(const AccessFlags& flags, const std::string& listen_host);

// The exports of an exports file, each an existing directory. EINVAL naming the file and
// line; ENOENT for a file that is not there.
Result<std::vector<ExportLine>> load_exports(const std::string& file, const AccessFlags& flags);

// As whom calls act on the store: fs->act_as_callers (and fs->access.read_only). remote_store:
// a store that takes on callers without privileges of this process (CephFS: a UserPerm per
// call), where a local export needs root (setfsuid). EPERM for --identity caller without
// the means; a warning logged when every caller acts as one user.
Status configure_identity(const AccessFlags& flags, bool remote_store, FileService::Options* fs);

// Why the rules cannot be served ("" when they can): a tls rule without a certificate to
// serve, an mtls rule without a CA.
std::string tls_rules_problem(const ExportRules& rules, bool have_tls,
                              const TlsIdentities::Files& files);

// The recovery record of the export known by `key` (its directory, or DIR@CONF for a
// CephFS export): one file per export in the state directory (default /var/lib/odafs as
// root, else $XDG_STATE_HOME/odafs or ~/.local/state/odafs), so servers of other exports
// share the directory safely. The directory is made and checked private
// (server/private_files.h): another user could otherwise make odafsd write through a link
// or forge the record. "" (no write delegations, logged) when there is no state directory.
Result<std::string> prepare_recovery_record(const std::string& state_dir, const std::string& key);

// A CephFS gateway's session identity across its restarts: a random uuid kept beside the
// export's recovery record (`record`.ceph-session, made at the first start), which
// CephStore gives its session (Options::session_uuid) after evicting the session an
// earlier instance left. The file stays locked (flock) while this process lives and
// lock_fd stays open: a second odafsd of the same export and state directory is refused
// (EBUSY, naming --state-dir), since it would evict the first's session at its mount and
// share its recovery record. REQUIRES: record from prepare_recovery_record, not "".
struct CephSession {
  std::string uuid;
  int lock_fd = -1;  // held for the process's life
};
Result<CephSession> claim_ceph_session(const std::string& record);

// The key of --handle-key-file: SHA-256 of the file's bytes (32 or more, in a private file
// in a private directory: it lets its holder forge handles) and of the export, so gateways
// of different directories of one CephFS never take each other's handles.
Result<NodeTable::SharedKey> read_handle_key(const std::string& path,
                                             const std::string& export_spec);

// SIGHUP with an exports file: the file read again, and each export's rules replaced by its
// line's, from every connection's next call (CallAuthority::replace_rules). A file that does
// not load, or whose rules cannot be served, changes nothing. An export whose line is gone
// admits no one from now on; a new line needs a restart (its cache, engine and recovery
// record are made at start). Everything it does or refuses is logged; the result says
// whether the new rules are in force.
Status reload_exports(const std::string& file, const AccessFlags& flags, bool have_tls,
                      const TlsIdentities::Files& tls_files, const ExportRouter& router);

}  // namespace odafs::server
