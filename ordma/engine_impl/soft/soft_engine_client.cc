// The client side of the soft engine.
//
// No receiver thread: whichever caller is waiting reads the socket for everyone (leader /
// follower). A lone caller thus reads its own response with no thread hand-off, which is
// most of a one-sided read's latency. With many callers, the leader places each response's
// bytes straight into its owner's buffer and wakes that owner alone (a futex per request);
// once its own response is in, it hands the socket to one caller asleep on its read.
//
// When the engine offers a local ring and it can be reached, reads go through the ring
// instead; TCP then carries only direct I/O, and reads again if the ring breaks.
//
// TLS mounts (EngineClientOptions::tls): the TCP connection asks for TLS in answer to the
// engine's greeting and proves the session inside it, bound to that TLS session
// (handshake.h); every later byte goes through tls_. The ring, being local, needs none.
//
// Deadlines. Every wait (connect, handshake, a read's completion on either transport, a
// direct transfer) ends by EngineClientOptions::timeout_ms. A wait that runs out fails the
// whole connection (fail_all): every pending call completes with kTransport and the socket
// is shut down. Tags alone would keep a late response from completing a later read, but a
// late PUT could still land in a buffer id that was registered again, and an engine that
// did not answer one read in time will not answer the next: a broken client is dropped by
// its owner and replaced, after one timeout rather than one per read.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <system_error>
#include <vector>

#include "base/futex.h"
#include "base/log.h"
#include "ordma/engine_impl/soft/handshake.h"
#include "ordma/engine_impl/soft/local_ring.h"
#include "ordma/engine_impl/soft/setup_errors.h"
#include "ordma/engine_impl/soft/soft_engine.h"
#include "ordma/engine_impl/soft/wire.h"

namespace odafs::ordma {
namespace {

// This thread, as a value Pending::owner can hold.
const void* this_thread() {
  thread_local const char marker = 0;
  return &marker;
}

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
    // Under mu_: its owner sleeps on this read's state word. Only such a read is offered the
    // socket (a thread sleeps on one read of its batch at a time: a wake elsewhere is lost).
    bool asleep = false;
    // The thread that waits for it. The reader completing its own calls (a lone caller,
    // or IoQueue's one thread with a window in flight) skips the futex wake: that thread
    // is not asleep, and the wake would be a system call per read for no one.
    const void* owner = nullptr;
  };

