// The client's end of a local ring (see local_ring.h for the protocol).
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <system_error>

#include "base/futex.h"
#include "base/net.h"
#include "ordma/engine_impl/soft/handshake.h"
#include "ordma/engine_impl/soft/local_ring.h"
#include "ordma/engine_impl/soft/setup_errors.h"

namespace odafs::ordma::ring {
namespace {

// How long a reader polls its completion before it sleeps. Polling is what a verbs client
// does with its completion queue; sleeping makes the engine pay for a wake-up. The poll
// yields the CPU on every turn, so a client sharing a core with the engine lets it run.
constexpr long kPollNanos = 100'000;
// While sleeping, how often a reader checks that the engine is still there.
constexpr int kAliveCheckMs = 200;

long nanos_since(const timespec& t0) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - t0.tv_sec) * 1'000'000'000L + (now.tv_nsec - t0.tv_nsec);
}

// Receives the WELCOME and the two descriptors that ride on it, by the deadline.
void receive_welcome(Setup* s, unsigned char* welcome, const timespec& deadline) {
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  iovec iov{welcome, wire::kWelcomeBytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ok_or_fail(net::wait_ready_until(s->sock, POLLIN, deadline));
  ssize_t n = recvmsg(s->sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n <= 0) fail(n == 0 ? ECONNRESET : errno, "local ring: no welcome");
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(2 * sizeof(int))) {
      int fds[2];
      std::memcpy(fds, CMSG_DATA(c), sizeof fds);
      s->memfd = fds[0];
      s->doorbell = fds[1];
    }
  }
  if (static_cast<size_t>(n) < wire::kWelcomeBytes &&
      !value_or_fail(net::read_full_until(
          s->sock, welcome + n, wire::kWelcomeBytes - static_cast<size_t>(n), &deadline))) {
    fail(ECONNRESET, "local ring: short welcome");
  }
}

}  // namespace

std::string socket_name(const Token& token) {
  static const char kHex[] = "0123456789abcdef";
  std::string name(1, '\0');
  name += "odafs-engine-";
  for (unsigned char b : token) {
    name += kHex[b >> 4];
    name += kHex[b & 15];
  }
  return name;
}

Setup::~Setup() {
  for (int fd : {sock, memfd, doorbell}) {
    if (fd >= 0) close(fd);
  }
}

Setup set_up(const Token& token, const Session& session, const timespec* deadline) {
  // A handshake that stalls is abandoned, not waited on forever, even with no deadline.
  timespec cap = deadline_after_ms(kSetupTimeoutMs);
  const timespec& by = deadline != nullptr ? earliest(*deadline, cap) : cap;
  Setup s;
  s.sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s.sock < 0) fail(errno, "local ring: socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = socket_name(token);
  std::memcpy(addr.sun_path, name.data(), name.size());
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  // A Unix connect waits while the listener's backlog is full (a stopped engine's fills),
  // for at most SO_SNDTIMEO; it then fails with EAGAIN.
  int ms = std::max(1, ms_until(by));
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  setsockopt(s.sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(s.sock, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    // Another host or namespace (TCP it is), or a backlog that did not drain in time.
    fail(errno == EAGAIN ? ETIMEDOUT : errno, "local ring: connect");
  }
  timeval none{0, 0};
  setsockopt(s.sock, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
  answer_greeting(s.sock, session, &by);
  unsigned char welcome[wire::kWelcomeBytes];
  receive_welcome(&s, welcome, by);
  if (!wire::welcome_valid(welcome) || s.memfd < 0 || s.doorbell < 0) {
    fail(EACCES, "local ring: refused");
  }
  return s;
}

std::unique_ptr<RingClient> RingClient::connect(const Token& token, const Session& session,
                                                const timespec* deadline) {
  Setup s = set_up(token, session, deadline);
  struct stat st;
  if (fstat(s.memfd, &st) != 0) fail(errno, "local ring: fstat");
  auto bytes = static_cast<size_t>(st.st_size);
  if (bytes < data_offset()) fail(EPROTO, "local ring: too small");
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s.memfd, 0);
  if (base == MAP_FAILED) fail(errno, "local ring: mmap");
  const Header* h = header(base);
  if (h->magic != kMagic || h->version != kVersion || h->slots != kSlots || h->slot_bytes == 0 ||
      ring_bytes(h->slot_bytes) > bytes) {
    munmap(base, bytes);
    fail(EPROTO, "local ring: bad geometry");
  }
  auto client = std::unique_ptr<RingClient>(new RingClient(s.sock, s.doorbell, base, bytes));
  s.sock = s.doorbell = -1;  // the client owns them now
  return client;
}

RingClient::RingClient(int sock, int doorbell, void* base, size_t bytes)
    : sock_(sock),
      doorbell_(doorbell),
      base_(base),
      bytes_(bytes),
      slot_bytes_(header(base)->slot_bytes),
      free_(~uint64_t{0}) {}

RingClient::~RingClient() {
  // Reads in flight are the owner's to have finished: EngineClient's contract.
  close(sock_);
  close(doorbell_);
  munmap(base_, bytes_);
}

void RingClient::ring_doorbell() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(doorbell_, &one, sizeof one);
}

