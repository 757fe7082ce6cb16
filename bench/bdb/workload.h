// The Berkeley DB workload of the ODAFS paper's Fig. 5: a database of 60 KiB records and
// an equality join whose result is a long list of keys, whose records the application
// then reads (copying part of each from BDB's cache into its own buffer).
//
// Schema: the primary is a Queue database (records.db) of fixed 60 KiB records in 64 KiB
// pages, one record per page, so that the page of record r is computable (r * 64 KiB):
// that is what lets the application pre-compute the pages it needs and prefetch them. (A
// B-tree primary puts 60 KiB records on overflow pages whose numbers the API does not
// give.) Two B-tree secondaries with sorted duplicates index attributes a = r mod kA
// (by_a.db) and b = r mod kB (by_b.db); the join of a = x and b = y is DB->join over them.
//
// Transactions: BDB's log stays in memory (DB_LOG_IN_MEMORY). With a read hook installed
// (bench/bdb/bdb_odafs.h), BDB 5.3 demands that every read return exactly the bytes asked
// and turns a short one into EAGAIN; its log code reads the header of each log file it has
// just created, which is empty, so a log file through the hooks fails the environment.
// Commits are atomic and isolated; a checkpoint, sync or close makes them durable on the
// server (BDB flushes its cache through the hooks and fsyncs).
//
// Every record is self-describing (fill_record): a header with its number and attributes,
// then bytes that depend on the number and position, so a reader can check it whole.
#pragma once

#include <db.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace odafs::bdb {

constexpr uint32_t kPageSize = 64 * 1024;
constexpr uint32_t kRecordBytes = 60 * 1024;
constexpr uint32_t kA = 2;  // attribute a takes kA values, b kB: kA * kB joins cover all
constexpr uint32_t kB = 3;

inline uint32_t attr_a(uint32_t recno) { return recno % kA; }
inline uint32_t attr_b(uint32_t recno) { return recno % kB; }

// Writes record recno's kRecordBytes into out.
void fill_record(uint32_t recno, char* out);

// A BDB error, with BDB's message.
class DbError : public std::runtime_error {
 public:
  DbError(int code, const std::string& what);
  int code() const { return code_; }

 private:
  int code_;
};

class Database {
 public:
  struct Options {
    std::string home;            // the environment's directory (exists)
    bool create = false;         // make the databases (load)
    bool transactional = false;  // DB_INIT_TXN | DB_INIT_LOG | DB_INIT_LOCK, log in memory
    size_t cache_bytes = 8u << 20;
  };
  // Opens the environment (private: no region files, no mmap) and the three databases.
  // Throws DbError.
  explicit Database(const Options& options);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Puts records first .. first + count - 1 (and their index entries); in one transaction
  // per record when transactional. Throws DbError.
  void load(uint32_t first, uint32_t count);
  // Puts record recno in a transaction and aborts it. REQUIRES: transactional.
  void put_and_abort(uint32_t recno);
  // The record numbers with a == a_value and b == b_value, ascending. Throws DbError.
  std::vector<uint32_t> join(uint32_t a_value, uint32_t b_value);
  // Copies the first len (<= kRecordBytes) bytes of record recno into out, from BDB's cache
  // (a partial get): the application's copy. Returns the bytes copied; 0 when there is no
  // such record. Throws DbError.
  size_t get(uint32_t recno, char* out, size_t len);
  // Flushes BDB's cache (and, transactional, checkpoints). Throws DbError.
  void sync();

  // Where record recno's page starts in records.db.
  static uint64_t page_offset(uint32_t recno) { return uint64_t{recno} * kPageSize; }
  static constexpr const char* kPrimaryFile = "records.db";

 private:
  void close_all();
  // Puts record recno (built in *record, kRecordBytes) and its index entries; when
  // transactional, in a transaction committed or, commit false, aborted. Throws DbError.
  void put_record(uint32_t recno, std::vector<char>* record, bool commit);

  Options options_;
  DB_ENV* env_ = nullptr;
  DB* primary_ = nullptr;
  DB* by_a_ = nullptr;
  DB* by_b_ = nullptr;
};

}  // namespace odafs::bdb
