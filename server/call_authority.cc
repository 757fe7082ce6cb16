#include "server/call_authority.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "base/log.h"
#include "base/net.h"
#include "proto/odafs_prot.h"

namespace odafs::server {
namespace {

constexpr uint32_t kNoId = UINT32_MAX;  // what (uid_t)-1 means to the kernel: "no change"

// Fills owner's gid and groups from the user database (at most 16 groups, the rest
// dropped: fewer groups, never more). Without an entry, gid is kNoId and there are none.
void fill_groups_of(uint32_t uid, rpc::CallerCred* owner) {
  owner->gid = kNoId;
  owner->ngids = 0;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) return;
  owner->gid = pw.pw_gid;
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<size_t>(n));
    if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) n = 0;
  }
  for (int i = 0; i < n && owner->ngids < 16; ++i) owner->gids[owner->ngids++] = groups[i];
}

bool owner_has_group(const rpc::CallerCred& owner, uint32_t gid) {
  if (gid == owner.gid) return true;
  return std::find(owner.gids, owner.gids + owner.ngids, gid) != owner.gids + owner.ngids;
}

bool names_no_id(const rpc::CallerCred& c) {
  if (c.uid == kNoId || c.gid == kNoId) return true;
  return std::find(c.gids, c.gids + c.ngids, kNoId) != c.gids + c.ngids;
}

void make_anonymous(const ClientRule& rule, rpc::CallerCred* cred) {
  *cred = rpc::CallerCred{};
  cred->auth_sys = true;  // runs as someone: the anonymous user
  cred->uid = rule.anon_uid;
  cred->gid = rule.anon_gid;
}

}  // namespace

CallAuthority::CallAuthority(Options options) : options_(std::move(options)) {
  replace_rules(std::move(options_.rules));
}

void CallAuthority::replace_rules(ExportRules rules) {
  std::lock_guard lock(versions_mu_);
  versions_.push_back(std::make_unique<const ExportRules>(std::move(rules)));
  current_.store(versions_.back().get(), std::memory_order_release);
}

rpc::Admission CallAuthority::admit(int fd, const sockaddr_storage& peer) const {
  rpc::Admission a;
  a.rule = rules().match(peer);
  a.address = peer;
  a.source_port = net::endpoint_of(peer).port;
  if (a.rule == rpc::Admission::kNone) {
    // Decided here, from the address alone, before the connection takes a slot.
    a.refused = true;
    counters_.no_rule.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED(
        "client %s: no --clients rule admits it; its first call is refused and it is closed",
        net::endpoint_of(peer).host.c_str());
    return a;
  }
  const net::LocalPeer local = net::local_peer(fd);
  a.local = local.local;
  if (local.uid >= 0) {
    a.owner_known = true;
    a.owner.auth_sys = true;
    a.owner.uid = static_cast<uint32_t>(local.uid);
    if (local.uid != 0) fill_groups_of(a.owner.uid, &a.owner);
  } else if (local.local) {
    ODAFS_LOG_WARN_THROTTLED(
        "client %s: a local socket whose owner the kernel did not name; its calls run as the "
        "anonymous user",
        net::endpoint_of(peer).to_string().c_str());
  }
  return a;
}

auth_stat CallAuthority::authorize(const rpc::CallContext& ctx, rpc::CallerCred* cred) const {
  if (ctx.proc == ODAFSPROC_NULL) return AUTH_OK;
  const rpc::Admission& a = *ctx.admission;
  if (a.rule == rpc::Admission::kNone) return AUTH_TOOWEAK;  // refused at admit already
  const ExportRules& rules = this->rules();
  const uint32_t index = rules.match(a.address);
  if (index == rpc::Admission::kNone) {
    // Admitted at accept, but a reload of the rules has since dropped the peer.
    counters_.no_rule.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("call from %s refused: no rule admits it since the last reload",
                             ctx.peer->c_str());
    return AUTH_TOOWEAK;
  }
  const ClientRule& rule = rules.rule(index);
  if (rule.secure && a.source_port >= 1024) {
    counters_.insecure_port.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("call from %s refused: rule '%s' says secure (a port below 1024)",
                             ctx.peer->c_str(), rule.spec.c_str());
    return AUTH_TOOWEAK;
  }
  if ((rule.tls && !a.tls) || (rule.mtls && !a.tls_client_verified)) {
    counters_.tls_required.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED(
        "call from %s refused: rule '%s' says %s", ctx.peer->c_str(), rule.spec.c_str(),
        !a.tls ? "tls (this connection runs none)" : "mtls (this client presented no certificate)");
    return AUTH_TOOWEAK;
  }
  const TlsIdentity* mapped = nullptr;
  if (a.tls_identity != rpc::Admission::kNone && options_.tls != nullptr) {
    mapped = options_.tls->current(a.tls_identity);
    if (mapped == nullptr) {
      // A reload took the line this connection was named by: it may no longer act as
      // that identity, nor fall back to another; a new connection is named afresh.
      counters_.identity_unmapped.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED(
          "call from %s refused: the identity map line its certificate was given is gone "
          "since a reload (it must connect again)",
          ctx.peer->c_str());
      return AUTH_REJECTEDCRED;
    }
  }
  if (mapped != nullptr && !mapped->trust) {
    // The certificate says who calls: the credential's claim does not matter.
    cred->auth_sys = true;
    cred->uid = mapped->uid;
    cred->gid = mapped->gid;
    cred->ngids = static_cast<uint32_t>(mapped->groups.size());
    std::copy(mapped->groups.begin(), mapped->groups.end(), cred->gids);
    squash(rule, cred);
    return AUTH_OK;
  }
  if (!cred->auth_sys || rule.squash == ClientRule::Squash::kAll ||
      (rule.mtls && mapped == nullptr) || ((rule.named_peers_only || a.local) && !a.owner_known)) {
    counters_.squashed.fetch_add(1, std::memory_order_relaxed);
    make_anonymous(rule, cred);
    return AUTH_OK;
  }
  if (names_no_id(*cred)) {
    counters_.bad_credential.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("call from %s refused: credential names id 4294967295",
                             ctx.peer->c_str());
    return AUTH_BADCRED;
  }
  bool changed = false;
  // A local peer that is not root may act only as itself.
  if (a.owner_known && a.owner.uid != 0) {
    if (cred->uid != a.owner.uid) {
      counters_.not_socket_owner.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED("call from %s refused: claims uid %u, its socket is uid %u's",
                               ctx.peer->c_str(), cred->uid, a.owner.uid);
      return AUTH_BADCRED;
    }
    if (!owner_has_group(a.owner, cred->gid)) {
      cred->gid = a.owner.gid != kNoId ? a.owner.gid : rule.anon_gid;
      changed = true;
    }
    uint32_t kept = 0;
    for (uint32_t i = 0; i < cred->ngids; ++i) {
      if (owner_has_group(a.owner, cred->gids[i])) cred->gids[kept++] = cred->gids[i];
    }
    changed |= kept != cred->ngids;
    cred->ngids = kept;
  }
  squash(rule, cred, changed);
  return AUTH_OK;
}

