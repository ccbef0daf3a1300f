#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/ip.h"
#include "common/name.h"
#include "common/random.h"
#include "common/time.h"
#include "db/connection.h"
#include "db/engine.h"
#include "db/open_interrupt.h"
#include "model/page.h"
#include "saga/store.h"

namespace fp::db {

// The datastore stores and returns the product's model under the model's own names.
using namespace ::fp::model;  // NOLINT(google-build-using-namespace)

// A transaction in progress. Obtained only inside Datastore::Write/Read. It runs statements on
// the engine's Connection (db/connection.h): one virtual call per statement. It is the saga
// engine's StoreTx of the datastore's saga store (db/sagas.h), so that a saga action's
// database change commits with the saga's log.
class Tx : public saga::StoreTx {
 public:
  // `outcome_hooks`: where OnOutcome keeps its calls (null in a read: OnOutcome is then unused).
  Tx(Connection& conn, Timestamp now, Random& random,
     std::vector<std::function<void(bool committed)>>* outcome_hooks = nullptr)
      : conn_(conn), now_(now), random_(random), outcome_hooks_(outcome_hooks) {}

  // The transaction's timestamp: every row it writes carries the same time.
  Timestamp now() const { return now_; }
  // A fresh id for a row this transaction creates, from the datastore's Random.
  Uuid NewId() { return random_.NewUuid(); }
  // A fresh time-ordered id (Uuid::TimeOrdered) at the transaction's time.
  Uuid NewTimeOrderedId() { return random_.NewTimeOrderedUuid(now_); }
  // The transaction runs on PostgreSQL, where an operation that would take several statements
  // (each a round trip to the server) has a one-statement form.
  bool postgres() const { return conn_.dialect() == Dialect::kPostgres; }

  template <typename... Args>
  Result<std::vector<Row>> Query(std::string_view sql, Args&&... args) {
    return conn_.Query(sql, {ToSql(std::forward<Args>(args))...});
  }
  template <typename... Args>
  Result<std::optional<Row>> QueryRow(std::string_view sql, Args&&... args) {
    return FirstRow(FP_TRY(Query(sql, std::forward<Args>(args)...)));
  }
  // A read's last statement (Connection::QueryLast): on PostgreSQL the transaction's COMMIT
  // goes in the same exchange. Nothing may run after it in the transaction.
  template <typename... Args>
  Result<std::vector<Row>> QueryLast(std::string_view sql, Args&&... args) {
    return conn_.QueryLast(sql, {ToSql(std::forward<Args>(args))...});
  }
  template <typename... Args>
  Result<std::optional<Row>> QueryRowLast(std::string_view sql, Args&&... args) {
    return FirstRow(FP_TRY(QueryLast(sql, std::forward<Args>(args)...)));
  }
  // The same statement for each parameter list, as a read's last (Connection::QueryEachLast):
  // on PostgreSQL all of them and the COMMIT in one exchange.
  Result<std::vector<std::vector<Row>>> QueryEachLast(
      std::string_view sql, const std::vector<std::vector<SqlValue>>& params) {
    return conn_.QueryEachLast(sql, params);
  }
  // Same with a parameter list built at run time.
  Result<std::vector<Row>> QueryV(std::string_view sql, const std::vector<SqlValue>& params) {
    return conn_.Query(sql, params);
  }
  // Runs a statement; returns the number of rows it changed.
  template <typename... Args>
  Result<int64_t> Exec(std::string_view sql, Args&&... args) {
    return conn_.Exec(sql, {ToSql(std::forward<Args>(args))...});
  }
  Result<int64_t> ExecV(std::string_view sql, const std::vector<SqlValue>& params) {
    return conn_.Exec(sql, params);
  }
  // A write whose result the transaction does not read (Connection::ExecLater): on PostgreSQL
  // it goes with the transaction's next statement or its COMMIT instead of in a round trip of
  // its own, so its failure may come back from either. Nothing after it may depend on it.
  template <typename... Args>
  Status ExecLater(std::string_view sql, Args&&... args) {
    return conn_.ExecLater(sql, {ToSql(std::forward<Args>(args))...}, -1, kNoCheck);
  }
  Status ExecLaterV(std::string_view sql, const std::vector<SqlValue>& params) {
    return conn_.ExecLater(sql, params, -1, kNoCheck);
  }
  // The same for a write that must change exactly one row: else the transaction fails (rolls
  // back) with `otherwise`, whichever later statement or commit the failure comes back from.
  template <typename... Args>
  Status ExecLaterOne(const Error& otherwise, std::string_view sql, Args&&... args) {
    return conn_.ExecLater(sql, {ToSql(std::forward<Args>(args))...}, 1, otherwise);
  }

