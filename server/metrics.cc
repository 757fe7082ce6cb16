#include "server/metrics.h"

#include <cstdio>
#include <map>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace odafs::server {
namespace {

// Counters that are a level, not a count: served as gauges, without the _total suffix.
bool is_gauge(std::string_view name) {
  for (std::string_view g :
       {"rpc.open_connections", "rpc.loops", "rpc.spare_threads", "cache.blocks",
        "cache.block_size", "leases.held", "nodes.live", "nodes.open_fds", "nodes.max_open_fds",
        "direct_writes.waiting", "delegations.held", "space.promised_bytes", "recovery.in_grace",
        "owners.known", "owners.away", "engine.threads"}) {
    if (name == g) return true;
  }
  return name.rfind("engine.backend.", 0) == 0;
}

// Counters of the whole server (the RPC server's, the process's CPU): served once.
bool is_server_wide(std::string_view name) {
  return name.rfind("rpc.", 0) == 0 || name.rfind("cpu_us.", 0) == 0;
}

// A Prometheus metric name from a counter's: [a-zA-Z0-9_] only.
std::string metric_name(std::string_view counter) {
  std::string name = "odafs_";
  for (char c : counter) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    name += ok ? c : '_';
  }
  return name;
}

// A label value, escaped as the format asks (backslash, double quote, line feed).
std::string label_value(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// The metric families in the order first met, each with its lines.
class Families {
 public:
  void add(const std::string& name, const char* type, const std::string& line) {
    auto [it, fresh] = index_.try_emplace(name, families_.size());
    if (fresh) families_.push_back({name, type, {}});
    families_[it->second].lines.push_back(line);
  }
  std::string text() const {
    std::string out;
    for (const Family& f : families_) {
      out += "# TYPE " + f.name + " " + f.type + "\n";
      for (const std::string& line : f.lines) out += line + "\n";
    }
    return out;
  }

 private:
  struct Family {
    std::string name;
    const char* type;
    std::vector<std::string> lines;
  };
  std::vector<Family> families_;
  std::unordered_map<std::string, size_t> index_;
};

std::string seconds(uint64_t us) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(us) / 1e6);
  return text;
}

}  // namespace

std::string render_metrics(const ExportRouter& router) {
  Families families;
  const std::vector<ExportRouter::Export>& exports = router.exports();
  for (size_t i = 0; i < exports.size(); ++i) {
    const std::string label = "export=\"" + label_value(exports[i].path) + "\"";
    for (const auto& [counter, value] : exports[i].service->counters()) {
      if (counter.rfind("calls.", 0) == 0) continue;  // odafs_call_seconds_count has them
      const bool wide = is_server_wide(counter);
      if (wide && i > 0) continue;
      const bool gauge = is_gauge(counter);
      const std::string name = metric_name(counter) + (gauge ? "" : "_total");
      families.add(name, gauge ? "gauge" : "counter",
                   name + (wide ? "" : "{" + label + "}") + " " + std::to_string(value));
    }
    const CallTimes& times = router.times(i);
    const std::vector<const char*>& names = router.procedure_names();
    for (uint32_t proc = 0; proc < names.size() && proc < CallTimes::kMaxProcedures; ++proc) {
      uint64_t calls = 0;
      for (size_t b = 0; b <= CallTimes::kBoundsUs.size(); ++b) calls += times.in_bucket(proc, b);
      if (names[proc] == nullptr || calls == 0) continue;  // a series from its first call
      const std::string labels = label + ",procedure=\"" + names[proc] + "\"";
      uint64_t count = 0;
      for (size_t b = 0; b <= CallTimes::kBoundsUs.size(); ++b) {
        count += times.in_bucket(proc, b);
        const std::string le =
            b < CallTimes::kBoundsUs.size() ? seconds(CallTimes::kBoundsUs[b]) : "+Inf";
        families.add(
            "odafs_call_seconds", "histogram",
            "odafs_call_seconds_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(count));
      }
      char sum[48];
      std::snprintf(sum, sizeof sum, "%.9f", static_cast<double>(times.sum_ns(proc)) / 1e9);
      families.add("odafs_call_seconds", "histogram",
                   "odafs_call_seconds_sum{" + labels + "} " + sum);
      families.add("odafs_call_seconds", "histogram",
                   "odafs_call_seconds_count{" + labels + "} " + std::to_string(count));
    }
  }
  return families.text();
}

}  // namespace odafs::server
