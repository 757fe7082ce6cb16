// A local ring's server side (local_ring.h has the layout both sides share): the engine's
// mapping of the ring and its doorbell, and the setup that hands both to the client.
//
// The engine takes the ring's geometry from its own memory (slot_bytes), never from the
// header in shared memory, which is the client's to scribble on.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/status.h"

namespace odafs::ordma {

struct Ring {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  int doorbell = -1;  // eventfd the client writes to post
  ~Ring();
};

// A ring just built, and the memfd that backs it, to hand to the client. The NewRing owns
// the memfd and closes it when it goes (the engine's mapping and the client's copy keep the
// memory), so the memfd is closed on every way out, WELCOME sent or not.
struct NewRing {
  std::unique_ptr<Ring> ring;
  int memfd = -1;

  NewRing() = default;
  NewRing(NewRing&& other) noexcept;
  NewRing& operator=(NewRing&&) = delete;
  ~NewRing();
};

// Builds a ring of ring::kSlots slots of slot_bytes each in a sealed memfd (the client cannot
// shrink it under the engine's mapping: no SIGBUS), maps it, initialises its header and
// makes its doorbell. Fails with the errno of the step that failed, nothing left open.
Result<NewRing> create_ring(uint32_t slot_bytes);

// Sends WELCOME over the ring's setup socket with the memfd and the doorbell attached
// (SCM_RIGHTS). Non-blocking; false if the whole WELCOME did not go.
bool send_ring_welcome(int socket_fd, int memfd, int doorbell);

}  // namespace odafs::ordma
