#pragma once

// Recovery of unfinished sagas off the start path. The sagas that an earlier run of this
// executor left running or unwinding are listed once, synchronously, before the server takes
// requests (so that no saga a request starts is taken for an unfinished one), and then resumed
// on a few worker threads while the server serves. A request that touches a resource such a
// saga holds meets the saga's transitional state (an IP attaching, an instance starting or
// migrating) and is refused as retryable, exactly as while the saga ran before the restart.
//
// Recovery never takes a saga the executor is running (a request's), and takes each saga it
// resumes over under a new generation first (SagaExecutor::Claim), so that any other execution
// of it (a zombie of an earlier process under the same coordinator id) is fenced. A server
// starts a recovery at start-up and another each time it adopts sagas (saga/coordinator.h).
//
// What happens to each saga:
//  - no longer the executor's (adopted by another server) or already at rest: dropped,
//    unreported;
//  - resumed to rest (done, unwound, or stuck by a failed undo): reported;
//  - its resume failed with ServiceUnavailable (e.g. an agent or a lock held elsewhere; a
//    store busy past its retry deadline is Internal, the case below): reported and tried
//    again after a backoff, unless it is no longer this executor's;
//  - its log cannot be resumed by this engine (a corrupt log, an action not registered, a newer
//    engine; SagaExecutor::WhyNotResumable), or its resume threw: it is marked stuck, for an
//    operator to see, and reported. The other sagas recover all the same;
//  - its resume failed otherwise (a store error, an action's engine error): reported and
//    tried again after a backoff, like a transient failure, and marked stuck only after
//    `max_attempts` failures in a row, so that a passing fault never strands a saga that could
//    have finished.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "saga/saga.h"

namespace fp::saga {

struct RecoveryEvent {
  enum class Kind {
    kAtRest,        // `outcome` is where the saga came to rest
    kCannotResume,  // `error` says why; the saga is now stuck (`outcome` says so too)
    kRetrying,      // `error` is a transient failure; the saga is tried again later
  };
  Kind kind = Kind::kAtRest;
  Uuid saga_id;
  SagaOutcome outcome;
  std::optional<Error> error;
};

struct RecoveryOptions {
  int concurrency = 8;  // sagas resumed at once
  // Called on a worker thread for every event; must be thread-safe. May be empty.
  std::function<void(const RecoveryEvent&)> report;
  // Called (on a worker thread, or in Stop) once the recovery is done with a saga, whatever
  // became of it; must be thread-safe. May be empty.
  std::function<void(const Uuid&)> finished;
  // Backoff of a transient failure: doubled at each failure of the same saga, up to max.
  std::chrono::milliseconds first_retry{250};
  std::chrono::milliseconds max_retry{8000};
  // Failed resumes of one saga, other than ServiceUnavailable, before it is marked stuck.
  int max_attempts = 8;
};

class SagaRecovery {
 public:
  // Lists the executor's unfinished sagas now (those it is running excepted) and starts
  // resuming them on at most `options.concurrency` threads; returns at once. Errors: the
  // store's, from the listing (nothing started then). `executor` must outlive the recovery.
  static Result<std::unique_ptr<SagaRecovery>> Start(SagaExecutor& executor,
                                                     RecoveryOptions options);
  // Same for the given sagas (which the executor owns in the given generations), e.g. those it
  // just adopted; no listing.
  static std::unique_ptr<SagaRecovery> StartWith(SagaExecutor& executor, RecoveryOptions options,
                                                 std::vector<OwnedSaga> sagas);
  // Stop().
  ~SagaRecovery();
  SagaRecovery(const SagaRecovery&) = delete;
  SagaRecovery& operator=(const SagaRecovery&) = delete;

  // The sagas listed at Start, oldest first.
  const std::vector<Uuid>& sagas() const { return sagas_; }
  // Blocks until every listed saga is at rest or marked stuck, or was left for the next start
  // (after Stop, or once the executor is quiesced), or dropped (no longer the executor's).
  void Wait();
  // Whether Wait would return at once.
  bool finished();
  // Takes no further saga and joins the workers once each has finished the call it is in; for
  // shutdown, SagaExecutor::Quiesce first makes that at most the node it is in. Sagas not at
  // rest stay unfinished in the log for the next start. Idempotent; call from one thread.
  void Stop();

 private:
  struct Pending {
    Uuid id;
    int64_t generation = 1;  // the executor owns the saga in it (before the next claim)
    MonoTime not_before;
    std::chrono::milliseconds backoff;
    int failures = 0;  // failed resumes other than ServiceUnavailable
  };

  SagaRecovery(SagaExecutor& executor, RecoveryOptions options, std::vector<OwnedSaga> sagas);
  void Work();
  // Resumes one saga; returns it to the queue if it is to be tried again.
  void Recover(Pending pending) FP_EXCLUDES(mu_);
  // Marks the saga stuck (retrying later if even that fails).
  void CannotResume(Pending pending, const Error& why) FP_EXCLUDES(mu_);
  // Reports `error` and queues the saga again after its backoff.
  void Retry(Pending pending, const Error& error) FP_EXCLUDES(mu_);
  void Report(const RecoveryEvent& event) const;
  // The saga needs nothing more from this recovery.
  void Finished(const Uuid& id) FP_EXCLUDES(mu_);

  SagaExecutor& exec_;
  RecoveryOptions options_;
  std::vector<Uuid> sagas_;
  Mutex mu_;
  std::condition_variable changed_;
  std::deque<Pending> queue_ FP_GUARDED_BY(mu_);
  size_t remaining_ FP_GUARDED_BY(mu_) = 0;  // listed sagas not yet finished
  bool stopping_ FP_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace fp::saga
