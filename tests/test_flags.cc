// Unit: the flag table (base/flags.h) every program parses its command line with.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
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
                      "--sizes", "4,8,100", "--", "--not-a-flag"});
  REQUIRE(p.ok);
  CHECK(t.url == "odafs://h:1/");
  CHECK(t.clients == 8);
  CHECK(t.grace == -1);
  CHECK(t.seconds == 2.5);
  CHECK(t.quiet);
  CHECK(t.rules == std::vector<std::string>{"a", "b"});
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
