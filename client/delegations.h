// The read and write delegations a mount holds, by the name they were opened under.
//
// OPEN may grant a read delegation (docs/protocol.md, "Open delegations"): until the
// server recalls it, this client may open the file again by the same name, and trust its
// attributes and cached blocks, without a call. The server recalls it with a CB_RECALL
// on this mount's connection before another client writes, truncates, renames or removes
// the file or opens it to write; the channel's receiver hands the recall here, which drops
// the entry and the file's cached data at once, and a worker thread sends the
// DELEGRETURN.
//
// Trust is bounded by the lease. A holder that does not answer a recall within lease_ms
// loses the delegation without being told, so an entry is used only while the channel has
// heard from the server within three quarters of the lease (Channel::confirmed_since_ns:
// every recall sent before that reply has been handled). A mount idle for longer opens
// with a call again, which renews the entry.
//
// This client's own changes never recall its own delegations (the server does not
// conflict a connection with itself), so the client forgets an entry itself when it
// changes the file or its name, and gives it back (DELEGRETURN), so that the server holds
// no delegation the client no longer knows of. Its own writes keep a write delegation.
//
// A write delegation (OPEN or CREATE to write, no other client holding one) is a read one
// that also lets a close skip its WRITE and COMMIT: the close leaves the file's SharedFile
// (size, run written behind, unstable writes) in the entry (keep_open), so nothing is lost
// when the last File goes. What is kept so is bounded in bytes (across the mount), in
// offset (the server's space_limit: it holds the space for them) and in time: the worker writes
// it back max_kept_ms after the close that kept it, keeping the delegation. Whenever the entry goes
// (recalled, return_all: on the worker; this client's own change: on its thread, before the
// change), the SharedFile first goes to write_back (send the run, COMMIT, re-send after a server
// restart), then DELEGRETURN. A holder that does not write back within the lease loses the
// delegation at the server: its bytes then land later than the access that recalled it; DELEGRETURN
// answering INVAL tells, and the client logs it. Bytes that cannot be written back (the connection
// lost, the server restarted) are reported by the next fsync or close of a File still open on the
// file, else logged as lost.
//
// Thread-safety: all members are thread-safe. recall() runs on the channel's receiver
// thread and never waits for a reply.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client/client.h"
#include "client/open_files.h"
#include "rpc/message_header.h"

namespace odafs {

namespace rpc {
class Channel;
}
class ClientCache;

class Delegations {
 public:
  // Writes back what this client holds unsent or uncommitted of file fh under a write
  // delegation: `kept` (from keep_open), or else the SharedFile of its open Files, if
  // any. On this mount's channel, never re-mounting; true if there was anything to write
  // back, or why it failed. Called by the worker or return_all, never on the channel's
  // receiver thread.
  using WriteBack = std::function<Result<bool>(const Handle& fh, const OpenFiles::Ref& kept)>;
  // Gives back a Ref that keep_open took (OpenFiles::release).
  using Release = std::function<void(const Handle& fh, OpenFiles::Ref& shared)>;
  // Called (once, on the worker) when the channel breaks while kept bytes wait: the
  // client should re-mount soon and reclaim them (take_unsent). Must not block.
  using ConnectionLost = std::function<void()>;
  struct Return;
  // Takes a Return whose write-back failed with the connection after take_unsent (its bytes
  // would otherwise have no one to reclaim them). Runs on the thread that gave it back.
  using Adopt = std::function<void(Return&)>;
  // REQUIRES: channel and cache outlive stop() (MountState stops it before freeing them),
  // and so do what write_back and release use. server: the channel's server, as messages
  // name it. max_kept_bytes, max_kept_ms: MountOptions::delegated_bytes,
  // delegated_write_back_ms. write_back's failures name the file and the server (they are
  // logged as they are).
  Delegations(rpc::Channel* channel, ClientCache* cache, std::string server, size_t max_kept_bytes,
              int max_kept_ms, WriteBack write_back, Release release,
              ConnectionLost connection_lost, Adopt adopt);
  ~Delegations();
  Delegations(const Delegations&) = delete;
  Delegations& operator=(const Delegations&) = delete;

