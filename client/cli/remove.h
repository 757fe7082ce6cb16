// `odafs rm [-r] URL...`: removing many names through one IoQueue, their REMOVEs in flight
// together, as rm(1) does it: every operand tried, each failure said, the exit status 1 if
// any failed.
#pragma once

#include <memory>
#include <string>

namespace odafs {
class Client;

namespace cli {

// Removes names through one queue: remove() queues or does each operand, finish() waits
// for the rest. Failures are reported on stderr as "odafs: rm SHOWN: why" and the work
// goes on; finish() says whether everything went. Throws only what the client throws for
// misuse, never for a failed removal.
class Remover {
 public:
  explicit Remover(Client& client);
  ~Remover();
  Remover(const Remover&) = delete;
  Remover& operator=(const Remover&) = delete;

  // A file or symlink at path; with `recursive`, a directory too, with everything under
  // it: the names of each directory as pipelined REMOVEs, its subdirectories depth first,
  // then the directory itself. `shown` names path in messages (the operand as given).
  void remove(const std::string& path, const std::string& shown, bool recursive);
  // Waits for every removal queued; true if all of them (and all before) succeeded.
  bool finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cli
}  // namespace odafs
