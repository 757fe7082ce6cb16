// How a Client mounts and behaves (MountOptions and the choices in it), what the server
// told it at mount (ServerLimits), and what its read path did (ClientStats).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace odafs {

// How READ replies reach the caller's buffer (the paper's Table 1 / Table 3 mechanisms).
enum class ReadMode {
  kInline,     // RPC: reply received into the channel's buffer, payload copied out
  kPrePosted,  // RPC: payload received straight into the caller's buffer, matched by XID
  kOrdma,      // one-sided read when the directory has a reference, else pre-posted RPC
               // (which brings references); a fault falls back to the RPC
  kDirect,     // DAFS direct read: the server's engine writes into the caller's buffer,
               // registered with the client's side of the engine; bypasses the cache
};

// How the client cache picks what to give up, for its headers (the directory of
// references) and, separately, for its data blocks (docs/architecture.md, "The client
// cache").
enum class CachePolicy {
  kLru,         // least recently used
  kMultiQueue,  // MQ (Zhou, Philbin and Li, 2001): use counts in 8 LRU queues, with
                // expiry and a history of the counts of blocks given up; a block read
                // once never pushes out one read often
};

// Stability asked of each WRITE (NFSv3 semantics).
enum class Stability { kUnstable, kDataSync, kFileSync };

using Handle = std::array<unsigned char, 40>;
using WriteVerifier = std::array<unsigned char, 8>;
// Names one Client to the server across its connections (CLIENT_ID).
using ClientOwner = std::array<unsigned char, 16>;

struct MountOptions {
  ReadMode read_mode = ReadMode::kOrdma;
  // Client cache: headers (each may hold a reference) and, fewer, data blocks of the
  // server's block size. Headers outnumber data blocks: a header keeps its reference
  // after its data is reclaimed. cache_blocks = 0 turns data caching off.
  size_t directory_entries = 1u << 16;
  size_t cache_blocks = 2048;
  // Replacement for both (also ?cache_policy=lru|mq in the mount URL).
  CachePolicy cache_policy = CachePolicy::kLru;
  // DAFS direct writes: the server's engine pulls the data from the caller's buffer
  // (WRITE_DIRECT) instead of it travelling inside the RPC. Needs the server's engine.
  bool direct_writes = false;
  Stability stability = Stability::kUnstable;
  // On the server's own host, take the faster path its engine offers such a client (the
  // soft engine's shared-memory rings) rather than the network; a client elsewhere keeps
  // to the network by itself.
  bool same_host_shortcut = true;
  bool auth_sys = true;  // send the process's uid/gid (AUTH_SYS); false: AUTH_NONE
  int timeout_ms = 60000;
  // After a lost connection, how long the client keeps trying to reconnect and re-mount
  // (a server restarting) before an operation fails; 0: one attempt. Retries back off from
  // 50 ms to 1 s. Only idempotent operations are re-sent after a reconnect; the others
  // fail with the connection's error, as their effect is unknown.
  int reconnect_window_ms = 0;
  // A File keeps a copy of its unstable writes until they are committed, to send them
  // again if the server restarts before the COMMIT; past this many bytes it commits first.
  size_t max_uncommitted_bytes = 8u << 20;
  // Write-behind: positioned writes smaller than this are gathered, while they follow one
  // another, and sent as one WRITE when the run breaks or fills, or at fsync, close,
  // truncate, stat or a read of the file by this client; an error sending them comes back
  // from the next write, fsync or close of the file (as with NFS). The server sees nothing
  // of them until then (close-to-open: another client sees them after the close). 0: every
  // write is sent when made. Clamped to the server's max_write.
  size_t write_behind_bytes = 64u << 10;
  // Under a write delegation a close keeps the file's unsent and uncommitted writes until
  // the delegation is recalled or given back (docs/protocol.md, "Open delegations"); past
  // this many bytes kept so, across the mount's files, a close sends and commits its own.
  size_t delegated_bytes = 64u << 20;
  // ...and for at most this long after the close that kept them: then they are written
  // back (the delegation stays), so that a client that dies or is killed loses at most
  // this much of what it closed without fsync, as a local file system's page cache does.
  int delegated_write_back_ms = 5000;
  // Unmounting (Client::try_unmount, and the destructor) with bytes kept under write
  // delegations that the server does not have yet (the connection lost, the server down or
  // restarting): how long to wait for the server to come back and take them, re-mounting
  // (and so reclaiming) every quarter second or so and saying so in the log every 5 s.
  // -1: as long as it takes (odafs-mount's default, as an NFS hard mount's). The library's
  // default is bounded so that a program (or a test) whose server is gone for good still
  // ends. The bound is looked at between re-mounts, and one re-mount to a server that
  // accepts and does not answer takes up to timeout_ms. When the wait ends without the
  // server, the bytes go to rescue files (rescue_dir), never nowhere.
  int unmount_wait_ms = 60000;
  // Where kept bytes that could not be written back at unmount are saved: one file per
  // server file, odafs-rescue.NAME.XXXXXX (mode 0600), holding the bytes at their offsets
  // in the file (what was not kept reads as zeros). Empty: $TMPDIR, else /var/tmp.
  std::string rescue_dir;
  // How long a directory's handle found on the way to a file is used without looking the
  // directory up again (the path to it, not the file: open still looks the file up, for
  // close-to-open). Another client's rename of a directory may go unseen that long, as
  // with NFS's directory attribute cache; this client's own renames clear it. 0: off.
  int dir_cache_ms = 3000;
  // RPC-with-TLS (RFC 9289): the connection starts TLS 1.3 after an AUTH_TLS probe, and
  // the one-sided engine's TCP path runs TLS too (its same-host rings need none). The
  // server's certificate must chain to tls_ca (empty: the system's CA store) and name the
  // URL's host. tls_cert and tls_key: this client's certificate for mutual TLS (the
  // server's `mtls` rules ask for one). Also ?tls=1&tls_ca=FILE... in the URL.
  bool tls = false;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
};

struct ServerLimits {
  uint32_t block_size = 0;
  uint32_t max_read = 0;
  uint32_t max_write = 0;
  WriteVerifier write_verifier{};  // at mount time
  std::string engine;              // one-sided engine "HOST:PORT"; empty: RPC only
  std::string engine_kind;         // its backend ("soft")
};

// What the read path did, by branch and by fault reason. Monotonic counters.
struct ClientStats {
  std::atomic<uint64_t> cache_hits{0};   // blocks served from the client cache
  std::atomic<uint64_t> ordma_reads{0};  // blocks read one-sided
  std::atomic<uint64_t> ordma_bytes{0};
  std::atomic<uint64_t> rpc_reads{0};  // READ calls
  std::atomic<uint64_t> rpc_bytes{0};
  std::atomic<uint64_t> direct_reads{0};  // READ_DIRECT calls
  std::atomic<uint64_t> direct_bytes{0};
  std::atomic<uint64_t> direct_writes{0};  // WRITE_DIRECT calls
  std::atomic<uint64_t> fallbacks{0};      // faults answered with an RPC
  std::atomic<uint64_t> refs_received{0};
  std::atomic<uint64_t> delegated_opens{0};    // opens served by a read delegation: no call
  std::atomic<uint64_t> delegated_lookups{0};  // lookups served by a delegation: no call
  // Files whose kept writes were written back after a server restart (client/reclaim.cc),
  // and files whose kept writes could not be (reported: logged, then EIO).
  std::atomic<uint64_t> reclaimed_files{0};
  std::atomic<uint64_t> lost_files{0};
  std::array<std::atomic<uint64_t>, 10> faults{};  // by ordma::Fault value
};

}  // namespace odafs
