#pragma once

// This server's saga execution coordinator (SEC) among several servers on one database: its
// lease, the adoption of the sagas of servers whose lease expired, and the recovery of the
// sagas it owns but does not run.
//
// - Lease. At start the coordinator takes its lease under a new incarnation (this process) and
//   takes its own unfinished sagas over under a new generation (db::SecLeaseTake), which
//   fences any zombie of an earlier run under the same id. A background thread renews the
//   lease every `renew_interval`. While the lease is not known to be live (the last renewal
//   began more than `lease_ttl` ago by this server's clock: the server was paused, or the
//   database did not answer), or after another process took the coordinator id over, the
//   executor refuses new sagas with ServiceUnavailable (its start gate); sagas in flight go on,
//   fenced by generation if another server adopted them.
// - Adoption. The same thread adopts, in one transaction each pass, the unfinished sagas of
//   coordinators whose lease expired more than `adopt_grace` ago (db::SagaAdoptExpired), and
//   resumes them (saga/recovery.h): they finish or unwind here.
// - Recovery. At start, and every `own_recovery_interval`, the coordinator resumes its own
//   unfinished sagas that no call of the executor is driving (a saga whose request gave up on
//   an engine error, one it adopted back while a fenced execution of it was still running).
//   A request that gives up on an engine error brings that pass forward (the executor's
//   left-unfinished hook), so the saga is taken up again at once, and retried with the
//   recovery's backoff for as long as the datastore fails (a full disk, a database that does
//   not answer: ServiceUnavailable, never marked stuck for it).
//   A saga is handed to at most one recovery at a time; recovery claims it under a new
//   generation before resuming it.
//
// With SQLite (one server per database) the lease and adoption change nothing users see: the
// server takes its own sagas back at start and recovers them at once, as before.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "common/time.h"
#include "saga/recovery.h"
#include "saga/saga.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

struct CoordinatorOptions {
  // How long a renewed lease is valid; another server adopts this one's sagas once it expired
  // and `adopt_grace` passed (the grace covers clock differences between servers).
  std::chrono::milliseconds lease_ttl{5000};
  std::chrono::milliseconds renew_interval{1000};  // also the period of adoption passes
  std::chrono::milliseconds adopt_grace{2000};
  std::chrono::milliseconds own_recovery_interval{10000};
  // A saga a request left unfinished (saga::SagaExecutor::SetLeftUnfinishedHook) brings the
  // next pass of own recovery forward, but never closer than this to the one before.
  std::chrono::milliseconds own_recovery_min_gap{250};
  int64_t adopt_batch = 100;  // sagas adopted per transaction
  // For each recovery the coordinator starts (its `finished` is the coordinator's own).
  saga::RecoveryOptions recovery;
};

// Thread-safety: every method may be called from any thread; Stop once, last.
class SagaCoordinator {
 public:
  // Takes the lease of `executor`'s coordinator id (executor.sec()) under a new incarnation,
  // installs the executor's start gate, starts recovering the sagas this id owns (those of an
  // earlier run), and adopts those of expired coordinators. Errors: the datastore's (nothing
  // started then). `ds` and `executor` must outlive the coordinator, and the coordinator every
  // saga the executor starts (the gate refers to it). The background thread starts with
  // StartBackground.
  static Result<std::unique_ptr<SagaCoordinator>> Start(db::Datastore& ds,
                                                        saga::SagaExecutor& executor,
                                                        CoordinatorOptions options);
  ~SagaCoordinator();
  SagaCoordinator(const SagaCoordinator&) = delete;
  SagaCoordinator& operator=(const SagaCoordinator&) = delete;

  // Starts the thread that renews the lease, adopts and recovers (see the file comment).
  void StartBackground();
  // Stops the thread and every recovery (sagas not at rest stay in the log), and lets the
  // lease expire now, so that other servers adopt what is left after the grace.
  void Stop();

  // One pass of each, on the caller's thread (the background thread's steps; tests call them).
  // RenewOnce: ServiceUnavailable if the renewal failed or another process took the id over.
  Status RenewOnce();
  // Adopts the sagas of expired coordinators (only while this server's lease is live) and
  // starts their recovery. Returns them.
  Result<std::vector<saga::OwnedSaga>> AdoptOnce();
  // Starts a recovery of this coordinator's unfinished sagas that nothing drives. Returns how
  // many it handed to it: none while its lease is not live (taken over by another process
  // under the same id, or lapsed).
  Result<size_t> RecoverOwnOnce();

  // Ok while this server may start sagas: its lease is live and its own. Otherwise
  // ServiceUnavailable saying why. The executor's start gate.
  Status LeaseLive() const;
  // The sagas the coordinator took over at start (its own, from an earlier run).
  size_t sagas_at_start() const { return sagas_at_start_; }
  // Sagas handed to a recovery and not yet done with (for tests and logs).
  size_t recovering() const;

 private:
  SagaCoordinator(db::Datastore& ds, saga::SagaExecutor& executor, CoordinatorOptions options);
  // Hands the sagas not yet in a recovery to a new one.
  void Recover(std::vector<saga::OwnedSaga> sagas);
  void Loop();
  // The executor's left-unfinished hook: brings the next own recovery pass forward.
  void OwnRecoveryDue();
  Status LeaseLiveLocked() const FP_REQUIRES(mu_);

  db::Datastore& ds_;
  saga::SagaExecutor& exec_;
  const CoordinatorOptions options_;
  const std::string incarnation_;
  size_t sagas_at_start_ = 0;

  mutable Mutex mu_;
  Timestamp live_until_ FP_GUARDED_BY(mu_) = 0;  // the last renewal's start + lease_ttl
  bool superseded_ FP_GUARDED_BY(mu_) = false;
  std::optional<Error> renew_error_ FP_GUARDED_BY(mu_);  // why the last renewal failed
  std::set<Uuid> recovering_ FP_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<saga::SagaRecovery>> recoveries_ FP_GUARDED_BY(mu_);
  bool stop_ FP_GUARDED_BY(mu_) = false;
  bool own_due_ FP_GUARDED_BY(mu_) = false;  // a request left a saga unfinished
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace fp::app
