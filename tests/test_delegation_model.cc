// A sole writer under write delegations against a model of its files: random writes,
// appends, truncations, renames and removals of a few files by one client, with kept bytes
// written back by age as fast as the worker can (MountOptions::delegated_write_back_ms),
// so that the worker's write-backs interleave with every operation. Every read is checked
// against the model, and the export's disk at the end. The soak found the first bug here.
#include <doctest/doctest.h>
#include <fcntl.h>

#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/support/client_util.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::File;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;

namespace {

void run_model(uint64_t seed) {
  CAPTURE(seed);
  TempDir dir;
  ServerProcess server(dir.path());
  odafs::MountOptions o;
  o.delegated_write_back_ms = 1;
  auto fs = Client::mount(server.url(), o);
  const uint64_t bs = fs->limits().block_size;
  std::mt19937_64 rng(seed);
  std::map<std::string, std::string> model;
  std::vector<std::string> history;
  uint64_t seq = 0;
  auto name_of = [&] { return "p" + std::to_string(rng() % 4); };
  auto bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; i += 8) {
      uint64_t v = ++seq;
      s.replace(i, std::min<size_t>(8, n - i), reinterpret_cast<const char*>(&v),
                std::min<size_t>(8, n - i));
    }
    return s;
  };
  auto log = [&](const std::string& what) {
    history.push_back(what);
    if (history.size() > 12) history.erase(history.begin());
  };
  bool ok = true;
  for (int op = 0; op < 3000 && ok; ++op) {
    const std::string name = name_of();
    const bool exists = model.count(name) != 0;
    const int pick = static_cast<int>(rng() % 100);
    std::ostringstream what;
    if (pick < 30) {  // write 1..3 blocks somewhere
      const uint64_t at = (rng() % 24) * bs;
      const std::string b = bytes(bs * (1 + rng() % 3));
      what << "write " << name << " @" << at << " +" << b.size();
      File f = fs->open(name, exists ? O_RDWR : O_RDWR | O_CREAT | O_EXCL, 0644);
      f.pwrite(b.data(), b.size(), at);
      f.close();
      std::string& m = model[name];
      if (m.size() < at + b.size()) m.resize(at + b.size(), '\0');
      m.replace(at, b.size(), b);
    } else if (pick < 45 && exists && model[name].size() <= 24 * bs) {  // append
      const std::string b = bytes(bs * (1 + rng() % 2));
      what << "append " << name << " +" << b.size();
      File f = fs->open(name, O_RDWR | O_APPEND);
      f.pwrite(b.data(), b.size(), 0);
      f.close();
      model[name] += b;
    } else if (pick < 52 && exists) {  // truncate to any size
      const uint64_t size = rng() % (24 * bs + 1);
      what << "truncate " << name << " " << size;
      fs->truncate(name, size);
      model[name].resize(size, '\0');
    } else if (pick < 56 && exists) {  // rename over another
      const std::string to = name_of();
      if (to == name) continue;
      what << "rename " << name << " " << to;
      fs->rename(name, to);
      model[to] = std::move(model[name]);
      model.erase(name);
    } else if (pick < 60 && exists) {
      what << "remove " << name;
      fs->unlink(name);
      model.erase(name);
    } else if (exists) {  // read it all back
      what << "read " << name;
      File f = fs->open(name, O_RDONLY);
      const std::string& want = model[name];
      std::string got(want.size() + bs, '\0');
      // The size the open started from: a read stops there without asking the server.
      const uint64_t at_open = f.known_size();
      got.resize(f.pread(got.data(), got.size(), 0));
      const uint64_t size = f.stat().size;
      if (got != want || size != want.size()) {
        size_t at = 0;
        while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
        std::ostringstream last;
        for (const std::string& h : history) last << "  " << h << "\n";
        FAIL_CHECK("op " << op << ": " << name << " read " << got.size() << " bytes, stat " << size
                         << ", want " << want.size() << ", size at open " << at_open
                         << ", first difference at " << at << "\nlast operations:\n"
                         << last.str());
        ok = false;
      }
    } else {
      continue;
    }
    log(what.str());
  }
  fs.reset();  // unmount: everything kept goes back
  for (const auto& [name_key, want] : model) {
    const auto& name = name_key;  // clang 14 lambdas cannot capture a binding
    CAPTURE(name);
    CHECK(read_local(dir / name) == want);
  }
}

}  // namespace

TEST_CASE("a sole writer's files match the model while kept bytes are written back by age") {
  for (uint64_t seed : {20261125u, 1u, 2u, 3u, 4u}) run_model(seed);
}