void CallAuthority::squash(const ClientRule& rule, rpc::CallerCred* cred, bool changed) const {
  const bool trust_root = rule.squash == ClientRule::Squash::kNone;
  if (!trust_root) {
    if (cred->uid == 0) {
      cred->uid = rule.anon_uid;
      changed = true;
    }
    if (cred->gid == 0) {
      cred->gid = rule.anon_gid;
      changed = true;
    }
    for (uint32_t i = 0; i < cred->ngids; ++i) {
      if (cred->gids[i] == 0) {
        cred->gids[i] = rule.anon_gid;
        changed = true;
      }
    }
  }
  if (changed) counters_.squashed.fetch_add(1, std::memory_order_relaxed);
}

void CallAuthority::on_tls(const tls::Session& session, const std::string& peer,
                           rpc::Admission* admission) const {
  if (options_.tls == nullptr || !admission->tls_client_verified) return;
  const tls::PeerCertificate cert = session.peer();
  admission->tls_identity = options_.tls->identify(cert);
  const time_t now = time(nullptr);
  if (cert.not_after != 0 && cert.not_after - now < 7 * 24 * 3600) {
    ODAFS_LOG_WARN_THROTTLED("client %s: its certificate (%s) expires in %lld hour(s)",
                             peer.c_str(), cert.subject.c_str(),
                             static_cast<long long>((cert.not_after - now) / 3600));
  }
  ODAFS_LOG_DEBUG(
      "client %s: certificate %s %s", peer.c_str(), cert.subject.c_str(),
      admission->tls_identity == rpc::Admission::kNone ? "is not in the identity map" : "mapped");
}

bool CallAuthority::allows_devices(const rpc::CallContext& ctx) const {
  if (ctx.admission == nullptr) return false;
  const ExportRules& rules = this->rules();
  const uint32_t rule = rules.match(ctx.admission->address);
  return rule != rpc::Admission::kNone && rules.rule(rule).devices;
}

bool CallAuthority::read_only(const rpc::CallContext& ctx) const {
  if (options_.read_only || ctx.admission == nullptr) return true;
  const ExportRules& rules = this->rules();
  const uint32_t rule = rules.match(ctx.admission->address);
  return rule == rpc::Admission::kNone || rules.rule(rule).read_only;
}

std::string CallAuthority::principal(const rpc::CallContext& ctx) const {
  if (const rpc::Admission* a = ctx.admission; a != nullptr) {
    if (a->owner_known) return "uid:" + std::to_string(a->owner.uid);
    if (a->tls_identity != rpc::Admission::kNone) return "tls:" + std::to_string(a->tls_identity);
  }
  // "HOST:PORT", the host bracketed if IPv6: the port is the connection's, not the client's.
  const std::string peer = ctx.peer != nullptr ? *ctx.peer : "";
  return "host:" + peer.substr(0, peer.rfind(':'));
}

void CallAuthority::report_counters(const CounterSink& add) const {
  const Counters& c = counters_;
  add("refused.no_rule", c.no_rule.load());
  add("refused.insecure_port", c.insecure_port.load());
  add("refused.tls_required", c.tls_required.load());
  add("refused.identity_unmapped", c.identity_unmapped.load());
  add("refused.bad_credential", c.bad_credential.load());
  add("refused.not_socket_owner", c.not_socket_owner.load());
  add("read_only", c.read_only.load());
  add("squashed", c.squashed.load());
}

}  // namespace odafs::server
