#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "common/name.h"
#include "common/time.h"
#include "db/connection.h"
#include "db/engine.h"
#include "model/auth.h"
#include "model/external_ips.h"
#include "model/ip_pools.h"
#include "model/page.h"
#include "model/silos.h"
#include "saga/store.h"

namespace fp::db {

// The datastore stores and returns the product's model under the model's own names.
using namespace ::fp::model;  // NOLINT(google-build-using-namespace)

// A transaction in progress. Obtained only inside Datastore::Write/Read. It runs statements on
// the engine's Connection (db/connection.h): one virtual call per statement. It is the saga
// engine's StoreTx of the datastore's saga store (db/saga_log.h), so that a saga action's
// database change commits with the saga's log.
class Tx : public saga::StoreTx {
 public:
  Tx(Connection& conn, Timestamp now) : conn_(conn), now_(now) {}

  // The transaction's timestamp: every row it writes carries the same time.
  Timestamp now() const { return now_; }

  template <typename... Args>
  Result<std::vector<Row>> Query(std::string_view sql, Args&&... args) {
    return conn_.Query(sql, {ToSql(std::forward<Args>(args))...});
  }
  template <typename... Args>
  Result<std::optional<Row>> QueryRow(std::string_view sql, Args&&... args) {
    auto rows = FP_TRY(Query(sql, std::forward<Args>(args)...));
    if (rows.empty()) return std::optional<Row>();
    return std::optional<Row>(std::move(rows.front()));
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
  static SqlValue ToSql(std::nullptr_t) { return nullptr; }

 private:
  Connection& conn_;
  Timestamp now_;
};

// The SQL tail ("AND <key> > ? ORDER BY <key> LIMIT ?") of one page of a list sorted by
// name or id, with its parameters appended to `params`.
std::string PageClause(const PageRequest& page, std::string_view name_column,
                       std::string_view id_column, std::vector<SqlValue>& params);

// Parses a stored UUID/address column; a malformed value is an internal error (corruption).
Result<Uuid> UuidColumn(const Row& row, size_t i);
Result<std::optional<Uuid>> OptUuidColumn(const Row& row, size_t i);
Result<IpAddr> IpColumn(const Row& row, size_t i);

// Low-level allocation primitives over a pool's free space, run inside a caller's write
// transaction. The cost of each is O(log n) in the number of allocated addresses: free
// addresses are kept as maximal spans per range (ip_free_span), and SNAT addresses with free
// port blocks in snat_address.
struct AllocatedAddress {
  Uuid range_id;
  IpAddr ip;
  int first_port = 0;
  int last_port = 65535;
};
Result<AllocatedAddress> AllocateLowestAddress(Tx& tx, const Uuid& pool_id);
// InvalidRequest "Requested external IP address not available" when the address is in use
// (wholly or by an SNAT port block) or not in any live range of the pool.
Result<AllocatedAddress> AllocateExplicitAddress(Tx& tx, const Uuid& pool_id, const IpAddr& ip);
// The lowest free (address, 16384-port block) of the pool.
Result<AllocatedAddress> AllocateSnatBlock(Tx& tx, const Uuid& pool_id);
// Returns a whole address (first_port 0, last_port 65535) or an SNAT block to the free space.
Status ReleaseAddress(Tx& tx, const Uuid& pool_id, const AllocatedAddress& a);

// The persistent state of floatplane. Every method runs exactly one transaction: a check and
// the change it guards happen in the same transaction, and errors are derived from what that
// transaction read. All methods are thread-safe.
//
// Error conventions: NotFound when a referenced resource is absent or soft-deleted (worded as
// the API words it), ObjectAlreadyExists for name conflicts, InvalidRequest for rule
// violations, InsufficientCapacity when a pool is exhausted, Internal for database failures.
class Datastore {
 public:
  // Opens (creating and migrating as needed) the SQLite database at `path`.
  static Result<std::unique_ptr<Datastore>> OpenSqlite(const std::string& path,
                                                       std::shared_ptr<const Clock> clock);
  ~Datastore();