 public:
  SoftEngineClient(const net::Endpoint& engine, const Session& session,
                   const EngineClientOptions& options)
      : timeout_ms_(options.timeout_ms), next_tag_(std::random_device{}()) {
    Deadline deadline(timeout_ms_);  // for the whole setup, both transports
    fd_ = value_or_fail(net::connect_tcp_until(engine, deadline.get()));
    if (timeout_ms_ > 0) net::set_receive_timeout(fd_, timeout_ms_);
    try {
      tls_ = answer_greeting(fd_, session, deadline.get(), options.tls, options.tls_host);
      unsigned char welcome[wire::kWelcomeBytes];
      if (!read_exact(welcome, sizeof welcome, deadline.get()) || !wire::welcome_valid(welcome)) {
        throw std::system_error(EACCES, std::generic_category(), "engine: session refused");
      }
      ring::Token token{};
      if (options.same_host_shortcut && wire::welcome_offers_rings(welcome, token.data())) {
        try {
          ring_ = ring::RingClient::connect(token, session, deadline.get());
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
    Deadline deadline(timeout_ms_);  // one for the whole read, whichever way it goes
    if (ring_ && !ring_->broken()) {
      Fault f;
      if (ring_->read(ref, offset, length, dst, got, &f, deadline.get())) {
        if (!ring_->broken()) return f;
        if (deadline.passed()) {  // the engine did not answer: it will not over TCP either
          fail_all();
          return Fault::kTransport;
        }
      }
      // Ring full, or it just broke: this read goes over TCP.
    }
    ReadOp op{ref, offset, length, dst};
    read_tcp(&op, 1, deadline.get());
    if (op.fault == Fault::kNone) *got = op.got;
    return op.fault;
  }

  void read_many(std::span<ReadOp> ops) override {
    Deadline deadline(timeout_ms_);  // one for the whole batch
    size_t next = 0;
    // The ring: post as many as there are slots, wake the engine once, collect in order.
    thread_local std::vector<int> slots;
    while (next < ops.size() && ring_ && !ring_->broken() && !broken()) {
      slots.clear();
      const size_t first = next;
      for (; next < ops.size(); ++next) {
        int slot = ring_->post(ops[next].ref, ops[next].offset, ops[next].length);
        if (slot < 0) break;
        slots.push_back(slot);
      }
      if (slots.empty()) break;  // no slot free now: the rest go over TCP
      ring_->wake();
      for (size_t k = 0; k < slots.size(); ++k) {
        ReadOp& op = ops[first + k];
        op.fault = ring_->finish(slots[k], op.dst, op.length, &op.got, deadline.get());
      }
      if (ring_->broken()) {
        if (deadline.passed()) {  // the engine did not answer: it will not over TCP either
          fail_all();
          for (size_t k = next; k < ops.size(); ++k) ops[k].fault = Fault::kTransport;
          return;
        }
        // It broke under this batch: what it did not complete goes again over TCP.
        for (size_t k = first; k < next; ++k) {
          if (ops[k].fault == Fault::kTransport) read_tcp(&ops[k], 1, deadline.get());
        }
      }
    }
    if (next < ops.size()) read_tcp(&ops[next], ops.size() - next, deadline.get());
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

  Result<Fault> direct(const std::function<Status(uint32_t tag)>& call, uint32_t* got,
                       int timeout_ms) override {
    if (broken()) return Fault::kTransport;
    Pending p;
    p.direct = true;
    p.owner = this_thread();
    {
      std::lock_guard lock(mu_);
      p.tag = next_tag_++;
      pending_.push_back(&p);
    }
    if (Status called = call(p.tag); !called.ok()) {
      withdraw(p);
      return called;
    }
    Deadline deadline(timeout_ms < 0 ? timeout_ms_ : timeout_ms);
    await(p, deadline.get());
    if (p.fault == Fault::kNone) *got = p.got;
    return p.fault;
  }

 private:
  // Reads ops[0, n) over TCP: every request in one send, then each answer awaited (the
  // waiting caller reads the socket for everyone, so the answers land as they come).
  void read_tcp(ReadOp* ops, size_t n, const timespec* deadline) {
    if (broken()) {
      for (size_t k = 0; k < n; ++k) ops[k].fault = Fault::kTransport;
      return;
    }
    // Per thread and reused (a batch completes before its thread sends another), so a
    // steady stream of reads allocates nothing.
    thread_local std::unique_ptr<Pending[]> pool;
    thread_local size_t pool_size = 0;
    if (pool_size < n) {
      pool.reset(new Pending[n]);
      pool_size = n;
    }
    Pending* pend = pool.get();
    for (size_t k = 0; k < n; ++k) {
      pend[k].direct = false;
      pend[k].owner = this_thread();
      pend[k].fault = Fault::kTransport;
      pend[k].got = 0;
      pend[k].asleep = false;
      pend[k].state.store(kWaiting, std::memory_order_relaxed);
    }
    thread_local std::vector<unsigned char> frames;
    frames.resize(n * wire::kReadRequestBytes);
    {
      std::lock_guard lock(mu_);
      for (size_t k = 0; k < n; ++k) {
        pend[k].dst = static_cast<unsigned char*>(ops[k].dst);
        pend[k].capacity = ops[k].length;
        pend[k].tag = next_tag_++;
        pending_.push_back(&pend[k]);
      }
    }
    for (size_t k = 0; k < n; ++k) {
      wire::ReadRequest req;
      req.tag = pend[k].tag;
      req.ref = ops[k].ref;
      req.offset = ops[k].offset;
      req.length = ops[k].length;
      wire::encode(req, frames.data() + k * wire::kReadRequestBytes);
    }
    try {
      std::lock_guard lock(send_mu_);
      iovec iov{frames.data(), frames.size()};
      write_iov(&iov, 1, deadline);
    } catch (const std::exception&) {
      fail_all();  // part of a frame may be on the wire: the stream is unusable
    }
    for (size_t k = 0; k < n; ++k) {
      await(pend[k], deadline);
      ops[k].fault = pend[k].fault;
      if (pend[k].fault == Fault::kNone) ops[k].got = pend[k].got;
    }
  }

  // Takes p out of the pending list; if a reader already took it, waits until that reader
  // has finished with it (p lives on the caller's stack).
  void withdraw(Pending& p) {
    {
      std::lock_guard lock(mu_);
      auto it = std::find(pending_.begin(), pending_.end(), &p);
      if (it != pending_.end()) {
        pending_.erase(it);
        return;
      }
    }
    wait_done(p);
  }

  // Waits until whoever holds p (a reader, or fail_all) has completed it.
  static void wait_done(Pending& p) {
    for (uint32_t st; (st = p.state.load(std::memory_order_acquire)) != kDone;) {
      futex_wait(&p.state, st);
    }
  }

  // Waits until p is done, reading the socket for everyone while no one else does. If the
  // deadline (when given) passes first, fails the connection: p then completes with
  // kTransport (unless its response was already being placed) like every other call.
  void await(Pending& p, const timespec* deadline) {
    for (;;) {
      bool lead = false;
      {
        std::lock_guard lock(mu_);
        uint32_t st = p.state.load(std::memory_order_acquire);
        if (st == kLead) p.state.compare_exchange_strong(st, kWaiting);  // take the offer
        p.asleep = false;
        if (p.state.load(std::memory_order_acquire) == kDone) return;
        if (!reader_active_) {
          reader_active_ = true;
          lead = true;
        } else {
          p.asleep = true;  // until the futex wait below returns
        }
      }
      if (!lead) {
        if (deadline != nullptr && deadline_passed(*deadline)) {
          fail_all();    // shuts the socket down, so the reader's wait ends too
          wait_done(p);  // a reader placing p's response finishes it first
          return;
        }
        futex_wait(&p.state, kWaiting, deadline);  // until done, or offered the socket
        continue;
      }
      while (p.state.load(std::memory_order_acquire) != kDone) {
        if (!read_one(deadline)) {  // the connection failed, or the deadline passed
          fail_all();
          break;
        }
      }
      std::lock_guard lock(mu_);
      reader_active_ = false;
      // To a caller asleep on its read; the others look for a reader before they sleep.
      auto next = std::find_if(pending_.begin(), pending_.end(),
                               [](const Pending* q) { return q->asleep; });
      uint32_t expected = kWaiting;
      if (next != pending_.end() && (*next)->state.compare_exchange_strong(expected, kLead)) {
        futex_wake(&(*next)->state, 1);
      }
      return;
    }
  }

  struct Buffer {
    unsigned char* base = nullptr;
    size_t length = 0;
  };

  // Reads one response and completes its owner. Runs with reader_active_ held, mu_ not.
  // False when the connection failed, the engine broke the protocol, or the deadline (the
  // reader's own) passed, possibly mid-frame: the caller then fails the connection.
  bool read_one(const timespec* deadline) {
    try {
      // The head starts with what the previous response's payload read took along (see
      // read_payload); the rest is the hot wait: block in recv (SO_RCVTIMEO bounds it)
      // rather than poll, then recv.
      unsigned char head[wire::kResponseBytes];
      const size_t have = carry_len_;
      std::memcpy(head, carry_, have);
      carry_len_ = 0;
      if (have < sizeof head &&
          !read_exact(head + have, sizeof head - have, deadline, /*hot=*/true)) {
        return false;
      }
      wire::Response r;
      wire::decode(head, &r);
      if (wire::kind_of(head) == wire::kKindPut) return read_put(r, deadline);
      if (wire::kind_of(head) == wire::kKindGet) return answer_get(r, deadline);
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
      if (!receive_for(p, p->dst, r.length, deadline, /*carry=*/true)) return false;
      complete(p, r.fault, r.length);
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }

  // Reads a frame's `length` payload bytes into dst (nullptr: drops them) for p, the call
  // the reader took out of the pending list (nullptr: none); with carry (a RESPONSE's
  // payload), by read_payload. On failure (the connection broke, or the deadline passed
  // mid-frame) p goes back into the list, so that fail_all completes it: its owner waits
  // for that and must not wait forever.
  bool receive_for(Pending* p, unsigned char* dst, uint32_t length, const timespec* deadline,
                   bool carry = false) {
    bool ok = true;
    try {
      if (dst != nullptr) {
        ok = length == 0 ||
             (carry ? read_payload(dst, length, deadline) : read_exact(dst, length, deadline));
      } else {
        unsigned char sink[4096];
        for (uint32_t left = length; ok && left > 0;) {
          uint32_t n = std::min<uint32_t>(left, sizeof sink);
          ok = read_exact(sink, n, deadline);
          left -= n;
        }
      }
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok && p != nullptr) {
      std::lock_guard lock(mu_);
      pending_.push_back(p);
    }
    return ok;
  }

  // Reads a RESPONSE's `length` payload bytes into dst and, in the same system call, up to
  // a head's worth of whatever follows into carry_, for read_one to start the next frame
  // from. With a window of reads in flight the next response is usually there already, so
  // this saves the separate recv of its 12-byte head: one system call per response
  // instead of two (bench/peers/bound.sh counts them). carry_ is empty here (read_one
  // consumed it for this frame's head), and only the reader touches it. False on EOF
  // before the payload; throws like net::read_full_until once the deadline passes.
  bool read_payload(unsigned char* dst, uint32_t length, const timespec* deadline) {
    if (tls_) return read_exact(dst, length, deadline);  // the session reads ahead itself
    for (size_t done = 0; done < length;) {
      iovec iov[2] = {{dst + done, length - done}, {carry_, sizeof carry_}};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      const ssize_t n = recvmsg(fd_, &msg, MSG_DONTWAIT);
      if (n > 0) {
        done += static_cast<size_t>(n);
        if (done > length) carry_len_ = done - length;
      } else if (n == 0) {
        return false;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (deadline != nullptr) {
          ok_or_fail(net::wait_ready_until(fd_, POLLIN, *deadline));  // throws once it passes
        } else {
          pollfd pfd{fd_, POLLIN, 0};
          poll(&pfd, 1, -1);
        }
      } else if (errno != EINTR) {
        return false;
      }
    }
    return true;
  }

  // A server-initiated write: lands in a registered buffer if it fits and its tag names a
  // direct call still waiting, and completes that call. A PUT for a call that gave up
  // (its buffer id may already name another caller's buffer) or a bad PUT is dropped.
  bool read_put(const wire::Response& r, const timespec* deadline) {
    unsigned char extra[wire::kPutExtraBytes];
    if (!read_exact(extra, sizeof extra, deadline)) return false;
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
      if (p != nullptr && buffer < buffers_.size() && buffers_[buffer].base != nullptr &&
          uint64_t{offset} + r.length <= buffers_[buffer].length) {
        dst = buffers_[buffer].base + offset;
      }
    }
    if (!receive_for(p, dst, r.length, deadline)) return false;
    if (p != nullptr) complete(p, dst != nullptr ? Fault::kNone : Fault::kOutOfBounds, r.length);
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
    complete(p, fault, got);
  }

  // Completes p, taken out of the pending list, and wakes its owner if that is another
  // thread. Whether it is, is read before the done store: from then on p is the owner's,
  // who may have returned and reused it.
  static void complete(Pending* p, Fault fault, uint32_t got) {
    const bool mine = p->owner == this_thread();
    p->fault = fault;
    p->got = got;
    p->state.store(kDone, std::memory_order_release);
    if (!mine) futex_wake(&p->state);
  }

  // A server-initiated read (direct write): answers from a registered buffer, or refuses.
  bool answer_get(const wire::Response& r, const timespec* deadline) {
    unsigned char extra[wire::kPutExtraBytes];
    if (!read_exact(extra, sizeof extra, deadline)) return false;
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
      write_iov(iov, 2, deadline);
    } catch (const std::exception&) {
      return false;
    }
    complete_direct(r.tag, fault, src != nullptr ? r.length : 0);
    return true;
  }

  // The connection's bytes, through tls_ on a TLS mount. read_exact: false at EOF before
  // the first byte, throws on failure or at the deadline (net::read_full_until's contract);
  // hot: the wait for a response, blocking in recv (SO_RCVTIMEO bounds it) on clear TCP.
  bool read_exact(void* buf, size_t len, const timespec* deadline, bool hot = false) {
    if (tls_) return value_or_fail(tls_->read_full(buf, len, deadline));
    return value_or_fail(hot ? net::read_full_blocking_until(fd_, buf, len, deadline)
                             : net::read_full_until(fd_, buf, len, deadline));
  }
  void write_iov(iovec* iov, int count, const timespec* deadline) {
    if (!tls_) return ok_or_fail(net::write_all_until(fd_, iov, count, deadline));
    for (int i = 0; i < count; ++i) {
      ok_or_fail(tls_->write_all(iov[i].iov_base, iov[i].iov_len, deadline));
    }
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

  int timeout_ms_;  // EngineClientOptions::timeout_ms
  int fd_ = -1;
  std::unique_ptr<tls::Session> tls_;       // a TLS mount's; set in the constructor, then constant
  std::unique_ptr<ring::RingClient> ring_;  // set once, before any read
  std::atomic<bool> broken_{false};
  std::mutex send_mu_;
  std::mutex mu_;
  std::vector<Pending*> pending_;  // guarded by mu_
  std::vector<Buffer> buffers_;    // registered buffers by id; guarded by mu_
  bool reader_active_ = false;     // guarded by mu_
  // Bytes of the next frame's head read along with a payload (read_payload); the active
  // reader's alone (reader_active_ hands them over with the socket).
  unsigned char carry_[wire::kResponseBytes];
  size_t carry_len_ = 0;
  uint32_t next_tag_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<EngineClient> connect_soft_engine(const net::Endpoint& engine,
                                                  const Session& session,
                                                  const EngineClientOptions& options) {
  return std::make_unique<SoftEngineClient>(engine, session, options);
}

}  // namespace odafs::ordma
