// Berkeley DB on libodafs: BDB's file I/O routed to a Client through db_env_set_func_*.
//
//   auto client = odafs::Client::mount("odafs://127.0.0.1:2049/");
//   std::string root = odafs::bdb::Hooks::install(client.get());
//   db_env_create(&env, 0);
//   env->open(env, (root + "/db").c_str(), DB_CREATE | DB_INIT_MPOOL | DB_PRIVATE, 0);
//
// BDB names files by local-looking paths under `root`, a local directory install()
// makes; the hooks serve each as the server path below root ("/db/x.db" above): open,
// close, read/write after seek, pread/pwrite, fsync, ftruncate, ioinfo (size), exists,
// rename, unlink, dirlist/dirfree. A path outside root fails ENOENT. A failed call
// returns BDB's failure with errno set to the libodafs error's errno (ETIMEDOUT,
// ECONNREFUSED, ENOENT, ...), which BDB reports as its own error: nothing throws through
// BDB. Use DB_PRIVATE environments (no region files) and DB_NOMMAP.
//
// Why the local root: BDB 5.3 takes a new database's file id from stat(2) of its path,
// which no hook covers. So each file created through the hooks gets an empty stand-in at
// its path under root, where stat finds a distinct inode. Existing databases carry their
// id in their meta page and need none. uninstall() removes root.
//
// BDB also calls fcntl(F_SETFD) on each descriptor it opens (no hook either), so every
// open file is given a real descriptor (of /dev/null) that names it here.
//
// Prefetch: a Prefetcher (bench/bdb/prefetch.h) attached to a server path serves the
// reads BDB makes of that file from the asynchronous reads it already has in flight.
//
// Thread-safety: the hooks are process-wide (BDB's are); they may be called from any
// thread, each open file by one thread at a time (BDB without DB_THREAD).
#pragma once

#include <memory>
#include <string>

#include "client/client.h"

namespace odafs::bdb {

class Prefetcher;

class Hooks {
 public:
  // Routes BDB's I/O to client; returns the local root BDB's paths go under. REQUIRES: no
  // BDB environment is open; client outlives every BDB handle opened before uninstall().
  // Throws Error when the root cannot be made.
  static std::string install(Client* client);
  // Restores BDB's own I/O. REQUIRES: every BDB handle opened since install is closed.
  static void uninstall();

  // BDB's reads of `path` (a server path, as BDB names it) are first offered to p.
  // REQUIRES: p outlives the files BDB opens afterwards, or is detached (nullptr) first.
  static void attach_prefetcher(const std::string& path, Prefetcher* p);

  // Reads BDB made, and of them how many a prefetcher served.
  struct Counters {
    uint64_t reads = 0;
    uint64_t prefetched = 0;
  };
  static Counters counters();
};

}  // namespace odafs::bdb
