// The RPC server's spare threads, in process over real sockets on 127.0.0.1: a call about
// to wait hands its event loop to a spare (before_blocking), and when no spare can be had
// it is told so, so that it gives up its wait instead of holding every connection of its
// loop (odafsd answers DELAY, or sends a direct write to plain WRITE). Before, such a call
// waited with its loop: holders returning delegations on that loop's connections went
// unserved for the whole wait, and the 64-client soak ran at a fifth of its speed.
#include <doctest/doctest.h>
#include <rpc/rpc.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "rpc/client_channel.h"
#include "rpc/server.h"
#include "rpc/xdr_util.h"
#include "tests/support/rpc_calls.h"

namespace {

using namespace odafs;

constexpr uint32_t kProgram = 0x20000777;
constexpr uint32_t kVersion = 1;
constexpr uint32_t kProcWait = 1;     // before_blocking(), then waits for release when told yes
constexpr uint32_t kProcRefused = 2;  // a handler that cannot act as its caller

// A gate that the waiting calls block on until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(20), [&] { return open; });
  }
  void release() {
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

struct Harness {
  Gate gate;
  std::unique_ptr<rpc::Server> server;

  explicit Harness(int max_blocked_threads) {
    rpc::Server::Options o;
    o.listen = net::Endpoint{"127.0.0.1", 0};
    o.threads = 1;
    o.max_blocked_threads = max_blocked_threads;
    o.program = kProgram;
    o.version = kVersion;
    Result<std::unique_ptr<rpc::Server>> listening = rpc::Server::listen(o);
    REQUIRE_OK(listening);
    server = std::move(listening).value();
    // Answers whether the loop was handed over; waits at the gate only if it was.
    server->add_procedure(kProcWait, "WAIT",
                          [this](const rpc::CallContext&, XDR*, rpc::Reply& reply) {
                            bool_t handed_over = rpc::before_blocking() ? TRUE : FALSE;
                            if (handed_over) gate.wait();
                            return reply.send(rpc::to_xdrproc(xdr_bool), &handed_over);
                          });
    // Encodes results, then finds it cannot act as the caller (IdentityScope::refused_call's
    // path): the refusal, not the results, is the answer.
    server->add_procedure(kProcRefused, "REFUSED",
                          [](const rpc::CallContext&, XDR*, rpc::Reply& reply) {
                            bool_t yes = TRUE;
                            reply.send(rpc::to_xdrproc(xdr_bool), &yes);
                            reply.refuse(AUTH_BADCRED);
                            return true;
                          });
    server->start();
  }
  ~Harness() {
    gate.release();
    server->stop();
  }

  std::unique_ptr<rpc::Channel> connect() {
    rpc::Channel::Options o;
    o.program = kProgram;
    o.version = kVersion;
    o.timeout_ms = 30000;
    return test::open_channel(server->bound(), o);
  }
};

bool_t wait_call(rpc::Channel& ch) {
  bool_t handed_over = FALSE;
  REQUIRE_OK(ch.call(kProcWait, rpc::to_xdrproc(rpc::xdr_nothing), nullptr,
                     rpc::to_xdrproc(xdr_bool), &handed_over));
  return handed_over;
}

}  // namespace

TEST_CASE("a call about to wait with no spare thread left is told so, and its loop goes on") {
  Harness h(/*max_blocked_threads=*/2);
  auto a = h.connect();
  auto b = h.connect();
  auto c = h.connect();
  auto d = h.connect();
  // Two waits take the two spares; each is told its loop went on without it.
  std::atomic<int> handed{0};
  std::thread ta([&] { handed += wait_call(*a) ? 1 : 0; });
  std::thread tb([&] { handed += wait_call(*b) ? 1 : 0; });
  // Until both are waiting, a third could still find a spare.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (h.server->counters().handovers.load() < 2 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(h.server->counters().handovers.load() == 2);
  // The third finds no spare: told so at once, it does not wait, and answers.
  auto t0 = std::chrono::steady_clock::now();
  CHECK(wait_call(*c) == FALSE);
  CHECK(h.server->counters().no_spare.load() == 1);
  // The loop was never held: another connection's call is served while the two wait.
  CHECK(wait_call(*d) == FALSE);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  h.gate.release();
  ta.join();
  tb.join();
  CHECK(handed == 2);
}

TEST_CASE("a handler's refusal is the call's answer (AUTH_BADCRED), and the connection serves on") {
  Harness h(/*max_blocked_threads=*/2);
  auto ch = h.connect();
  rpc::CallFailure layer = rpc::CallFailure::kTransport;
  bool_t got = FALSE;
  Status refused = ch->call(kProcRefused, rpc::to_xdrproc(rpc::xdr_nothing), nullptr,
                            rpc::to_xdrproc(xdr_bool), &got, &layer);
  CHECK(refused.errno_value() == EACCES);
  CHECK(layer == rpc::CallFailure::kDenied);
  CHECK(refused.message().find("AUTH_BADCRED") != std::string::npos);
  CHECK(got == FALSE);  // the encoded results never left
  CHECK(h.server->counters().rejected.load() == 1);
  CHECK_FALSE(ch->broken());
  // The same connection's next call runs.
  rpc::Call c;
  REQUIRE_OK(ch->start(c, kProcRefused, rpc::to_xdrproc(rpc::xdr_nothing), nullptr));
  XDR x;
  CHECK(ch->wait(c, &x, &layer).errno_value() == EACCES);
  CHECK(h.server->counters().rejected.load() == 2);
}
