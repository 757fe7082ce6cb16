#include "server/tls_identities.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace odafs::server {
namespace {

bool parse_id(std::string_view text, uint32_t* out) {
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && p == end && !text.empty() && *out != UINT32_MAX;
}

// "UID:GID[:G,G...]" into entry.
bool parse_ids(const std::string& text, TlsIdentity* entry) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return false;
  const size_t second = text.find(':', colon + 1);
  const std::string_view all(text);
  if (!parse_id(all.substr(0, colon), &entry->uid)) return false;
  if (!parse_id(all.substr(colon + 1,
                           second == std::string::npos ? std::string::npos : second - colon - 1),
                &entry->gid)) {
    return false;
  }
  if (second == std::string::npos) return true;
  std::string_view groups = all.substr(second + 1);
  while (!groups.empty()) {
    const size_t comma = groups.find(',');
    uint32_t g = 0;
    if (!parse_id(groups.substr(0, comma), &g) || entry->groups.size() == 16) return false;
    entry->groups.push_back(g);
    if (comma == std::string_view::npos) break;
    groups.remove_prefix(comma + 1);
    if (groups.empty()) return false;
  }
  return true;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status(ENOENT, "cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Result<std::vector<TlsIdentity>> parse_identity_map(const std::string& text) {
  std::vector<TlsIdentity> out;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    TlsIdentity entry;
    std::string what, extra;
    if (!(words >> entry.name)) continue;  // blank or comment
    const bool named = entry.name.rfind("subject:", 0) == 0 || entry.name.rfind("DNS:", 0) == 0 ||
                       entry.name.rfind("IP:", 0) == 0 || entry.name.rfind("email:", 0) == 0 ||
                       entry.name.rfind("URI:", 0) == 0;
    const std::string where = "identity map line " + std::to_string(number) + ": ";
    if (!named) {
      return Status(EINVAL, where + "'" + entry.name +
                                "' is not subject:..., DNS:..., IP:..., email:... or URI:...");
    }
    if (!(words >> what) || (words >> extra)) {
      return Status(EINVAL, where + "want NAME UID:GID[:GROUPS] or NAME trust");
    }
    if (what == "trust") {
      entry.trust = true;
    } else if (!parse_ids(what, &entry)) {
      return Status(EINVAL, where + "'" + what +
                                "' is not UID:GID[:GROUP,...] (at most 16 groups, no 4294967295) "
                                "or trust");
    }
    out.push_back(std::move(entry));
  }
  return out;
}

Result<std::unique_ptr<TlsIdentities>> TlsIdentities::load(Files files) {
  std::unique_ptr<TlsIdentities> t(new TlsIdentities(std::move(files)));
  if (Status s = t->reload(); !s.ok()) return s;
  return t;
}

Status TlsIdentities::reload() {
  Result<std::shared_ptr<const tls::Context>> context =
      tls::Context::make(tls::Context::Side::kServer, files_.tls);
  if (!context.ok()) return context.status();
  std::vector<TlsIdentity> map;
  if (!files_.identity_map.empty()) {
    Result<std::string> text = read_file(files_.identity_map);
    if (!text.ok()) return text.status();
    Result<std::vector<TlsIdentity>> parsed = parse_identity_map(*text);
    if (!parsed.ok()) {
      return Status(EINVAL, files_.identity_map + ": " + parsed.status().message());
    }
    map = std::move(*parsed);
  }
  std::lock_guard lock(mu_);
  context_ = std::move(*context);
  std::vector<uint32_t> previous;
  previous.swap(active_);
  for (uint32_t index : previous) lines_[index].in_map = false;
  for (TlsIdentity& entry : map) {
    // A line the old map had unchanged keeps its index (and its connections); a line
    // named twice gets two.
    auto kept = std::find_if(previous.begin(), previous.end(), [&](uint32_t index) {
      return !lines_[index].in_map && lines_[index].identity == entry;
    });
    uint32_t index;
    if (kept != previous.end()) {
      index = *kept;
    } else {
      index = static_cast<uint32_t>(lines_.size());
      lines_.push_back(Line{std::move(entry), false});
    }
    lines_[index].in_map = true;
    active_.push_back(index);
  }
  return Status();
}

std::shared_ptr<const tls::Context> TlsIdentities::context() const {
  std::lock_guard lock(mu_);
  return context_;
}

uint32_t TlsIdentities::identify(const tls::PeerCertificate& cert) const {
  if (!cert.present) return UINT32_MAX;
  const std::string subject = "subject:" + cert.subject;
  std::lock_guard lock(mu_);
  for (uint32_t index : active_) {
    const std::string& name = lines_[index].identity.name;
    if (name == subject) return index;
    for (const std::string& alt : cert.alt_names) {
      if (name == alt) return index;
    }
  }
  return UINT32_MAX;
}

const TlsIdentity* TlsIdentities::current(uint32_t index) const {
  std::lock_guard lock(mu_);
  if (index >= lines_.size() || !lines_[index].in_map) return nullptr;
  return &lines_[index].identity;  // a deque's elements stay put as it grows
}

}  // namespace odafs::server
