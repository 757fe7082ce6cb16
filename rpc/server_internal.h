// rpc::Server's insides, shared by its two source files (private to rpc/):
//   server.cc       lifecycle, accepting, the idle sweep, reading and cutting records
//   server_dispatch.cc  one call: header, credential, authorization, procedure, reply
//   server_flow.cc  memory and flow control: large-record permits, running records while
//                   replies do not back up, sending and queueing replies, the backlog budget
//   server_tls.cc   RPC-with-TLS: the AUTH_TLS probe's answer, the handshake, TLS reads
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rpc/record.h"
#include "rpc/server.h"

namespace odafs::rpc {

// An event loop: an epoll set and the connections registered in it. Driven by one thread
// at a time (the one that holds it: its first thread, or a spare it was handed to).
struct Server::Loop {
  explicit Loop(int epoll_fd) : epoll_fd(epoll_fd) {}
  ~Loop() { close(epoll_fd); }
  const int epoll_fd;
  std::atomic<size_t> connections{0};  // open connections given to it (for accept's choice)
};

struct Server::Connection : std::enable_shared_from_this<Connection> {
  Connection(uint64_t id, int fd, Loop& loop, std::string host, std::string peer,
             Admission admission, size_t max_record, int64_t now_ms)
      : id(id),
        fd(fd),
        write_fd(dup(fd)),
        loop(loop),
        host(std::move(host)),
        peer(std::move(peer)),
        refused(admission.refused),
        admission(admission),
        assembler(max_record),
        last_active_ms(now_ms) {}
  ~Connection() {
    close(fd);
    if (write_fd >= 0) close(write_fd);
  }

  const uint64_t id;
  const int fd;
  // A second descriptor of the same socket, registered in the epoll set for EPOLLOUT only
  // while replies are queued. Separate registrations keep the one-shot read arming (one
  // reader at a time) independent of write readiness.
  const int write_fd;
  Loop& loop;              // whose epoll set holds fd and write_fd, for the connection's life
  const std::string host;  // the peer's address: the per-address limit counts by it
  const std::string peer;
  const bool refused;  // Admission::refused: one answer, then closed
  // Changed only when TLS starts (Server::continue_handshake), when no call of the
  // connection runs: the client waits for the handshake before it calls again.
  Admission admission;
  std::atomic<uint32_t> tag{CallContext::kNoTag};  // CallContext::connection_tag
  RecordAssembler assembler;  // touched only by the thread holding the read event
  // Holds a large-record permit. Changed by the read-event holder, or under write_mu by
  // the permit's hand-over while the connection waits for one.
  std::atomic<bool> permit{false};
  std::atomic<bool> closed{false};
  // When the connection last completed a record or a reply, and how many of its calls run
  // now: a connection is idle when nothing runs and nothing completed for idle_timeout.
  std::atomic<int64_t> last_active_ms;
  std::atomic<int> calls_running{0};
  bool idle_closed = false;  // guarded by Server::conns_mu_; the sweep shut it down

  // TLS (RFC 9289): null until an AUTH_TLS probe was answered; from then on every byte
  // goes through it. Published (tls) under write_mu before the probe's reply is sent.
  std::unique_ptr<tls::Session> tls_session;
  std::atomic<tls::Session*> tls{nullptr};
  // The handshake is done. Written by the read event's holder; read by run_records.
  std::atomic<bool> tls_ready{false};

  std::mutex write_mu;  // replies from several threads go out whole and in order
  // Reply bytes the socket did not take yet (a client slow to read). Guarded by write_mu.
  std::vector<char> backlog;
  size_t backlog_head = 0;
  bool write_failed = false;  // guarded by write_mu; the socket is shut down, drop replies
  // Unsent reply bytes (backlog.size() - backlog_head) and when they last moved, readable
  // without write_mu by the shedding scan.
  std::atomic<size_t> backlog_bytes{0};
  std::atomic<int64_t> backlog_moved_ms{0};

  // Flow control, guarded by write_mu. `parked`: no thread holds or waits for the read
  // event (it is not armed); whoever clears the last reason re-arms it.
  bool blocked = false;         // replies wait: run no calls; cut ones wait in `pending`
  bool waiting_permit = false;  // a large record waits for a permit
  bool parked = false;
  bool shut = false;  // shut down (idle, failed): read to EOF and close, whatever else
  std::vector<std::vector<char>> pending;  // records cut but not run while blocked
  size_t pending_used = 0;

  size_t unsent() const { return backlog.size() - backlog_head; }
};

// Replies of one run of calls are sent together once they hold this many bytes, and at the
// end of the run: one send for a batch of small replies instead of one each.
inline constexpr size_t kCoalesceBytes = 64 * 1024;

// Per pool thread: reusable buffers, so serving a call allocates nothing in steady state.
struct Server::Worker {
  Server* server = nullptr;
  // The loop this thread drives; null for a spare, and from the moment before_blocking
  // handed the loop over.
  Loop* loop = nullptr;
  std::vector<char> staging = std::vector<char>(64 * 1024);
  std::vector<std::vector<char>> batch;  // records cut in this round; slots reused
  size_t batch_used = 0;
  std::vector<std::vector<char>> resumed;  // a blocked connection's records, run on drain
  // Replies of the current run, whole records (mark + body) back to back in
  // out[out_head, out_used), for out_conn (out[0, out_head) went out while a call ran);
  // the next reply is encoded at out_used + 4. Sized kCoalesceBytes + max_reply + 4, and
  // out_used < kCoalesceBytes when a call starts, so a reply always fits.
  std::vector<char> out;
  size_t out_head = 0;
  size_t out_used = 0;
  Connection* out_conn = nullptr;
  CallerCred cred;
};

inline constexpr uint32_t kListenTag = 1;
inline constexpr uint32_t kWakeTag = 2;
inline constexpr uint32_t kSweepTag = 4;
// Read events carry the Connection* itself, write events (id << 1) | kWriteTag; the tags
// above are neither valid pointers nor odd.
inline constexpr uint64_t kWriteTag = 1;

// Keep reading one connection for at most this many recv calls per event, so one busy
// client cannot hold a pool thread forever.
inline constexpr int kReadsPerEvent = 16;
// What a connection may hold of input without a permit: the record it is receiving plus
// records cut and waiting. Past kLargeRecord of one record it needs a permit.
inline constexpr size_t kSmallInput = 64 * 1024;
inline constexpr size_t kLargeRecord = kSmallInput / 2;
// Buffers above this are given back once used, so idle connections and threads stay small.
inline constexpr size_t kKeepBuffer = kSmallInput;
inline constexpr size_t kKeepBacklog = 1u << 20;

}  // namespace odafs::rpc
