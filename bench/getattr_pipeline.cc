// odafs-getattr-pipeline: what the server spends on a metadata call when calls arrive
// together.
//
//   odafs-getattr-pipeline --url odafs://127.0.0.1:PORT/ [--inflight 1,16] [--seconds 2]
//                          [--rounds 3] [--ways rpc,library,lstat,create]
//
// One thread, one connection: it sends `inflight` GETATTRs at once and waits for all of
// them, over and over, two ways: `library`, IoQueue::submit_stat of an open file (libodafs's
// asynchronous stat), and `rpc`, raw calls of the export's root (the server alone, no
// client library); `lstat` and `create` measure IoQueue's requests by path the same way
// (run_paths). Synchronous callers, even 16 threads on one connection, send one call
// per wake-up, and the server then wakes once per call. Each point's server CPU per call
// comes from STATS (cpu_us.total) over the measured time. Rounds interleave the points.
// Prints a table, and a JSON object per point on stderr.
#include <fcntl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/flags.h"
#include "bench/bench_util.h"
#include "client/client.h"
#include "client/io_queue.h"
#include "client/url.h"
#include "proto/odafs_prot.h"
#include "rpc/client_channel.h"
#include "rpc/xdr_util.h"

namespace {

using odafs::rpc::to_xdrproc;

struct Point {
  const char* via = "";
  size_t inflight = 0;
  double calls_per_s = 0;
  double server_cpu_us_per_call = 0;
};

// Runs batch() (one round of `inflight` calls, all awaited) for `seconds`; the server's CPU
// per call from its STATS over that time.
template <class Batch>
Point measure(const char* via, size_t inflight, double seconds, odafs::Client& stats,
              Batch&& batch) {
  const uint64_t cpu0 = odafs::bench::server_cpu_us(stats)["total"];
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  uint64_t done = 0;
  while (std::chrono::steady_clock::now() < end) {
    batch();
    done += inflight;
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t cpu1 = odafs::bench::server_cpu_us(stats)["total"];
  return Point{via, inflight, static_cast<double>(done) / took,
               static_cast<double>(cpu1 - cpu0) / static_cast<double>(done)};
}

// Raw RPC: `inflight` GETATTRs of the root at a time. Calls and replies are reused: the
// loop allocates nothing.
Point run_rpc(odafs::rpc::Channel& ch, const char (&root)[ODAFS_FHSIZE], size_t inflight,
              double seconds, odafs::Client& stats) {
  std::vector<std::unique_ptr<odafs::rpc::Call>> calls;
  for (size_t i = 0; i < inflight; ++i) calls.push_back(std::make_unique<odafs::rpc::Call>());
  getattr_args args{};
  std::memcpy(args.fh, root, sizeof args.fh);
  return measure("rpc", inflight, seconds, stats, [&] {
    for (auto& c : calls) {
      odafs::or_throw(ch.start(*c, ODAFSPROC_GETATTR, to_xdrproc(xdr_getattr_args), &args));
    }
    for (auto& c : calls) {
      XDR x;
      odafs::or_throw(ch.wait(*c, &x));
      attr_res res{};
      if (!xdr_attr_res(&x, &res) || res.status != ODAFS_OK) {
        throw std::runtime_error("GETATTR failed");
      }
    }
  });
}

// The same through libodafs: IoQueue::submit_stat of one open file, `inflight` at a time.
Point run_library(odafs::Client& client, odafs::File& f, size_t inflight, double seconds) {
  odafs::IoQueue q(client, inflight);
  std::vector<odafs::Attr> attrs(inflight);
  std::vector<odafs::Completion> done_now(inflight);
  return measure("library", inflight, seconds, client, [&] {
    for (size_t i = 0; i < inflight; ++i) q.submit_stat(f, &attrs[i], i);
    for (size_t got = 0; got < inflight;) {
      const size_t n = q.wait(done_now, 1, 30000);
      if (n == 0) throw std::runtime_error("stat: no completion in 30 s");
      for (size_t i = 0; i < n; ++i) {
        if (done_now[i].error != 0) throw std::runtime_error("stat failed");
      }
      got += n;
    }
  });
}

// Waits for `count` completions of q; throws on a failed one.
void await(odafs::IoQueue& q, std::vector<odafs::Completion>& done_now, size_t count,
           const char* what) {
  for (size_t got = 0; got < count;) {
    const size_t n = q.wait(done_now, 1, 30000);
    if (n == 0) throw std::runtime_error(std::string(what) + ": no completion in 30 s");
    for (size_t i = 0; i < n; ++i) {
      if (done_now[i].error != 0) {
        throw std::runtime_error(std::string(what) +
                                 " failed: " + std::strerror(done_now[i].error));
      }
    }
    got += n;
  }
}

// IoQueue's requests by path, `inflight` at a time: `lstat` of files another client made
// (this one holds no delegation on them: one LOOKUP each), or `create` (O_EXCL, then
// closed) followed by `unlink` of as many names (a CREATE and a REMOVE each).
Point run_paths(odafs::Client& client, const std::string& url, const char* op, size_t inflight,
                double seconds) {
  odafs::IoQueue q(client, inflight);
  std::vector<odafs::Attr> attrs(inflight);
  std::vector<odafs::File> files(inflight);
  std::vector<odafs::Completion> done_now(inflight);
  std::vector<std::string> names;
  for (size_t i = 0; i < inflight; ++i) {
    names.push_back("/odafs-metadata-pipeline-" + std::string(op) + "-" + std::to_string(i));
  }
  if (std::strcmp(op, "lstat") == 0) {
    auto maker = odafs::Client::mount(url);
    for (const std::string& n : names) maker->open(n, O_WRONLY | O_CREAT, 0644).close();
    Point p = measure(op, inflight, seconds, client, [&] {
      for (size_t i = 0; i < inflight; ++i) q.submit_lstat(names[i], &attrs[i], i);
      await(q, done_now, inflight, "lstat");
    });
    for (const std::string& n : names) maker->unlink(n);
    return p;
  }
  Point p = measure(op, 2 * inflight, seconds, client, [&] {
    for (size_t i = 0; i < inflight; ++i) {
      q.submit_create(names[i], O_WRONLY | O_EXCL, 0644, &files[i], i);
    }
    await(q, done_now, inflight, "create");
    for (odafs::File& f : files) f.close();
    for (size_t i = 0; i < inflight; ++i) q.submit_unlink(names[i], i);
    await(q, done_now, inflight, "unlink");
  });
  p.inflight = inflight;
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::string url_text, inflight_text = "1,16";
  double seconds = 2;
  int rounds = 3;
  odafs::Flags flags("odafs-getattr-pipeline", "--url odafs://HOST:PORT/ [flags]");
  flags.add("--url", &url_text, "the export (odafs://HOST:PORT/)");
  flags.add("--inflight", &inflight_text, "GETATTRs in flight, a list (default 1,16)");
  flags.add("--seconds", &seconds, "seconds per point (default 2)", 0.1, 3600);
  flags.add("--rounds", &rounds, "rounds over the points (default 3)", 1, 100);
  std::string ways_text = "rpc,library";
  flags.add("--ways", &ways_text,
            "what to measure, a list of rpc, library (GETATTRs), lstat, create (CREATE and "
            "REMOVE by path) (default rpc,library)");
  flags.parse(argc, argv);
  try {
    odafs::Url url = odafs::or_throw(odafs::parse_url(url_text));
    auto stats = odafs::Client::mount(url_text);
    odafs::rpc::Channel::Options o;
    o.program = ODAFS_PROGRAM;
    o.version = ODAFS_V3;
    std::unique_ptr<odafs::rpc::Channel> channel =
        odafs::or_throw(odafs::rpc::Channel::connect(url.server, o));
    odafs::rpc::Channel& ch = *channel;
    mount_args ma{};
    ma.path = const_cast<char*>("/");
    mount_res mr{};
    odafs::or_throw(
        ch.call(ODAFSPROC_MOUNT, to_xdrproc(xdr_mount_args), &ma, to_xdrproc(xdr_mount_res), &mr));
    if (mr.status != ODAFS_OK) throw std::runtime_error("MOUNT refused");
    char root[ODAFS_FHSIZE];
    std::memcpy(root, mr.mount_res_u.ok.root, sizeof root);
    xdr_free(to_xdrproc(xdr_mount_res), reinterpret_cast<char*>(&mr));
    odafs::File f = stats->open("/odafs-getattr-pipeline.dat", O_RDWR | O_CREAT, 0644);
    std::printf("%8s %8s %12s %22s\n", "via", "inflight", "calls/s", "server CPU us/call");
    const std::vector<std::string> ways = odafs::bench::parse_words(ways_text);
    for (int r = 1; r <= rounds; ++r) {
      for (size_t n : odafs::bench::parse_list(inflight_text)) {
        for (size_t k = 0; k < ways.size(); ++k) {
          const std::string& way = ways[(k + static_cast<size_t>(r)) % ways.size()];
          Point p = way == "rpc"       ? run_rpc(ch, root, n, seconds, *stats)
                    : way == "library" ? run_library(*stats, f, n, seconds)
                    : way == "lstat"   ? run_paths(*stats, url_text, "lstat", n, seconds)
                                       : run_paths(*stats, url_text, "create", n, seconds);
          std::printf("%8s %8zu %12.0f %22.2f\n", p.via, p.inflight, p.calls_per_s,
                      p.server_cpu_us_per_call);
          const odafs::bench::Json row = {
              {"round", r},
              {"via", p.via},
              {"inflight", p.inflight},
              {"calls_per_s", odafs::bench::rounded(p.calls_per_s, 1)},
              {"server_cpu_us_per_call", odafs::bench::rounded(p.server_cpu_us_per_call, 3)}};
          std::fprintf(stderr, "%s\n", row.dump().c_str());
        }
      }
    }
    f.close();
    stats->unlink("/odafs-getattr-pipeline.dat");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odafs-getattr-pipeline: %s\n", e.what());
    return 1;
  }
  return 0;
}
