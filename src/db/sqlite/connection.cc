#include "db/sqlite/connection.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <mutex>
#include <thread>

#include "common/log.h"
#include "db/sqlite/log_vfs.h"

namespace fp::db::sqlite {

namespace {
// How long a statement waits for a lock held by another connection before failing busy.
constexpr int kBusyTimeoutMs = 10000;
}  // namespace

Result<std::unique_ptr<SqliteConnection>> SqliteConnection::Open(const std::string& path,
                                                                 int cache_kib) {
  static std::once_flag configured;
  std::call_once(configured, [] {
    // SQLite's memory statistics put every allocation of every connection behind one global
    // mutex; with a connection per request thread that mutex was contended (futex calls from
    // sqlite3Malloc in profiles). Nothing here reads the statistics. The setting only takes
    // before SQLite initializes; if something already initialized it, it stays as it was.
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  });
  sqlite3* db = nullptr;
  // "unix-excl": this process takes the database file for itself (the server's data directory
  // lock already keeps any other server out), so the connections of this process coordinate
  // in memory: the log's index lives on the heap instead of a shared -shm file, and a read
  // transaction takes no file lock. With the default VFS every read and write transaction
  // took and dropped fcntl locks, system calls that a virtual machine makes costly. Wrapped
  // so that a log frame is one write, not two (sqlite/log_vfs.h).
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           LogVfsName());
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return Fail(Error::Internal(fmt::format("cannot open database {}: {}", path, msg)));
  }
  std::unique_ptr<SqliteConnection> conn(new SqliteConnection(db));
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  // temp_store=MEMORY keeps statement and savepoint journals (every write in a group-commit
  // batch runs under a savepoint) in memory: they only matter while their transaction is open,
  // and a temporary file for each costs an open, an unlink and page writes.
  FP_CHECK_OK(conn->ExecScript(
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; "
      "PRAGMA temp_store=MEMORY;"));
  if (cache_kib > 0)
    FP_CHECK_OK(conn->ExecScript(fmt::format("PRAGMA cache_size=-{};", cache_kib)));
  return conn;
}

void SqliteConnection::Interrupt() { sqlite3_interrupt(db_); }

SqliteConnection::~SqliteConnection() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

void SqliteConnection::SetWalHook(std::function<void(int)> hook) {
  wal_hook_ = std::move(hook);
  sqlite3_wal_hook(
      db_,
      [](void* self, sqlite3*, const char*, int frames) {
        static_cast<SqliteConnection*>(self)->wal_hook_(frames);
        return SQLITE_OK;
      },
      this);
}

Status SqliteConnection::CheckpointPassive() {
  last_error_busy_ = false;
  int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
  if (rc != SQLITE_OK) return Fail(SqlError("checkpoint", rc));
  return Ok();
}

Status SqliteConnection::CheckpointRestart(std::chrono::microseconds budget, const Clock& clock) {
  last_error_busy_ = false;
  // The connection's 10 s busy timeout would let a long read stall every write queued behind
  // this checkpoint: wait for at most `budget` instead, in short sleeps.
  struct Wait {
    const Clock& clock;
    MonoTime deadline;
  } wait{clock, clock.Deadline(budget)};
  sqlite3_busy_handler(
      db_,
      [](void* arg, int) -> int {
        auto& w = *static_cast<Wait*>(arg);
        if (w.clock.Monotonic() >= w.deadline) return 0;
        w.clock.SleepFor(std::chrono::microseconds(50));
        return 1;
      },
      &wait);
  int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_RESTART, nullptr, nullptr);
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  if (rc != SQLITE_OK) return Fail(SqlError("checkpoint (restart)", rc));
  return Ok();
}

Error SqliteConnection::SqlError(std::string_view what, int rc) {
  const int primary = rc & 0xff;
  last_error_busy_ = primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
  if (primary == SQLITE_INTERRUPT) interrupted_ever_ = true;
  std::string detail = fmt::format("sqlite: {}: {} ({})", what, sqlite3_errmsg(db_), rc);
  // A disk that does not take writes: a full one, or one failing to write or sync. Nothing
  // was written, and the same request succeeds once the disk takes writes again: 503 (retry),
  // and saga recovery keeps retrying rather than giving the saga up as stuck. Other I/O errors
  // (reads, a corrupt file) stay Internal. The client is told what it can act on; the log has
  // the file and SQLite's words.
  const bool full = primary == SQLITE_FULL;
  if (full || rc == SQLITE_IOERR_WRITE || rc == SQLITE_IOERR_FSYNC ||
      rc == SQLITE_IOERR_DIR_FSYNC || rc == SQLITE_IOERR_TRUNCATE) {
    const char* file = sqlite3_db_filename(db_, "main");
    LogEvent("error", "the database cannot be written",
             {{"file", file && *file ? file : ""}, {"error", detail}});
    return Error::Unavailable(
        fmt::format("the database cannot be written: {}; retry once it takes writes again",
                    full ? "its disk is full" : "its disk failed a write"),
        5);
  }
  return Error::Internal(std::move(detail));
}