  struct Held {
    Handle fh{};
    Attr attr;
    bool write = false;
    uint64_t space_limit = 0;  // a write one keeps unsent bytes past a close below this
  };
  // The file `name` in directory `dir` names under a delegation this mount may trust now.
  // Allocates nothing.
  std::optional<Held> find(const Handle& dir, std::string_view name) const;
  // Whether this mount holds a write delegation on fh that it may trust now: no other
  // client reads or writes the file until it is given back. Allocates nothing.
  bool holds_write(const Handle& fh) const;
  // Records delegation `id` on fh, granted by an OPEN of `name` in `dir` that answered attr.
  // A write delegation keeps what an earlier entry of the file kept.
  void insert(const Handle& dir, std::string_view name, const Handle& fh, const Attr& attr,
              uint64_t id, uint32_t lease_ms, bool write, uint64_t space_limit);
  // This client is changing the file (truncation, attributes) or its name. A write
  // delegation is written back and returned here, on the caller's thread, before the
  // change goes out. REQUIRES: not on the channel's receiver thread.
  void forget_file(const Handle& fh);
  void forget_name(const Handle& dir, std::string_view name);
  // A delegation taken out of the table, still to be given back.
  struct Return {
    Handle fh{};
    uint64_t id = 0;
    bool write = false;   // written back before the DELEGRETURN
    OpenFiles::Ref kept;  // from keep_open
    std::optional<rpc::CallerCred> caller;
    // Its file was being removed by this client when the connection broke: if it is gone
    // after the restart, the REMOVE went through and the bytes went with the file.
    bool removing = false;
  };
  // This client is about to remove `name` in dir: a delegation on a file with no other
  // link is taken out without writing its bytes back (the file goes with the name); hand
  // it to removed() after the REMOVE. Otherwise as forget_name. REQUIRES: not on the
  // channel's receiver thread.
  std::optional<Return> take_for_remove(const Handle& dir, std::string_view name);
  // After the REMOVE take_for_remove prepared: done, the kept bytes are dropped, and so is
  // the delegation (the server dropped it with the file's last link: no DELEGRETURN);
  // failed, they are written back and it is returned now.
  void removed(Return& r, bool done);

  // A close of file fh under a write delegation this mount may trust now: keeps `shared`
  // in the entry (if it keeps none yet) and returns true; the close then commits nothing.
  // False too when the bytes kept across the mount's files would pass max_kept_bytes, or
  // the run written behind reaches past the delegation's space_limit.
  // REQUIRES: no lock of `shared` held.
  // The bytes are written back later, on another thread, as the caller of the first keep
  // (rpc::CallAs::current(), or the channel's own): a close by another caller gets false.
  bool keep_open(const Handle& fh, const OpenFiles::Ref& shared);
  // This client wrote fh up to `end`: a read delegation is void, a write one stays and
  // the size it serves opens with grows to end. True if a write one stays: no open will
  // revalidate the cached data, so the caller drops what it wrote over.
  bool wrote(const Handle& fh, uint64_t end);
  // Writes back and returns every delegation held, on the caller's thread, and waits for
  // the worker to finish what it had queued (before unmounting).
  void return_all();

  // CB_RECALL of delegation id on fh: drops it and the file's cached data, and queues its
  // return. Called on the channel's receiver thread.
  void recall(const Handle& fh, uint64_t id);

  // What this mount's write delegations keep that the server may not have (kept by a
  // close, queued for return, or handed back unsent when the connection broke): the files'
  // paths and the bytes in all. For messages; takes the files' locks.
  struct Unsent {
    std::vector<std::string> paths;
    size_t bytes = 0;
  };
  Unsent unsent() const;

  // Stops the return worker (pending returns are dropped: the connection goes with the
  // mount; kept bytes not written back are logged as lost). Idempotent.
  void stop();
  // Stops the worker like stop(), but hands over instead of dropping what this mount's
  // write delegations kept and did not get written back (the connection broke): the
  // caller reclaims them on a new mount, or reports them lost, and releases them.
  std::vector<Return> take_unsent();

