#pragma once

// A PostgreSQL connection: the Connection of the PostgreSQL engine (postgres/engine.h), and
// what the engine itself uses to begin and commit.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "db/connection.h"
#include "db/postgres/libpq.h"

namespace fp::db::postgres {

// One libpq connection. The datastore's SQL text is SQLite's dialect with `?` placeholders: it
// is translated to `$n` once and prepared once per connection for each pair (SQL text,
// parameter types), then run as a prepared statement (a transaction's first statement, and its
// prepare, in one pipeline with the transaction's BEGIN: DeferBegin). Parameters go as int8
// (int64), float8 (double), text (std::string), bytea in binary (Blob), and untyped NULL; result
// columns come back by type: int2/int4/int8, integral numeric and bool (0/1) as int64,
// float4/float8 and other numeric as double, bytea as Blob, everything else as text.
//
// Failures are remembered for the engine to decide on: broken() once the connection is lost,
// retryable() once a statement failed with a serialization failure (40001), a deadlock (40P01)
// or a timeout (57014, 55P03) since ClearRetryable(). Not thread-safe: one transaction uses it at a
// time.
class PgConnection final : public Connection {
 public:
  // Connects to `url` (a libpq URL or keyword string; unless it names them, connect_timeout is
  // 5 s, TCP keepalives probe after 5 s idle every 2 s, 3 times, and tcp_user_timeout is 10 s).
  // Errors: Unavailable when no server accepts the connection.
  static Result<std::unique_ptr<PgConnection>> Open(const std::string& url);
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  Result<std::vector<Row>> Query(std::string_view sql,
                                 const std::vector<SqlValue>& params) override;
  // Returns the rows the statement affected (PQcmdTuples).
  Result<int64_t> Exec(std::string_view sql, const std::vector<SqlValue>& params) override;
  Dialect dialect() const override { return Dialect::kPostgres; }
  // Runs statements that take no parameters (BEGIN ..., COMMIT, DDL; several separated by ';'
  // run in one round trip) through the simple query protocol, after a pending begin
  // (DeferBegin) in the same round trip. Internal on failure.
  Status Run(std::string_view sql);
  // The statements that open a transaction (BEGIN ..., SET LOCAL ...; each without
  // parameters), held back and sent with the transaction's first statement, in the same
  // exchange (libpq's pipeline mode), instead of in an exchange of their own. Until that
  // statement the server has not begun the transaction.
  void DeferBegin(std::vector<std::string> statements) { pending_begin_ = std::move(statements); }
  // DeferBegin's statements were never sent (no statement ran): there is nothing to end.
  bool begin_pending() const { return !pending_begin_.empty(); }
  void DropPendingBegin() { pending_begin_.clear(); }

  // The connection's socket, for tests that break it from outside.
  int TEST_socket() const { return PQsocket(conn_.get()); }
  // The value of a connection option in use (PQconninfo), e.g. "keepalives_idle"; "" if unset.
  std::string Option(std::string_view keyword) const;
  // The connection was lost (libpq reports it bad), or left in a state no statement can follow
  // (a pipeline it could not leave): nothing more can run on it.
  bool broken() const { return unusable_ || PQstatus(conn_.get()) != CONNECTION_OK; }
  // A statement failed with 40001, 40P01, 57014 or 55P03 since ClearRetryable: the transaction
  // may be retried.
  bool retryable() const { return retryable_; }
  void ClearRetryable() { retryable_ = false; }
  // Inside a transaction that a failed statement aborted (every statement but ROLLBACK fails,
  // and COMMIT rolls back).
  bool failed_transaction() const { return PQtransactionStatus(conn_.get()) == PQTRANS_INERROR; }
  // Identify the server process serving this connection (pg_stat_activity's pid and
  // backend_start), read when connecting, so that after losing the connection the engine can
  // make sure that process is gone before deciding what it committed.
  int backend_pid() const { return backend_pid_; }
  const std::string& backend_start() const { return backend_start_; }
  // Every exchange with the server from now on (a statement, a prepare, a simple query
  // string) adds one to `*counter`, which must outlive the connection.
  void CountRoundTripsIn(std::atomic<int64_t>* counter) { round_trips_ = counter; }

 private:
  explicit PgConnection(PgConnPtr conn) : conn_(std::move(conn)) {}
  Result<PgResultPtr> Execute(std::string_view sql, const std::vector<SqlValue>& params);
  // The pending begin, then `name`'s prepare if `translated` is not empty, then its execution,
  // in one exchange. Returns the execution's result or the first failure; `prepared` says
  // whether the prepare succeeded (the server then holds `name`, whatever failed after it).
  Result<PgResultPtr> ExecuteAfterBegin(std::string_view sql, const std::string& name,
                                        const std::string& translated,
                                        const std::vector<Oid>& types,
                                        const std::vector<const char*>& values,
                                        const std::vector<int>& lengths,
                                        const std::vector<int>& formats, bool& prepared);
  Error Failure(std::string_view sql, const PGresult* r);

  PgConnPtr conn_;
  void RoundTrip() {
    if (round_trips_ != nullptr) round_trips_->fetch_add(1, std::memory_order_relaxed);
  }

  bool retryable_ = false;
  std::atomic<int64_t>* round_trips_ = nullptr;
  int backend_pid_ = 0;
  std::string backend_start_;
  // Prepared statement names by SQL text + parameter type signature.
  std::unordered_map<std::string, std::string> prepared_;
  std::vector<std::string> pending_begin_;  // see DeferBegin
  bool unusable_ = false;                   // see broken()
};

}  // namespace fp::db::postgres
