// One soak client: a process that mounts odafs and runs a mixed workload for a while,
// checking every byte it reads.
//
// It works on two kinds of files. Shared files (shared/sNN) are read, written, appended,
// truncated, created, renamed over and removed by every client at once; their bytes are
// checked with the self-describing blocks of soak_model.h (block-atomic, right file, right
// place), and races between clients (a name gone, a handle gone stale, a name taken) are
// counted, not failures. Private files (cNN/pK) belong to this client alone; it keeps their
// exact contents in memory and every read must match byte for byte, through whichever read
// path the client uses (cache, one-sided over the ring or TCP, RPC).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace odafs::soak {

struct ClientConfig {
  int id = 0;
  std::string url;
  // "ring": one-sided reads over the local ring; "tcp": one-sided over the engine's TCP
  // transport, with direct writes; "rpc": RPC reads only (pre-posted).
  std::string mode = "ring";
  int seconds = 60;
  int shared_files = 32;
  uint64_t seed = 1;
  // The server restarts, or the connections are cut, under the soak: the client reconnects
  // (and reclaims), and an operation a restart or cut cut off (its effect unknown) counts as
  // interrupted, not as an error; a private file it touched leaves the model (its bytes are
  // unknown).
  bool restarts = false;
};

struct ClientReport {
  int id = 0;
  uint64_t ops = 0;
  uint64_t races = 0;        // expected conflicts with other clients
  uint64_t interrupted = 0;  // operations a restart or cut cut off (restarts only)
  // Files whose bytes, kept under a write delegation, the client could not write back and
  // reported lost (ClientStats::lost_files, after its unmount): a broken promise.
  uint64_t lost = 0;
  uint64_t errors = 0;           // unexpected errors
  uint64_t checksum_errors = 0;  // bytes that break the model
  uint64_t bytes_checked = 0;
  std::vector<uint32_t> ops_per_second;
  std::string first_problem;  // the first error or checksum failure, for the log

  // One line, for the parent: "SOAK id=.. ops=.. ... per_s=a,b,c problem=...".
  std::string to_line() const;
  // Parses to_line()'s output; false if the line is not one.
  static bool parse(const std::string& line, ClientReport* out);
};

// Runs the workload until cfg.seconds have passed. Never throws: a failure to mount counts
// as an error in the report.
ClientReport run_client(const ClientConfig& cfg);

}  // namespace odafs::soak
