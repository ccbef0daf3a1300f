#pragma once

// Bounded history: finished sagas (done, unwound) with their node events, idempotency keys and
// audit log entries are deleted once older than a retention, by a background thread, in small
// batches (one write transaction each) so that the write lane never waits long behind one. Stuck
// sagas stay until a human repairs them; unfinished ones are never touched.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <thread>

#include "common/error.h"
#include "common/mutex.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::loops {

struct HistoryRetention {
  // How long a finished saga or an idempotency key is kept (from when it came to rest or was
  // claimed): long enough for an operator to look at recent sagas, and for a client to retry
  // with its key.
  std::chrono::seconds retention{std::chrono::hours(72)};
  // Time between two passes of the background thread.
  std::chrono::milliseconds period{std::chrono::minutes(1)};
  // Sagas (or keys) per write transaction. 100 sagas with their node events (about 400 rows)
  // took about 2 ms of the write lane (release build, 1.2 KB DAGs); 500 took 9-37 ms, as long
  // as an attach's p99, for every write queued behind them.
  int64_t batch = 100;
  // An audit entry still in progress this long after its request arrived, with no unfinished
  // saga to complete it, was cut short by a server that stopped (another server's request
  // between its two sagas takes milliseconds): each pass completes it as an error.
  std::chrono::seconds cut_short_after{60};
};

struct PrunedHistory {
  int64_t sagas = 0;
  int64_t idempotency_keys = 0;
  int64_t audit_entries = 0;
  int64_t audit_entries_cut_short = 0;  // completed, not deleted
};

// Deletes finished sagas and idempotency keys older than the retention (see the file comment).
// `ds` must outlive it. Thread-safety: see each method.
class HistoryPruner {
 public:
  HistoryPruner(db::Datastore& ds, HistoryRetention retention) : ds_(ds), retention_(retention) {}
  ~HistoryPruner() { Stop(); }
  HistoryPruner(const HistoryPruner&) = delete;
  HistoryPruner& operator=(const HistoryPruner&) = delete;

  // One pass: batch after batch until one comes back short, so that a backlog (a first start
  // after an upgrade) is gone at the end of the pass. The datastore's clock decides what is
  // old. Returns what it deleted; the first datastore error stops the pass (what it deleted
  // before stays deleted), and so does Stop. Thread-safe, but passes are meant to run one at
  // a time.
  Result<PrunedHistory> PruneOnce();

  // Runs PruneOnce every period on a thread of its own (logging what it deleted, and errors),
  // the first pass at once. Call Start at most once; Stop waits for a pass in progress.
  void Start();
  void Stop();

 private:
  db::Datastore& ds_;
  const HistoryRetention retention_;
  Mutex mu_;
  std::condition_variable cv_;
  bool stop_ FP_GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_{false};  // not under mu_: a pass in progress polls it
  std::thread thread_;
};

}  // namespace fp::loops
