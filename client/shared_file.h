// SharedFile: the state a Client's Files of one file share (client/open_files.h says
// why): the size the client knows, the unstable writes awaiting COMMIT with the copies kept
// to send them again after a server restart, and the write-behind run.
//
// Thread-safety: `size` is atomic; the write books are under `mu`; the write-behind run is
// under `behind_mu`, held while the run is sent so that runs go out in order. Lock order:
// commit_mu, then behind_mu, then mu.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"

namespace odafs {

struct SharedFile {
  // The paths this client's opens named the file by, the latest first: a write delegation's
  // bytes are found a home by them after a server restart (client/reclaim.cc tries each; the
  // file id decides). Not the first open's alone: the file may have been renamed while
  // something of this client's kept this alive (an open File, a write-back under way) and
  // opened again by its new name, whose close then kept bytes here.
  // Thread-safety: all three are thread-safe.
  void opened_as(const std::string& path);  // OpenFiles::acquire, at every open
  std::string path() const;                 // the latest, for messages
  std::vector<std::string> paths() const;
  // Set at creation, then constant. file_generation: 0 when the server could not tell.
  uint64_t fileid = 0;
  uint64_t file_generation = 0;
  // The file's modification time (ns) as the server showed it at the latest open: what
  // LostWrites keys a loss by besides the file id, as inode numbers are reused.
  std::atomic<int64_t> server_mtime_ns{0};

  // The file's size as this client knows it: at open, from stat(), after its own writes
  // and truncations, and as reads find it. Reads stop here without asking the server, as
  // an NFS client's reads stop at its cached size: close-to-open promises the size at open,
  // and this spares a READ per whole-file read just to learn the end.
  std::atomic<uint64_t> size{0};

  std::mutex commit_mu;  // one fsync at a time

  std::mutex mu;                          // guards the unstable-write books below
  bool unstable = false;                  // writes not yet committed
  std::optional<WriteVerifier> verifier;  // of the last unstable write
  bool verifier_changed = false;          // differed between two unstable writes
  // The unstable writes since the last COMMIT, (offset, length), their bytes end to end in
  // pending_data, kept to be sent again should the server restart before the COMMIT.
  std::vector<std::pair<uint64_t, size_t>> pending;
  std::vector<char> pending_data;

  // Guards the write-behind run and its error. Timed: a write delegation's write-back waits
  // for it only while the connection holds (client/write_back.cc).
  std::timed_mutex behind_mu;
  uint64_t behind_offset = 0;
  std::vector<char> behind;             // written, not yet sent: [behind_offset, + behind.size())
  uint64_t size_before_run = 0;         // `size` when the run began (restored if it fails)
  std::atomic<bool> has_behind{false};  // behind is not empty (checked without the lock)
  // Write-behind runs that could not be sent, counted (as Linux's errseq_t): each reader's
  // mark (File::ErrorMark) hears of the latest once, at its next write, fsync or close.
  // behind_failures_reported: the count when someone last heard; a File opened while a
  // failure was heard by no one starts there, and hears it.
  uint64_t behind_failures = 0;
  uint64_t behind_failures_reported = 0;
  int behind_errno = 0;  // the latest failure
  std::string behind_error;

 private:
  static constexpr size_t kMaxPaths = 4;  // bounded: a file opened by many names keeps the last
  mutable std::mutex paths_mu_;
  std::vector<std::string> paths_;  // latest first; guarded by paths_mu_
};

}  // namespace odafs
