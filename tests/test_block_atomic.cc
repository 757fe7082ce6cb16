// The block-atomic read guarantee under a server whose cache fills race with writes.
//
// A reader's block comes from the server's cache, which fills a missing block from the
// file; a write lands in the file and then in any cached copy. The kernel does not make a
// pread atomic against a concurrent pwrite of the same page, so a fill racing a write could
// copy half of the old bytes and half of the new (the soak caught one: a block whose first
// words were still the hole's zeros). The server must order them: a read sees a block whole,
// before or after each write, never a mixture. The server runs with --slow-writes, which
// lands each write in two halves 200 µs apart, so a fill that races a write is caught
// every time rather than once in hours.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/soak/soak_model.h"
#include "tests/support/server_process.h"

using odafs::Client;
using odafs::Error;
using odafs::File;
using odafs::MountOptions;
using odafs::ReadMode;
using odafs::test::ServerProcess;
using odafs::test::TempDir;

namespace {

constexpr size_t kBlock = 4096;
constexpr uint64_t kBlocks = 64;

// Writes fresh blocks into holes: cuts the file back to its first block, then writes
// blocks at random places past it, so readers keep filling blocks the writer is writing.
void write_into_holes(const std::string& url, int writer, std::atomic<bool>& stop,
                      std::atomic<uint64_t>& writes) {
  auto fs = Client::mount(url);
  std::mt19937_64 rng(static_cast<uint64_t>(writer) * 7919 + 1);
  std::vector<unsigned char> block(kBlock);
  uint64_t seq = 0;
  File f = fs->open("f", O_RDWR);
  while (!stop.load()) {
    if (writer == 0 && rng() % 8 == 0) f.truncate(kBlock);
    uint64_t index = 1 + rng() % (kBlocks - 1);
    odafs::soak::fill_block(block, {1, index, static_cast<uint64_t>(writer), ++seq});
    f.pwrite(block.data(), kBlock, index * kBlock);
    writes.fetch_add(1);
  }
}

}  // namespace

TEST_CASE("reads filling the server's cache never see half of a concurrent write") {
  TempDir dir;
  // The truncations drop the file's blocks from the cache, so readers fill them from the
  // file again and again while the writers write them.
  ServerProcess server(dir.path(), {"--block-size", "4096", "--cache-mb", "1", "--threads", "4",
                                    "--slow-writes", "200"});
  {
    auto fs = Client::mount(server.url());
    File f = fs->open("f", O_RDWR | O_CREAT, 0644);
    std::vector<unsigned char> block(kBlock);
    odafs::soak::fill_block(block, {1, 0, 9, 0});
    f.pwrite(block.data(), kBlock, 0);
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0}, reads{0}, faults{0};
  std::string first_fault;
  std::mutex fault_mu;
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] { write_into_holes(server.url(), w, stop, writes); });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      MountOptions o;
      o.read_mode = r == 0 ? ReadMode::kPrePosted : ReadMode::kOrdma;
      o.cache_blocks = 0;  // every read goes to the server
      auto fs = Client::mount(server.url(), o);
      std::vector<unsigned char> buf((kBlocks + 1) * kBlock);
      while (!stop.load()) {
        File f = fs->open("f", O_RDONLY);
        size_t n = f.pread(buf.data(), buf.size(), 0);
        std::string fault = odafs::soak::check_file({buf.data(), n}, kBlock, 1);
        reads.fetch_add(1);
        if (!fault.empty()) {
          std::lock_guard lock(fault_mu);
          if (faults.fetch_add(1) == 0) first_fault = fault;
        }
      }
    });
  }
  // The writers and readers race for 4 s: the length of the load, not a wait for anything.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  stop.store(true);
  for (auto& t : threads) t.join();
  INFO("writes ", writes.load(), ", reads ", reads.load(), ", first fault: ", first_fault);
  CHECK(writes.load() > 100);
  CHECK(reads.load() > 100);
  CHECK(faults.load() == 0);
}
