// The verbs engine's service thread: connection requests and their handshake (a nonce in
// the accept's private data, the client's PROOF as its first SEND), the clients' messages
// (REGISTER, UNREGISTER), disconnects, and handshakes that take too long. Reads never come
// here: the NIC serves them.
#include <fcntl.h>
#include <openssl/rand.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/futex.h"
#include "base/log.h"
#include "ordma/engine_impl/verbs/verbs_engine_impl.h"
#include "ordma/engine_impl/verbs/verbs_support.h"

namespace odafs::ordma::verbs {
namespace {

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

void VerbsEngine::serve() {
  if (options_.on_thread_start) options_.on_thread_start();
  set_nonblocking(cm_channel_->fd);
  set_nonblocking(recv_channel_->fd);
  pollfd fds[3] = {
      {cm_channel_->fd, POLLIN, 0}, {recv_channel_->fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (!stopping_.load()) {
    if (::poll(fds, 3, kSweepMs) < 0 && errno != EINTR) {
      ODAFS_LOG_ERROR("verbs engine: poll: %s", std::strerror(errno));
      break;
    }
    rdma_cm_event* event = nullptr;
    while (rdma_get_cm_event(cm_channel_.get(), &event) == 0) on_cm_event(event);
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    while (ibv_get_cq_event(recv_channel_.get(), &cq, &context) == 0) {
      ibv_ack_cq_events(cq, 1);
      ibv_req_notify_cq(cq, 0);
    }
    ibv_wc wcs[16];
    int n;
    while ((n = ibv_poll_cq(recv_cq_.get(), 16, wcs)) > 0) {
      for (int i = 0; i < n; ++i) on_receive(wcs[i]);
    }
    sweep_handshakes();
  }
  if (options_.on_thread_exit) options_.on_thread_exit();
}

void VerbsEngine::on_cm_event(rdma_cm_event* event) {
  if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
    on_connect_request(event);  // acks it
    return;
  }
  auto* raw = static_cast<Conn*>(event->id->context);
  const rdma_cm_event_type type = event->event;
  rdma_ack_cm_event(event);
  if (raw == nullptr) return;
  std::shared_ptr<Conn> c;
  {
    std::shared_lock lock(conns_mu_);
    auto it = conns_.find(raw->id);
    if (it != conns_.end()) c = it->second;
  }
  if (!c) return;
  switch (type) {
    case RDMA_CM_EVENT_ESTABLISHED:
      break;  // the client's PROOF comes next
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      teardown(c);
      break;
    default:
      break;
  }
}

void VerbsEngine::on_connect_request(rdma_cm_event* event) {
  rdma_cm_id* id = event->id;
  ConnectRequest req{};
  const bool ours = event->param.conn.private_data_len >= sizeof req &&
                    (std::memcpy(&req, event->param.conn.private_data, sizeof req), true) &&
                    req.magic.get() == kMagic && req.version.get() == kVersion;
  rdma_ack_cm_event(event);
  auto refuse = [&](std::atomic<uint64_t>& counter, const char* why) {
    counter.fetch_add(1, std::memory_order_relaxed);
    ODAFS_LOG_WARN_THROTTLED("verbs engine: connection refused: %s", why);
    rdma_reject(id, nullptr, 0);
    CmId refused(id);
  };
  if (!ours) return refuse(stats_.bad_handshakes, "not an odafs client");
  if (id->verbs != ctx_) return refuse(stats_.refused, "arrived on another device");
  {
    std::shared_lock lock(conns_mu_);
    if (conns_.size() >= options_.max_connections) {
      return refuse(stats_.refused, "at --engine-max-connections");
    }
  }
  auto c = std::make_shared<Conn>();
  c->id = next_conn_id_++;
  c->v.cm.reset(id);
  c->accepted_ms = now_ms();
  auto give_up = [&](const char* what) {
    ODAFS_LOG_WARN("verbs engine: cannot accept a connection: %s: %s", what, std::strerror(errno));
    rdma_reject(id, nullptr, 0);
    release_conn(*c);  // destroys id too
  };
  ConnVerbs& v = c->v;
  if (!windows_) {
    v.own_pd.reset(ibv_alloc_pd(ctx_));
    if (v.own_pd == nullptr) return give_up("ibv_alloc_pd");
  }
  v.pd = windows_ ? pd_.get() : v.own_pd.get();
  v.send_cq.reset(ibv_create_cq(ctx_, 64, nullptr, nullptr, 0));
  if (v.send_cq == nullptr) return give_up("ibv_create_cq");
  ibv_qp_init_attr qa{};
  qa.send_cq = v.send_cq.get();
  qa.recv_cq = recv_cq_.get();
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 32;
  qa.cap.max_recv_wr = kRecvSlots;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if (rdma_create_qp(id, v.pd, &qa) != 0) return give_up("rdma_create_qp");
  v.qp.reset(id);
  v.messages = std::make_unique<MessageArea>();
  v.messages_mr =
      register_memory(v.pd, v.messages.get(), sizeof(MessageArea), IBV_ACCESS_LOCAL_WRITE);
  if (v.messages_mr == nullptr) return give_up("registering message buffers");
  ibv_mr* generations = generations_mr_.get();
  if (!windows_) {
    v.generations_mr = register_memory(v.pd, generations_.get(), sizeof(Be64) * memory_.segments,
                                       IBV_ACCESS_REMOTE_READ);
    if (v.generations_mr == nullptr) return give_up("registering the generation words");
    generations = v.generations_mr.get();
  }
  for (int slot = 0; slot < kRecvSlots; ++slot) post_receive(*c, slot);
  if (RAND_bytes(c->nonce.data(), static_cast<int>(c->nonce.size())) != 1) {
    return give_up("RAND_bytes");
  }
  ConnectAccept acc{};
  acc.magic.set(kMagic);
  acc.version.set(kVersion);
  std::memcpy(acc.nonce, c->nonce.data(), sizeof acc.nonce);
  acc.generations_addr.set(reinterpret_cast<uint64_t>(generations_.get()));
  acc.generations_rkey.set(generations->rkey);
  acc.segments.set(static_cast<uint32_t>(memory_.segments));
  rdma_conn_param param{};
  param.private_data = &acc;
  param.private_data_len = sizeof acc;
  param.responder_resources = responder_resources_;
  param.initiator_depth = initiator_depth_;
  param.rnr_retry_count = 7;
  id->context = c.get();
  {
    std::unique_lock lock(conns_mu_);
    conns_[c->id] = c;
  }
  if (rdma_accept(id, &param) != 0) {
    ODAFS_LOG_WARN("verbs engine: rdma_accept: %s", std::strerror(errno));
    teardown(c);
    return;
  }
  stats_.connections.fetch_add(1, std::memory_order_relaxed);
}

void VerbsEngine::post_receive(Conn& c, int slot) {
  ibv_sge sge{reinterpret_cast<uint64_t>(&c.v.messages->recv[slot]), sizeof(Message),
              c.v.messages_mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = (c.id << 8) | static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ibv_post_recv(c.v.cm->qp, &wr, &bad);  // fails only on a dead queue pair: nothing to do
}

void VerbsEngine::on_receive(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS) return;  // flushed at a disconnect
  std::shared_ptr<Conn> c;
  {
    std::shared_lock lock(conns_mu_);
    auto it = conns_.find(wc.wr_id >> 8);
    if (it != conns_.end()) c = it->second;
  }
  if (!c) return;
  const int slot = static_cast<int>(wc.wr_id & 0xff);
  Message m;
  std::memcpy(&m, &c->v.messages->recv[slot], sizeof m);
  post_receive(*c, slot);
  const auto kind = static_cast<MessageKind>(m.kind.get());
  if (!c->authenticated.load()) {
    Proof proof;
    std::memcpy(proof.data(), m.proof, proof.size());
    if (wc.byte_len != sizeof m || kind != MessageKind::kProof ||
        tls_bound(m.session.get()) ||  // a TLS mount's session: this backend has no TLS
        !sessions_.verify(m.session.get(), c->nonce, proof)) {
      stats_.bad_handshakes.fetch_add(1, std::memory_order_relaxed);
      ODAFS_LOG_WARN_THROTTLED("verbs engine: a client failed the %s", "session proof");
      rdma_disconnect(c->v.cm.get());
      return;
    }
    c->session = m.session.get();
    c->authenticated.store(true);
    {
      std::unique_lock lock(conns_mu_);
      by_session_[c->session] = c;  // a reconnecting client replaces its failed queue pair
    }
    std::lock_guard send(c->send_mu);
    send_locked(*c, make_message(MessageKind::kWelcome));
    return;
  }
  if (wc.byte_len != sizeof m) {
    stats_.bad_frames.fetch_add(1, std::memory_order_relaxed);
    rdma_disconnect(c->v.cm.get());
    return;
  }
  switch (kind) {
    case MessageKind::kRegister: {
      std::lock_guard lock(c->buffers_mu);
      c->buffers[m.id.get()] = RemoteBuffer{m.addr.get(), m.length.get(), m.rkey.get()};
      c->buffers_cv.notify_all();
      break;
    }
    case MessageKind::kUnregister: {
      std::lock_guard lock(c->buffers_mu);
      c->buffers.erase(m.id.get());
      break;
    }
    default:
      stats_.bad_frames.fetch_add(1, std::memory_order_relaxed);
      rdma_disconnect(c->v.cm.get());
      break;
  }
}

void VerbsEngine::sweep_handshakes() {
  const int64_t now = now_ms();
  std::shared_lock lock(conns_mu_);
  for (auto& [id, c] : conns_) {
    if (!c->authenticated.load() && now - c->accepted_ms > options_.handshake_timeout_ms &&
        c->accepted_ms != 0) {
      c->accepted_ms = 0;  // once
      stats_.handshake_timeouts.fetch_add(1, std::memory_order_relaxed);
      rdma_disconnect(c->v.cm.get());  // its DISCONNECTED event tears it down
    }
  }
}

void VerbsEngine::teardown(const std::shared_ptr<Conn>& c) {
  {
    std::unique_lock lock(conns_mu_);
    if (conns_.erase(c->id) == 0) return;  // already gone
    auto it = by_session_.find(c->session);
    if (it != by_session_.end() && it->second == c) by_session_.erase(it);
  }
  std::vector<uint32_t> segments;
  {
    std::lock_guard wl(c->windows_mu);
    c->dead = true;
    for (auto& [segment, w] : c->v.windows) segments.push_back(segment);
  }
  for (uint32_t segment : segments) {
    SegmentState& s = segments_[segment];
    std::lock_guard seg(s.mu);
    std::erase(s.bound, c.get());
  }
  {
    std::lock_guard lock(c->buffers_mu);
    c->buffers.clear();
    c->buffers_cv.notify_all();
  }
  rdma_disconnect(c->v.cm.get());  // ends every access through its windows, if still connected
  release_conn(*c);
}

}  // namespace odafs::ordma::verbs
