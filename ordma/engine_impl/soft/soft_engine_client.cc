// The client side of the soft engine.
//
// No receiver thread: whichever caller is waiting reads the socket for everyone (leader /
// follower). A lone caller thus reads its own response with no thread hand-off, which is
// most of a one-sided read's latency. With many callers, the leader places each response's
// bytes straight into its owner's buffer and wakes that owner alone (a futex per request);
// once its own response is in, it hands the socket to one waiting caller.
//
// When the engine offers a local ring and it can be reached, reads go through the ring
// instead; TCP then carries only direct I/O, and reads again if the ring breaks.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>
#include <system_error>
#include <vector>

#include "base/futex.h"
#include "base/log.h"
#include "ordma/engine_impl/soft/handshake.h"
#include "ordma/engine_impl/soft/local_ring.h"
#include "ordma/engine_impl/soft/soft_engine.h"
#include "ordma/engine_impl/soft/wire.h"

namespace odafs::ordma {
namespace {

class SoftEngineClient final : public EngineClient {
  enum : uint32_t { kWaiting = 0, kDone = 1, kLead = 2 };  // Pending::state
  struct Pending {
    uint32_t tag = 0;
    unsigned char* dst = nullptr;
    uint32_t capacity = 0;
    bool direct = false;                    // completed by a PUT into a registered buffer
    std::atomic<uint32_t> state{kWaiting};  // futex word; kDone once fault/got are final
    Fault fault = Fault::kTransport;
    uint32_t got = 0;
  };

 public:
  SoftEngineClient(const net::Endpoint& engine, const Session& session,
                   const EngineClientOptions& options)
      : fd_(net::connect_tcp(engine)), next_tag_(std::random_device{}()) {
    try {
      answer_greeting(fd_, session);
      unsigned char welcome[wire::kWelcomeBytes];
      if (!net::read_full(fd_, welcome, sizeof welcome) || !wire::welcome_valid(welcome)) {
        throw std::system_error(EACCES, std::generic_category(), "engine: session refused");
      }
      ring::Token token{};
      if (options.local_rings && wire::welcome_offers_rings(welcome, token.data())) {
        try {
          ring_ = ring::RingClient::connect(token, session);
        } catch (const std::exception& e) {  // not on the engine's host, most likely
          ODAFS_LOG_DEBUG("engine: no local ring (%s); reading over TCP", e.what());
        }
      }
    } catch (...) {
      close(fd_);
      throw;
    }
  }

  ~SoftEngineClient() override {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
  }

  bool broken() const override { return broken_.load(std::memory_order_acquire); }

  const char* transport() const override { return ring_ && !ring_->broken() ? "ring" : "tcp"; }

  Fault read(const Reference& ref, uint32_t offset, uint32_t length, void* dst,
             uint32_t* got) override {
    if (broken()) return Fault::kTransport;
    if (ring_ && !ring_->broken()) {
      Fault f;
      if (ring_->read(ref, offset, length, dst, got, &f) && !ring_->broken()) return f;
      // Ring full, or it just broke: this read goes over TCP.
    }
    Pending p;
    p.dst = static_cast<unsigned char*>(dst);
    p.capacity = length;
    wire::ReadRequest req;
    req.ref = ref;
    req.offset = offset;
    req.length = length;
    {
      std::lock_guard lock(mu_);
      p.tag = req.tag = next_tag_++;
      pending_.push_back(&p);
    }
    unsigned char frame[wire::kReadRequestBytes];
    wire::encode(req, frame);
    try {
      std::lock_guard lock(send_mu_);
      iovec iov{frame, sizeof frame};
      net::write_all(fd_, &iov, 1);
    } catch (const std::exception&) {
      fail_all();
    }
    await(p);
    if (p.fault == Fault::kNone) *got = p.got;
    return p.fault;
  }

  uint32_t register_buffer(void* base, size_t length) override {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < buffers_.size(); ++i) {
      if (buffers_[i].base == nullptr) {
        buffers_[i] = {static_cast<unsigned char*>(base), length};
        return static_cast<uint32_t>(i);
      }
    }
    buffers_.push_back({static_cast<unsigned char*>(base), length});
    return static_cast<uint32_t>(buffers_.size() - 1);
  }

  void unregister_buffer(uint32_t id) override {
    std::lock_guard lock(mu_);
    if (id < buffers_.size()) buffers_[id] = {};
  }

  Fault direct(const std::function<void(uint32_t tag)>& call, uint32_t* got,
               int timeout_ms) override {
    if (broken()) return Fault::kTransport;
    Pending p;
    p.direct = true;
    {
      std::lock_guard lock(mu_);
      p.tag = next_tag_++;
      pending_.push_back(&p);
    }
    try {
      call(p.tag);
    } catch (...) {
      withdraw(p);
      throw;
    }
    timespec deadline = deadline_after_ms(timeout_ms);
    if (!await(p, &deadline)) {
      withdraw(p);
      if (p.state.load(std::memory_order_acquire) != kDone) return Fault::kTransport;
    }
    if (p.fault == Fault::kNone) *got = p.got;
    return p.fault;
  }

