// odafs URLs: odafs://HOST:PORT/PATH[?timeout_ms=N][&cache_policy=lru|mq], parsed (unit)
// and applied by Client::mount (integration, against a stopped odafsd).
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "client/client.h"
#include "client/url.h"
#include "tests/support/server_process.h"
#include "tests/support/watchdog.h"

using odafs::parse_timeout_ms;
using odafs::parse_url;
using odafs::Url;
using odafs::test::errno_of;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::Watchdog;
using Clock = std::chrono::steady_clock;

namespace {

// The message parse_url refuses text with (always EINVAL), or "" if it accepts it.
std::string refusal(const std::string& text) {
  odafs::Result<Url> u = parse_url(text);
  if (u.ok()) return "";
  CHECK(u.errno_value() == EINVAL);
  return u.status().message();
}

}  // namespace

TEST_CASE("a URL without options has no timeout") {
  Url u = *parse_url("odafs://127.0.0.1:7000/db/table");
  CHECK(u.server.host == "127.0.0.1");
  CHECK(u.server.port == 7000);
  CHECK(u.path == "/db/table");
  CHECK_FALSE(u.timeout_ms.has_value());
  CHECK(parse_url("odafs://h:1")->path == "/");
}

TEST_CASE("?timeout_ms=N sets the timeout and is not part of the path") {
  Url u = *parse_url("odafs://127.0.0.1:7000/db/table?timeout_ms=2500");
  CHECK(u.path == "/db/table");
  REQUIRE(u.timeout_ms.has_value());
  CHECK(*u.timeout_ms == 2500);

  Url root = *parse_url("odafs://127.0.0.1:7000?timeout_ms=1");
  CHECK(root.path == "/");
  CHECK(root.server.port == 7000);
  CHECK(root.timeout_ms == 1);

  Url v6 = *parse_url("odafs://[::1]:7000/?timeout_ms=3600000");
  CHECK(v6.server.host == "::1");
  CHECK(v6.path == "/");
  CHECK(v6.timeout_ms == odafs::kMaxTimeoutMs);
  CHECK(parse_url("odafs://h:1/x?timeout_ms=007")->timeout_ms == 7);
}

TEST_CASE("bad timeout_ms values and unknown options are refused, saying why") {
  const std::string base = "odafs://127.0.0.1:7000/f?";
  CHECK(refusal(base + "timeout_ms=abc").find("not a whole number") != std::string::npos);
  CHECK(refusal(base + "timeout_ms=-5").find("not a whole number") != std::string::npos);
  CHECK(refusal(base + "timeout_ms=1.5").find("not a whole number") != std::string::npos);
  CHECK(refusal(base + "timeout_ms= 5").find("not a whole number") != std::string::npos);
  CHECK(refusal(base + "timeout_ms=").find("not a whole number") != std::string::npos);
  CHECK(refusal(base + "timeout_ms=0").find("zero") != std::string::npos);
  CHECK(refusal(base + "timeout_ms=3600001").find("an hour") != std::string::npos);
  CHECK(refusal(base + "timeout_ms=99999999999999999999").find("an hour") != std::string::npos);
  CHECK(refusal(base + "timeout_ms").find("needs a value") != std::string::npos);
  CHECK(refusal(base + "timeout=5").find("unknown odafs URL option 'timeout=5'") !=
        std::string::npos);
  CHECK(refusal(base + "timeout_ms=5&timeout_ms=6").find("repeats") != std::string::npos);
  CHECK(refusal(base + "timeout_ms=5&").find("unknown") != std::string::npos);
  CHECK(refusal("odafs://127.0.0.1:7000?").find("unknown") != std::string::npos);
  // Every refusal names the offending value and the URL.
  CHECK(refusal(base + "timeout_ms=abc").find("'abc'") != std::string::npos);
  CHECK(refusal(base + "timeout_ms=abc").find(base) != std::string::npos);
}