  // A read whose rows go to `sink` rather than to the body (Connection::QueryLater): on
  // PostgreSQL with the transaction's next statement or its COMMIT, no round trip of its own.
  template <typename... Args>
  Status QueryLater(std::function<void(Result<std::vector<Row>>)> sink, std::string_view sql,
                    Args&&... args) {
    return conn_.QueryLater(sql, {ToSql(std::forward<Args>(args))...}, std::move(sink));
  }

  // A read in a transaction of its own after this write's commit, in the COMMIT's exchange
  // (Connection::QueryAfterCommit): PostgreSQL only (SQLite refuses it). `sink` gets its rows
  // during the commit, only if the write committed and the read succeeded.
  template <typename... Args>
  Status QueryAfterCommit(std::function<void(std::vector<Row>)> sink, std::string_view sql,
                          Args&&... args) {
    return conn_.QueryAfterCommit(sql, {ToSql(std::forward<Args>(args))...}, std::move(sink));
  }

  void JoinWriteQueue() override { conn_.JoinWriteQueue(); }

  // In a write: `fn` runs after the rest of the body, the request's answer and audit entry
  // included (Datastore::Write with an Effect), just before the commit, in the order given. For
  // held-back changes under a lock the transaction then holds to its end (the NAT versions'
  // turn, db/nat.h), so that no statement that waits for its answer comes after them.
  void AtEnd(std::function<Status(Tx&)> fn) { at_end_.push_back(std::move(fn)); }

  // In a write: `fn` is called once the transaction's fate is known, with whether it committed,
  // on the thread that made the write, before Datastore::Write returns. A body run again (the
  // engine retries a transaction) has the calls of its last run only: what an earlier run
  // registered went with its rollback.
  void OnOutcome(std::function<void(bool committed)> fn) {
    if (outcome_hooks_ != nullptr) outcome_hooks_->push_back(std::move(fn));
  }

  // The sagas whose rows this transaction inserted (SagaCreateIn): their owner is the one it
  // wrote, so their events need no look at the row (DatastoreSagaStore::RecordAllIn).
  void NoteSagaCreated(const Uuid& id) { created_sagas_.push_back(id); }
  bool SagaCreatedHere(const Uuid& id) const {
    return std::find(created_sagas_.begin(), created_sagas_.end(), id) != created_sagas_.end();
  }

  static SqlValue ToSql(const Uuid& u) { return u.ToString(); }
  static SqlValue ToSql(const std::optional<Uuid>& u) {
    return u ? SqlValue(u->ToString()) : SqlValue(nullptr);
  }
  static SqlValue ToSql(const std::string& s) { return s; }
  static SqlValue ToSql(std::string_view s) { return std::string(s); }
  static SqlValue ToSql(const char* s) { return std::string(s); }
  static SqlValue ToSql(const std::optional<std::string>& s) {
    return s ? SqlValue(*s) : SqlValue(nullptr);
  }
  static SqlValue ToSql(const IpAddr& a) { return Blob{a.Key()}; }
  static SqlValue ToSql(const Blob& b) { return b; }
  static SqlValue ToSql(const SqlValue& v) { return v; }
  static SqlValue ToSql(bool b) { return int64_t{b ? 1 : 0}; }
  static SqlValue ToSql(int v) { return int64_t{v}; }
  static SqlValue ToSql(int64_t v) { return v; }
  static SqlValue ToSql(const std::optional<int64_t>& v) {
    return v ? SqlValue(*v) : SqlValue(nullptr);
  }
  static SqlValue ToSql(std::nullptr_t) { return nullptr; }

