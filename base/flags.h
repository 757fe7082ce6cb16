// A program's command-line flags, declared once as a table: each flag's name, the variable
// it sets (whose value before parsing is the default), bounds for numbers, and one line of
// help. parse() fills the variables, refuses unknown flags, missing or bad values and
// numbers out of bounds, and answers --help / -h with the usage text made from the table,
// so the usage can never disagree with what is parsed.
//
//   odafs::Flags flags("odafs-scale", "--url URL --workload W [flags]");
//   flags.add("--url", &url, "the export to mount (odafs://HOST:PORT/PATH)");
//   flags.add("--clients", &clients, "client processes", 1, 4096);
//   std::vector<std::string> rest = flags.parse(argc, argv);  // exits on error or --help
//
// Thread-safety: none (used from main).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace odafs {

class Flags {
 public:
  Flags(std::string program, std::string synopsis);

  void add(const char* name, std::string* value, const char* help);
  void add(const char* name, bool* value, const char* help);  // a switch: present = true
  void add(const char* name, int* value, const char* help, int64_t min = INT32_MIN,
           int64_t max = INT32_MAX);
  void add(const char* name, int64_t* value, const char* help, int64_t min = INT64_MIN,
           int64_t max = INT64_MAX);
  void add(const char* name, size_t* value, const char* help, uint64_t min = 0,
           uint64_t max = SIZE_MAX);
  void add(const char* name, uint32_t* value, const char* help, uint64_t min = 0,
           uint64_t max = UINT32_MAX);
  void add(const char* name, double* value, const char* help, double min = 0, double max = 1e300);
  // A comma-separated list of whole numbers, each within [min, max]; at least one.
  void add(const char* name, std::vector<size_t>* value, const char* help, uint64_t min = 0,
           uint64_t max = SIZE_MAX);
  // A flag that may be given many times, each value passed to `take`, which returns an
  // error message or "" (accepted). value_name nullptr: a switch, `take` gets "".
  void add_each(const char* name, const char* value_name, const char* help,
                std::function<std::string(const std::string&)> take);
  // Leaves an added flag out of the usage (still parsed): for the test suites' own flags.
  void hide(const char* name);
  // Free text printed after the flags in the usage.
  void set_epilog(std::string text) { epilog_ = std::move(text); }

  // Parses argv[1..argc). Returns the arguments that are not flags, in order. On --help or
  // -h prints usage() to stdout and exits 0, on --version "PROGRAM VERSION"; on an error
  // prints it and the usage to stderr and exits 2.
  std::vector<std::string> parse(int argc, char** argv);
  // Like parse, but returns false with *error set instead of exiting (for tests).
  bool try_parse(int argc, char** argv, std::vector<std::string>* rest, std::string* error);

  std::string usage() const;

 private:
  struct Flag {
    std::string name, value_name, help, default_text;
    bool takes_value = true;
    std::function<std::string(const std::string&)> take;  // "" or the error
    bool hidden = false;                                  // hide(): not in the usage
  };
  void add_flag(Flag f);
  template <class T, class Bound>
  void add_number(const char* name, T* value, const char* help, Bound min, Bound max,
                  const char* value_name);

  std::string program_, synopsis_, epilog_;
  std::vector<Flag> flags_;
};

}  // namespace odafs
