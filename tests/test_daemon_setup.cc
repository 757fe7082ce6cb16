// odafsd's start-up decisions, without a process (server/daemon_setup.h).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "server/daemon_setup.h"
#include "tests/support/server_process.h"

using odafs::server::AccessFlags;
using odafs::test::TempDir;
using odafs::test::write_local;

TEST_CASE("daemon setup: --clients rules, and the loopback default only on a loopback listen") {
  AccessFlags flags;
  for (const char* host : {"127.0.0.1", "localhost", "::1", "127.9.9.9"}) {
    CAPTURE(host);
    odafs::Result<odafs::server::ExportRules> rules = odafs::server::rules_from_flags(flags, host);
    REQUIRE(rules.ok());
    CHECK(rules->size() == 2);  // 127.0.0.0/8 and ::1
    CHECK(rules->rule(0).named_peers_only);
  }
  for (const char* host : {"0.0.0.0", "", "10.1.2.3", "::"}) {
    CAPTURE(host);
    odafs::Result<odafs::server::ExportRules> rules = odafs::server::rules_from_flags(flags, host);
    REQUIRE(!rules.ok());
    CHECK(rules.status().message().find("reachable from other hosts") != std::string::npos);
  }
  flags.clients = {"10.0.0.0/8(ro)", "192.168.1.7"};
  odafs::Result<odafs::server::ExportRules> given = odafs::server::rules_from_flags(flags, "::");
  REQUIRE(given.ok());
  CHECK(given->size() == 2);
  CHECK(given->rule(0).read_only);
  flags.clients = {"10.0.0.0/8(ro,bogus)"};
  odafs::Result<odafs::server::ExportRules> bad = odafs::server::rules_from_flags(flags, "::");
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().rfind("--clients 10.0.0.0/8(ro,bogus): unknown option", 0) == 0);
}

TEST_CASE("daemon setup: an exports file loads only with every export an existing directory") {
  TempDir dir;
  REQUIRE(mkdir((dir / "a").c_str(), 0755) == 0);
  write_local(dir / "f", "");
  write_local(dir / "good", dir / "a" + " 127.0.0.1\n");
  write_local(dir / "missing", dir / "a" + " 127.0.0.1\n" + dir / "b" + " 127.0.0.1\n");
  write_local(dir / "file", dir / "f" + " 127.0.0.1\n");
  write_local(dir / "empty", "# nothing\n");
  AccessFlags flags;
  CHECK(odafs::server::load_exports(dir / "good", flags).ok());
  odafs::Result<std::vector<odafs::server::ExportLine>> missing =
      odafs::server::load_exports(dir / "missing", flags);
  REQUIRE(!missing.ok());
  CHECK(missing.status().errno_value() == ENOENT);
  CHECK(missing.status().message() ==
        dir / "missing" + ":2: " + dir / "b" + " is not a directory (it does not exist)");
  CHECK(odafs::server::load_exports(dir / "file", flags).status().errno_value() == ENOTDIR);
  CHECK(odafs::server::load_exports(dir / "empty", flags)
            .status()
            .message()
            .find("exports nothing") != std::string::npos);
  CHECK(odafs::server::load_exports(dir / "absent", flags).status().errno_value() == ENOENT);
}

TEST_CASE("daemon setup: tls and mtls rules need what serves them") {
  odafs::server::ExportRules rules;
  rules.add("*(tls)", 65534, 65534);
  odafs::server::TlsIdentities::Files files;
  CHECK(odafs::server::tls_rules_problem(rules, false, files).find("give --tls-cert") !=
        std::string::npos);
  CHECK(odafs::server::tls_rules_problem(rules, true, files).empty());
  odafs::server::ExportRules mutual;
  mutual.add("*(mtls)", 65534, 65534);
  CHECK(odafs::server::tls_rules_problem(mutual, true, files).find("give --tls-ca") !=
        std::string::npos);
  files.tls.ca = "/some/ca.pem";
  CHECK(odafs::server::tls_rules_problem(mutual, true, files).empty());
}

TEST_CASE("daemon setup: one recovery record per export, in a private state directory") {
  TempDir dir;
  TempDir export_a, export_b;
  const std::string state = dir / "state";
  odafs::Result<std::string> a = odafs::server::prepare_recovery_record(state, export_a.path());
  odafs::Result<std::string> b = odafs::server::prepare_recovery_record(state, export_b.path());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->rfind(state + "/recovery-", 0) == 0);
  CHECK(*a != *b);
  // Two spellings of one directory share one record.
  CHECK(*odafs::server::prepare_recovery_record(state, export_a.path() + "/.") == *a);
  struct stat st;
  REQUIRE(stat(state.c_str(), &st) == 0);
  CHECK((st.st_mode & 077) == 0);
  // A state directory others may write is refused.
  const std::string open_dir = dir / "open";
  REQUIRE(mkdir(open_dir.c_str(), 0777) == 0);
  REQUIRE(chmod(open_dir.c_str(), 0777) == 0);
  odafs::Result<std::string> refused =
      odafs::server::prepare_recovery_record(open_dir, export_a.path());
  REQUIRE(!refused.ok());
  CHECK(refused.status().message().rfind("--state-dir " + open_dir + ": ", 0) == 0);
}

TEST_CASE("daemon setup: a handle key file must be private and long enough") {
  TempDir dir;
  REQUIRE(chmod(dir.path().c_str(), 0700) == 0);
  const std::string key = dir / "key";
  write_local(key, std::string(40, 'k'));
  REQUIRE(chmod(key.c_str(), 0600) == 0);
  odafs::Result<odafs::server::NodeTable::SharedKey> one =
      odafs::server::read_handle_key(key, "ceph:/a");
  odafs::Result<odafs::server::NodeTable::SharedKey> other =
      odafs::server::read_handle_key(key, "ceph:/b");
  REQUIRE(one.ok());
  REQUIRE(other.ok());
  CHECK(*one != *other);  // keyed by the export too
  REQUIRE(chmod(key.c_str(), 0644) == 0);
  CHECK(odafs::server::read_handle_key(key, "ceph:/a")
            .status()
            .message()
            .find("may be read by others") != std::string::npos);
  REQUIRE(chmod(key.c_str(), 0600) == 0);
  write_local(key, "short");
  CHECK(odafs::server::read_handle_key(key, "ceph:/a")
            .status()
            .message()
            .find("32 or more are needed") != std::string::npos);
}