 private:
  static std::optional<Row> FirstRow(std::vector<Row> rows) {
    if (rows.empty()) return std::nullopt;
    return std::move(rows.front());
  }
  inline static const Error kNoCheck = Error::Internal("(no count to check)");
  Connection& conn_;
  Timestamp now_;
  Random& random_;
  std::vector<std::function<void(bool committed)>>* outcome_hooks_;
  std::vector<std::function<Status(Tx&)>> at_end_;
  // Runs what AtEnd gave, once (Datastore::RunWrite, after the body).
  friend class Datastore;
  Status RunAtEnd() {
    std::vector<std::function<Status(Tx&)>> fns = std::exchange(at_end_, {});
    for (auto& fn : fns) FP_CHECK_OK(fn(*this));
    return Ok();
  }
  std::vector<Uuid> created_sagas_;
};

class RequestEffect;

// The effect of a request, as the write of a `T` that carries it records it: the request's
// answer rendered from the write's result (db/request_effect.h), committed with it. An empty
// Effect (no request: background work, tests) records nothing.
struct EffectAnswer {
  int status = 0;
  std::string body;  // empty for 204
};
template <typename T>
struct Effect {
  RequestEffect* request = nullptr;
  std::function<EffectAnswer(const T&)> render;
};
// The effect of a request whose write returns only success: its answer is fixed.
template <>
struct Effect<void> {
  RequestEffect* request = nullptr;
  EffectAnswer answer;
};

// The SQL tail ("AND <key> > ? ORDER BY <key> LIMIT ?") of one page of a list sorted by
// name or id, with its parameters appended to `params`.
std::string PageClause(const PageRequest& page, std::string_view name_column,
                       std::string_view id_column, std::vector<SqlValue>& params);

// Parses a stored UUID/address column; a malformed value is an internal error (corruption).
Result<Uuid> UuidColumn(const Row& row, size_t i);
Result<std::optional<Uuid>> OptUuidColumn(const Row& row, size_t i);
Result<IpAddr> IpColumn(const Row& row, size_t i);

// The PostgreSQL engine's settings (db/postgres/).
struct PostgresOptions {
  // Connections in the pool: enough for the server's concurrent transactions (its request
  // workers, saga actions and background work), few enough for several servers on one
  // PostgreSQL.
  int pool_size = 16;
  // How long a transaction is retried on serialization failures (40001, 40P01) and lost
  // connections before it fails with ServiceUnavailable.
  std::chrono::milliseconds retry_deadline{5000};
};

class Datastore;

// Reads given this scope (ReadDeferred, or a read function given a Reader that names it)
// return without waiting for the sync of the commits they could have seen; the scope's end
// waits for them instead. For a request whose checks read, then run a saga: its writes wait
// for a later commit anyway, so on success the end finds everything durable already, and
// only an answer derived from the checks alone (an error, or an "already done") waits, as
// every read's answer does. The request passes it to its checks as an argument.
class DeferredDurability {
 public:
  explicit DeferredDurability(Datastore& ds) : ds_(ds) {}
  ~DeferredDurability();
  DeferredDurability(const DeferredDurability&) = delete;
  DeferredDurability& operator=(const DeferredDurability&) = delete;

  // Waits now for what the scope's reads saw, before the caller acts on it (the end then has
  // nothing left to wait for). Errors: the engine cannot make it durable.
  Status Wait();
  // For a caller that acts on nothing its reads saw (a judgement that the state it read needs
  // nothing done): the end does not wait for it. A crash that undoes it then undoes nothing
  // this caller did.
  void Dismiss() { seen_ = 0; }

 private:
  friend class Datastore;
  Datastore& ds_;
  int64_t seen_ = 0;  // the highest commit number a read in the scope could have seen
};

// The persistent state of floatplane: the transaction engine. All methods are thread-safe.
//
// The resources are reached through free functions over it, one header per resource (silos.h,
// projects.h, ip_pools.h, external_ips.h, tokens.h, instances.h, ...): a function taking the
// Datastore runs exactly one transaction, in which a check and the change it guards happen
// together and errors are derived from what that transaction read; a function named `...In`
// runs inside a caller's transaction, so that steps compose.
//
// Error conventions: NotFound when a referenced resource is absent or soft-deleted (worded as
// the API words it), ObjectAlreadyExists for name conflicts, InvalidRequest for rule
// violations, InsufficientCapacity when a pool is exhausted, Internal for database failures.
class Datastore {
 public:
  // Opens (creating and migrating as needed) the SQLite database at `path`.
  // `clock` and `random` are the time and randomness of every part that uses this datastore
  // (clock(), random()): the machine's in the server, a test's or the simulation's otherwise.
  // `interrupt` (when given) stops the schema migration from another thread: the open then
  // fails Unavailable, the migration under way rolled back (OpenInterrupt).
  static Result<std::unique_ptr<Datastore>> OpenSqlite(const std::string& path,
                                                       std::shared_ptr<const Clock> clock,
                                                       std::shared_ptr<Random> random,
                                                       OpenInterrupt* interrupt = nullptr);

  // Opens a PostgreSQL database by libpq connection URL or keyword string (multi-host with
  // target_session_attrs=read-write included), migrating its schema under a lock so that
  // servers starting together do not race. Errors: Unavailable when no server answers.
  // `interrupt`: as OpenSqlite's (here every migration of this start rolls back together).
  static Result<std::unique_ptr<Datastore>> OpenPostgres(const std::string& url,
                                                         std::shared_ptr<const Clock> clock,
                                                         std::shared_ptr<Random> random,
                                                         PostgresOptions options = {},
                                                         OpenInterrupt* interrupt = nullptr);
  ~Datastore();

