// Who may call odafsd, and as whom each call runs: the export rules (export_rules.h)
// applied to every connection and call, before any procedure runs.
//
// At accept (admit): the first rule matching the peer's address (none: the connection is
// refused, rpc::Admission::refused: one AUTH_TOOWEAK answer, then closed, holding no slot
// of admitted clients), and, for a peer on this host (one coming from any of the host's
// addresses, loopback or not: net::local_peer), the owner of its socket as the kernel
// records it, with that user's groups from the host's user database.
//
// At every call (authorize), in order, failing closed:
//   1. no rule admitted the peer: AUTH_TOOWEAK (the RPC server already answers so, NULL
//      included, for the refused connection: this only fails closed);
//   2. the rule says `secure` and the source port is 1024 or above, `tls` and the
//      connection runs no TLS, or `mtls` and the client presented no verified
//      certificate: AUTH_TOOWEAK;
//   2a. a certificate the identity map (tls_identities.h) maps to a user: the call runs as
//      that user (then step 6); one it maps to `trust`: on as below; under `mtls`, one it
//      does not name: as the anonymous user; one named by a line a reload has since
//      removed or changed: AUTH_REJECTEDCRED;
//   3. AUTH_NONE runs as the rule's anonymous uid/gid, and so does every call of a local
//      peer the kernel could not name (whatever the rule), and of a peer the loopback
//      default admits but the kernel could not name;
//   4. AUTH_SYS naming uid or gid 0xffffffff (the kernel's "no id") in any field:
//      AUTH_BADCRED (more than 16 groups never decodes: AUTH_BADCRED too);
//   5. a local peer whose socket belongs to a user other than root may act only as that
//      user: another uid is AUTH_BADCRED; a gid or group the user database does not give
//      that user is dropped (the primary gid falls back to the user's own);
//   6. the rule's squashing: all_squash makes every caller anonymous; root_squash makes
//      uid 0 the anonymous uid and gid 0 (primary or supplementary) the anonymous gid.
// What is left is the credential the call runs as (CallContext::cred).
//
// Thread-safety: admit and authorize may run concurrently on any threads.
#pragma once

#include <rpc/rpc.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/counter_sink.h"
#include "rpc/server.h"
#include "server/export_rules.h"
#include "server/tls_identities.h"

namespace odafs::server {

class CallAuthority {
 public:
  struct Options {
    ExportRules rules;       // the rules at start; replace_rules swaps them
    bool read_only = false;  // the whole export, whatever the rules say
    // odafsd's TLS, if it serves TLS (--tls-cert): the identity map. Not owned.
    const TlsIdentities* tls = nullptr;
  };
  explicit CallAuthority(Options options);

  rpc::Admission admit(int fd, const sockaddr_storage& peer) const;
  // Whether some rule admits peer (the engine's accept filter).
  bool admits(const sockaddr_storage& peer) const {
    return rules().match(peer) != rpc::Admission::kNone;
  }

  // The rules in force. Every call is matched against the rules in force when it arrives
  // (not those of its connection's accept), so a replace_rules applies from each
  // connection's next call: a peer the new rules no longer admit is refused then.
  // REQUIRES: the result is used while this authority lives.
  const ExportRules& rules() const { return *current_.load(std::memory_order_acquire); }
  // Thread-safe with every other member.
  void replace_rules(ExportRules rules);
  auth_stat authorize(const rpc::CallContext& ctx, rpc::CallerCred* cred) const;
  // Once a connection's TLS handshake is done: the identity map's line for the client's
  // certificate, into admission->tls_identity; logs a certificate close to expiry.
  void on_tls(const tls::Session& session, const std::string& peer,
              rpc::Admission* admission) const;

  // Whether the call's client may change nothing (its rule says ro, or --read-only).
  bool read_only(const rpc::CallContext& ctx) const;
  // read_only() for a call that would change the export, counted (auth.read_only) when
  // true: the caller answers ROFS.
  bool refuses_change(const rpc::CallContext& ctx) const {
    if (!read_only(ctx)) return false;
    counters_.read_only.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // Who the call's connection is, as a name to bind client state to (ClientOwners): a local
  // peer the kernel named, by its user ("uid:N"); else a client whose certificate the
  // identity map names, by that line ("tls:N"); else the peer's host ("host:ADDRESS"), the
  // most this server can tell of it. Allocates: for CLIENT_ID, not the per-call path.
  std::string principal(const rpc::CallContext& ctx) const;

  // Whether the call's client may make device nodes (its rule says `devices`).
  bool allows_devices(const rpc::CallContext& ctx) const;

  // Refusals by reason, and the calls whose credential was squashed or confined.
  struct Counters {
    std::atomic<uint64_t> no_rule{0};  // connections no rule admits (refused at accept)
    std::atomic<uint64_t> insecure_port{0};
    std::atomic<uint64_t> tls_required{0};  // a tls or mtls rule's calls without it
    // calls of a connection whose identity map line a reload removed (AUTH_REJECTEDCRED)
    std::atomic<uint64_t> identity_unmapped{0};
    std::atomic<uint64_t> bad_credential{0};
    std::atomic<uint64_t> not_socket_owner{0};
    std::atomic<uint64_t> read_only{0};  // EROFS answers
    std::atomic<uint64_t> squashed{0};   // run as another than claimed (3, 5, 6)
  };
  const Counters& counters() const { return counters_; }
  // Its counters under their own names (base/counter_sink.h). Thread-safe.
  void report_counters(const CounterSink& add) const;

 private:
  // Step 6: the rule's squashing of *cred (counted as squashed if it or `changed` altered).
  void squash(const ClientRule& rule, rpc::CallerCred* cred, bool changed = false) const;

  Options options_;  // rules moved out into versions_
  // The rules in force, read by every call with one load. A reload publishes a new
  // version; the old ones stay until the authority goes (a call may still be reading one,
  // reloads are rare and rules small), so no call pays for reference counting.
  std::atomic<const ExportRules*> current_{nullptr};
  std::mutex versions_mu_;
  std::vector<std::unique_ptr<const ExportRules>> versions_;  // guarded by versions_mu_
  mutable Counters counters_;
};

}  // namespace odafs::server
