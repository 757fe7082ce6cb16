// What the verbs engine and its client share: errors, rdma_cm events with deadlines,
// address resolution, and one send work request waited for on its own completion queue.
// Private to ordma/engine_impl/verbs/.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>
#include <string>

#include "base/net.h"

namespace odafs::ordma::verbs {

// Owning handles for verbs and rdma_cm objects: each frees its object with the one call
// that does. Verbs wants objects freed before what they were made from (a queue pair before
// its windows, regions and completion queue; those before their protection domain; all
// before the rdma_cm id): a class that declares its handles in creation order gets that
// order from its destructor, with nothing freed by hand.
template <auto Free>
struct Freer {
  template <class T>
  void operator()(T* object) const {
    Free(object);
  }
};
using EventChannel = std::unique_ptr<rdma_event_channel, Freer<rdma_destroy_event_channel>>;
using CmId = std::unique_ptr<rdma_cm_id, Freer<rdma_destroy_id>>;
// The queue pair of an rdma_cm id (rdma_create_qp), not the id itself.
using QueuePair = std::unique_ptr<rdma_cm_id, Freer<rdma_destroy_qp>>;
using ProtectionDomain = std::unique_ptr<ibv_pd, Freer<ibv_dealloc_pd>>;
using CompletionChannel = std::unique_ptr<ibv_comp_channel, Freer<ibv_destroy_comp_channel>>;
using CompletionQueue = std::unique_ptr<ibv_cq, Freer<ibv_destroy_cq>>;
using MemoryRegion = std::unique_ptr<ibv_mr, Freer<ibv_dereg_mr>>;
// ibv_dealloc_mw is a static inline function: a template argument of internal linkage would
// give every type holding a window internal linkage too.
struct WindowFreer {
  void operator()(ibv_mw* window) const;
};
using MemoryWindow = std::unique_ptr<ibv_mw, WindowFreer>;

// Throws std::system_error(err) with "verbs: <what>".
[[noreturn]] void fail(int err, const std::string& what);

// Waits for the next event on `channel` up to timeout_ms (<= 0: no limit) and returns it
// (the caller acks it), or nullptr on timeout. Throws when the channel fails.
rdma_cm_event* next_event(rdma_event_channel* channel, int timeout_ms);

// Waits for an event of type `want` for `id`; any other event for it is an error (EPROTO,
// or ECONNREFUSED for a rejection), a timeout ETIMEDOUT. Returns the event, unacked.
rdma_cm_event* expect_event(rdma_event_channel* channel, rdma_cm_event_type want, int timeout_ms);

// Resolves `where` for rdma_cm (passive: to listen). Caller frees with rdma_freeaddrinfo.
rdma_addrinfo* resolve(const net::Endpoint& where, bool passive);

// Posts `wr` (signalled) on qp and spins on cq, which only this caller polls while it
// holds the queue pair's send lock, until its completion or timeout_ms. Returns the work
// completion's status (IBV_WC_GENERAL_ERR for a failed post or a timeout).
ibv_wc_status post_and_wait(ibv_qp* qp, ibv_cq* cq, ibv_send_wr* wr, int timeout_ms);

// ibv_reg_mr with the access flags as a plain int: rdma-core's ibv_reg_mr macro mixes two
// enumerations, which C++20 deprecates (clang's -Wdeprecated-enum-enum-conversion).
MemoryRegion register_memory(ibv_pd* pd, void* addr, size_t length, int access);

// Does the device support type-2 memory windows? (Else regions per block are the fallback.)
bool has_type2_windows(ibv_context* ctx);

}  // namespace odafs::ordma::verbs