  // Runs `fn` in a write transaction of the engine (Engine::Write: for SQLite, BEGIN IMMEDIATE
  // in a batch with concurrent writes, retried on SQLITE_BUSY with jittered backoff until a
  // deadline; for PostgreSQL, SERIALIZABLE). `fn` returning an error rolls back. On PostgreSQL
  // `fn` may run more than once (the whole transaction is retried on conflicts and lost
  // connections; Unavailable past PostgresOptions::retry_deadline): it must keep nothing
  // outside the database from a run that did not commit.
  template <typename T>
  Result<T> Write(const std::function<Result<T>(Tx&)>& fn) {
    return Write<T>(Effect<T>{}, fn);
  }
  Status Write(const std::function<Status(Tx&)>& fn) { return RunWrite(fn); }
  // A write that carries a request's effect: once `fn` succeeded, the same transaction records
  // the request's answer (`effect.render` of the result) and its audit entry
  // (RequestEffect::RecordAnswerIn).
  template <typename T>
  Result<T> Write(const Effect<T>& effect, const std::function<Result<T>(Tx&)>& fn) {
    Result<T> out = Fail(Error::Internal("transaction did not run"));
    FP_CHECK_OK(RunWrite([&](Tx& tx) -> Status {
      out = fn(tx);
      if (!out) return Fail(out.error());
      if (effect.request == nullptr) return Ok();
      return RecordAnswerIn(*effect.request, tx, effect.render(*out));
    }));
    return out;
  }
  Status Write(const Effect<void>& effect, const std::function<Status(Tx&)>& fn) {
    return RunWrite([&](Tx& tx) -> Status {
      FP_CHECK_OK(fn(tx));
      if (effect.request == nullptr) return Ok();
      return RecordAnswerIn(*effect.request, tx, effect.answer);
    });
  }
  // Same for a read-only transaction (a consistent snapshot; runs concurrently with writes).
  // Returns once every commit it could have seen is durable.
  template <typename T>
  Result<T> Read(const std::function<Result<T>(Tx&)>& fn) {
    return ReadImpl<T>(fn, /*wait_durable=*/true);
  }
  // A read that may return commits not yet durable, without waiting for the sync. Only for
  // readers whose consumer tolerates a crash undoing what they saw: the NAT feed (a switch
  // ahead of the datastore is repaired by the reconciler's checks), which must not wait
  // for syncs while it holds the lock that orders the switch's updates.
  template <typename T>
  Result<T> ReadLatest(const std::function<Result<T>(Tx&)>& fn) {
    return ReadImpl<T>(fn, /*wait_durable=*/false);
  }

  // A read whose wait for durability is left to `until`'s end (a scope of this datastore).
  template <typename T>
  Result<T> ReadDeferred(const std::function<Result<T>(Tx&)>& fn, DeferredDurability& until) {
    return ReadImpl<T>(fn, /*wait_durable=*/true, &until);
  }

  // Durable commits (write transactions that committed) since open.
  int64_t durable_commits() const { return engine_->stats().durable_commits; }
  // Engine transactions that carried them: SQLite's engine runs concurrent write transactions
  // one after the other inside one SQLite transaction (each in a savepoint), so this grows more
  // slowly.
  int64_t sqlite_commits() const { return engine_->stats().engine_commits; }
  // Syncs of the write-ahead log since open. Under concurrent writes one sync makes several
  // commits durable, so this grows more slowly than durable_commits().
  int64_t log_syncs() const { return engine_->stats().log_syncs; }
  // Transactions waiting now for a sync of the log that another one leads: a write or read whose
  // answer waits for a commit to be durable (group commit; always 0 on PostgreSQL).
  int sync_waiters() const { return engine_->stats().sync_waiters; }
  // Writes waiting now in the SQLite engine's queue: to lead a batch, or, run in another's
  // batch, for that batch to be durable (0 on PostgreSQL).
  int queued_writes() const { return engine_->stats().queued_writes; }
  // Checkpoints (the log copied into the database file) run by the background checkpointer.
  int64_t checkpoints() const { return engine_->stats().checkpoints; }
  // Times the log was emptied so that the next write starts it over from its beginning.
  int64_t log_restarts() const { return engine_->stats().log_restarts; }
  // Of those, the times the log had reached its limit and writes waited for the restart.
  int64_t log_limit_restarts() const { return engine_->stats().log_limit_restarts; }
  // Sizes in bytes of the database file and of its write-ahead log (0 if a file is absent).
  int64_t database_file_bytes() const { return engine_->database_file_bytes(); }
  int64_t log_file_bytes() const { return engine_->log_file_bytes(); }
  // Read connections open now (idle or in use).
  int open_readers() const { return engine_->stats().open_readers; }
  // Reads waiting now for a read connection, all of them being busy (SQLite).
  int waiting_readers() const { return engine_->stats().waiting_readers; }
  // Exchanges with the database server (PostgreSQL; 0 for SQLite, which runs in the process).
  int64_t round_trips() const { return engine_->stats().round_trips; }
  // Transactions run again, whole, after a serialization failure or a lost connection
  // (PostgreSQL; SQLite's engine never runs a body twice).
  int64_t transaction_retries() const { return engine_->stats().retries; }
  // Write transactions whose body refused (a 4xx decided inside: rolled back, no sync), and
  // those that failed otherwise (the database's errors, 5xx), since open.
  int64_t refused_writes() const { return refused_writes_.load(); }
  int64_t failed_writes() const { return failed_writes_.load(); }
  // Read transactions run since open (Read, ReadDeferred, ...: one each, however many
  // statements it ran).
  int64_t read_transactions() const { return read_transactions_.load(); }
  EngineStats engine_stats() const { return engine_->stats(); }

