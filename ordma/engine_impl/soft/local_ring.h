// Local rings: the soft engine's transport for clients on the engine's own host.
//
// Over TCP every one-sided read costs the engine a trip through the loopback network stack
// (receive, send, and the wake-up of the reader), which on an RNIC is the NIC's work, not
// the host's. A client on the same host can instead talk to the engine the way a verbs
// consumer talks to its NIC: it writes a work request into a queue in shared memory, rings
// a doorbell, and polls a completion; the engine thread checks the capability and copies
// the segment's bytes into the client's slot (the soft engine's DMA). The engine never
// makes a system call to answer, unless the client chose to sleep.
//
// Setup. The TCP WELCOME offers rings with a random token naming an abstract Unix socket.
// The client connects to it and proves its session exactly as on TCP (GREETING / HELLO);
// the engine answers WELCOME with two descriptors (SCM_RIGHTS): a sealed memfd holding the
// ring (layout below) and an eventfd, the doorbell. The Unix socket stays open: it closing
// is how each side learns that the other is gone.
//
// Trust. The ring is writable by the client, so the engine copies each request out of its
// slot before checking it, reads the ring's geometry only from its own copy, writes only
// into the slot the request came in, and the memfd is sealed against shrinking (a client
// cannot make the engine fault on a truncated mapping). A client that scribbles over its
// ring harms only its own reads.
//
// Slot protocol (one word per slot, `state`):
//   client  kFree → fills request → kPosted, sets its bit in `posted`, rings the doorbell
//           unless `engine_awake`; waits for kDone (polling, then sleeping: it first moves
//           kPosted → kPostedWaiting and futex-waits on the word)
//   engine  takes the `posted` bits, serves each kPosted/kPostedWaiting slot, writes fault
//           and length, exchanges state to kDone and futex-wakes if it was kPostedWaiting
//   client  copies the bytes out, kDone → kFree
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>

#include "ordma/engine_impl/soft/capability.h"
#include "ordma/engine_impl/soft/wire.h"
#include "ordma/fault.h"
#include "ordma/session.h"

namespace odafs::ordma::ring {

inline constexpr uint32_t kMagic = 0x4f44524e;  // "ODRN"
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kSlots = 64;  // one bit each in Header::posted (a u64)
enum SlotState : uint32_t { kFree = 0, kPosted = 1, kPostedWaiting = 2, kDone = 3 };

using Token = std::array<unsigned char, 16>;

struct Header {
  uint32_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t slot_bytes;  // data capacity of each slot: the engine's segment size
  alignas(64) std::atomic<uint64_t> posted;
  alignas(64) std::atomic<uint32_t> engine_awake;  // 1 while the engine will look again
};

struct alignas(64) Slot {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> fault;  // a Fault; final once state is kDone
  std::atomic<uint32_t> length;
  uint32_t reserved;
  unsigned char request[wire::kReadRequestBytes];  // a READ frame; its tag is ignored
};

inline constexpr size_t kHeaderBytes = 192;
static_assert(sizeof(Header) <= kHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
              std::atomic<uint32_t>::is_always_lock_free);

inline size_t slots_offset() { return kHeaderBytes; }
inline size_t data_offset() { return kHeaderBytes + kSlots * sizeof(Slot); }
inline size_t ring_bytes(uint32_t slot_bytes) {
  size_t bytes = data_offset() + size_t{kSlots} * slot_bytes;
  return (bytes + 4095) & ~size_t{4095};
}

inline Header* header(void* base) { return static_cast<Header*>(base); }
inline Slot* slot(void* base, uint32_t i) {
  return reinterpret_cast<Slot*>(static_cast<std::byte*>(base) + slots_offset()) + i;
}
inline std::byte* slot_data(void* base, uint32_t slot_bytes, uint32_t i) {
  return static_cast<std::byte*>(base) + data_offset() + size_t{i} * slot_bytes;
}

// The abstract Unix socket name for a token, leading NUL included.
std::string socket_name(const Token& token);

// A ring's setup, client side: the connected Unix socket (its closing tells the engine the
// client is gone) and the two descriptors WELCOME carried. Owns all three.
struct Setup {
  int sock = -1;
  int memfd = -1;     // the ring: map it whole, MAP_SHARED
  int doorbell = -1;  // an eventfd: write 1 to wake the engine
  Setup() = default;
  Setup(Setup&& o) noexcept : sock(o.sock), memfd(o.memfd), doorbell(o.doorbell) {
    o.sock = o.memfd = o.doorbell = -1;
  }
  Setup& operator=(Setup&&) = delete;
  ~Setup();
};

// Connects to the engine's rings named by token and authenticates as session, by the
// deadline (CLOCK_MONOTONIC) and within kSetupTimeoutMs in any case: rings are optional,
// a client that cannot set one up in time reads over TCP. Throws std::system_error when the
// rings cannot be reached, the engine refuses, or it does not answer in time (ETIMEDOUT).
// RingClient is built on it; tests use it alone to play a client that does not follow the
// protocol.
inline constexpr int kSetupTimeoutMs = 5000;
Setup set_up(const Token& token, const Session& session, const timespec* deadline = nullptr);

// The client's end of one ring. Thread-safe: up to kSlots reads are in flight together.
class RingClient {
 public:
  // Connects to the engine's rings named by token and authenticates as session, like
  // set_up. Throws std::system_error when the rings cannot be reached or set up in time
  // (the caller keeps TCP).
  static std::unique_ptr<RingClient> connect(const Token& token, const Session& session,
                                             const timespec* deadline = nullptr);
  ~RingClient();
  RingClient(const RingClient&) = delete;
  RingClient& operator=(const RingClient&) = delete;

  // Reads like EngineClient::read. Returns false, doing nothing, when every slot is busy or
  // the request does not fit a slot (the caller then reads over TCP); otherwise *fault is
  // the outcome (kTransport once the engine is gone, or the ring broke meanwhile). If the
  // engine has not completed the read by `deadline` (CLOCK_MONOTONIC; nullptr: none), the
  // ring breaks and the read returns kTransport; its slot is never reused, so the engine's
  // late completion reaches no later read.
  bool read(const Reference& ref, uint32_t offset, uint32_t length, void* dst, uint32_t* got,
            Fault* fault, const timespec* deadline = nullptr);
  // read() in halves, for many reads in flight from one thread: post() takes a slot and
  // posts the request without waking the engine (-1: no slot free, or it does not fit);
  // wake() rings the doorbell once if the engine sleeps; finish() waits for slot's
  // completion and ends it as read() does.
  int post(const Reference& ref, uint32_t offset, uint32_t length);
  void wake();
  Fault finish(int slot, void* dst, uint32_t length, uint32_t* got, const timespec* deadline);
  bool broken() const { return broken_.load(std::memory_order_acquire); }

 private:
  RingClient(int sock, int doorbell, void* base, size_t bytes);
  Fault await(Slot& s, const timespec* deadline);
  void ring_doorbell();

  int sock_;
  int doorbell_;
  void* base_;
  size_t bytes_;
  uint32_t slot_bytes_;
  std::atomic<uint64_t> free_;  // bit i: slot i is ours to take
  std::atomic<bool> broken_{false};
};

}  // namespace odafs::ordma::ring
