// odafs-tcp-pingpong: the floors under every read figure on this machine.
//
//   odafs-tcp-pingpong [--iters N] [--bytes B]
//       [--mode blocking|busy|client_poll|shm|shm_doorbell|memcpy]
//
// Two processes (fork) exchange B-byte messages, one at a time:
//   blocking  over a loopback TCP connection with TCP_NODELAY, blocking reads (the floor
//             of an RPC whose threads sleep in the kernel between requests);
//   busy      the same with non-blocking sockets both sides spin on (no sleep, no wake-up:
//             the floor of a busy-polling transport);
//   client_poll  the same, the client spinning and the echo blocking (the floor of a
//             client that polls for its answer from a server that sleeps between requests:
//             one wake-up per round trip instead of two);
//   shm       through a shared-memory mailbox both sides spin on (no kernel at all: the
//             floor of a same-host one-sided read through a local ring);
//   shm_doorbell  the same mailbox, but the echo sleeps in epoll_wait on an eventfd that
//             the client writes after posting, as the soft engine sleeps between a ring's
//             reads and its client rings the doorbell (local_ring.h); the client spins,
//             yielding, for the reply (the floor of a ring whose engine is asleep);
// and in one process:
//   memcpy    a B-byte copy between two cache-warm buffers (the floor of any read that
//             lands in the caller's buffer).
// The round trip, and the echo side's CPU per exchange, are what any request/response
// protocol pays before it does any work. Prints a table row and, last, a JSON line.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include "base/flags.h"
#include "base/net.h"
#include "bench/bench_util.h"

