// Which clients may use the export, and on what terms: the client list of exports(5) and
// ganesha's CLIENT blocks, given to odafsd as `--clients SPEC` (repeatable).
//
//   SPEC    = WHO [ "(" OPTION { "," OPTION } ")" ]
//   WHO     = CIDR (10.0.0.0/8, fd00::/8) | address | host name | "*" | "localhost"
//   OPTION  = rw | ro | root_squash | no_root_squash | all_squash | anonuid=N | anongid=N
//           | secure | insecure | devices | nodev | tls | mtls
//           | sync | async | subtree_check | no_subtree_check | wdelay | no_wdelay | hide
//           | nohide | fsid=X | sec=sys     (NFS's, accepted with no effect: accepted_only)
//
// Defaults, as exports(5): rw, root_squash, insecure (any source port), anonuid and anongid
// from --anon-uid/--anon-gid; and nodev: MKNOD makes FIFOs and sockets for anyone who may
// create in the directory, character and block devices only under `devices` (and then
// only for a caller whose squashed credential is root: the kernel's CAP_MKNOD). `tls`:
// the client's calls are refused (AUTH_TOOWEAK) unless its connection runs TLS (RFC 9289);
// `mtls`: unless it also presented a certificate odafsd's --tls-ca vouches for, and the
// calls then run as --tls-identity-map maps that certificate (anonymous if it maps to
// nothing; server/tls_identities.h). The
// loopback default (below) says `devices`: its root is this host's root. A host name is resolved
// once, when the rule is parsed: each of its addresses becomes a rule of its own. The first rule
// that matches a peer's address decides; a peer no rule matches is refused.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace odafs::server {

struct ClientRule {
  enum class Squash { kRoot, kNone, kAll };

  std::string spec;  // as given, for logs and errors
  // The network: family (AF_INET or AF_INET6), address bytes (4 or 16) and prefix length.
  int family = AF_INET;
  unsigned char address[16] = {};
  int prefix = 0;
  bool read_only = false;
  Squash squash = Squash::kRoot;
  uint32_t anon_uid = 65534;
  uint32_t anon_gid = 65534;
  bool secure = false;   // only from a source port below 1024 (which only root can bind)
  bool devices = false;  // MKNOD of character and block devices allowed
  bool tls = false;      // calls only over TLS
  bool mtls = false;     // ... and with a verified client certificate (implies tls)
  // Believes a peer's credential only when the kernel named the peer (the loopback
  // default): a peer it could not name runs as the anonymous user, whatever it claims.
  bool named_peers_only = false;
  // The NFS options given that odafs accepts with no effect ("sync,no_subtree_check").
  std::string accepted_only;

  bool matches(const sockaddr_storage& peer) const;
  // The rule's terms in exports(5) words, every one spelled out: "rw,root_squash,insecure".
  std::string options_text() const;
  // The network the rule admits, as CIDR: "10.0.0.0/8", "::1/128".
  std::string network_text() const;
};

class ExportRules {
 public:
  // Parses one SPEC into one rule per address it names and appends them. Throws
  // std::invalid_argument with a message "SPEC: what is wrong".
  void add(std::string_view spec, uint32_t anon_uid, uint32_t anon_gid);

  // The rule odafsd uses when given none and listening on loopback only: this host's
  // processes (127.0.0.0/8 and ::1), rw, no_root_squash, devices. It is safe only because
  // such peers are named by the kernel (CallAuthority): root's sockets are root, anyone
  // else's may act only as its owner. So a device node is made only for this host's root,
  // who could make it in the export directly anyway.
  void add_loopback_default(uint32_t anon_uid, uint32_t anon_gid);

  // The index of the first rule that matches peer, or UINT32_MAX when none does.
  uint32_t match(const sockaddr_storage& peer) const;

  const ClientRule& rule(uint32_t index) const { return rules_[index]; }
  size_t size() const { return rules_.size(); }
  bool empty() const { return rules_.empty(); }

 private:
  std::vector<ClientRule> rules_;
};

}  // namespace odafs::server
