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

#include "common/error.h"

struct sqlite3;
struct sqlite3_stmt;

namespace fp::db {

// A BLOB parameter or column (as opposed to TEXT); the bytes are arbitrary.
struct Blob {
  std::string bytes;
};

using SqlValue = std::variant<std::nullptr_t, int64_t, double, std::string, Blob>;

// One result row, materialised so it outlives the statement that produced it.
class Row {
 public:
  explicit Row(std::vector<SqlValue> values) : values_(std::move(values)) {}

  bool IsNull(size_t i) const { return std::holds_alternative<std::nullptr_t>(values_.at(i)); }
  int64_t Int(size_t i) const;
  double Double(size_t i) const;
  // TEXT or BLOB column as bytes.
  const std::string& Text(size_t i) const;
  std::optional<std::string> OptText(size_t i) const {
    return IsNull(i) ? std::nullopt : std::optional<std::string>(Text(i));
  }

 private:
  std::vector<SqlValue> values_;
};

// A SQLite connection. Not thread-safe: one thread uses it at a time (the Datastore's pool
// hands each transaction its own connection).
class SqliteConnection {
 public:
  // Opens (creating if needed) the database file and applies the connection settings the
  // datastore relies on: WAL, synchronous=NORMAL, foreign keys, busy timeout.
  //
  // synchronous=NORMAL: a commit writes its WAL frames without waiting for the disk, and the
  // WAL is synced before each checkpoint (so the database file never gets ahead of a durable
  // log). The Datastore makes each commit durable itself, syncing the WAL once for every
  // commit that finished while the previous sync ran (group commit).
  static Result<std::unique_ptr<SqliteConnection>> Open(const std::string& path);
  ~SqliteConnection();
  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;

  // Runs one or more statements that take no parameters and return no rows. A text without ';'
  // (one statement) is prepared once and cached like Query's.
  Status ExecScript(std::string_view sql);
  // Runs one statement with parameters and returns every row. Prepared statements are cached
  // per SQL text.
  Result<std::vector<Row>> Query(std::string_view sql, const std::vector<SqlValue>& params);
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
  Status CheckpointRestart(std::chrono::microseconds budget);
  // True if the last failed call failed because the database was locked (SQLITE_BUSY): the
  // whole transaction may be retried.
  bool last_error_was_busy() const { return last_error_busy_; }

 private:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}
  Error SqlError(std::string_view what, int rc);

  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
  bool last_error_busy_ = false;
  std::function<void(int)> wal_hook_;
};

}  // namespace fp::db
