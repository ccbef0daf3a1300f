#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "db/connection.h"

struct sqlite3;
struct sqlite3_stmt;

namespace fp::db::sqlite {

// A SQLite connection: the Connection of the SQLite engine (sqlite/engine.h), and what the
// engine itself uses to begin, commit and checkpoint. Not thread-safe: one thread uses it at a
// time (the engine's reader pool hands each read its own connection; writes use the write
// lane's).
class SqliteConnection final : public Connection {
 public:
  // Opens (creating if needed) the database file and applies the connection settings the
  // datastore relies on: WAL, synchronous=NORMAL, foreign keys, busy timeout.
  //
  // synchronous=NORMAL: a commit writes its WAL frames without waiting for the disk, and the
  // WAL is synced before each checkpoint (so the database file never gets ahead of a durable
  // log). The engine (sqlite/engine.h) makes each commit durable itself, syncing the WAL once for
  // every commit that finished while the previous sync ran (group commit).
  // `cache_kib`: its page cache's bound (SQLite's default, 2,000 KiB, when 0).
  static Result<std::unique_ptr<SqliteConnection>> Open(const std::string& path, int cache_kib = 0);
  ~SqliteConnection();
  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;

  // Runs one or more statements that take no parameters and return no rows. A text without ';'
  // (one statement) is prepared once and cached like Query's.
  Status ExecScript(std::string_view sql);
  // Runs one statement with parameters and returns every row. Prepared statements are cached
  // per SQL text.
  Result<std::vector<Row>> Query(std::string_view sql,
                                 const std::vector<SqlValue>& params) override;
  // Query, then Changes().
  Result<int64_t> Exec(std::string_view sql, const std::vector<SqlValue>& params) override;
  // Query; in a read begun by BeginRead, nothing may run after it in the transaction (a
  // statement after it fails Internal), as on PostgreSQL, where it carries the COMMIT.
  Result<std::vector<Row>> QueryLast(std::string_view sql,
                                     const std::vector<SqlValue>& params) override;
  // BEGIN of a read transaction (the engine's Read), where QueryLast ends what may run.
  Status BeginRead();
  // Connection's, refused in a read (as on PostgreSQL).
  Status QueryLater(std::string_view sql, const std::vector<SqlValue>& params,
                    std::function<void(Result<std::vector<Row>>)> sink) override;
  Dialect dialect() const override { return Dialect::kSqlite; }
  // Rows changed by the last INSERT/UPDATE/DELETE.
  int64_t Changes() const;
  // True while a transaction is open (SQLite may end one by itself after some errors).
  bool InTransaction() const;
  // Replaces SQLite's automatic checkpoint on this connection: after each commit, `hook` gets
  // the number of frames now in the write-ahead log (called on the committing thread).
  void SetWalHook(std::function<void(int frames)> hook);
  // A PASSIVE checkpoint: copies what it can of the log into the database without waiting for
  // readers or writers.
  Status CheckpointPassive();
  // A RESTART checkpoint: copies the rest of the log into the database, waiting up to `budget`
  // for readers still using the log, so that the next write starts the log over from its
  // beginning instead of appending. Fails busy (the log left as it is) when a reader or another
  // writer outlasts the budget. The connection must not be in a transaction.
  Status CheckpointRestart(std::chrono::microseconds budget, const Clock& clock);
  // Stops the statement running on this connection now (it fails "interrupted", and a write
  // inside a transaction rolls the transaction back): the one call that is safe from another
  // thread while the connection lives. Does nothing when no statement runs.
  void Interrupt();
  // True if the last failed call failed because the database was locked (SQLITE_BUSY): the
  // whole transaction may be retried.
  bool last_error_was_busy() const { return last_error_busy_; }
  // A statement on this connection was stopped by Interrupt() (SQLITE_INTERRUPT) since it
  // opened.
  bool interrupted_ever() const { return interrupted_ever_; }

 private:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}
  Error SqlError(std::string_view what, int rc);

  // Prepared statements by their text, found by a string_view of it (no copy per statement).
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*, TextHash, std::equal_to<>> statements_;
  bool last_error_busy_ = false;
  bool interrupted_ever_ = false;
  bool reading_ = false;  // since BeginRead: the connection runs reads only
  bool ended_ = false;    // QueryLast ran in this read
  std::function<void(int)> wal_hook_;
};

}  // namespace fp::db::sqlite
