#include "loops/history_pruner.h"

#include "common/log.h"
#include "common/thread_name.h"
#include "db/audit_log.h"
#include "db/datastore.h"
#include "db/idempotency.h"
#include "db/sagas.h"

namespace fp::loops {

Result<PrunedHistory> HistoryPruner::PruneOnce() {
  const int64_t retention_us =
      std::chrono::duration_cast<std::chrono::microseconds>(retention_.retention).count();
  PrunedHistory pruned;
  // Keys first: a key's record is never younger than the saga it links to (the link commits
  // with the saga's creation, and the saga comes to rest later), so no retry can find its key
  // still recorded and its saga already gone.
  for (;;) {
    int64_t n = FP_TRY(db::IdempotencyPrune(ds_, retention_us, retention_.batch));
    pruned.idempotency_keys += n;
    if (n < retention_.batch || stopping_.load()) break;
  }
  for (;;) {
    int64_t n = FP_TRY(db::SagaPruneFinished(ds_, retention_us, retention_.batch));
    pruned.sagas += n;
    if (n < retention_.batch || stopping_.load()) break;
  }
  for (;;) {
    int64_t n = FP_TRY(db::AuditPrune(ds_, retention_us, retention_.batch));
    pruned.audit_entries += n;
    if (n < retention_.batch || stopping_.load()) break;
  }
  const Timestamp cut_short_before =
      ds_.clock().Now() -
      std::chrono::duration_cast<std::chrono::microseconds>(retention_.cut_short_after).count();
  for (;;) {
    int64_t n = FP_TRY(db::AuditCompleteCutShort(ds_, cut_short_before, retention_.batch));
    pruned.audit_entries_cut_short += n;
    if (n < retention_.batch || stopping_.load()) break;
  }
  return pruned;
}

void HistoryPruner::Start() {
  thread_ = std::thread([this] {
    NameThisThread("history-prune");
    MutexLock lock(mu_);
    while (!stop_) {
      lock.Unlock();
      auto pruned = PruneOnce();
      if (!pruned) {
        LogEvent("warn", "pruning history failed; retrying at the next pass",
                 {{"error", pruned.error().message()}});
      } else if (pruned->sagas > 0 || pruned->idempotency_keys > 0 || pruned->audit_entries > 0) {
        LogEvent("info", "history pruned",
                 {{"sagas", pruned->sagas},
                  {"idempotency_keys", pruned->idempotency_keys},
                  {"audit_entries", pruned->audit_entries}});
      }
      if (pruned && pruned->audit_entries_cut_short > 0) {
        LogEvent("warn", "audit entries of requests a stopped server left unfinished completed",
                 {{"entries", pruned->audit_entries_cut_short}});
      }
      lock.Lock();
      ds_.clock().WaitFor(lock, cv_, retention_.period, [&]() FP_REQUIRES(mu_) { return stop_; });
    }
  });
}

void HistoryPruner::Stop() {
  stopping_.store(true);  // a pass with a backlog ends after its current batch
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace fp::loops
