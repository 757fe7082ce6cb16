// What the verbs engine and its client share: errors, rdma_cm events with deadlines,
// address resolution, and one send work request waited for on its own completion queue.
// Private to ordma/engine_impl/verbs/.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <string>

#include "base/net.h"

namespace odafs::ordma::verbs {

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
ibv_mr* register_memory(ibv_pd* pd, void* addr, size_t length, int access);

// Does the device support type-2 memory windows? (Else regions per block are the fallback.)
bool has_type2_windows(ibv_context* ctx);

}  // namespace odafs::ordma::verbs