 private:
  // Takes p out of the pending list; if a reader already took it, waits until that reader
  // has finished with it (p lives on the caller's stack).
  void withdraw(Pending& p) {
    std::unique_lock lock(mu_);
    auto it = std::find(pending_.begin(), pending_.end(), &p);
    if (it != pending_.end()) {
      pending_.erase(it);
      return;
    }
    while (p.state.load(std::memory_order_acquire) != kDone) {
      lock.unlock();
      futex_wait(&p.state, p.state.load(std::memory_order_acquire));
      lock.lock();
    }
  }

  static bool expired(const timespec* deadline, int* remaining_ms) {
    if (deadline == nullptr) {
      *remaining_ms = -1;
      return false;
    }
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long ms = (deadline->tv_sec - now.tv_sec) * 1000 + (deadline->tv_nsec - now.tv_nsec) / 1000000;
    *remaining_ms = ms > 0 ? static_cast<int>(ms) : 0;
    return ms <= 0;
  }

  // Waits until p is done, reading the socket for everyone while no one else does.
  // Returns false if the deadline (when given) passed first.
  bool await(Pending& p, const timespec* deadline = nullptr) {
    for (;;) {
      bool lead = false;
      {
        std::lock_guard lock(mu_);
        uint32_t st = p.state.load(std::memory_order_acquire);
        if (st == kLead) p.state.compare_exchange_strong(st, kWaiting);  // take the offer
        if (p.state.load(std::memory_order_acquire) == kDone) return true;
        if (!reader_active_) {
          reader_active_ = true;
          lead = true;
        }
      }
      int remaining = -1;
      if (!lead) {
        if (expired(deadline, &remaining)) return false;
        futex_wait(&p.state, kWaiting, deadline);  // until done, or offered the socket
        continue;
      }
      bool timed_out = false;
      while (p.state.load(std::memory_order_acquire) != kDone) {
        if (deadline != nullptr) {
          if (expired(deadline, &remaining)) {
            timed_out = true;
            break;
          }
          pollfd pfd{fd_, POLLIN, 0};
          if (poll(&pfd, 1, remaining) == 0) continue;  // re-check the deadline
        }
        if (!read_one()) {
          fail_all();
          break;
        }
      }
      std::lock_guard lock(mu_);
      reader_active_ = false;
      if (!pending_.empty()) {  // hand the socket to one caller still waiting
        uint32_t expected = kWaiting;
        if (pending_.front()->state.compare_exchange_strong(expected, kLead)) {
          futex_wake(&pending_.front()->state, 1);
        }
      }
      return !timed_out || p.state.load(std::memory_order_acquire) == kDone;
    }
  }

  struct Buffer {
    unsigned char* base = nullptr;
    size_t length = 0;
  };