Status SqliteConnection::ExecScript(std::string_view sql) {
  last_error_busy_ = false;
  if (sql.find(';') == std::string_view::npos) {
    // One statement (BEGIN, COMMIT, SAVEPOINT, RELEASE ... run once or more per transaction):
    // prepared once and kept, instead of parsed again at every call.
    auto it = statements_.find(sql);
    if (it == statements_.end()) {
      sqlite3_stmt* stmt = nullptr;
      int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                  SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
      if (rc != SQLITE_OK) return Fail(SqlError(sql.substr(0, 80), rc));
      if (stmt == nullptr) return Ok();  // only whitespace or a comment
      it = statements_.emplace(std::string(sql), stmt).first;
    }
    sqlite3_stmt* stmt = it->second;
    int rc = SQLITE_ROW;
    while (rc == SQLITE_ROW) rc = sqlite3_step(stmt);
    Status result = Ok();
    if (rc != SQLITE_DONE) result = Fail(SqlError(sql.substr(0, 80), rc));
    sqlite3_reset(stmt);
    return result;
  }
  const std::string text(sql);  // sqlite3_exec wants it terminated
  char* err = nullptr;
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    sqlite3_free(err);
    return Fail(SqlError(text.substr(0, 80), rc));
  }
  return Ok();
}

Status SqliteConnection::BeginRead() {
  reading_ = true;
  ended_ = false;
  return ExecScript("BEGIN");
}

Status SqliteConnection::QueryLater(std::string_view sql, const std::vector<SqlValue>& params,
                                    std::function<void(Result<std::vector<Row>>)> sink) {
  if (reading_) return Fail(HeldBackReadInARead("sqlite", sql.substr(0, 80)));
  return Connection::QueryLater(sql, params, std::move(sink));
}

Result<std::vector<Row>> SqliteConnection::QueryLast(std::string_view sql,
                                                     const std::vector<SqlValue>& params) {
  auto rows = FP_TRY(Query(sql, params));
  if (reading_) ended_ = true;
  return rows;
}

Result<std::vector<Row>> SqliteConnection::Query(std::string_view sql,
                                                 const std::vector<SqlValue>& params) {
  if (ended_) return Fail(StatementAfterTheLast("sqlite", sql.substr(0, 80)));
  last_error_busy_ = false;
  sqlite3_stmt* stmt = nullptr;
  if (auto it = statements_.find(sql); it != statements_.end()) {
    stmt = it->second;
  } else {
    int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return Fail(SqlError(fmt::format("prepare {}", sql), rc));
    statements_.emplace(std::string(sql), stmt);
  }
  // The values are bound without a copy (SQLITE_STATIC): `params` outlives the statement's
  // run, and the statement lets go of them on every way out of this function.
  struct Unbind {
    sqlite3_stmt* stmt;
    ~Unbind() {
      sqlite3_reset(stmt);
      sqlite3_clear_bindings(stmt);
    }
  } unbind{stmt};
  sqlite3_reset(stmt);
  for (size_t i = 0; i < params.size(); ++i) {
    int idx = static_cast<int>(i) + 1;
    const SqlValue& p = params[i];
    int rc = SQLITE_OK;
    if (std::holds_alternative<std::nullptr_t>(p)) {
      rc = sqlite3_bind_null(stmt, idx);
    } else if (auto* n = std::get_if<int64_t>(&p)) {
      rc = sqlite3_bind_int64(stmt, idx, *n);
    } else if (auto* d = std::get_if<double>(&p)) {
      rc = sqlite3_bind_double(stmt, idx, *d);
    } else if (auto* s = std::get_if<std::string>(&p)) {
      rc = sqlite3_bind_text(stmt, idx, s->data(), static_cast<int>(s->size()), SQLITE_STATIC);
    } else if (auto* b = std::get_if<Blob>(&p)) {
      rc = sqlite3_bind_blob(stmt, idx, b->bytes.data(), static_cast<int>(b->bytes.size()),
                             SQLITE_STATIC);
    }
    if (rc != SQLITE_OK) return Fail(SqlError("bind", rc));
  }
  std::vector<Row> rows;
  for (;;) {
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return Fail(SqlError(sql, rc));
    int n = sqlite3_column_count(stmt);
    std::vector<SqlValue> values;
    values.reserve(static_cast<size_t>(n));
    for (int c = 0; c < n; ++c) {
      switch (sqlite3_column_type(stmt, c)) {
        case SQLITE_INTEGER:
          values.emplace_back(static_cast<int64_t>(sqlite3_column_int64(stmt, c)));
          break;
        case SQLITE_FLOAT:
          values.emplace_back(sqlite3_column_double(stmt, c));
          break;
        case SQLITE_TEXT:
          values.emplace_back(
              std::string(reinterpret_cast<const char*>(sqlite3_column_text(stmt, c)),
                          static_cast<size_t>(sqlite3_column_bytes(stmt, c))));
          break;
        case SQLITE_BLOB: {
          const char* data = static_cast<const char*>(sqlite3_column_blob(stmt, c));
          values.emplace_back(
              Blob{std::string(data, static_cast<size_t>(sqlite3_column_bytes(stmt, c)))});
          break;
        }
        default:
          values.emplace_back(nullptr);
      }
    }
    rows.emplace_back(std::move(values));
  }
  return rows;
}

Result<int64_t> SqliteConnection::Exec(std::string_view sql, const std::vector<SqlValue>& params) {
  FP_TRY(Query(sql, params));
  return Changes();
}

int64_t SqliteConnection::Changes() const { return sqlite3_changes64(db_); }

bool SqliteConnection::InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }

}  // namespace fp::db::sqlite