  // Test seam: `hook` is called with the name of each sync point the datastore passes (e.g.
  // "ip_range_remove:checked"), inside the transaction, so a test can force an interleaving.
  void TEST_SetSyncPoint(std::function<void(std::string_view)> hook) {
    sync_points_.Set(std::move(hook));
  }
  void SyncPoint(std::string_view name) { sync_points_.Pass(name); }

  const Clock& clock() const { return *clock_; }
  Random& random() const { return *random_; }

 private:
  friend class DeferredDurability;  // its end waits on the engine
  Datastore(std::string path, std::shared_ptr<const Clock> clock, std::shared_ptr<Random> random);
  // A read that waits for durability does so before it returns, or leaves it to `deferred`.
  Status RunTransaction(bool write, const std::function<Status(Tx&)>& body,
                        bool wait_durable = true, DeferredDurability* deferred = nullptr);
  template <typename T>
  Result<T> ReadImpl(const std::function<Result<T>(Tx&)>& fn, bool wait_durable,
                     DeferredDurability* deferred = nullptr) {
    Result<T> out = Fail(Error::Internal("transaction did not run"));
    FP_CHECK_OK(RunTransaction(
        false,
        [&](Tx& tx) -> Status {
          out = fn(tx);
          if (!out) return Fail(out.error());
          return Ok();
        },
        wait_durable, deferred));
    return out;
  }
  // Every write: the engine's transaction, then its outcome hooks (Tx::OnOutcome).
  Status RunWrite(const std::function<Status(Tx&)>& body);
  // RequestEffect::RecordAnswerIn, out of line (db/request_effect.h includes this header).
  static Status RecordAnswerIn(RequestEffect& effect, Tx& tx, const EffectAnswer& answer);

  std::string path_;
  std::shared_ptr<const Clock> clock_;
  std::shared_ptr<Random> random_;
  // The engine's own (Random::Fork): its draws do not move the sequence ids come from, so
  // the same seed gives the same ids on either engine.
  std::shared_ptr<Random> engine_random_ = random_->Fork();
  SyncPoints sync_points_;
  std::atomic<int64_t> refused_writes_{0};
  std::atomic<int64_t> read_transactions_{0};
  std::atomic<int64_t> failed_writes_{0};
  std::unique_ptr<Engine> engine_;
};

// Where a read function reads: a datastore, and optionally a DeferredDurability scope of it
// whose end waits for the sync of what the read saw, instead of the read. Converts from a
// Datastore, so that a read function taking a Reader is called with a datastore as usual, and
// with `{ds, &scope}` by a request's checks.
class Reader {
 public:
  Reader(Datastore& ds) : ds_(ds) {}  // NOLINT(google-explicit-constructor): see above
  Reader(Datastore& ds, DeferredDurability* deferred) : ds_(ds), deferred_(deferred) {}
  template <typename T>
  Result<T> Read(const std::function<Result<T>(Tx&)>& fn) const {
    return deferred_ != nullptr ? ds_.ReadDeferred<T>(fn, *deferred_) : ds_.Read<T>(fn);
  }

 private:
  Datastore& ds_;
  DeferredDurability* deferred_ = nullptr;
};

}  // namespace fp::db
