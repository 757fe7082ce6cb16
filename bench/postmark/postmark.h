// PostMark (Katcher, Network Appliance TR 3022, 1997) on libodafs: the small-file workload
// of mail and news servers, and the paper's Fig. 6 workload.
//
// A pool of files with random sizes is created, then transactions run, each a read or an
// append of a random file (bias_read in 10 makes it a read) followed by a create or a
// delete (bias_create in 10 makes it a create); -1 turns either half off. Reads take the
// whole file in read_block pieces, appends add a random size in [size_low, size_high] in
// write_block pieces, creates write a random size in [size_low, size_high]. Every file is
// opened and closed around its operation, as PostMark does. At the end the pool is deleted.
//
// File contents are a function of (file seed, offset), so any read can be checked byte for
// byte (verify): the driver doubles as a correctness test of the caching client.
//
// The algorithm is written once against Backend (backend.h): libodafs here, libnfs in
// bench/peers/, so both run the same transactions from the same seed.
//
// Thread-safety: a Postmark is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/postmark/backend.h"
#include "client/client.h"

namespace odafs::postmark {

struct Config {
  size_t files = 500;
  size_t transactions = 500;
  uint64_t size_low = 500, size_high = 10000;
  size_t read_block = 512, write_block = 512;
  int bias_read = 5;    // 0..10, or -1: no reads or appends
  int bias_create = 5;  // 0..10, or -1: no creates or deletes
  size_t subdirectories = 0;
  uint64_t seed = 42;
  bool verify = false;  // check every byte read
};

struct Counts {
  uint64_t created = 0, created_alone = 0;
  uint64_t read = 0, appended = 0;
  uint64_t deleted = 0, deleted_alone = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t blocks_touched = 0;  // client-cache blocks the reads covered
  uint64_t mismatches = 0;      // verify: reads that returned wrong bytes
  double create_s = 0, transactions_s = 0, delete_s = 0;
};

class Postmark {
 public:
  // fs: a mount whose root holds the pool (under "pm/"). block_size: the client cache's
  // block size, to count blocks touched. REQUIRES: fs outlives the Postmark.
  Postmark(Client& fs, const Config& config, uint32_t block_size);
  // The same on another client library. REQUIRES: fs outlives the Postmark.
  Postmark(Backend& fs, const Config& config, uint32_t block_size);

  // The three phases. create_pool and delete_pool may be run by one Postmark and
  // transactions by others sharing its pool (adopt_pool), as the Fig. 6 comparison does.
  void create_pool();
  void transactions(size_t count);
  void delete_pool();
  // Takes over another driver's pool (names, sizes, seeds) to run transactions on it.
  void adopt_pool(const Postmark& other);

  const Counts& counts() const { return counts_; }
  void reset_counts() { counts_ = {}; }
  // PostMark's report, in its layout.
  std::string report() const;
  // The pool's size in blocks of block_size (what a cache would need to hold all of it).
  uint64_t pool_blocks() const;

 private:
  struct PoolFile {
    std::string path;
    uint64_t size = 0;
    uint64_t seed = 0;
  };
  void create_one(bool alone);
  void delete_one(bool alone);
  void read_one();
  void append_one();
  // Writes [from, to) of pf into the backend's current file.
  void write_range(const PoolFile& pf, uint64_t from, uint64_t to);
  uint64_t random_size();

  std::unique_ptr<Backend> owned_;  // the ClientBackend of the Client& constructor
  Backend* fs_;
  Config cfg_;
  uint32_t block_size_;
  std::mt19937_64 rng_;
  std::vector<PoolFile> pool_;
  uint64_t next_name_ = 0;
  std::vector<char> buf_, want_;
  Counts counts_;
};

// The byte at `offset` of a file with content seed `seed`.
void fill_content(uint64_t seed, uint64_t offset, char* dst, size_t len);

}  // namespace odafs::postmark
