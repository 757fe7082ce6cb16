// Unit: the flag table (base/flags.h) every program parses its command line with.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/flags.h"

namespace {

struct Args {
  explicit Args(std::vector<std::string> a) : strings(std::move(a)) {
    strings.insert(strings.begin(), "prog");
    for (auto& s : strings) ptrs.push_back(s.data());
  }
  int argc() { return static_cast<int>(ptrs.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> strings;
  std::vector<char*> ptrs;
};

struct Parsed {
  bool ok;
  std::string error;
  std::vector<std::string> rest;
};

struct Table {
  std::string url;
  size_t clients = 2;
  int grace = -1;
  double seconds = 1.5;
  bool quiet = false;
  std::vector<size_t> sizes = {1, 2};
  std::vector<std::string> rules;
  odafs::Flags flags{"prog", "[flags] FILE"};
  Table() {
    flags.add("--url", &url, "the export");
    flags.add("--clients", &clients, "client processes", 1, 64);
    flags.add("--grace-ms", &grace, "grace period", -1, 100000);
    flags.add("--seconds", &seconds, "time", 0.1, 10);
    flags.add("--quiet", &quiet, "say less");
    flags.add("--sizes", &sizes, "sizes", 1, 100);
    flags.add_each("--clients-rule", "SPEC", "who may mount", [this](const std::string& v) {
      if (v.empty()) return std::string("an empty rule");
      rules.push_back(v);
      return std::string();
    });
    flags.add_each("--no-cache", nullptr, "a switch told by call", [this](const std::string& v) {
      rules.push_back("no-cache" + v);
      return std::string();
    });
  }
  Parsed parse(std::vector<std::string> a) {
    Args args(std::move(a));
    Parsed p;
    p.ok = flags.try_parse(args.argc(), args.argv(), &p.rest, &p.error);
    return p;
  }
};

}  // namespace

TEST_CASE("flags: values, switches, repeats and positional arguments") {
  Table t;
  Parsed p = t.parse({"--url", "odafs://h:1/", "--clients=8", "FILE", "--grace-ms", "-1",
                      "--seconds", "2.5", "--quiet", "--clients-rule", "a", "--clients-rule", "b",
                      "--sizes", "4,8,100", "--no-cache", "--", "--not-a-flag"});
  REQUIRE(p.ok);
  CHECK(t.url == "odafs://h:1/");
  CHECK(t.clients == 8);
  CHECK(t.grace == -1);
  CHECK(t.seconds == 2.5);
  CHECK(t.quiet);
  CHECK(t.rules == std::vector<std::string>{"a", "b", "no-cache"});  // a switch takes no value
  CHECK(t.sizes == std::vector<size_t>{4, 8, 100});
  CHECK(p.rest == std::vector<std::string>{"FILE", "--not-a-flag"});
}

TEST_CASE("flags: defaults stay when a flag is not given") {
  Table t;
  REQUIRE(t.parse({}).ok);
  CHECK(t.clients == 2);
  CHECK(t.grace == -1);
  CHECK_FALSE(t.quiet);
}

TEST_CASE("flags: every bad command line is refused with the reason") {
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {{"--bogus"}, "unknown option --bogus"},
           {{"--clients"}, "needs a value"},
           {{"--clients", "0"}, "outside 1..64"},
           {{"--clients", "65"}, "outside 1..64"},
           {{"--clients", "-3"}, "negative"},
           {{"--clients", "4x"}, "not a whole number"},
           {{"--clients", "99999999999999999999999"}, "not a whole number"},
           {{"--grace-ms", "-2"}, "outside"},
           {{"--seconds", "nan-ish"}, "not a number"},
           {{"--seconds", "11"}, "outside"},
           {{"--quiet=1"}, "takes no value"},
           {{"--clients-rule", ""}, "an empty rule"},
           {{"--sizes", "1,,2"}, "needs a number"},
           {{"--sizes", "1,200"}, "outside 1..100"},
           {{"--sizes", ""}, "needs a number"},
           {{"--sizes", "3,x"}, "not a whole number"},
       }) {
    CAPTURE(c.args[0]);
    Table t;
    Parsed p = t.parse(c.args);
    CHECK_FALSE(p.ok);
    CHECK(p.error.find(c.says) != std::string::npos);
  }
}

TEST_CASE("flags: the usage lists every flag with its help and default") {
  Table t;
  std::string u = t.flags.usage();
  CHECK(u.rfind("usage: prog [flags] FILE\n", 0) == 0);
  for (const char* f : {"--url", "--clients N", "--grace-ms N", "--seconds X", "--quiet",
                        "--clients-rule SPEC", "--help"}) {
    CAPTURE(f);
    CHECK(u.find(f) != std::string::npos);
  }
  CHECK(u.find("client processes (default 2)") != std::string::npos);
  CHECK(u.find("--sizes N,N,...") != std::string::npos);
  CHECK(u.find("sizes (default 1,2)") != std::string::npos);
}