  // Runs `fn` in a write transaction of the engine (Engine::Write: for SQLite, BEGIN IMMEDIATE
  // in a batch with concurrent writes), retrying the whole function on SQLITE_BUSY with
  // jittered backoff until a deadline. `fn` returning an error rolls back.
  //
  // Inside a keyed request (db/idempotency.h), the write also records the request's answer,
  // rendered from its result, or the link to a saga it creates, in the same transaction.
  template <typename T>
  Result<T> Write(const std::function<Result<T>(Tx&)>& fn) {
    Result<T> out = Fail(Error::Internal("transaction did not run"));
    FP_CHECK_OK(RunScopedWrite(
        [&](Tx& tx) -> Status {
          out = fn(tx);
          if (!out) return Fail(out.error());
          return Ok();
        },
        [&]() -> const void* { return &*out; }, typeid(T)));
    return out;
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

  // Within its scope, reads on this thread through `ds` return without waiting for the sync of
  // the commits they could have seen; the scope's end waits for them instead. For a request
  // whose checks read, then run a saga: its writes wait for a later commit anyway, so on success
  // the end finds everything durable already, and only an answer derived from the checks alone
  // (an error, or an "already done") waits, as every read's answer does. An inner scope waits
  // at its own end.
  class DeferredDurability {
   public:
    explicit DeferredDurability(Datastore& ds);
    ~DeferredDurability();
    DeferredDurability(const DeferredDurability&) = delete;
    DeferredDurability& operator=(const DeferredDurability&) = delete;

   private:
    friend class Datastore;
    Datastore& ds_;
    int64_t seen_ = 0;  // the highest commit number a read in the scope could have seen
    DeferredDurability* outer_;
  };

  // Durable commits (write transactions that committed) since open.
  int64_t durable_commits() const { return engine_->stats().durable_commits; }
  // Engine transactions that carried them: SQLite's engine runs concurrent write transactions
  // one after the other inside one SQLite transaction (each in a savepoint), so this grows more
  // slowly.
  int64_t sqlite_commits() const { return engine_->stats().engine_commits; }
  // Syncs of the write-ahead log since open. Under concurrent writes one sync makes several
  // commits durable, so this grows more slowly than durable_commits().
  int64_t log_syncs() const { return engine_->stats().log_syncs; }
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

  // Test seam: `hook` is called with the name of each sync point the datastore passes (e.g.
  // "ip_range_remove:checked"), inside the transaction, so a test can force an interleaving.
  void TEST_SetSyncPoint(std::function<void(std::string_view)> hook) {
    sync_points_.Set(std::move(hook));
  }
  void SyncPoint(std::string_view name) { sync_points_.Pass(name); }

  // --- Silos (silos.cc) ---
  Result<Silo> SiloCreate(const SiloCreate& params);
  Result<Silo> SiloLookup(const NameOrId& selector);
  Result<std::vector<Silo>> SiloList(const PageRequest& page);
  // Refused while the silo has live projects (the message names one).
  Status SiloDelete(const Uuid& id);

  // --- Projects (projects.cc) ---
  Result<Project> ProjectCreate(const Uuid& id, const Uuid& silo_id, const std::string& name,
                                const std::string& description);
  Result<Project> ProjectLookup(const Uuid& silo_id, const NameOrId& selector);
  Result<std::vector<Project>> ProjectList(const Uuid& silo_id, const PageRequest& page);
  Result<Project> ProjectUpdate(const Uuid& id, const IdentityUpdate& update);
  // Refused while the project holds floating IPs (the message names one).
  Status ProjectDelete(const Uuid& id);

  // --- IP pools, ranges and silo links (ip_pools.cc) ---
  Result<IpPool> PoolCreate(const PoolCreate& params);
  Result<IpPool> PoolLookup(const NameOrId& selector);
  Result<std::vector<IpPool>> PoolList(const IpPoolFilter& filter, const PageRequest& page);
  Result<IpPool> PoolUpdate(const Uuid& id, const IdentityUpdate& update);
  Status PoolDelete(const Uuid& id);
  Result<std::vector<IpPoolRange>> RangeList(const Uuid& pool_id, std::optional<IpAddr> after,
                                             int64_t limit);
  Result<IpPoolRange> RangeAdd(const Uuid& pool_id, const Uuid& range_id, const IpRange& range);
  Status RangeRemove(const Uuid& pool_id, const IpRange& range);
  Result<std::vector<SiloLink>> LinkList(const Uuid& pool_id, std::optional<Uuid> after,
                                         int64_t limit);
  Result<SiloLink> Link(const Uuid& pool_id, const NameOrId& silo, bool is_default);
  Result<SiloLink> LinkUpdate(const Uuid& pool_id, const Uuid& silo_id, bool is_default);
  // Removes the link. NotFound (`ip-pool-resource`) without one; InvalidRequest `IP addresses
  // from this pool are in use in the linked silo (<holder> holds <ip>)` while a live address of
  // the pool belongs to a live resource of the silo: a floating IP of one of its projects, or
  // an instance's SNAT or ephemeral address. The check and the removal are one transaction.
  Status Unlink(const Uuid& pool_id, const Uuid& silo_id);
  Result<PoolUtilization> Utilization(const Uuid& pool_id);
  Result<std::vector<SiloIpPool>> SiloPoolList(const Uuid& silo_id, const IpPoolFilter& filter,
                                               const PageRequest& page);
  Result<SiloIpPool> SiloPoolLookup(const Uuid& silo_id, const NameOrId& selector);

  // --- Floating IPs (external_ips.cc) ---
  Result<ExternalIp> FloatingIpCreate(const FloatingIpCreate& params);
  Result<ExternalIp> FloatingIpLookupById(const Uuid& silo_id, const Uuid& id);
  Result<ExternalIp> FloatingIpLookupByName(const Uuid& project_id, const std::string& name);
  Result<std::vector<ExternalIp>> FloatingIpList(const Uuid& project_id, const PageRequest& page);
  Result<ExternalIp> FloatingIpUpdate(const Uuid& id, const IdentityUpdate& update);
  // Refused while attached (the message names the holder); the address returns to the pool.
  Status FloatingIpDelete(const Uuid& id);

  // --- Tokens (tokens.cc) ---
  // Stores the SHA-256 of `secret`, never the secret.
  Result<Token> TokenCreate(const Uuid& id, const Uuid& silo_id, Role role, const std::string& name,
                            const std::string& secret);
  // NotFound-free: std::nullopt when no live token has that secret.
  // Answers from a cache of recent positive answers when it can (a read transaction per request
  // was a tenth of the server's work). A revocation or silo delete made through this datastore
  // empties the cache when it commits; one made by another process is seen within
  // kTokenCacheTtl.
  Result<std::optional<Token>> TokenAuthenticate(const std::string& secret);
  Status TokenRevoke(const Uuid& id);
  static constexpr std::chrono::milliseconds kTokenCacheTtl{1000};

  const Clock& clock() const { return *clock_; }

 private:
  Datastore(std::string path, std::shared_ptr<const Clock> clock);
  Status RunTransaction(bool write, const std::function<Status(Tx&)>& body,
                        bool wait_durable = true);
  template <typename T>
  Result<T> ReadImpl(const std::function<Result<T>(Tx&)>& fn, bool wait_durable) {
    Result<T> out = Fail(Error::Internal("transaction did not run"));
    FP_CHECK_OK(RunTransaction(
        false,
        [&](Tx& tx) -> Status {
          out = fn(tx);
          if (!out) return Fail(out.error());
          return Ok();
        },
        wait_durable));
    return out;
  }
  // A write through the idempotency scope of the calling thread's keyed request, if any (see
  // Write): `result` gives the body's result, of type `type` (nullptr and void: a Status).
  Status RunScopedWrite(const std::function<Status(Tx&)>& body,
                        const std::function<const void*()>& result, const std::type_info& type);

  std::string path_;
  std::shared_ptr<const Clock> clock_;
  SyncPoints sync_points_;
  std::unique_ptr<Engine> engine_;  // group commit, checkpoints and readers: sqlite/engine.h
  // Token cache (tokens.cc), keyed by the secret's hash. A read that began before an
  // invalidation (generation bump) does not insert what it read.
  void InvalidateTokenCache();
  struct CachedToken {
    Token token;
    std::chrono::steady_clock::time_point expires;
  };
  std::mutex token_cache_mu_;
  uint64_t token_generation_ = 0;                             // guarded by token_cache_mu_
  std::unordered_map<std::string, CachedToken> token_cache_;  // guarded by token_cache_mu_
};

// SHA-256 of `secret` as lowercase hex.
std::string HashToken(const std::string& secret);

}  // namespace fp::db