namespace {

using Clock = std::chrono::steady_clock;

double cpu_us(const rusage& r) {
  return r.ru_utime.tv_sec * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_sec * 1e6 +
         r.ru_stime.tv_usec;
}

// Spins on a non-blocking socket until len bytes came. Returns false on EOF before any.
bool spin_read(int fd, char* buf, size_t len) {
  for (size_t got = 0; got < len;) {
    ssize_t n = recv(fd, buf + got, len - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      if (got == 0) return false;
      throw std::system_error(EPIPE, std::generic_category(), "EOF mid-message");
    } else if (errno != EAGAIN && errno != EINTR) {
      throw std::system_error(errno, std::generic_category(), "recv");
    }
  }
  return true;
}

// The shared-memory mailbox: a request and a reply slot, each a sequence number and bytes.
// A side publishes by storing the next sequence number (release) after the bytes; the
// other spins until it sees it (acquire). seq 0 stays unused; ~0 tells the echo to stop.
struct Mailbox {
  alignas(64) std::atomic<uint64_t> req_seq{0};
  alignas(64) std::atomic<uint64_t> rep_seq{0};
  alignas(64) std::atomic<uint32_t> awake{0};  // shm_doorbell: the echo is looking
};
constexpr uint64_t kStop = ~uint64_t{0};

// Spins until seq holds something other than last; yields now and then, so that a side
// sharing a core with the other does not hold it for a whole time slice, or on every turn
// (yield_always: as a ring's client polls its completion, local_ring_client.cc).
uint64_t spin_until_changed(const std::atomic<uint64_t>& seq, uint64_t last,
                            bool yield_always = false) {
  for (unsigned i = 1;; ++i) {
    uint64_t v = seq.load(std::memory_order_acquire);
    if (v != last) return v;
    if (yield_always || i % 4096 == 0) sched_yield();
  }
}

// Copies of `bytes` in memory, timed in batches, into lat.
void run_memcpy(size_t bytes, std::vector<double>& lat) {
  // Timed in batches: a clock read costs more than a small copy.
  std::vector<char> src(bytes, 'x'), dst(bytes);
  const size_t batch = 64;
  for (size_t i = 0; i < lat.size(); ++i) {
    auto t0 = Clock::now();
    for (size_t k = 0; k < batch; ++k) {
      std::memcpy(dst.data(), src.data(), bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");  // the copy is not optimised away
    }
    lat[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / batch;
  }
}

// Shared-memory ping-pong with a forked echo (spinning, or asleep behind a doorbell): the
// round trips into lat, the echo's CPU per exchange into *echo_cpu. 0, or 1 when the
// system refuses the set-up.
int run_shm(size_t bytes, bool doorbell, std::vector<double>& lat, double* echo_cpu) {
  const size_t iters = lat.size();
  const size_t region = sizeof(Mailbox) + 2 * bytes;
  void* mem = mmap(nullptr, region, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 1;
  Mailbox* box = new (mem) Mailbox;
  char* req = static_cast<char*>(mem) + sizeof(Mailbox);
  char* rep = req + bytes;
  int report[2];
  if (pipe(report) != 0) return 1;
  // The doorbell, and the echo's epoll set on it, edge-triggered as the engine's.
  const int bell = doorbell ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1;
  pid_t child = fork();
  if (child == 0) {
    std::vector<char> buf(bytes);
    int ep = -1;
    if (doorbell) {
      ep = epoll_create1(EPOLL_CLOEXEC);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLET;
      if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, bell, &ev) != 0) _exit(1);
    }
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    size_t n = 0;
    for (uint64_t last = 0;;) {
      if (doorbell) {
        // Awake while looking, asleep in epoll_wait once nothing is posted: the engine's
        // engine_awake protocol, so the client writes the doorbell only to a sleeper.
        box->awake.store(1, std::memory_order_seq_cst);
        while (box->req_seq.load(std::memory_order_acquire) == last) {
          box->awake.store(0, std::memory_order_seq_cst);
          if (box->req_seq.load(std::memory_order_seq_cst) != last) {
            box->awake.store(1, std::memory_order_seq_cst);
            break;
          }
          epoll_event ev;
          epoll_wait(ep, &ev, 1, -1);
          box->awake.store(1, std::memory_order_seq_cst);
        }
      }
      last = spin_until_changed(box->req_seq, last);
      if (last == kStop) break;
      std::memcpy(buf.data(), req, bytes);  // take the request, as a server would
      std::memcpy(rep, buf.data(), bytes);
      box->rep_seq.store(last, std::memory_order_release);
      ++n;
    }
    getrusage(RUSAGE_SELF, &after);
    double per_op = n ? (cpu_us(after) - cpu_us(before)) / static_cast<double>(n) : 0;
    [[maybe_unused]] ssize_t w = write(report[1], &per_op, sizeof per_op);
    _exit(0);
  }
  std::vector<char> buf(bytes, 'x');
  auto post = [&](uint64_t seq) {
    box->req_seq.store(seq, std::memory_order_seq_cst);
    if (doorbell && box->awake.load(std::memory_order_seq_cst) == 0) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t w = write(bell, &one, sizeof one);
    }
  };
  for (size_t i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    std::memcpy(req, buf.data(), bytes);
    post(i + 1);
    spin_until_changed(box->rep_seq, i, doorbell);
    std::memcpy(buf.data(), rep, bytes);
    lat[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  post(kStop);
  [[maybe_unused]] ssize_t r = read(report[0], echo_cpu, sizeof *echo_cpu);
  waitpid(child, nullptr, 0);
  return 0;
}

// TCP ping-pong on loopback with a forked echo (mode: blocking, busy, client_poll), as
// run_shm.
int run_tcp(size_t bytes, const std::string& mode, std::vector<double>& lat, double* echo_cpu) {
  const size_t iters = lat.size();
  const bool busy = mode == "busy";
  const bool client_spins = busy || mode == "client_poll";
  odafs::net::Endpoint bound;
  // A benchmark of the loopback itself: a socket call that fails ends the run (value()
  // aborts with its reason).
  int listener = odafs::net::listen_tcp({"127.0.0.1", 0}, &bound).value();
  if (!odafs::net::set_nonblocking(listener, false).ok()) return 1;
  int report[2];
  if (pipe(report) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    int s = accept(listener, nullptr, nullptr);
    odafs::net::set_nodelay(s);
    if (busy && !odafs::net::set_nonblocking(s, true).ok()) _exit(1);
    std::vector<char> buf(bytes);
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    size_t n = 0;
    while (busy ? spin_read(s, buf.data(), bytes)
                : odafs::net::got_all(odafs::net::read_full(s, buf.data(), bytes))) {
      iovec iov{buf.data(), bytes};
      if (!odafs::net::write_all(s, &iov, 1).ok()) break;
      ++n;
    }
    getrusage(RUSAGE_SELF, &after);
    double per_op = n ? (cpu_us(after) - cpu_us(before)) / static_cast<double>(n) : 0;
    [[maybe_unused]] ssize_t w = write(report[1], &per_op, sizeof per_op);
    _exit(0);
  }
  int c = odafs::net::connect_tcp(bound).value();
  if (client_spins && !odafs::net::set_nonblocking(c, true).ok()) return 1;
  std::vector<char> buf(bytes, 'x');
  for (size_t i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    iovec iov{buf.data(), bytes};
    if (!odafs::net::write_all(c, &iov, 1).ok()) return 1;
    if (client_spins) {
      spin_read(c, buf.data(), bytes);
    } else if (!odafs::net::got_all(odafs::net::read_full(c, buf.data(), bytes))) {
      return 1;
    }
    lat[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  close(c);
  [[maybe_unused]] ssize_t r = read(report[0], echo_cpu, sizeof *echo_cpu);
  waitpid(child, nullptr, 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t iters = 20000, bytes = 64;
  std::string mode = "blocking";
  odafs::Flags flags("odafs-tcp-pingpong", "[flags]");
  flags.add("--iters", &iters, "exchanges (or copies)", 1, 1u << 30);
  flags.add("--bytes", &bytes, "bytes per message", 1, 64u << 20);
  flags.add("--mode", &mode, "blocking, busy, client_poll, shm, shm_doorbell or memcpy");
  if (!flags.parse(argc, argv).empty()) mode.clear();  // reported below
  const bool doorbell = mode == "shm_doorbell";
  if (iters == 0 || bytes == 0 ||
      (mode != "blocking" && mode != "busy" && mode != "client_poll" && mode != "shm" &&
       !doorbell && mode != "memcpy")) {
    std::fprintf(stderr, "odafs-tcp-pingpong: unknown --mode\n%s", flags.usage().c_str());
    return 2;
  }
  std::vector<double> lat(iters);
  double echo_cpu = 0;
  const std::string name = mode == "blocking"      ? "tcp_pingpong"
                           : mode == "busy"        ? "tcp_busy_poll"
                           : mode == "client_poll" ? "tcp_client_poll"
                           : mode == "shm"         ? "shm_pingpong"
                           : doorbell              ? "shm_doorbell"
                                                   : "memcpy";
  int rc = 0;
  if (mode == "memcpy") {
    run_memcpy(bytes, lat);
  } else if (mode == "shm" || doorbell) {
    rc = run_shm(bytes, doorbell, lat, &echo_cpu);
  } else {
    rc = run_tcp(bytes, mode, lat, &echo_cpu);
  }
  if (rc != 0) return rc;
  double sum = 0;
  for (double v : lat) sum += v;
  std::sort(lat.begin(), lat.end());
  std::printf("%-14s %8s %10s %10s %10s %18s\n", "mechanism", "bytes", "mean_us", "p50_us",
              "p99_us", "echo_cpu_us/op");
  std::printf("%-14s %8zu %10.2f %10.2f %10.2f %18.2f\n", name.c_str(), bytes, sum / iters,
              lat[iters / 2], lat[iters * 99 / 100], echo_cpu);
  using odafs::bench::rounded;
  const odafs::bench::Json row = {{"mechanism", name},
                                  {"bytes", bytes},
                                  {"ops", iters},
                                  {"mean_us", rounded(sum / iters, 3)},
                                  {"p50_us", rounded(lat[iters / 2], 3)},
                                  {"p99_us", rounded(lat[iters * 99 / 100], 3)},
                                  {"server_cpu_us_per_op", rounded(echo_cpu, 3)}};
  std::printf("%s\n", row.dump().c_str());
  return 0;
}
