#include "base/flags.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <type_traits>

namespace odafs {
namespace {

// Parses all of text as a number of type T within [min, max]; "" on success, else why not.
template <class T, class Bound>
std::string parse_number(const std::string& text, T* out, Bound min, Bound max) {
  if (text.empty()) return "needs a number";
  errno = 0;
  char* end = nullptr;
  if constexpr (std::is_floating_point_v<T>) {
    double v = std::strtod(text.c_str(), &end);
    if (errno != 0 || *end != '\0') return "'" + text + "' is not a number";
    if (v < min || v > max) {
      return "'" + text + "' is outside " + std::to_string(min) + ".." + std::to_string(max);
    }
    *out = static_cast<T>(v);
  } else if constexpr (std::is_signed_v<T>) {
    long long v = std::strtoll(text.c_str(), &end, 0);
    if (errno != 0 || *end != '\0') return "'" + text + "' is not a whole number";
    if (v < static_cast<long long>(min) || v > static_cast<long long>(max)) {
      return "'" + text + "' is outside " + std::to_string(min) + ".." + std::to_string(max);
    }
    *out = static_cast<T>(v);
  } else {
    if (text[0] == '-') return "'" + text + "' is negative";
    unsigned long long v = std::strtoull(text.c_str(), &end, 0);
    if (errno != 0 || *end != '\0') return "'" + text + "' is not a whole number";
    if (v < static_cast<unsigned long long>(min) || v > static_cast<unsigned long long>(max)) {
      return "'" + text + "' is outside " + std::to_string(min) + ".." + std::to_string(max);
    }
    *out = static_cast<T>(v);
  }
  return "";
}

template <class T>
std::string text_of(T v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

Flags::Flags(std::string program, std::string synopsis)
    : program_(std::move(program)), synopsis_(std::move(synopsis)) {}

void Flags::add_flag(Flag f) { flags_.push_back(std::move(f)); }

void Flags::add(const char* name, std::string* value, const char* help) {
  add_flag({name, "TEXT", help, value->empty() ? "" : *value, true, [value](const std::string& v) {
              *value = v;
              return std::string();
            }});
}

void Flags::add(const char* name, bool* value, const char* help) {
  add_flag({name, "", help, "", false, [value](const std::string&) {
              *value = true;
              return std::string();
            }});
}

template <class T, class Bound>
void Flags::add_number(const char* name, T* value, const char* help, Bound min, Bound max,
                       const char* value_name) {
  add_flag({name, value_name, help, text_of(*value), true,
            [value, min, max](const std::string& v) { return parse_number(v, value, min, max); }});
}

void Flags::add(const char* name, int* value, const char* help, int64_t min, int64_t max) {
  add_number(name, value, help, min, max, "N");
}
void Flags::add(const char* name, int64_t* value, const char* help, int64_t min, int64_t max) {
  add_number(name, value, help, min, max, "N");
}
void Flags::add(const char* name, size_t* value, const char* help, uint64_t min, uint64_t max) {
  add_number(name, value, help, min, max, "N");
}
void Flags::add(const char* name, uint32_t* value, const char* help, uint64_t min, uint64_t max) {
  add_number(name, value, help, min, max, "N");
}
void Flags::add(const char* name, double* value, const char* help, double min, double max) {
  add_number(name, value, help, min, max, "X");
}

void Flags::add(const char* name, std::vector<size_t>* value, const char* help, uint64_t min,
                uint64_t max) {
  std::string shown;
  for (size_t v : *value) {
    if (!shown.empty()) shown += ',';
    shown += std::to_string(v);
  }
  add_flag({name, "N,N,...", help, shown, true, [value, min, max](const std::string& text) {
              std::vector<size_t> list;
              for (size_t pos = 0; pos <= text.size();) {
                size_t comma = std::min(text.find(',', pos), text.size());
                size_t item = 0;
                std::string why = parse_number(text.substr(pos, comma - pos), &item, min, max);
                if (!why.empty()) return why;
                list.push_back(item);
                pos = comma + 1;
              }
              *value = std::move(list);
              return std::string();
            }});
}

void Flags::add_each(const char* name, const char* value_name, const char* help,
                     std::function<std::string(const std::string&)> take) {
  add_flag({name, value_name ? value_name : "", help, "", value_name != nullptr, std::move(take)});
}

bool Flags::try_parse(int argc, char** argv, std::vector<std::string>* rest, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-' || arg == "--") {
      if (arg == "--") {
        for (++i; i < argc; ++i) rest->push_back(argv[i]);
        break;
      }
      rest->push_back(arg);
      continue;
    }
    std::string value;
    bool inline_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
      inline_value = true;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags_) {
      if (f.name == arg) flag = &f;
    }
    if (flag == nullptr) {
      *error = "unknown option " + arg;
      return false;
    }
    if (flag->takes_value && !inline_value) {
      if (i + 1 >= argc) {
        *error = arg + " needs a value";
        return false;
      }
      value = argv[++i];
    } else if (!flag->takes_value && inline_value) {
      *error = arg + " takes no value";
      return false;
    }
    if (std::string why = flag->take(value); !why.empty()) {
      *error = arg + ": " + why;
      return false;
    }
  }
  return true;
}

std::vector<std::string> Flags::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      std::fputs(usage().c_str(), stdout);
      std::exit(0);
    }
    if (a == "--version") {
      std::printf("%s %s\n", program_.c_str(), ODAFS_VERSION);
      std::exit(0);
    }
  }
  std::vector<std::string> rest;
  std::string error;
  if (!try_parse(argc, argv, &rest, &error)) {
    std::fprintf(stderr, "%s: %s\n%s", program_.c_str(), error.c_str(), usage().c_str());
    std::exit(2);
  }
  return rest;
}

void Flags::hide(const char* name) {
  for (Flag& f : flags_) {
    if (f.name == name) f.hidden = true;
  }
}

std::string Flags::usage() const {
  std::string out = "usage: " + program_ + " " + synopsis_ + "\n";
  size_t width = 0;
  for (const Flag& f : flags_) {
    width = std::max(width, f.name.size() + (f.value_name.empty() ? 0 : f.value_name.size() + 1));
  }
  for (const Flag& f : flags_) {
    if (f.hidden) continue;
    std::string left = f.name + (f.value_name.empty() ? "" : " " + f.value_name);
    out += "  " + left + std::string(width - left.size() + 2, ' ') + f.help;
    if (!f.default_text.empty()) out += " (default " + f.default_text + ")";
    out += "\n";
  }
  out += "  --help" + std::string(width > 6 ? width - 6 + 2 : 2, ' ') + "this text\n";
  out += "  --version" + std::string(width > 9 ? width - 9 + 2 : 2, ' ') + "the version\n";
  if (!epilog_.empty()) out += epilog_;
  return out;
}

}  // namespace odafs