// odafsd's usage comes from its flag table; docs/usage.md's synopsis of odafsd is written by
// hand: every flag of one is in the other (testing-only flags and aliases aside).
TEST_CASE("flags: odafsd --help and docs/usage.md's odafsd synopsis name the same flags") {
  std::string help;
  {
    FILE* p = popen(ODAFSD_PATH " --help", "r");
    REQUIRE(p != nullptr);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) help.append(buf, n);
    CHECK(pclose(p) == 0);  // --help is not an error
  }
  std::set<std::string> from_help;
  std::istringstream lines(help);
  const std::regex flag_line(R"(^  (--[a-z-]+))");
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, flag_line)) continue;
    if (line.find("(testing)") != std::string::npos) continue;
    if (line.find("the same as") != std::string::npos) continue;
    if (m[1] == "--help") continue;
    from_help.insert(m[1]);
  }
  std::ifstream readme(ODAFS_SOURCE_DIR "/docs/usage.md");
  std::stringstream text;
  text << readme.rdbuf();
  const std::string all = text.str();
  const size_t start = all.find("odafsd --export DIR --listen HOST:PORT");
  REQUIRE(start != std::string::npos);
  const std::string synopsis = all.substr(start, all.find("```", start) - start);
  std::set<std::string> from_readme;
  const std::regex any_flag(R"(--[a-z][a-z-]*)");
  for (auto it = std::sregex_iterator(synopsis.begin(), synopsis.end(), any_flag);
       it != std::sregex_iterator(); ++it) {
    from_readme.insert(it->str());
  }
  CHECK(from_help.size() > 30);
  for (const std::string& f : from_help) {
    CAPTURE(f);
    CHECK(from_readme.count(f) == 1);
  }
  for (const std::string& f : from_readme) {
    CAPTURE(f);
    CHECK(from_help.count(f) == 1);
  }
}

namespace {

// Runs odafsd with `flags` on a fresh export; its exit status and what it printed.
std::pair<int, std::string> run_odafsd(const std::string& flags) {
  char dir[] = "/tmp/odafs-flags-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string command = std::string("timeout 20 ") + ODAFSD_PATH + " --export " + dir +
                              " --listen 127.0.0.1:0 " + flags + " 2>&1";
  FILE* p = popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  std::filesystem::remove_all(dir);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

// The engine backends declare their own flags (ordma::backend_settings); odafsd names none.
TEST_CASE("flags: odafsd refuses a backend's setting for another backend, and a bad value") {
  auto [status, out] = run_odafsd("--rdma-dev mlx5_0");  // --engine is soft
  CHECK(status == 2);
  CHECK(out.find("--rdma-dev is the verbs engine's; --engine is soft") != std::string::npos);
  std::tie(status, out) = run_odafsd("--max-rings 0");
  CHECK(status == 1);
  CHECK(out.find("max_rings=0") != std::string::npos);
  CHECK(out.find("odafsd ready") == std::string::npos);
}

// --ceph-peer names gateways to fence: only for a CephFS export, only as HOST:PORT.
TEST_CASE("flags: odafsd refuses --ceph-peer for a local export, and a bad address") {
  auto [status, out] = run_odafsd("--ceph-peer 127.0.0.1:7001");
  CHECK(status == 2);
  CHECK(out.find("--ceph-peer needs --export ceph:PATH") != std::string::npos);
  std::tie(status, out) = run_odafsd("--ceph-peer nonsense");
  CHECK(status == 2);
  CHECK(out.find("odafsd ready") == std::string::npos);
}

TEST_CASE("flags: a hidden flag is parsed but left out of the usage, which lists --version") {
  odafs::Flags flags("prog", "[flags]");
  bool shown = false, hidden = false;
  flags.add("--shown", &shown, "in the usage");
  flags.add("--hidden", &hidden, "for the tests only");
  flags.hide("--hidden");
  std::vector<std::string> rest;
  std::string error;
  std::vector<std::string> args = {"prog", "--hidden"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  REQUIRE(flags.try_parse(static_cast<int>(argv.size()), argv.data(), &rest, &error));
  CHECK(hidden);
  const std::string usage = flags.usage();
  CHECK(usage.find("--shown") != std::string::npos);
  CHECK(usage.find("--hidden") == std::string::npos);
  CHECK(usage.find("--version") != std::string::npos);
}

// ---- The docs cite the code: every source path, test suite and Class::member that
// README.md and docs/*.md name in `backticks` must exist, so a rename or a removal that
// leaves a doc behind fails here rather than misleading the next reader.

namespace docs_check {

namespace fs = std::filesystem;

const fs::path kRoot = ODAFS_SOURCE_DIR;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Whether `word` occurs in text with no identifier character on either side.
bool has_word(const std::string& text, const std::string& word) {
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool left = at == 0 || !is_word_char(text[at - 1]);
    const size_t end = at + word.size();
    const bool right = end >= text.size() || !is_word_char(text[end]);
    if (left && right) return true;
  }
  return false;
}

// The project's files (relative paths; build trees and .git left out) and the text of its
// sources.
struct Tree {
  std::set<std::string> files;
  std::string sources;
  Tree() {
    for (auto it = fs::recursive_directory_iterator(kRoot);
         it != fs::recursive_directory_iterator(); ++it) {
      const std::string rel = fs::relative(it->path(), kRoot).string();
      if (it->is_directory() && (rel.rfind("build", 0) == 0 || rel == ".git")) {
        it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file()) continue;
      files.insert(rel);
      const std::string ext = it->path().extension().string();
      if (ext == ".h" || ext == ".cc" || ext == ".x" || ext == ".sh" || ext == ".py") {
        sources += read_text(it->path());
      }
    }
  }
  // A path as docs write it: a file or folder, or a stem ("rpc/server" for its .h and .cc,
  // "docs/results/peers" for its result files).
  bool has_path(const std::string& path) const {
    auto it = files.lower_bound(path);
    return it != files.end() && it->rfind(path, 0) == 0;
  }
};

// The `spans` of a Markdown text outside ``` blocks.
std::vector<std::string> inline_code(const std::string& text) {
  std::vector<std::string> spans;
  std::istringstream lines(text);
  bool fenced = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("```", 0) == 0) {
      fenced = !fenced;
      continue;
    }
    if (fenced) continue;
    for (size_t open = line.find('`'); open != std::string::npos;) {
      const size_t close = line.find('`', open + 1);
      if (close == std::string::npos) break;
      spans.push_back(line.substr(open + 1, close - open - 1));
      open = line.find('`', close + 1);
    }
  }
  return spans;
}

// Source paths in a span: a top-level folder of the project, '/', then path characters.
std::vector<std::string> paths_in(const std::string& span) {
  static const char* const kTops[] = {"base",   "proto", "rpc",   "cache",   "ordma", "server",
                                      "client", "tests", "bench", "scripts", "dist",  "docs"};
  std::vector<std::string> paths;
  for (const char* top : kTops) {
    const std::string prefix = std::string(top) + "/";
    for (size_t at = span.find(prefix); at != std::string::npos; at = span.find(prefix, at + 1)) {
      if (at > 0 && (is_word_char(span[at - 1]) || span[at - 1] == '/' || span[at - 1] == '.' ||
                     span[at - 1] == '-')) {
        continue;
      }
      size_t end = at + prefix.size();
      while (end < span.size() && (is_word_char(span[end]) || span[end] == '.' ||
                                   span[end] == '/' || span[end] == '-')) {
        ++end;
      }
      std::string path = span.substr(at, end - at);
      while (!path.empty() && (path.back() == '.' || path.back() == '-')) path.pop_back();
      if (path.find('*') == std::string::npos) paths.push_back(path);
    }
  }
  return paths;
}

std::vector<fs::path> documents() {
  std::vector<fs::path> docs = {kRoot / "README.md"};
  for (const auto& e : fs::directory_iterator(kRoot / "docs")) {
    if (e.path().extension() == ".md") docs.push_back(e.path());
  }
  return docs;
}

}  // namespace docs_check