bool RingClient::read(const Reference& ref, uint32_t offset, uint32_t length, void* dst,
                      uint32_t* got, Fault* fault, const timespec* deadline) {
  int i = post(ref, offset, length);
  if (i < 0) return false;
  wake();
  *fault = finish(i, dst, length, got, deadline);
  return true;
}

int RingClient::post(const Reference& ref, uint32_t offset, uint32_t length) {
  if (length > slot_bytes_) return -1;
  uint64_t mask = free_.load(std::memory_order_acquire);
  uint64_t bit;
  do {
    if (mask == 0) return -1;  // kSlots reads in flight already
    bit = mask & (~mask + 1);
  } while (!free_.compare_exchange_weak(mask, mask & ~bit, std::memory_order_acquire));
  auto i = static_cast<uint32_t>(std::countr_zero(bit));
  Slot& s = *slot(base_, i);
  wire::ReadRequest req;
  req.tag = i;
  req.ref = ref;
  req.offset = offset;
  req.length = length;
  wire::encode(req, s.request);
  s.state.store(kPosted, std::memory_order_release);
  header(base_)->posted.fetch_or(bit, std::memory_order_seq_cst);
  return static_cast<int>(i);
}

void RingClient::wake() {
  if (header(base_)->engine_awake.load(std::memory_order_seq_cst) == 0) ring_doorbell();
}

Fault RingClient::finish(int slot_index, void* dst, uint32_t length, uint32_t* got,
                         const timespec* deadline) {
  const auto i = static_cast<uint32_t>(slot_index);
  Slot& s = *slot(base_, i);
  Fault f = await(s, deadline);
  if (f == Fault::kTransport) return f;  // the engine is gone or late; the slot stays taken
  uint32_t raw = s.fault.load(std::memory_order_relaxed);
  uint32_t n = s.length.load(std::memory_order_relaxed);
  f = raw < kFaultKinds ? static_cast<Fault>(raw) : Fault::kTransport;
  if (f == Fault::kNone && n != length) f = Fault::kTransport;
  if (f == Fault::kNone) {
    std::memcpy(dst, slot_data(base_, slot_bytes_, i), length);
    *got = length;
  } else if (f == Fault::kTransport) {
    broken_.store(true, std::memory_order_release);  // the engine broke the protocol
  }
  s.state.store(kFree, std::memory_order_relaxed);
  free_.fetch_or(uint64_t{1} << i, std::memory_order_release);
  return f;
}

// Polls, then sleeps, until the slot is done. kTransport, the ring broken, if the engine
// went away or the deadline passed first.
Fault RingClient::await(Slot& s, const timespec* deadline) {
  timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (s.state.load(std::memory_order_acquire) != kDone) {
    if (nanos_since(t0) > kPollNanos) break;
    sched_yield();
  }
  for (;;) {
    uint32_t st = kPosted;
    s.state.compare_exchange_strong(st, kPostedWaiting, std::memory_order_acq_rel);
    if (s.state.load(std::memory_order_acquire) == kDone) return Fault::kNone;
    timespec step = deadline_after_ms(kAliveCheckMs);
    const timespec& until = deadline != nullptr ? earliest(*deadline, step) : step;
    futex_wait(&s.state, kPostedWaiting, &until, FutexScope::kShared);
    if (s.state.load(std::memory_order_acquire) == kDone) return Fault::kNone;
    if (deadline != nullptr && deadline_passed(*deadline)) {
      broken_.store(true, std::memory_order_release);  // a late completion lands in a dead slot
      return Fault::kTransport;
    }
    // The engine never writes to this socket after WELCOME: anything on it means it closed.
    pollfd pfd{sock_, POLLIN | POLLRDHUP, 0};
    if (broken() || poll(&pfd, 1, 0) != 0) {
      broken_.store(true, std::memory_order_release);
      return Fault::kTransport;
    }
  }
}

}  // namespace odafs::ordma::ring
