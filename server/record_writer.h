// Writes one small file (the recovery record) atomically and durably, on its own thread.
//
// Why a thread of its own: a durable rewrite is a write, two fsyncs and a rename, and a disk
// under load (or one that hangs) can hold it for seconds. Done on an rpc thread for a closing
// connection, it held odafsd's stop, which joins those threads (issue #40: an ASan odafsd
// still in a rewrite 10 s after SIGTERM). Here only the calls that need the bytes durable wait
// for them (a first write delegation's grant), each bounded by the stop; every other change is
// queued, and the newest content wins (the record is a set: each version says it all).
//
// A version is written to a fresh temporary, synced, renamed over the file, and the directory
// synced: a crash leaves the old version or the new one, never a torn one.
//
// Thread-safety: thread-safe. The writer's state outlives this object while a write is under
// way at its destruction (the process is exiting: the write ends with it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace odafs::server {

class RecordWriter {
 public:
  // Writes `name` in the directory `dir_fd` (which the writer now owns and closes);
  // `path` names the file in log lines. As the thread that constructs it: REQUIRES the
  // constructing thread acts as the server (odafsd's main thread at start-up).
  RecordWriter(int dir_fd, std::string name, std::string path);
  // Stops (stop()), then lets the writer write the version queued last, if any: waits at
  // most kLeaveAfterMs for it before leaving it to finish, or to end with the process.
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  static constexpr int kLeaveAfterMs = 500;

  // Queues `text` as the file's next content, replacing any version queued and not begun.
  // Returns the version's number, for wait_durable.
  uint64_t submit(std::string text);
  // Waits until `version`, or a later one, is on stable storage: true. False when the write
  // that would have carried it failed (logged) or the writer stopped first.
  bool wait_durable(uint64_t version);
  // Every waiter returns false from now on, at once (the server is stopping: it waits on no
  // disk); the versions queued are still written, in the background.
  void stop();
  // Versions written and synced so far.
  uint64_t writes() const;
  // Whether any writer of this process left a write under way at its destruction: its thread
  // may sleep in the disk for good, so the process must not wait on it at exit.
  static bool left_a_write();

 private:
  struct State;
  static void run(const std::shared_ptr<State>& state);
  std::shared_ptr<State> state_;
};

}  // namespace odafs::server
