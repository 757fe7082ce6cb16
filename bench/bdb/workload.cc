#include "bench/bdb/workload.h"

#include <cstring>
#include <stdexcept>

namespace odafs::bdb {
namespace {

void check(int rc, const char* what) {
  if (rc != 0) throw DbError(rc, what);
}

// Secondary keys come from the record's header (recno, a, b as host-order u32).
int key_a(DB*, const DBT*, const DBT* data, DBT* out) {
  std::memset(out, 0, sizeof(*out));
  out->data = static_cast<char*>(data->data) + 4;
  out->size = 4;
  return 0;
}

int key_b(DB*, const DBT*, const DBT* data, DBT* out) {
  std::memset(out, 0, sizeof(*out));
  out->data = static_cast<char*>(data->data) + 8;
  out->size = 4;
  return 0;
}

}  // namespace

DbError::DbError(int code, const std::string& what)
    : std::runtime_error(what + ": " + db_strerror(code)), code_(code) {}

void fill_record(uint32_t recno, char* out) {
  uint32_t header[3] = {recno, attr_a(recno), attr_b(recno)};
  std::memcpy(out, header, sizeof(header));
  uint64_t x = recno * 0x9E3779B97F4A7C15ull + 1;
  for (uint32_t i = sizeof(header); i < kRecordBytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out + i, &x, std::min<uint32_t>(8, kRecordBytes - i));
  }
}

Database::Database(const Options& options) : options_(options) {
  try {
    check(db_env_create(&env_, 0), "db_env_create");
    env_->set_errfile(env_, stderr);  // BDB's own account of an error, beside ours
    env_->set_errpfx(env_, "bdb");
    check(env_->set_cachesize(env_, 0, static_cast<u_int32_t>(options.cache_bytes), 1),
          "set_cachesize");
    check(env_->set_flags(env_, DB_NOMMAP, 1), "set_flags(DB_NOMMAP)");
    u_int32_t flags = DB_CREATE | DB_PRIVATE | DB_INIT_MPOOL;
    if (options.transactional) {
      // The log in memory: BDB's log code reads the header of a log file it has just
      // created and, with a read hook installed, takes the short read for an error
      // (workload.h). Commits are atomic; a checkpoint or close makes them durable.
      flags |= DB_INIT_TXN | DB_INIT_LOG | DB_INIT_LOCK;
      check(env_->log_set_config(env_, DB_LOG_IN_MEMORY, 1), "log_set_config(DB_LOG_IN_MEMORY)");
      check(env_->set_lg_bsize(env_, 16u << 20), "set_lg_bsize");
    }
    check(env_->open(env_, options.home.c_str(), flags, 0), "DB_ENV->open");

    u_int32_t open_flags = options.create ? DB_CREATE : DB_RDONLY;
    if (options.transactional) open_flags = DB_CREATE | DB_AUTO_COMMIT;
    check(db_create(&primary_, env_, 0), "db_create");
    check(primary_->set_pagesize(primary_, kPageSize), "set_pagesize");
    check(primary_->set_re_len(primary_, kRecordBytes), "set_re_len");
    check(primary_->open(primary_, nullptr, kPrimaryFile, nullptr, DB_QUEUE, open_flags, 0644),
          "open records.db");
    DB** secondaries[2] = {&by_a_, &by_b_};
    const char* names[2] = {"by_a.db", "by_b.db"};
    for (int i = 0; i < 2; ++i) {
      check(db_create(secondaries[i], env_, 0), "db_create");
      DB* s = *secondaries[i];
      check(s->set_flags(s, DB_DUPSORT), "set_flags(DB_DUPSORT)");
      check(s->open(s, nullptr, names[i], nullptr, DB_BTREE, open_flags, 0644), names[i]);
      // Associated only when records are put: readers use the index as a plain database.
      if (options.create || options.transactional) {
        check(primary_->associate(primary_, nullptr, s, i == 0 ? key_a : key_b,
                                  options.transactional ? DB_AUTO_COMMIT : 0),
              "associate");
      }
    }
  } catch (...) {
    close_all();
    throw;
  }
}

Database::~Database() { close_all(); }

