#pragma once

// What a transaction of the datastore runs statements on, whatever the database engine: the
// seam between the SQL that src/db writes (Tx, db/datastore.h) and an engine (db/engine.h).
// Two implementations: SQLite's (db/sqlite/) and PostgreSQL's (db/postgres/). There is one SQL
// text per statement, written in what both accept (`?` placeholders, ON CONFLICT, columns
// qualified in DO UPDATE, no SQLite-only functions); the PostgreSQL connection turns `?` into
// `$n`. Only the schema migrations differ per engine (db/schema_sqlite_migrations.cc,
// db/schema_postgres.cc).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/error.h"

namespace fp::db {

// A BLOB parameter or column (as opposed to TEXT); the bytes are arbitrary.
struct Blob {
  std::string bytes;
};

using SqlValue = std::variant<std::nullptr_t, int64_t, double, std::string, Blob>;

// Which database a connection talks to. The datastore's SQL is one text for both engines
// except where an operation runs as a single PostgreSQL statement instead of several
// round trips (e.g. db/attach.cc): those ask the transaction which engine it runs on.
enum class Dialect { kSqlite, kPostgres };

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
  // Columns [first, first + count) as a row of their own: for a statement that returns several
  // tables' rows side by side, each decoded by its table's decoder.
  Row Slice(size_t first, size_t count) const;

 private:
  std::vector<SqlValue> values_;
};

// A connection inside an open transaction, as an engine hands it to a transaction's body: one
// virtual call per statement, none per row or parameter. Not thread-safe: the engine gives it
// to one transaction at a time. Errors: Internal for any database error (the message names
// the statement); whether the whole transaction may be retried is the engine's decision, made
// when the body returns the error.
class Connection {
 public:
  virtual ~Connection() = default;

  // Runs one statement with `params` bound in order and returns every row it produced.
  virtual Result<std::vector<Row>> Query(std::string_view sql,
                                         const std::vector<SqlValue>& params) = 0;
  // Runs one statement with `params` bound in order; returns the number of rows it inserted,
  // updated or deleted (meaningful after INSERT, UPDATE and DELETE only).
  virtual Result<int64_t> Exec(std::string_view sql, const std::vector<SqlValue>& params) = 0;
  // A write whose result the transaction does not read: it must change exactly `rows` rows
  // (any number when `rows` is negative), or the transaction fails with `otherwise`. An engine
  // may hold it back and send it with the transaction's next statement or with its COMMIT, in
  // one exchange (PostgreSQL's pipeline): its failure then comes back from that statement or
  // from the commit, and the transaction rolls back. So nothing after it in the body may depend
  // on its having run, and `otherwise` is what the write's caller is told, not the body.
  // `sql` is one INSERT, UPDATE or DELETE without RETURNING (with `rows` negative, also a WITH
  // ... INSERT/UPDATE: a data-modifying WITH cannot be wrapped to count). SQLite's (this
  // default) runs it at once.
  virtual Status ExecLater(std::string_view sql, const std::vector<SqlValue>& params, int64_t rows,
                           const Error& otherwise);
  // A read whose rows the transaction's body does not need: `sink` gets them, on an engine that
  // holds it back (PostgreSQL's) when it goes with the transaction's next statement or with its
  // COMMIT, in one exchange; SQLite's (this default) runs it at once. So it sees the writes held
  // back before it, and its rows are to be trusted only once the transaction committed (the
  // caller learns that through Tx::OnOutcome). A read the database fails fails the
  // transaction; rows the connection cannot decode go to `sink` as that error, the transaction
  // going on.
  // In a write only: a read transaction has no OnOutcome to learn whether it committed, so a
  // read's is refused (Internal, HeldBackReadInARead) on every engine.
  virtual Status QueryLater(std::string_view sql, const std::vector<SqlValue>& params,
                            std::function<void(Result<std::vector<Row>>)> sink) {
    sink(FP_TRY(Query(sql, params)));
    return Ok();
  }
  // The transaction's last statement, in a read: an engine may end the transaction in the same
  // exchange (PostgreSQL's sends COMMIT in one pipeline with it), so that a read of one
  // statement costs one round trip, not two. Its rows are returned only once the transaction
  // ended well (a COMMIT that fails is this statement's failure). Nothing may run after it. In
  // a write, or on an engine without the exchange to save (SQLite's: this default), Query.
  virtual Result<std::vector<Row>> QueryLast(std::string_view sql,
                                             const std::vector<SqlValue>& params) {
    return Query(sql, params);
  }
  // The same statement once for each parameter list, as a read's last statements: an engine
  // may send them all and end the transaction in one exchange (PostgreSQL's), so that reading
  // several rows by key costs one round trip, each by the prepared statement a single read
  // uses. The rows, one list per parameter list in their order, are returned only once the
  // transaction ended well. Nothing may run after them. SQLite's (this default) runs them one
  // by one; so does PostgreSQL's in a write. An empty `params` runs nothing.
  virtual Result<std::vector<std::vector<Row>>> QueryEachLast(
      std::string_view sql, const std::vector<std::vector<SqlValue>>& params) {
    std::vector<std::vector<Row>> out;
    out.reserve(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      out.push_back(
          FP_TRY(i + 1 < params.size() ? Query(sql, params[i]) : QueryLast(sql, params[i])));
    }
    return out;
  }
  // A read in a transaction of its own that begins once this write has committed, sent in the
  // same exchange as the COMMIT (PostgreSQL's pipeline), so that it costs no round trip: its
  // snapshot holds this write's commit and every commit before it. `sink` gets its rows when
  // the COMMIT and the read both succeeded, during the commit, and not at all otherwise: the
  // read's failure does not fail the write, which has committed. In a write only. An engine
  // without the exchange to save (SQLite's: this default) refuses it (Internal): there the
  // caller reads inside the write, or after it.
  virtual Status QueryAfterCommit(std::string_view sql, const std::vector<SqlValue>& params,
                                  std::function<void(std::vector<Row>)> sink) {
    (void)params;
    (void)sink;
    return Fail(Error::Internal(std::string(sql) +
                                ": a read after the commit (QueryAfterCommit) on an engine "
                                "without it"));
  }
  // The transaction joins the write queue (saga::StoreTx::JoinWriteQueue): before its first
  // statement it waits for the transactions that joined before it to end. Nothing once a
  // statement ran, or on an engine that runs writes one at a time (SQLite's: this default).
  virtual void JoinWriteQueue() {}
  virtual Dialect dialect() const = 0;
};

// The errors of the misuses every engine refuses, `engine` ("sqlite", "postgres") naming the
// connection's: a statement after a read's last (QueryLast), and QueryLater in a read.
inline Error StatementAfterTheLast(std::string_view engine, std::string_view sql) {
  return Error::Internal(std::string(engine) + ": " + std::string(sql) +
                         ": a statement after the transaction's last (QueryLast)");
}
inline Error HeldBackReadInARead(std::string_view engine, std::string_view sql) {
  return Error::Internal(std::string(engine) + ": " + std::string(sql) +
                         ": a held-back read (QueryLater) in a read transaction");
}

}  // namespace fp::db
