#pragma once

// Several servers on one database (schema migration 7): the lease of each server's saga
// execution coordinator (SEC), the adoption of the unfinished sagas of a coordinator whose
// lease expired, and leases that give a background task one holder at a time.
//
// Times are the datastore clock's (Tx::now()) of the server that writes them: a lease written
// by one server is judged expired by another's clock, so the servers' clocks must agree within
// the adoption grace (NTP does).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "db/datastore.h"
#include "db/lease_fence.h"
#include "saga/store.h"

namespace fp::db {

// --- Saga execution coordinator leases ---

struct SecLeaseTaken {
  Timestamp expires_at = 0;
  // Unfinished sagas of this coordinator, each now under a new generation.
  std::vector<saga::OwnedSaga> own_sagas;
};
// At a server's start, in one write transaction: makes `incarnation` (this process) the holder
// of the lease of coordinator `sec`, valid until now + `ttl_us`, whoever held it before (an
// earlier run of this server), and increments the adoption generation of every unfinished saga
// `sec` owns, so that a zombie of the earlier run can no longer write to them. Errors: the
// datastore's.
Result<SecLeaseTaken> SecLeaseTake(Datastore& ds, const std::string& sec,
                                   const std::string& incarnation, int64_t ttl_us);

// Extends the lease of `sec` to now + `ttl_us` if `incarnation` still holds it (recreating a
// row removed meanwhile). Returns the new expiry, or nullopt if another process took the lease
// over (a restart of this server under the same coordinator id while this process was
// paused, or a second server started with the same id): this process must then stop starting
// sagas. One durable commit.
Result<std::optional<Timestamp>> SecLeaseRenew(Datastore& ds, const std::string& sec,
                                               const std::string& incarnation, int64_t ttl_us);

// At a clean stop: lets the lease of `sec` expire now if `incarnation` holds it, so that other
// servers adopt the sagas left unfinished once the grace passed.
Status SecLeaseRelease(Datastore& ds, const std::string& sec, const std::string& incarnation);

// Adopts, in one write transaction, every unfinished saga whose coordinator has no lease that
// is live or expired less than `grace_us` ago (by this server's clock), `sec`'s own excepted:
// current_sec = sec, adopt_generation + 1. A saga of a coordinator that never held a lease (a
// server of an earlier version) is adopted too. Returns the adopted sagas with their new
// generations, oldest first, at most `limit`. When nothing is to be adopted (the usual case) it
// costs one read and no commit. The adoption and the expiry check are one transaction, so a
// lease renewed meanwhile keeps its sagas.
Result<std::vector<saga::OwnedSaga>> SagaAdoptExpired(Datastore& ds, const std::string& sec,
                                                      int64_t grace_us, int64_t limit);

// For operators and tests: every coordinator's lease.
struct SecLease {
  std::string sec;
  std::string incarnation;
  Timestamp expires_at = 0;
  Timestamp time_renewed = 0;
};
Result<std::vector<SecLease>> SecLeaseList(Datastore& ds);

// --- Leases of background tasks ---

// Makes `holder` the holder of task `task` until now + `ttl_us` if nobody holds it, `holder`
// holds it already (or `previous`, this server's name for its last tenure, if given), or the
// holder's lease expired. Returns whether `holder` holds it now. One durable commit.
Result<bool> TaskLeaseAcquire(Datastore& ds, const std::string& task, const std::string& holder,
                              int64_t ttl_us, const std::string& previous = {});
// Whether another holder than `holder` (and `previous`, if given) holds task `task` now (its
// lease has not run out by this server's clock): what TaskLeaseAcquire would refuse, told by a
// read, without a commit.
Result<bool> TaskLeaseHeldByAnother(Datastore& ds, const std::string& task,
                                    const std::string& holder, const std::string& previous = {});
// Extends the lease of task `task` to now + `ttl_us` if `holder` holds it (its row names it,
// run out or not). Returns whether it did: false once another holder took it, or it was given up
// (the row gone). One durable commit.
Result<bool> TaskLeaseRenew(Datastore& ds, const std::string& task, const std::string& holder,
                            int64_t ttl_us);
// Gives the task up if `holder` holds it (at shutdown, so another server takes it at once).
Status TaskLeaseRelease(Datastore& ds, const std::string& task, const std::string& holder);
// The name the lease row of task `task` holds, run out or not (nullopt without a row).
Result<std::optional<std::string>> TaskLeaseHolder(Datastore& ds, const std::string& task);

// One server's hold on one background task's lease: Held() says whether this server may run
// the task's next pass, acquiring or renewing the lease when less than half of it is left (so
// at most one commit per half TTL while it holds it; a server that does not hold it reads who
// does first, and writes only when the lease is free or ran out). A holder stops holding once
// its lease ran out by its own clock, before any other server can take it (that one waits for
// the expiry by its own clock; clocks must agree within the TTL's other half). Thread-safe;
// `ds` must outlive it.
//
// Each tenure (from taking the lease to losing it) holds it under a name of its own: `holder`
// for the first, then "holder#1", "holder#2", ...: a tenure ends when the lease ran out by this
// server's clock, or a renewal found the row taken or gone (another server took it over, or took
// it and gave it up). So the fence of a tenure (fence()) never passes the writes of a later
// one: a judgement begun before this server lost the lease writes nothing after it took the
// lease back.
//
// With `process` (a server passes a name of its own per start), the names are
// "holder@process", "holder@process#1", ...: so a restarted server's tenure is not its previous
// process's, whose zombie (a process paused, not dead, when the server was started again) would
// otherwise pass the new process's fence. A row of an earlier process of the same server (named
// `holder`, or "holder@<process>[#n]" with another process part, which holds no '@') is taken
// over at the new process's first look, as the saga coordinator's lease is (SecLeaseTake): its
// fenced writes are refused from then on. "Earlier" is told by the name, not by age: of two
// processes of one server, the one that looks second takes it. A row "holder#n" (a tenure of a
// server before processes had names) waits for its expiry.
class TaskLeaseKeeper {
 public:
  TaskLeaseKeeper(Datastore& ds, std::string task, std::string holder, int64_t ttl_us,
                  const std::string& process = {})
      : ds_(ds),
        task_(std::move(task)),
        name_(std::move(holder)),
        base_(process.empty() ? name_ : name_ + "@" + process),
        ttl_us_(ttl_us),
        holder_(base_),
        looked_for_earlier_(process.empty()) {}
  // Whether this server holds the task now (false also when the datastore did not answer).
  bool Held();
  // Gives the task up (at shutdown), so another server takes it at once.
  void Release();
  const std::string& task() const { return task_; }
  // What the writes of a judgement begun now carry (db/lease_fence.h): the name of the last
  // tenure that held the lease (one that is only trying to take it has none of its own yet).
  // Taken when the judgement begins, not when it writes.
  LeaseFence fence() const;
  int64_t ttl_us() const { return ttl_us_; }

 private:
  Datastore& ds_;
  const std::string task_;
  const std::string name_;  // the server's
  const std::string base_;  // this process's: the first tenure's holder name
  const int64_t ttl_us_;
  mutable Mutex mu_;
  // By this server's clock, counted from before the acquiring write.
  Timestamp held_until_ FP_GUARDED_BY(mu_) = 0;
  std::string holder_ FP_GUARDED_BY(mu_);  // this tenure's name
  int64_t tenure_ FP_GUARDED_BY(mu_) = 0;
  bool tenure_held_ FP_GUARDED_BY(mu_) = false;  // whether this tenure's name ever held it
  // The last tenure's name that held it (empty before the first): fence()'s, and a row of its
  // that the next tenure takes over without waiting for it to run out.
  std::string held_holder_ FP_GUARDED_BY(mu_);
  // Whether the first look read the row for an earlier process's tenure (`earlier_`, taken over
  // before this process held the lease once).
  bool looked_for_earlier_ FP_GUARDED_BY(mu_);
  std::string earlier_ FP_GUARDED_BY(mu_);
};

}  // namespace fp::db
