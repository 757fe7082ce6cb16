#include "server/exports_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "proto/export_paths.h"

namespace odafs::server {
namespace {

// One logical line: physical lines joined where one ends in '\', comments dropped.
struct LogicalLine {
  std::string text;
  int first = 0;  // its first physical line, from 1
};

std::vector<LogicalLine> logical_lines(std::string_view text) {
  std::vector<LogicalLine> lines;
  LogicalLine current;
  bool continuing = false;
  int number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view physical = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (!continuing) current = LogicalLine{"", number};
    // A '#' outside quotes starts a comment.
    bool quoted = false;
    size_t cut = physical.size();
    for (size_t i = 0; i < physical.size(); ++i) {
      if (physical[i] == '"') quoted = !quoted;
      if (physical[i] == '#' && !quoted) {
        cut = i;
        break;
      }
    }
    physical = physical.substr(0, cut);
    while (!physical.empty() &&
           (physical.back() == ' ' || physical.back() == '\t' || physical.back() == '\r')) {
      physical.remove_suffix(1);
    }
    continuing = !physical.empty() && physical.back() == '\\' && cut == physical.size();
    if (continuing) physical.remove_suffix(1);
    current.text.append(physical).append(" ");
    if (!continuing) lines.push_back(std::move(current));
  }
  if (continuing) lines.push_back(std::move(current));
  return lines;
}

// Splits on blanks; a double-quoted field may hold blanks. Sets *error on an open quote.
std::vector<std::string> fields_of(const std::string& text, std::string* error) {
  std::vector<std::string> fields;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    if (i == text.size()) break;
    std::string field;
    bool quoted = false;
    for (; i < text.size() && (quoted || (text[i] != ' ' && text[i] != '\t')); ++i) {
      if (text[i] == '"') {
        quoted = !quoted;
      } else {
        field += text[i];
      }
    }
    if (quoted) *error = "a quote is not closed";
    fields.push_back(std::move(field));
  }
  return fields;
}

}  // namespace

Result<std::vector<ExportLine>> parse_exports(std::string_view text, std::string_view name,
                                              uint32_t anon_uid, uint32_t anon_gid) {
  std::vector<ExportLine> exports;
  std::set<std::string> paths;
  for (const LogicalLine& line : logical_lines(text)) {
    auto fail = [&](const std::string& why) {
      return Status(EINVAL, std::string(name) + ":" + std::to_string(line.first) + ": " + why);
    };
    std::string error;
    std::vector<std::string> fields = fields_of(line.text, &error);
    if (!error.empty()) return fail(error);
    if (fields.empty()) continue;
    ExportLine e;
    e.line = line.first;
    e.path = wire::normal_path(fields[0]);
    if (fields[0][0] != '/' || wire::climbs(e.path)) {
      return fail("'" + fields[0] + "' is not an absolute path (nor may it hold '..')");
    }
    if (!paths.insert(e.path).second) return fail(e.path + " is exported twice");
    std::string defaults;
    for (size_t i = 1; i < fields.size(); ++i) {
      const std::string& f = fields[i];
      if (f[0] == '-') {
        if (!e.clients.empty()) return fail("'" + f + "': the line's -OPTIONS come first");
        defaults = f.substr(1);
        continue;
      }
      if (f[0] == '(') {
        return fail("'" + f +
                    "' follows a blank: options go right after the client, as host(rw) (with "
                    "the blank they would apply to every host)");
      }
      const size_t open = f.find('(');
      if (open != std::string::npos && f.back() != ')') {
        return fail("'" + f + "': options must end with ')'");
      }
      std::string spec = f;
      if (!defaults.empty()) {
        // The line's defaults first, the client's own after them (the later option wins).
        const std::string who = f.substr(0, open);
        std::string own = open == std::string::npos ? "" : f.substr(open + 1);
        if (!own.empty()) own.pop_back();  // the ')'
        spec = who + "(" + defaults + (own.empty() ? "" : "," + own) + ")";
      }
      try {
        e.rules.add(spec, anon_uid, anon_gid);
      } catch (const std::invalid_argument& bad) {
        return fail(bad.what());
      }
      e.clients.push_back(f);
    }
    if (e.clients.empty()) {
      return fail(e.path +
                  " names no client: say who may use it, e.g. 10.0.0.0/8(rw) or *(ro) (exportfs "
                  "would export it to the world)");
    }
    exports.push_back(std::move(e));
  }
  return exports;
}

Result<std::vector<ExportLine>> read_exports_file(const std::string& path, uint32_t anon_uid,
                                                  uint32_t anon_gid) {
  std::ifstream in(path);
  if (!in) return Status(errno != 0 ? errno : ENOENT, path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status(EIO, path + ": cannot be read");
  return parse_exports(text.str(), path, anon_uid, anon_gid);
}

std::string describe_exports(const std::vector<ExportLine>& exports) {
  std::string out;
  for (const ExportLine& e : exports) {
    out += e.path + "\n";
    for (size_t i = 0; i < e.rules.size(); ++i) {
      const ClientRule& rule = e.rules.rule(i);
      out += "  " + rule.spec + " = " + rule.network_text() + " " + rule.options_text();
      if (!rule.accepted_only.empty()) out += " (no effect in odafs: " + rule.accepted_only + ")";
      out += "\n";
    }
  }
  return out;
}

}  // namespace odafs::server