TEST_CASE("docs: every path, test suite and Class::member the docs cite exists") {
  using namespace docs_check;
  const Tree tree;
  REQUIRE(tree.files.count("server/odafsd.cc") == 1);
  size_t checked = 0;
  for (const fs::path& doc : documents()) {
    const std::string name = fs::relative(doc, kRoot).string();
    for (const std::string& span : inline_code(read_text(doc))) {
      for (const std::string& path : paths_in(span)) {
        CAPTURE(name);
        CAPTURE(path);
        CHECK(tree.has_path(path));
        ++checked;
      }
      // A suite: `test_exports` is tests/test_exports.cc.
      if (span.rfind("test_", 0) == 0 &&
          span.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") == std::string::npos) {
        CAPTURE(name);
        CAPTURE(span);
        CHECK(tree.files.count("tests/" + span + ".cc") == 1);
        ++checked;
      }
      // `Class::member`: a class or struct of that name, and the member's name, in the code.
      for (size_t colons = span.find("::"); colons != std::string::npos;
           colons = span.find("::", colons + 2)) {
        size_t begin = colons;
        while (begin > 0 && is_word_char(span[begin - 1])) --begin;
        size_t end = colons + 2;
        while (end < span.size() && is_word_char(span[end])) ++end;
        const std::string cls = span.substr(begin, colons - begin);
        const std::string member = span.substr(colons + 2, end - colons - 2);
        if (cls.empty() || member.empty() || cls[0] < 'A' || cls[0] > 'Z') continue;
        CAPTURE(name);
        CAPTURE(span);
        CHECK((has_word(tree.sources, "class " + cls) || has_word(tree.sources, "struct " + cls) ||
               has_word(tree.sources, "namespace " + cls)));
        CHECK(has_word(tree.sources, member));
        ++checked;
      }
    }
  }
  CHECK(checked > 300);  // the docs cite the code a lot: a scanner that finds none is broken
}
