// The docs cite the code: every source path, test suite and Class::member that README.md
// and docs/*.md name in `backticks` must exist, so a rename or a removal that leaves a doc
// behind fails here rather than misleading the next reader.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

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

}  // namespace

TEST_CASE("docs: every path, test suite and Class::member the docs cite exists") {
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
