#pragma once

// A PostgreSQL connection: the Connection of the PostgreSQL engine (postgres/engine.h), and
// what the engine itself uses to begin and commit.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
// or a timeout (57014, 55P03) since StartAttempt(). Not thread-safe: one transaction uses it at a
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
  // Held back (with a copy of `params`) and sent in one pipeline with the next statement, or
  // with Commit. With `rows` >= 0 the statement is sent as `WITH w AS (sql RETURNING 1) SELECT
  // fp_expect_rows(count(*), rows) FROM w`, so that the server itself fails the transaction
  // when the count differs (SQLSTATE FPX01, answered as `otherwise`): a COMMIT in the same
  // pipeline is then never run.
  Status ExecLater(std::string_view sql, const std::vector<SqlValue>& params, int64_t rows,
                   const Error& otherwise) override;
  // In a read, all but the last held back and sent with the last and the COMMIT in one exchange;
  // a misuse refused part way leaves nothing of the call held back.
  Result<std::vector<std::vector<Row>>> QueryEachLast(
      std::string_view sql, const std::vector<std::vector<SqlValue>>& params) override;
  // Held back like ExecLater's writes; `sink` gets its rows when the exchange that carries it
  // answers (not if that exchange fails before it).
  Status QueryLater(std::string_view sql, const std::vector<SqlValue>& params,
                    std::function<void(Result<std::vector<Row>>)> sink) override;
  // After the COMMIT, in its pipeline: BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY, the
  // begin's SET LOCAL timeouts again, each such read, COMMIT. A read that fails is rolled back
  // after the exchange; it marks nothing retryable (the write's outcome is the COMMIT's).
  Status QueryAfterCommit(std::string_view sql, const std::vector<SqlValue>& params,
                          std::function<void(std::vector<Row>)> sink) override;
  // In a read transaction: the statement, then COMMIT, in one pipeline with whatever is held
  // back (the begin); the transaction has then ended (ended()). In a write: Query.
  Result<std::vector<Row>> QueryLast(std::string_view sql,
                                     const std::vector<SqlValue>& params) override;
  Dialect dialect() const override { return Dialect::kPostgres; }
  // QueryLast committed the transaction: there is nothing left to commit or roll back.
  bool ended() const { return ended_; }
  // Runs statements that take no parameters (BEGIN ..., COMMIT, DDL; several separated by ';'
  // run in one round trip) through the simple query protocol, after a pending begin
  // (DeferBegin) in the same round trip. With statements held back (ExecLater), `sql` must be
  // one statement: it goes in their pipeline. Internal on failure.
  Status Run(std::string_view sql);
  // COMMIT, with whatever is held back (the begin, ExecLater's writes) in the same exchange.
  // A held-back write that fails leaves the transaction open and failed (in_transaction()):
  // the caller rolls it back.
  Status Commit() { return Run("COMMIT"); }
  // The statements that open a transaction (BEGIN ..., SET LOCAL ...; each without
  // parameters), held back and sent with the transaction's first statement, in the same
  // exchange (libpq's pipeline mode), instead of in an exchange of their own. Until that
  // statement the server has not begun the transaction.
  // `snapshot_at`: the index of the first of them that takes the transaction's snapshot (a
  // table lock asked for later, JoinWriteQueue, goes before it); `write`: a write transaction.
  void DeferBegin(std::vector<std::string> statements, size_t snapshot_at, bool write);
  // A statement with parameters added to the pending opening (after DeferBegin's): prepared
  // like the body's, held back with the rest of the opening, and like it never sent when the
  // body runs no statement (the engine's commit marker).
  Status DeferOpening(std::string_view sql, const std::vector<SqlValue>& params);
  // LOCK TABLE retry_queue IN EXCLUSIVE MODE before the snapshot, if the begin is a write's,
  // still pending and not queued already: the write queue that queued retries wait in too.
  void JoinWriteQueue() override;
  // DeferBegin's statements were never sent (no statement ran, not even one held back): there
  // is nothing to end.
  bool begin_pending() const { return begin_pending_; }
  // Whether the run since DeferBegin sent its request for the write queue's lock
  // (JoinWriteQueue): it waited its turn there.
  bool queue_sent() const { return queue_sent_; }
  // The failure of a held-back write (ExecLater) since DeferBegin, as the statement that carried
  // it answered: for the engine, when a body did not pass that answer on.
  const std::optional<Error>& held_back_failure() const { return held_back_failure_; }
  // ExecLater's writes are waiting for the next exchange.
  bool writes_held_back() const { return pending_.size() > begin_count_; }
  // Forgets everything held back (nothing of it was sent): before a ROLLBACK, or instead of
  // one when the begin is still pending.
  void DropPending();
  // The server has a transaction open on this connection (in progress or failed).
  bool in_transaction() const { return PQtransactionStatus(conn_.get()) != PQTRANS_IDLE; }

  // A function that asks the server to cancel the statement this connection runs at the time
  // (it then fails with 57014), callable from any thread, even after the connection closed (it
  // holds libpq's cancel object of its own; the server then finds nothing to cancel); it does
  // nothing when no statement runs. Made on the connection's own thread. It connects to the
  // server to ask: a host that is gone keeps it waiting for TCP.
  std::function<void()> Canceller();

  // The connection's socket, for tests that break it from outside.
  int TEST_socket() const { return PQsocket(conn_.get()); }
  // The value of a connection option in use (PQconninfo), e.g. "keepalives_idle"; "" if unset.
  std::string Option(std::string_view keyword) const;
  // The connection was lost (libpq reports it bad), or left in a state no statement can follow
  // (a pipeline it could not leave): nothing more can run on it.
  bool broken() const { return unusable_ || PQstatus(conn_.get()) != CONNECTION_OK; }
  // A statement failed with 40001, 40P01, 57014 or 55P03 since StartAttempt: the transaction
  // may be retried.
  bool retryable() const { return retryable_; }
  // A statement on this connection was cancelled since it opened (57014: Canceller's doing, or
  // a statement timeout).
  bool cancelled_ever() const { return cancelled_ever_; }
  // A transaction's attempt begins on this connection (before anything it runs, the engine's
  // own statements included): the last attempt's retryable failure and its end (QueryLast,
  // ended()) are forgotten.
  void StartAttempt() {
    retryable_ = false;
    ended_ = false;
    commit_acknowledged_ = false;
  }
  // The server answered this attempt's COMMIT: it committed, whatever became of the connection
  // afterwards (a read after the commit, QueryAfterCommit, may still have lost it).
  bool commit_acknowledged() const { return commit_acknowledged_; }
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
  // The first 120 characters of `sql`, for an error message.
  static std::string Shorten(std::string_view sql);
  // One statement to send: a prepared statement's execution (preceded by its prepare when the
  // server does not hold it yet), or a statement without parameters (BEGIN, SET LOCAL, COMMIT).
  struct Command {
    std::string_view borrowed_sql;  // the caller's text, for a command sent at once
    std::string text;               // or a copy, for a held-back or simple command
    bool simple = false;
    std::string name;     // the prepared statement
    std::string prepare;  // its translated text, when it must be prepared first
    std::string key;      // prepared_'s key for it
    std::vector<Oid> types;
    const std::vector<SqlValue>* borrowed = nullptr;     // the caller's parameters, sent at once
    std::vector<SqlValue> owned;                         // or a copy, for one held back
    std::optional<Error> otherwise;                      // ExecLater's, when it checks a count
    std::function<void(Result<std::vector<Row>>)> sink;  // QueryLater's
    std::function<void(std::vector<Row>)> after_commit;  // QueryAfterCommit's
    const std::vector<SqlValue>& params() const { return borrowed ? *borrowed : owned; }
    std::string_view sql() const { return text.empty() ? borrowed_sql : std::string_view(text); }
  };

  explicit PgConnection(PgConnPtr conn) : conn_(std::move(conn)) {}
  // Names `sql` (prepared once per text and parameter types) and fills `c` but its parameters.
  Status Resolve(std::string_view sql, const std::vector<SqlValue>& params, Command& c);
  Result<PgResultPtr> Execute(std::string_view sql, const std::vector<SqlValue>& params);
  // A statement to send later (ExecLater, QueryLater, QueryAfterCommit): named, with a copy of
  // its parameters.
  Result<Command> Held(std::string sql, const std::vector<SqlValue>& params);
  // Sends everything held back, then `last`, in one exchange (pipeline mode); returns last's
  // result or the first failure (a held-back write's `otherwise` for its count check). A
  // prepare that did not succeed is forgotten, so that the next use prepares again.
  // `then`, if given, is sent after `last` in the same exchange (QueryLast's COMMIT); its
  // failure is the answer, last's result is still what is returned. With `after` (last being
  // the COMMIT), the reads after the commit follow in their own transaction
  // (QueryAfterCommit); their failures are not the answer.
  Result<PgResultPtr> Pipeline(const Command& last, const Command* then = nullptr,
                               std::vector<Command>* after = nullptr);
  Result<std::vector<Row>> Rows(const PgResultPtr& r);
  Error Failure(std::string_view sql, const PGresult* r);

  PgConnPtr conn_;
  void RoundTrip() {
    if (round_trips_ != nullptr) round_trips_->fetch_add(1, std::memory_order_relaxed);
  }

  bool retryable_ = false;
  bool cancelled_ever_ = false;
  std::atomic<int64_t>* round_trips_ = nullptr;
  int backend_pid_ = 0;
  std::string backend_start_;
  // Prepared statement names by SQL text + parameter type signature (a held-back statement's
  // from when it is queued: a second one like it is not prepared twice).
  std::unordered_map<std::string, std::string> prepared_;
  int64_t next_name_ = 1;
  std::vector<Command> pending_;       // the begin's statements first, then ExecLater's writes
  std::vector<Command> after_commit_;  // QueryAfterCommit's reads
  std::vector<std::string> timeouts_;  // the begin's SET LOCAL statements, for those reads
  size_t begin_count_ = 0;             // how many of pending_ are the begin's
  size_t snapshot_at_ = 0;             // see DeferBegin
  bool queued_ = false;                // the pending begin waits in the write queue
  bool queue_sent_ = false;            // ... and was sent, the queue's lock with it
  bool read_only_ = false;             // the begin is a read's: it never queues
  std::optional<Error> held_back_failure_;
  bool begin_pending_ = false;        // see begin_pending()
  bool ended_ = false;                // see ended()
  bool commit_acknowledged_ = false;  // see commit_acknowledged()
  bool unusable_ = false;             // see broken()
};

}  // namespace fp::db::postgres
