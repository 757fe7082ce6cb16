#include "ordma/engine_impl/verbs/verbs_support.h"

#include <poll.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "base/futex.h"
#include "ordma/engine_impl/verbs/verbs_engine.h"

namespace odafs::ordma {

// Both sides ask it (engines.cc's backend_usable): it lives with the shared support code.
bool verbs_usable(std::string* why) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list != nullptr) ibv_free_device_list(list);
  if (n > 0) return true;
  *why =
      "no RDMA device (ibv_get_device_list found none; `rdma link add rxe0 type rxe netdev IF` "
      "makes one where the kernel has rdma_rxe)";
  return false;
}

namespace verbs {

void fail(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), "verbs: " + what);
}

rdma_cm_event* next_event(rdma_event_channel* channel, int timeout_ms) {
  pollfd p{channel->fd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms > 0 ? timeout_ms : -1);
  } while (r < 0 && errno == EINTR);
  if (r < 0) fail(errno, "poll on the rdma_cm channel");
  if (r == 0) return nullptr;
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) fail(errno, "rdma_get_cm_event");
  return event;
}

rdma_cm_event* expect_event(rdma_event_channel* channel, rdma_cm_event_type want, int timeout_ms) {
  rdma_cm_event* event = next_event(channel, timeout_ms);
  if (event == nullptr) fail(ETIMEDOUT, std::string("no ") + rdma_event_str(want) + " in time");
  if (event->event == want) return event;
  std::string got = rdma_event_str(event->event);
  int err = event->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : EPROTO;
  rdma_ack_cm_event(event);
  fail(err, "expected " + std::string(rdma_event_str(want)) + ", got " + got);
}

rdma_addrinfo* resolve(const net::Endpoint& where, bool passive) {
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  if (passive) hints.ai_flags = RAI_PASSIVE;
  std::string port = std::to_string(where.port);
  rdma_addrinfo* info = nullptr;
  const char* host = where.host.empty() ? nullptr : where.host.c_str();
  if (rdma_getaddrinfo(host, port.c_str(), &hints, &info) != 0 || info == nullptr) {
    fail(errno != 0 ? errno : EHOSTUNREACH, "cannot resolve " + where.to_string());
  }
  return info;
}

ibv_wc_status post_and_wait(ibv_qp* qp, ibv_cq* cq, ibv_send_wr* wr, int timeout_ms) {
  wr->send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(qp, wr, &bad) != 0) return IBV_WC_GENERAL_ERR;
  const int64_t give_up = monotonic_ns() + int64_t{timeout_ms} * 1000000;
  ibv_wc wc{};
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return IBV_WC_GENERAL_ERR;
    if (n == 1 && wc.wr_id == wr->wr_id) return wc.status;
    // n == 1 with another id: a completion left over from a failed wait; skip it.
    if (n == 0 && monotonic_ns() > give_up) return IBV_WC_GENERAL_ERR;
  }
}

void WindowFreer::operator()(ibv_mw* window) const { ibv_dealloc_mw(window); }

MemoryRegion register_memory(ibv_pd* pd, void* addr, size_t length, int access) {
  return MemoryRegion(ibv_reg_mr(pd, addr, length, access));
}

bool has_type2_windows(ibv_context* ctx) {
  ibv_device_attr_ex attr{};
  if (ibv_query_device_ex(ctx, nullptr, &attr) != 0) return false;
  return attr.orig_attr.max_mw > 0 &&
         (attr.orig_attr.device_cap_flags &
          (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
}

}  // namespace verbs
}  // namespace odafs::ordma
