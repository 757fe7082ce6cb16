// odafsd's TLS: the server context (--tls-cert, --tls-key, --tls-ca) and the map from
// client certificates to the identity their calls run as (--tls-identity-map), both read
// again on SIGHUP.
//
// The identity map (RFC 9289's two ways to use a client certificate, per certificate):
//
//   # comment
//   NAME  UID:GID[:GROUP,GROUP...]   every call on the connection runs as this user,
//                                    whatever its AUTH_SYS credential claims
//   NAME  trust                      the client's AUTH_SYS credential is believed (the
//                                    certificate stands for a host that checks its users)
//
// NAME is one of the certificate's subjectAltName entries as "DNS:name", "IP:addr",
// "email:addr" or "URI:uri", or its subject as "subject:" and the RFC 2253 form
// ("subject:CN=alice,O=example"). The first line naming any of them decides. The export
// rule's squashing applies after the map (root_squash turns a mapped uid 0 anonymous). A
// verified certificate the map does not name runs as the anonymous user under an `mtls`
// rule, and like a client without one elsewhere.
//
// Reloading (SIGHUP): a new context serves connections that start TLS from then on; the
// map's new lines decide for them too. A connection already running keeps the identity it
// was given while the map still has that line unchanged; once a reload removed or changed
// it, current() answers none and the connection's calls are refused (CallAuthority): its
// client must connect again, and is then named by the new map. A reload that fails (a
// file missing or bad) changes nothing and says why.
//
// Thread-safety: thread-safe. context() and identify() may run on any thread while
// reload() runs on another.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tls.h"

namespace odafs::server {

struct TlsIdentity {
  std::string name;    // as the map names the certificate
  bool trust = false;  // believe the client's AUTH_SYS credential
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  // at most 16

  bool operator==(const TlsIdentity&) const = default;
};

// Parses an identity map's text; the Status names the line that is wrong.
Result<std::vector<TlsIdentity>> parse_identity_map(const std::string& text);

class TlsIdentities {
 public:
  struct Files {
    tls::Files tls;
    std::string identity_map;  // empty: none
  };
  // Loads the files; the Status says which is wrong and why.
  static Result<std::unique_ptr<TlsIdentities>> load(Files files);

  // Reads every file again; on failure keeps what it had.
  Status reload();
  std::shared_ptr<const tls::Context> context() const;
  // The index of the map line naming cert (for current()), or UINT32_MAX for none.
  uint32_t identify(const tls::PeerCertificate& cert) const;
  // The line at index (from identify), or nullptr once a reload removed or changed it.
  // The line stays valid for the server's life (a deque's elements stay put).
  const TlsIdentity* current(uint32_t index) const;

 private:
  struct Line {
    TlsIdentity identity;
    bool in_map = false;  // the current map has it
  };
  explicit TlsIdentities(Files files) : files_(std::move(files)) {}
  Files files_;
  mutable std::mutex mu_;
  std::shared_ptr<const tls::Context> context_;  // mu_
  // mu_; every distinct line loaded: a reload reuses the index of a line it keeps
  // unchanged, so the connections given it go on, and only new or changed lines grow this.
  std::deque<Line> lines_;
  std::vector<uint32_t> active_;  // mu_; the current map's lines, in order
};

}  // namespace odafs::server