  // Reads one response and completes its owner. Runs with reader_active_ held, mu_ not.
  bool read_one() {
    try {
      unsigned char head[wire::kResponseBytes];
      if (!net::read_full(fd_, head, sizeof head)) return false;
      wire::Response r;
      wire::decode(head, &r);
      if (wire::kind_of(head) == wire::kKindPut) return read_put(r);
      if (wire::kind_of(head) == wire::kKindGet) return answer_get(r);
      Pending* p = nullptr;
      {
        std::lock_guard lock(mu_);
        auto it = std::find_if(pending_.begin(), pending_.end(),
                               [&](Pending* q) { return q->tag == r.tag; });
        if (it != pending_.end()) {
          p = *it;
          *it = pending_.back();
          pending_.pop_back();
        }
      }
      bool sane =
          p != nullptr && (r.fault == Fault::kNone ? r.length == p->capacity : r.length == 0);
      if (!sane) {
        if (p != nullptr) {  // put it back; the connection is about to fail everyone
          std::lock_guard lock(mu_);
          pending_.push_back(p);
        }
        return false;  // the engine broke the protocol: give up on the connection
      }
      // The owner waits for done, so its buffer is ours to fill until we set it.
      if (r.length > 0 && !net::read_full(fd_, p->dst, r.length)) {
        std::lock_guard lock(mu_);
        pending_.push_back(p);
        return false;
      }
      p->fault = r.fault;
      p->got = r.length;
      p->state.store(kDone, std::memory_order_release);
      futex_wake(&p->state);
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }

  // A server-initiated write: lands in a registered buffer if it fits, and completes the
  // direct call named by its tag. A bad PUT is dropped, not trusted.
  bool read_put(const wire::Response& r) {
    unsigned char extra[wire::kPutExtraBytes];
    if (!net::read_full(fd_, extra, sizeof extra)) return false;
    if (r.fault != Fault::kNone) {  // a cancel: the server's side of the call failed
      if (r.length != 0) return false;
      complete_direct(r.tag, r.fault, 0);
      return true;
    }
    wire::Transfer t = wire::decode_transfer(r, wire::kKindPut, extra);
    uint32_t buffer = t.buffer, offset = t.offset;
    Pending* p = nullptr;
    unsigned char* dst = nullptr;
    {
      std::lock_guard lock(mu_);
      auto it = std::find_if(pending_.begin(), pending_.end(),
                             [&](Pending* q) { return q->tag == r.tag && q->direct; });
      if (it != pending_.end()) {
        p = *it;
        *it = pending_.back();
        pending_.pop_back();
      }
      if (buffer < buffers_.size() && buffers_[buffer].base != nullptr &&
          uint64_t{offset} + r.length <= buffers_[buffer].length) {
        dst = buffers_[buffer].base + offset;
      }
    }
    if (dst != nullptr) {
      if (!net::read_full(fd_, dst, r.length)) return false;
    } else {
      unsigned char sink[4096];
      for (uint32_t left = r.length; left > 0;) {
        uint32_t n = std::min<uint32_t>(left, sizeof sink);
        if (!net::read_full(fd_, sink, n)) return false;
        left -= n;
      }
    }
    if (p != nullptr) {
      p->fault = dst != nullptr ? Fault::kNone : Fault::kOutOfBounds;
      p->got = r.length;
      p->state.store(kDone, std::memory_order_release);
      futex_wake(&p->state);
    }
    return true;
  }

  // Completes the direct call `tag`, if it is still waiting.
  void complete_direct(uint32_t tag, Fault fault, uint32_t got) {
    Pending* p = nullptr;
    {
      std::lock_guard lock(mu_);
      auto it = std::find_if(pending_.begin(), pending_.end(),
                             [&](Pending* q) { return q->tag == tag && q->direct; });
      if (it == pending_.end()) return;
      p = *it;
      *it = pending_.back();
      pending_.pop_back();
    }
    p->fault = fault;
    p->got = got;
    p->state.store(kDone, std::memory_order_release);
    futex_wake(&p->state);
  }

  // A server-initiated read (direct write): answers from a registered buffer, or refuses.
  bool answer_get(const wire::Response& r) {
    unsigned char extra[wire::kPutExtraBytes];
    if (!net::read_full(fd_, extra, sizeof extra)) return false;
    wire::Transfer t = wire::decode_transfer(r, wire::kKindGet, extra);
    uint32_t buffer = t.buffer, offset = t.offset;
    const unsigned char* src = nullptr;
    bool expected = false;
    {
      std::lock_guard lock(mu_);
      expected = std::any_of(pending_.begin(), pending_.end(),
                             [&](Pending* q) { return q->tag == r.tag && q->direct; });
      if (expected && buffer < buffers_.size() && buffers_[buffer].base != nullptr &&
          uint64_t{offset} + r.length <= buffers_[buffer].length) {
        src = buffers_[buffer].base + offset;
      }
    }
    Fault fault =
        src != nullptr ? Fault::kNone : (expected ? Fault::kOutOfBounds : Fault::kBadRequest);
    unsigned char head[wire::kDataHeaderBytes];
    wire::encode(wire::Data{r.tag, fault, src != nullptr ? r.length : 0}, head);
    try {
      std::lock_guard lock(send_mu_);
      iovec iov[2] = {{head, sizeof head},
                      {const_cast<unsigned char*>(src), src != nullptr ? r.length : 0}};
      net::write_all(fd_, iov, 2);
    } catch (const std::exception&) {
      return false;
    }
    complete_direct(r.tag, fault, src != nullptr ? r.length : 0);
    return true;
  }

  void fail_all() {
    broken_.store(true, std::memory_order_release);
    shutdown(fd_, SHUT_RDWR);
    std::lock_guard lock(mu_);
    for (Pending* p : pending_) {
      p->fault = Fault::kTransport;
      p->state.store(kDone, std::memory_order_release);
      futex_wake(&p->state);
    }
    pending_.clear();
  }

  int fd_;
  std::unique_ptr<ring::RingClient> ring_;  // set once, before any read
  std::atomic<bool> broken_{false};
  std::mutex send_mu_;
  std::mutex mu_;
  std::vector<Pending*> pending_;  // guarded by mu_
  std::vector<Buffer> buffers_;    // registered buffers by id; guarded by mu_
  bool reader_active_ = false;     // guarded by mu_
  uint32_t next_tag_;              // guarded by mu_
};

}  // namespace

std::unique_ptr<EngineClient> connect_soft_engine(const net::Endpoint& engine,
                                                  const Session& session,
                                                  const EngineClientOptions& options) {
  return std::make_unique<SoftEngineClient>(engine, session, options);
}

}  // namespace odafs::ordma
