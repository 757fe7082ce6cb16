#include "server/export_rules.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>
#include <stdexcept>

namespace odafs::server {
namespace {

// "SPEC: " followed by the parts. (Appends, not operator+: GCC 12 at -O3 warns falsely on
// "literal" + std::string chains, -Wrestrict.)
template <class... Parts>
[[noreturn]] void bad(std::string_view spec, const Parts&... parts) {
  std::string message(spec);
  message.append(": ");
  (message.append(std::string_view(parts)), ...);
  throw std::invalid_argument(message);
}

uint32_t parse_id(std::string_view spec, std::string_view text) {
  uint32_t v = 0;
  auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (err != std::errc() || end != text.data() + text.size() || text.empty() || v == UINT32_MAX) {
    bad(spec, "'", text, "' is not a uid or gid");
  }
  return v;
}

// The exports(5) options that people paste from their NFS exports and that odafs takes
// without a change in what it does (docs/exports.md says why for each): its writes are
// always acknowledged only once stable (sync; async asks for less), its handles are bound
// to their export by a MAC so there is no subtree to check, it does not delay writes, it
// crosses no mounts, and an export is named by its path (fsid=).
bool nfs_only_option(std::string_view opt) {
  for (std::string_view o : {"sync", "async", "subtree_check", "no_subtree_check", "wdelay",
                             "no_wdelay", "hide", "nohide", "sec=sys"}) {
    if (opt == o) return true;
  }
  return opt.substr(0, 5) == "fsid=" && opt.size() > 5;
}

// Applies one OPTION to rule.
void apply_option(std::string_view spec, std::string_view opt, ClientRule* rule) {
  if (opt == "rw") {
    rule->read_only = false;
  } else if (opt == "ro") {
    rule->read_only = true;
  } else if (opt == "root_squash") {
    rule->squash = ClientRule::Squash::kRoot;
  } else if (opt == "no_root_squash") {
    rule->squash = ClientRule::Squash::kNone;
  } else if (opt == "all_squash") {
    rule->squash = ClientRule::Squash::kAll;
  } else if (opt == "secure") {
    rule->secure = true;
  } else if (opt == "insecure") {
    rule->secure = false;
  } else if (opt == "tls") {
    rule->tls = true;
  } else if (opt == "mtls") {
    rule->tls = rule->mtls = true;
  } else if (opt == "devices") {
    rule->devices = true;
  } else if (opt == "nodev") {
    rule->devices = false;
  } else if (nfs_only_option(opt)) {
    rule->accepted_only.append(rule->accepted_only.empty() ? "" : ",").append(opt);
  } else if (opt.substr(0, 4) == "sec=") {
    bad(spec, "'", opt,
        "': odafs has no Kerberos; sec=sys is what it does (require TLS with tls or mtls)");
  } else if (opt.substr(0, 8) == "anonuid=") {
    rule->anon_uid = parse_id(spec, opt.substr(8));
  } else if (opt.substr(0, 8) == "anongid=") {
    rule->anon_gid = parse_id(spec, opt.substr(8));
  } else {
    bad(spec, "unknown option '", opt,
        "' (rw, ro, root_squash, no_root_squash, all_squash, anonuid=N, anongid=N, secure, "
        "insecure, devices, nodev, tls, mtls; and, with no effect, sync, async, "
        "subtree_check, no_subtree_check, wdelay, no_wdelay, hide, nohide, fsid=, sec=sys)");
  }
}

// A network in *rule from a literal address, optionally with /prefix. False if `who` is
// not a literal address (a host name, then).
bool parse_network(std::string_view spec, std::string_view who, ClientRule* rule) {
  std::string_view addr_text = who;
  int prefix = -1;  // none given
  if (size_t slash = who.find('/'); slash != std::string_view::npos) {
    addr_text = who.substr(0, slash);
    // Decimal digits only, at most three: from_chars alone takes a sign, and "-0" (read
    // as 0) admitted everyone while "-1" read as no prefix at all.
    const std::string_view p = who.substr(slash + 1);
    const bool digits =
        !p.empty() && p.size() <= 3 && p.find_first_not_of("0123456789") == std::string_view::npos;
    if (!digits) bad(spec, "bad prefix length in '", who, "' (want 0 to 32, or 0 to 128)");
    std::from_chars(p.data(), p.data() + p.size(), prefix);
  }
  const std::string addr(addr_text);
  if (inet_pton(AF_INET, addr.c_str(), rule->address) == 1) {
    rule->family = AF_INET;
    rule->prefix = prefix < 0 ? 32 : prefix;
    if (rule->prefix > 32) bad(spec, "an IPv4 prefix is at most 32");
    return true;
  }
  if (inet_pton(AF_INET6, addr.c_str(), rule->address) == 1) {
    rule->family = AF_INET6;
    rule->prefix = prefix < 0 ? 128 : prefix;
    if (rule->prefix > 128) bad(spec, "an IPv6 prefix is at most 128");
    return true;
  }
  if (prefix >= 0) bad(spec, "'", addr, "' is not an IP address");
  return false;
}

bool prefix_equal(const unsigned char* a, const unsigned char* b, int bits) {
  int whole = bits / 8;
  if (std::memcmp(a, b, static_cast<size_t>(whole)) != 0) return false;
  int rest = bits % 8;
  if (rest == 0) return true;
  unsigned char mask = static_cast<unsigned char>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

}  // namespace

bool ClientRule::matches(const sockaddr_storage& peer) const {
  unsigned char bytes[16];
  int peer_family;
  if (peer.ss_family == AF_INET) {
    peer_family = AF_INET;
    std::memcpy(bytes, &reinterpret_cast<const sockaddr_in&>(peer).sin_addr, 4);
  } else if (peer.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {  // an IPv4 client of a dual-stack listener
      peer_family = AF_INET;
      std::memcpy(bytes, a.s6_addr + 12, 4);
    } else {
      peer_family = AF_INET6;
      std::memcpy(bytes, a.s6_addr, 16);
    }
  } else {
    return false;
  }
  return peer_family == family && prefix_equal(bytes, address, prefix);
}

std::string ClientRule::options_text() const {
  std::string text = read_only ? "ro" : "rw";
  text += squash == Squash::kAll    ? ",all_squash"
          : squash == Squash::kNone ? ",no_root_squash"
                                    : ",root_squash";
  text += secure ? ",secure" : ",insecure";
  if (devices) text += ",devices";
  if (mtls) {
    text += ",mtls";
  } else if (tls) {
    text += ",tls";
  }
  if (squash != Squash::kNone) {
    text += ",anonuid=" + std::to_string(anon_uid) + ",anongid=" + std::to_string(anon_gid);
  }
  return text;
}

std::string ClientRule::network_text() const {
  char text[INET6_ADDRSTRLEN] = "?";
  inet_ntop(family, address, text, sizeof text);
  return std::string(text) + "/" + std::to_string(prefix);
}

void ExportRules::add(std::string_view spec, uint32_t anon_uid, uint32_t anon_gid) {
  ClientRule base;
  base.spec = std::string(spec);
  base.anon_uid = anon_uid;
  base.anon_gid = anon_gid;
  std::string_view who_text = spec;
  if (size_t open = spec.find('('); open != std::string_view::npos) {
    if (spec.back() != ')') bad(spec, "options must end with ')'");
    std::string_view opts = spec.substr(open + 1, spec.size() - open - 2);
    while (!opts.empty()) {
      size_t comma = opts.find(',');
      std::string_view opt = opts.substr(0, comma);
      if (!opt.empty()) apply_option(spec, opt, &base);
      opts = comma == std::string_view::npos ? std::string_view() : opts.substr(comma + 1);
    }
    who_text = spec.substr(0, open);
  }
  const std::string who(who_text);
  if (who.empty()) bad(spec, "no client named (a CIDR, an address, a host name or '*')");
  if (who == "*") {
    ClientRule v4 = base, v6 = base;
    v4.family = AF_INET;
    v6.family = AF_INET6;
    rules_.push_back(v4);
    rules_.push_back(v6);
    return;
  }
  ClientRule rule = base;
  if (parse_network(spec, who, &rule)) {
    rules_.push_back(rule);
    return;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int err = getaddrinfo(who.c_str(), nullptr, &hints, &found); err != 0) {
    bad(spec, "cannot resolve '", who, "': ", gai_strerror(err));
  }
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    ClientRule one = base;
    if (ai->ai_family == AF_INET) {
      one.family = AF_INET;
      one.prefix = 32;
      std::memcpy(one.address, &reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr, 4);
    } else if (ai->ai_family == AF_INET6) {
      one.family = AF_INET6;
      one.prefix = 128;
      std::memcpy(one.address, &reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr, 16);
    } else {
      continue;
    }
    rules_.push_back(one);
  }
  freeaddrinfo(found);
}

void ExportRules::add_loopback_default(uint32_t anon_uid, uint32_t anon_gid) {
  const size_t first = rules_.size();
  add("127.0.0.0/8(rw,no_root_squash,devices)", anon_uid, anon_gid);
  add("::1(rw,no_root_squash,devices)", anon_uid, anon_gid);
  for (size_t i = first; i < rules_.size(); ++i) rules_[i].named_peers_only = true;
}

uint32_t ExportRules::match(const sockaddr_storage& peer) const {
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (rules_[i].matches(peer)) return static_cast<uint32_t>(i);
  }
  return UINT32_MAX;
}

}  // namespace odafs::server
