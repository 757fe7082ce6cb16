// odafs-tcp-pingpong: the floor under every RPC number on this machine.
//
//   odafs-tcp-pingpong [--iters N] [--bytes B]
//
// Two processes (fork) exchange B-byte messages over a loopback TCP connection with
// TCP_NODELAY, one at a time: the round trip and the echo side's CPU per exchange are what
// any request/response protocol pays before it does any work. Prints a table and JSON.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/net.h"

int main(int argc, char** argv) {
  size_t iters = 20000, bytes = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--iters")
      iters = std::stoul(argv[i + 1]);
    else if (a == "--bytes")
      bytes = std::stoul(argv[i + 1]);
  }
  odafs::net::Endpoint bound;
  int listener = odafs::net::listen_tcp({"127.0.0.1", 0}, &bound);
  odafs::net::set_nonblocking(listener, false);
  int report[2];
  if (pipe(report) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    int s = accept(listener, nullptr, nullptr);
    odafs::net::set_nodelay(s);
    std::vector<char> buf(bytes);
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    size_t n = 0;
    while (odafs::net::read_full(s, buf.data(), bytes)) {
      iovec iov{buf.data(), bytes};
      odafs::net::write_all(s, &iov, 1);
      ++n;
    }
    getrusage(RUSAGE_SELF, &after);
    auto us = [](const rusage& r) {
      return r.ru_utime.tv_sec * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_sec * 1e6 +
             r.ru_stime.tv_usec;
    };
    double per_op = n ? (us(after) - us(before)) / static_cast<double>(n) : 0;
    [[maybe_unused]] ssize_t w = write(report[1], &per_op, sizeof per_op);
    _exit(0);
  }
  int c = odafs::net::connect_tcp(bound);
  std::vector<char> buf(bytes, 'x');
  std::vector<double> lat(iters);
  for (size_t i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    iovec iov{buf.data(), bytes};
    odafs::net::write_all(c, &iov, 1);
    odafs::net::read_full(c, buf.data(), bytes);
    lat[i] =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  close(c);
  double echo_cpu = 0;
  [[maybe_unused]] ssize_t r = read(report[0], &echo_cpu, sizeof echo_cpu);
  waitpid(child, nullptr, 0);
  double sum = 0;
  for (double v : lat) sum += v;
  std::sort(lat.begin(), lat.end());
  std::printf("%-14s %10s %10s %10s %18s\n", "mechanism", "mean_us", "p50_us", "p99_us",
              "echo_cpu_us/op");
  std::printf("%-14s %10.1f %10.1f %10.1f %18.1f\n", "tcp_pingpong", sum / iters, lat[iters / 2],
              lat[iters * 99 / 100], echo_cpu);
  std::printf(
      "{\"mechanism\": \"tcp_pingpong\", \"bytes\": %zu, \"ops\": %zu, \"mean_us\": %.2f, "
      "\"p50_us\": %.2f, \"p99_us\": %.2f, \"server_cpu_us_per_op\": %.2f}\n",
      bytes, iters, sum / iters, lat[iters / 2], lat[iters * 99 / 100], echo_cpu);
  return 0;
}