TEST_CASE("?cache_policy=lru|mq picks the client cache's replacement, with timeout_ms or not") {
  CHECK_FALSE(parse_url("odafs://h:1/x")->cache_policy.has_value());
  CHECK(parse_url("odafs://h:1/x?cache_policy=mq")->cache_policy ==
        odafs::CachePolicy::kMultiQueue);
  CHECK(parse_url("odafs://h:1/x?cache_policy=lru")->cache_policy == odafs::CachePolicy::kLru);
  Url both = *parse_url("odafs://h:1/x?cache_policy=mq&timeout_ms=9");
  CHECK(both.path == "/x");
  CHECK(both.timeout_ms == 9);
  CHECK(both.cache_policy == odafs::CachePolicy::kMultiQueue);
  CHECK(parse_url("odafs://h:1/x?timeout_ms=9&cache_policy=lru")->cache_policy ==
        odafs::CachePolicy::kLru);

  const std::string base = "odafs://127.0.0.1:7000/f?";
  CHECK(refusal(base + "cache_policy=arc").find("bad cache_policy 'arc'") != std::string::npos);
  CHECK(refusal(base + "cache_policy=MQ").find("lru or mq") != std::string::npos);
  CHECK(refusal(base + "cache_policy=").find("bad cache_policy") != std::string::npos);
  CHECK(refusal(base + "cache_policy").find("needs a value") != std::string::npos);
  CHECK(refusal(base + "cache_policy=mq&cache_policy=lru").find("repeats cache_policy") !=
        std::string::npos);
  CHECK(refusal(base + "cache=mq").find("cache_policy=lru|mq") != std::string::npos);
}

TEST_CASE("?tls=1 and the tls_ files: parsed, applied over the options, bad ones refused") {
  Url u = *parse_url("odafs://h:1/x?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/c.key&timeout_ms=5");
  CHECK(u.tls_ca == "/ca.pem");
  CHECK(u.tls_cert == "/c.pem");
  CHECK(u.tls_key == "/c.key");
  CHECK_FALSE(u.tls.has_value());
  odafs::MountOptions o;
  odafs::apply_url_options(u, &o);
  CHECK(o.tls);  // a file implies tls
  CHECK(o.tls_ca == "/ca.pem");
  CHECK(o.timeout_ms == 5);
  odafs::MountOptions off;
  off.tls = true;
  odafs::apply_url_options(*parse_url("odafs://h:1/?tls=0"), &off);
  CHECK_FALSE(off.tls);

  const std::string base = "odafs://127.0.0.1:7000/f?";
  CHECK(refusal(base + "tls=yes").find("0 or 1") != std::string::npos);
  CHECK(refusal(base + "tls_ca=").find("needs a value") != std::string::npos);
  CHECK(refusal(base + "tls=1&tls=1").find("repeats tls") != std::string::npos);
  CHECK(refusal(base + "tls_cafile=x").find("tls_ca=FILE") != std::string::npos);
}

TEST_CASE("parse_timeout_ms names what it parses") {
  CHECK(*parse_timeout_ms("250") == 250);
  odafs::Result<int> bad = parse_timeout_ms("0x10", "--timeout");
  REQUIRE(!bad.ok());
  CHECK(bad.errno_value() == EINVAL);
  CHECK(bad.status().message() == "bad --timeout '0x10': not a whole number of milliseconds");
}

TEST_CASE("Client::mount applies the URL's timeout_ms over MountOptions") {
  TempDir dir;
  ServerProcess server(dir.path(), {"--no-ordma"});
  odafs::MountOptions mo;
  mo.timeout_ms = 60000;  // the URL's 700 ms must win
  auto fs = odafs::Client::mount(server.url("/?timeout_ms=700"), mo);
  fs->ping();
  REQUIRE(odafs::test::stop_child(server.pid()));
  pid_t pid = server.pid();
  Watchdog watchdog(std::chrono::seconds(12), [pid] { kill(pid, SIGCONT); });
  auto t0 = Clock::now();
  int err = errno_of([&] { fs->ping(); });
  double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK_FALSE(watchdog.finish());
  CHECK(err == ETIMEDOUT);
  CHECK(elapsed >= 0.7);
  CHECK(elapsed < 5);
}

TEST_CASE("Client::mount refuses a URL with a bad option as EINVAL") {
  try {
    odafs::Client::mount("odafs://127.0.0.1:1/?timeout_ms=0");
    FAIL("mounted");
  } catch (const odafs::Error& e) {
    CHECK(e.errno_value() == EINVAL);
    CHECK(std::string(e.what()).find("timeout_ms") != std::string::npos);
  }
}

TEST_CASE("parse_url: several servers, for failover") {
  odafs::Result<odafs::Url> u = odafs::parse_url("odafs://10.0.0.1:7000,[::1]:7001,b:7002/d");
  REQUIRE(u.ok());
  REQUIRE(u->servers.size() == 3);
  CHECK(u->server.host == "10.0.0.1");
  CHECK(u->servers[1].host == "::1");
  CHECK(u->servers[1].port == 7001);
  CHECK(u->servers[2].host == "b");
  CHECK(u->path == "/d");
  CHECK(odafs::parse_url("odafs://a:1,/d").errno_value() == EINVAL);
  CHECK(odafs::parse_url("odafs://a:1,b/d").errno_value() == EINVAL);
  CHECK(odafs::parse_url("odafs://a:1,,b:2/d").errno_value() == EINVAL);
}
