#include "app/saga_coordinator.h"

#include <fmt/format.h>

#include "common/log.h"
#include "common/thread_name.h"
#include "db/datastore.h"
#include "db/leases.h"

namespace fp::app {

namespace {
int64_t Micros(std::chrono::milliseconds d) { return d.count() * 1000; }
}  // namespace

SagaCoordinator::SagaCoordinator(db::Datastore& ds, saga::SagaExecutor& executor,
                                 CoordinatorOptions options)
    : ds_(ds),
      exec_(executor),
      options_(std::move(options)),
      incarnation_(ds.random().NewUuid().ToString()) {}

Result<std::unique_ptr<SagaCoordinator>> SagaCoordinator::Start(db::Datastore& ds,
                                                                saga::SagaExecutor& executor,
                                                                CoordinatorOptions options) {
  std::unique_ptr<SagaCoordinator> c(new SagaCoordinator(ds, executor, std::move(options)));
  Timestamp began = ds.clock().Now();
  db::SecLeaseTaken taken =
      FP_TRY(db::SecLeaseTake(ds, executor.sec(), c->incarnation_, Micros(c->options_.lease_ttl)));
  {
    // No other thread sees `c` yet: the lock only satisfies the thread-safety analysis.
    MutexLock lock(c->mu_);
    c->live_until_ = began + Micros(c->options_.lease_ttl);
  }
  c->sagas_at_start_ = taken.own_sagas.size();
  executor.SetStartGate([raw = c.get()] { return raw->LeaseLive(); });
  executor.SetLeftUnfinishedHook([raw = c.get()] { raw->OwnRecoveryDue(); });
  c->Recover(std::move(taken.own_sagas));
  // Sagas of servers that are gone (or of an earlier version, which held no lease) are adopted
  // at once too: with SQLite that is the only server there is.
  if (auto adopted = c->AdoptOnce(); !adopted) {
    LogEvent("warn", "adopting sagas of expired coordinators failed; retrying in the background",
             {{"error", adopted.error().message()}});
  }
  return c;
}

SagaCoordinator::~SagaCoordinator() { Stop(); }

void SagaCoordinator::StartBackground() {
  thread_ = std::thread([this] {
    NameThisThread("saga-coord");
    Loop();
  });
}

void SagaCoordinator::OwnRecoveryDue() {
  {
    MutexLock lock(mu_);
    own_due_ = true;
  }
  cv_.notify_all();
}

void SagaCoordinator::Loop() {
  const Clock& clock = ds_.clock();
  // Start took the lease: the first renewal is one interval later.
  auto next_renew = clock.Monotonic() + options_.renew_interval;
  auto next_own = clock.Monotonic() + options_.own_recovery_interval;
  auto last_own = clock.Monotonic();
  MutexLock lock(mu_);
  while (!stop_) {
    const auto now = clock.Monotonic();
    const auto gap_ends = last_own + options_.own_recovery_min_gap;
    const bool renew = now >= next_renew;
    const bool own = now >= next_own || (own_due_ && now >= gap_ends);
    if (!renew && !own) {
      // Until the next renewal or own pass (a due one once the gap since the last ended), or
      // until a pass falls due or stop.
      auto wake = std::min(next_renew, next_own);
      if (own_due_) wake = std::min(wake, gap_ends);
      const bool was_due = own_due_;
      clock.WaitUntil(lock, cv_, wake,
                      [&]() FP_REQUIRES(mu_) { return stop_ || own_due_ != was_due; });
      continue;
    }
    const bool due = own && own_due_;
    if (own) own_due_ = false;
    lock.Unlock();
    if (renew) {
      next_renew = now + options_.renew_interval;
      if (auto renewed = RenewOnce(); !renewed) {
        LogEvent("warn", "saga coordinator lease not renewed",
                 {{"error", renewed.error().message()}});
      }
      if (auto adopted = AdoptOnce(); !adopted) {
        LogEvent("warn", "adopting sagas of expired coordinators failed",
                 {{"error", adopted.error().message()}});
      }
    }
    if (own) {
      last_own = clock.Monotonic();
      next_own = last_own + options_.own_recovery_interval;
      auto recovered = RecoverOwnOnce();
      if (!recovered) {
        LogEvent("warn", "listing unfinished sagas failed",
                 {{"error", recovered.error().message()}});
      }
      if (!recovered || !LeaseLive()) {
        // A pass brought forward by a request's saga that could take nothing up (the
        // datastore still failing, the lease not live) is due again after the gap.
        MutexLock relock(mu_);
        own_due_ = own_due_ || due;
      }
    }
    // Recoveries that are done: joined outside the lock (their workers report to us).
    std::vector<std::unique_ptr<saga::SagaRecovery>> done;
    lock.Lock();
    for (auto it = recoveries_.begin(); it != recoveries_.end();) {
      if ((*it)->finished()) {
        done.push_back(std::move(*it));
        it = recoveries_.erase(it);
      } else {
        ++it;
      }
    }
    lock.Unlock();
    done.clear();
    lock.Lock();
  }
}

void SagaCoordinator::Stop() {
  std::vector<std::unique_ptr<saga::SagaRecovery>> recoveries;
  {
    MutexLock lock(mu_);
    if (stop_) return;
    stop_ = true;
    recoveries.swap(recoveries_);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& r : recoveries) r->Stop();
  recoveries.clear();
  bool superseded = false;
  {
    MutexLock lock(mu_);
    superseded = superseded_;
  }
  if (!superseded) {
    if (auto released = db::SecLeaseRelease(ds_, exec_.sec(), incarnation_); !released) {
      LogEvent("warn", "could not release the saga coordinator lease; it expires by itself",
               {{"error", released.error().message()}});
    }
  }
}

Status SagaCoordinator::RenewOnce() {
  // The lease is counted from before the write: the database's expiry is later than that.
  Timestamp began = ds_.clock().Now();
  auto renewed = db::SecLeaseRenew(ds_, exec_.sec(), incarnation_, Micros(options_.lease_ttl));
  MutexLock lock(mu_);
  if (!renewed) {
    renew_error_ = renewed.error();
    return Fail(
        Error::Unavailable(fmt::format("cannot renew the lease of saga coordinator \"{}\": {}",
                                       exec_.sec(), renewed.error().message())));
  }
  if (!*renewed) {
    if (!superseded_) {
      LogEvent("error",
               "another server process took this server's saga coordinator id over; this "
               "process starts no more sagas",
               {{"coordinator_id", exec_.sec()}});
    }
    superseded_ = true;
    return LeaseLiveLocked();
  }
  renew_error_.reset();
  live_until_ = began + Micros(options_.lease_ttl);
  return Ok();
}

Status SagaCoordinator::LeaseLive() const {
  MutexLock lock(mu_);
  return LeaseLiveLocked();
}

Status SagaCoordinator::LeaseLiveLocked() const {
  if (superseded_) {
    return Fail(Error::Unavailable(fmt::format(
        "this server's saga coordinator id \"{}\" was taken over by another server process (a "
        "restart under the same id, or a second server given the same --coordinator-id): this "
        "process starts no more sagas; retry the request on another server, and give each "
        "server its own id",
        exec_.sec())));
  }
  Timestamp now = ds_.clock().Now();
  if (now >= live_until_) {
    std::string why = renew_error_ ? fmt::format(" (last renewal: {})", renew_error_->message())
                                   : std::string(" (this server was paused or slow)");
    return Fail(Error::Unavailable(fmt::format(
        "this server's saga coordinator lease expired {} ms ago{}: it starts no sagas until it "
        "renewed the lease, and another server may adopt its sagas; retry the request",
        (now - live_until_) / 1000, why)));
  }
  return Ok();
}

Result<std::vector<saga::OwnedSaga>> SagaCoordinator::AdoptOnce() {
  // A server that may itself be taken for dead adopts nothing.
  if (!LeaseLive()) return std::vector<saga::OwnedSaga>();
  std::vector<saga::OwnedSaga> adopted = FP_TRY(
      db::SagaAdoptExpired(ds_, exec_.sec(), Micros(options_.adopt_grace), options_.adopt_batch));
  if (!adopted.empty()) {
    LogEvent("warn", "adopted the unfinished sagas of expired saga coordinators",
             {{"sagas", adopted.size()}, {"coordinator_id", exec_.sec()}});
    Recover(adopted);
  }
  return adopted;
}

Result<size_t> SagaCoordinator::RecoverOwnOnce() {
  // A process whose id was taken over shares it with the process that took it: "its own"
  // sagas are that one's now. One whose lease lapsed may have lost them to an adopter; either
  // way it claims nothing until it holds its lease again.
  if (!LeaseLive()) return size_t{0};
  std::vector<saga::OwnedSaga> own = FP_TRY(exec_.ListUnfinished());
  std::erase_if(own, [&](const saga::OwnedSaga& s) { return exec_.IsRunning(s.id); });
  size_t before = recovering();
  Recover(std::move(own));
  size_t after = recovering();
  return after > before ? after - before : 0;
}

size_t SagaCoordinator::recovering() const {
  MutexLock lock(mu_);
  return recovering_.size();
}

void SagaCoordinator::Recover(std::vector<saga::OwnedSaga> sagas) {
  MutexLock lock(mu_);
  if (stop_) return;
  std::erase_if(sagas, [&](const saga::OwnedSaga& s)
                           FP_REQUIRES(mu_) { return !recovering_.insert(s.id).second; });
  if (sagas.empty()) return;
  saga::RecoveryOptions options = options_.recovery;
  options.finished = [this](const Uuid& id) {
    MutexLock finished_lock(mu_);
    recovering_.erase(id);
  };
  recoveries_.push_back(saga::SagaRecovery::StartWith(exec_, std::move(options), std::move(sagas)));
}

}  // namespace fp::app