void Database::close_all() {
  // Secondaries first (BDB's rule for associated databases), then the primary.
  bool opened = primary_ != nullptr;
  for (DB** d : {&by_a_, &by_b_, &primary_}) {
    if (*d != nullptr) (*d)->close(*d, 0);
    *d = nullptr;
  }
  if (env_ != nullptr && options_.transactional && opened) {
    // The log goes with the environment: the pages' LSNs must not point into it, or the
    // next environment refuses the files ("LSN past end of log").
    for (const char* f : {kPrimaryFile, "by_a.db", "by_b.db"}) {
      int rc = env_->lsn_reset(env_, f, 0);
      if (rc != 0) env_->err(env_, rc, "lsn_reset %s", f);
    }
  }
  if (env_ != nullptr) env_->close(env_, 0);
  env_ = nullptr;
}

void Database::put_record(uint32_t recno, std::vector<char>* record, bool commit) {
  fill_record(recno, record->data());
  db_recno_t r = recno;
  DBT key{}, data{};
  key.data = &r;
  key.size = sizeof(r);
  data.data = record->data();
  data.size = kRecordBytes;
  DB_TXN* txn = nullptr;
  if (options_.transactional) check(env_->txn_begin(env_, nullptr, &txn, 0), "txn_begin");
  int rc = primary_->put(primary_, txn, &key, &data, 0);
  if (txn != nullptr) {
    int end = rc == 0 && commit ? txn->commit(txn, 0) : txn->abort(txn);
    if (rc == 0) rc = end;
  }
  check(rc, commit ? "put" : "put (aborted)");
}

void Database::put_and_abort(uint32_t recno) {
  if (!options_.transactional) throw DbError(EINVAL, "put_and_abort: not transactional");
  std::vector<char> record(kRecordBytes);
  put_record(recno, &record, /*commit=*/false);
}

void Database::load(uint32_t first, uint32_t count) {
  std::vector<char> record(kRecordBytes);
  for (uint32_t r = first; r < first + count; ++r) put_record(r, &record, /*commit=*/true);
}

std::vector<uint32_t> Database::join(uint32_t a_value, uint32_t b_value) {
  DBC* cursors[3] = {nullptr, nullptr, nullptr};
  DBC* joined = nullptr;
  std::vector<uint32_t> out;
  auto close = [&] {
    if (joined != nullptr) joined->close(joined);
    for (DBC* c : cursors) {
      if (c != nullptr) c->close(c);
    }
  };
  try {
    uint32_t values[2] = {a_value, b_value};
    DB* indexes[2] = {by_a_, by_b_};
    for (int i = 0; i < 2; ++i) {
      check(indexes[i]->cursor(indexes[i], nullptr, &cursors[i], 0), "cursor");
      DBT key{}, data{};
      key.data = &values[i];
      key.size = sizeof(values[i]);
      int rc = cursors[i]->get(cursors[i], &key, &data, DB_SET);
      if (rc == DB_NOTFOUND) {
        close();
        return out;
      }
      check(rc, "cursor DB_SET");
    }
    check(primary_->join(primary_, cursors, &joined, 0), "join");
    for (;;) {
      DBT key{}, data{};
      int rc = joined->get(joined, &key, &data, DB_JOIN_ITEM);  // keys only
      if (rc == DB_NOTFOUND) break;
      check(rc, "join get");
      db_recno_t recno;
      std::memcpy(&recno, key.data, sizeof(recno));
      out.push_back(recno);
    }
  } catch (...) {
    close();
    throw;
  }
  close();
  return out;
}

size_t Database::get(uint32_t recno, char* out, size_t len) {
  db_recno_t r = recno;
  DBT key{}, data{};
  key.data = &r;
  key.size = sizeof(r);
  data.data = out;
  data.ulen = static_cast<u_int32_t>(len);
  data.dlen = static_cast<u_int32_t>(len);
  data.doff = 0;
  data.flags = DB_DBT_USERMEM | DB_DBT_PARTIAL;
  int rc = primary_->get(primary_, nullptr, &key, &data, 0);
  if (rc == DB_NOTFOUND || rc == DB_KEYEMPTY) return 0;
  check(rc, "get");
  return data.size;
}

void Database::sync() {
  for (DB* d : {primary_, by_a_, by_b_}) check(d->sync(d, 0), "sync");
  if (options_.transactional) check(env_->txn_checkpoint(env_, 0, 0, 0), "txn_checkpoint");
}

}  // namespace odafs::bdb