 private:
  struct Entry {
    Handle dir{};
    std::string name;
    Held held;
    uint64_t id = 0;
    OpenFiles::Ref kept;                    // a write delegation's SharedFile, from keep_open
    size_t kept_bytes = 0;                  // its unsent and uncommitted bytes at the last keep
    int64_t kept_since_ns = 0;              // monotonic time of the keep that took `kept`
    std::optional<rpc::CallerCred> caller;  // kept's writer, if not the channel's own
  };
  static uint64_t name_key(const Handle& dir, std::string_view name);
  bool trusted() const;
  // Drops the entry of file_key and queues its return for the worker; a write delegation's
  // goes to *now instead when given, for the caller to give back itself (its bytes reach
  // the server before the caller's change does). `renewed`: the server holds it no more
  // (renewed under a new id, or going with its file), so it is not given back; to *now if
  // given, for its kept bytes. REQUIRES: mu_ held.
  void erase_file_locked(uint64_t file_key, std::optional<Return>* now = nullptr,
                         bool renewed = false);
  void return_loop();
  // Takes out of its entry the first kept SharedFile due for writing back (max_kept_ms
  // after its keep) into *due, or says when the next one is (0: none). REQUIRES: mu_ held.
  int64_t take_due_locked(int64_t now, Return* due);
  // Writes back r's kept bytes as the caller who kept them; true if there were any. Logs
  // what fails, except when the channel broke: then *lost is set, and the bytes stay for
  // take_unsent.
  bool write_back(Return& r, bool* lost);
  // Keeps r (its write-back failed with the connection) for take_unsent. Returns false
  // (and keeps nothing) if r keeps no bytes.
  bool keep_unsent(Return& r);
  // Writes back a write delegation's bytes and sends the DELEGRETURN. Logs what fails.
  void give_back(Return& r);

  rpc::Channel* const channel_;
  ClientCache* const cache_;
  const std::string server_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> by_name_;     // name_key -> entry
  std::unordered_map<uint64_t, uint64_t> by_file_;  // cache_key(fh) -> name_key
  int64_t trust_ns_ = 0;                            // 3/4 of the lease; guarded by mu_
  // The last ids recalled while unknown here: an OPEN's reply that grants one arrives
  // after its recall, and must not be trusted. Guarded by mu_.
  std::array<uint64_t, 16> recalled_unknown_{};
  size_t recalled_next_ = 0;
  // Ids a caller's thread took out of the table to give back (or drop, with a REMOVE)
  // itself: a recall of one of them meanwhile is answered by that caller, after its
  // write-back; an early DELEGRETURN from the worker would let the recaller in before the
  // bytes. Guarded by mu_; as many as threads giving back at once.
  std::vector<uint64_t> giving_back_;
  void given_back(uint64_t id);
  std::atomic<size_t> held_{0};  // by_file_.size(), for a lock-free "none" (written under mu_)

  const size_t max_kept_bytes_;
  const int64_t max_kept_ns_;
  size_t kept_bytes_ = 0;  // sum of the entries' kept_bytes; guarded by mu_
  // Keeps in the order they were made, (file key, kept_since_ns), for the worker's
  // write-back by age; one whose entry no longer keeps since then is skipped. Guarded by mu_.
  std::deque<std::pair<uint64_t, int64_t>> keeps_;
  const WriteBack write_back_;
  const Release release_;
  const ConnectionLost connection_lost_;
  const Adopt adopt_;
  bool taken_ = false;          // take_unsent has run; guarded by mu_
  bool lost_told_ = false;      // connection_lost_ called; the worker's alone
  bool held_write_ = false;     // a write delegation was granted on this connection; guarded by mu_
  std::vector<Return> unsent_;  // write-backs the broken connection stopped; guarded by mu_
  std::condition_variable returns_ready_;
  std::condition_variable returns_done_;  // returns_ empty and the worker idle
  std::deque<Return> returns_;            // guarded by mu_
  bool returning_ = false;                // the worker is giving one back; guarded by mu_
  bool stopping_ = false;                 // guarded by mu_
  std::thread returner_;
};

}  // namespace odafs
