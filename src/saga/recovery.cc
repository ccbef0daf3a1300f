#include "saga/recovery.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <map>

#include "common/thread_name.h"

namespace fp::saga {

Result<std::unique_ptr<SagaRecovery>> SagaRecovery::Start(SagaExecutor& executor,
                                                          RecoveryOptions options) {
  std::vector<OwnedSaga> sagas = FP_TRY(executor.ListUnfinished());
  // A saga a request runs here is that request's to finish.
  std::erase_if(sagas, [&](const OwnedSaga& s) { return executor.IsRunning(s.id); });
  return StartWith(executor, std::move(options), std::move(sagas));
}

std::unique_ptr<SagaRecovery> SagaRecovery::StartWith(SagaExecutor& executor,
                                                      RecoveryOptions options,
                                                      std::vector<OwnedSaga> sagas) {
  return std::unique_ptr<SagaRecovery>(
      new SagaRecovery(executor, std::move(options), std::move(sagas)));
}

SagaRecovery::SagaRecovery(SagaExecutor& executor, RecoveryOptions options,
                           std::vector<OwnedSaga> sagas)
    : exec_(executor), options_(std::move(options)) {
  auto now = exec_.clock().Monotonic();
  for (const OwnedSaga& s : sagas) {
    sagas_.push_back(s.id);
    queue_.push_back(Pending{s.id, s.generation, now, options_.first_retry});
  }
  remaining_ = sagas_.size();
  size_t threads = std::min(sagas_.size(), static_cast<size_t>(std::max(1, options_.concurrency)));
  for (size_t i = 0; i < threads; ++i) {
    workers_.emplace_back([this] {
      NameThisThread("saga-recover");
      Work();
    });
  }
}

SagaRecovery::~SagaRecovery() { Stop(); }

void SagaRecovery::Wait() {
  MutexLock lock(mu_);
  lock.Wait(changed_, [&]() FP_REQUIRES(mu_) { return remaining_ == 0 || stopping_; });
}

bool SagaRecovery::finished() {
  MutexLock lock(mu_);
  return remaining_ == 0 || stopping_;
}

void SagaRecovery::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  // Sagas still queued are left for later (the next start, or another recovery).
  std::deque<Pending> left;
  {
    MutexLock lock(mu_);
    left.swap(queue_);
  }
  for (const Pending& p : left) Finished(p.id);
}

void SagaRecovery::Work() {
  MutexLock lock(mu_);
  while (!stopping_ && !queue_.empty()) {
    // A saga waiting out a backoff does not hold up the ones behind it.
    auto next = std::min_element(queue_.begin(), queue_.end(), [](const auto& a, const auto& b) {
      return a.not_before < b.not_before;
    });
    if (next->not_before > exec_.clock().Monotonic()) {
      // Any change to the queue (a saga queued that may be due sooner) or a stop wakes it, and
      // the loop looks again. The deadline is a copy: the entry may be gone when it wakes.
      const auto deadline = next->not_before;
      exec_.clock().BlockUntil(lock, changed_, deadline);
      continue;
    }
    Pending pending = *next;
    queue_.erase(next);
    lock.Unlock();
    Recover(pending);
    lock.Lock();
  }
}

void SagaRecovery::Recover(Pending pending) {
  if (exec_.IsRunning(pending.id)) return Finished(pending.id);  // a request runs it here
  // Under a new generation, so that no other execution of the saga writes to it any more.
  auto claimed = exec_.Claim(pending.id, pending.generation);
  if (!claimed) return Retry(std::move(pending), claimed.error());
  if (!*claimed) return Finished(pending.id);  // adopted by another server, or at rest
  pending.generation = **claimed;
  Result<SagaOutcome> outcome = Fail(Error::Internal("not resumed"));
  try {
    outcome = exec_.ResumeOwned(pending.id, pending.generation);
  } catch (const std::exception& e) {
    // An action that throws on this saga's parameters will throw at every attempt.
    return CannotResume(pending, Error::Internal(fmt::format(
                                     "resuming the saga threw an exception: {}", e.what())));
  }
  if (outcome) {
    Report(RecoveryEvent{RecoveryEvent::Kind::kAtRest, pending.id, *outcome, std::nullopt});
    return Finished(pending.id);
  }
  bool stopping = exec_.quiesced();
  {
    MutexLock lock(mu_);
    stopping = stopping || stopping_;
  }
  if (stopping)
    return Finished(pending.id);  // shutting down: unfinished in the log for the next start
  const Error& error = outcome.error();
  if (error.kind() == ErrorKind::kNotFound) return Finished(pending.id);  // no longer in the log
  if (IsLostSaga(error)) return Finished(pending.id);  // another server adopted it meanwhile
  if (error.kind() != ErrorKind::kServiceUnavailable) {
    auto why = exec_.WhyNotResumable(pending.id);
    if (why && *why) return CannotResume(pending, **why);
    if (++pending.failures >= options_.max_attempts) return CannotResume(pending, error);
  }
  Retry(std::move(pending), error);
}

void SagaRecovery::Retry(Pending pending, const Error& error) {
  Report(RecoveryEvent{RecoveryEvent::Kind::kRetrying, pending.id, SagaOutcome{}, error});
  pending.not_before = exec_.clock().Deadline(pending.backoff);
  pending.backoff = std::min(pending.backoff * 2, options_.max_retry);
  {
    MutexLock lock(mu_);
    queue_.push_back(pending);
  }
  changed_.notify_all();
}

void SagaRecovery::CannotResume(Pending pending, const Error& why) {
  auto marked = exec_.MarkStuck(pending.id, pending.generation, why);
  if (marked) {
    if (*marked) {
      SagaOutcome stuck{SagaResultKind::kStuck, Json(), why, std::nullopt};
      Report(RecoveryEvent{RecoveryEvent::Kind::kCannotResume, pending.id, stuck, why});
    }
    return Finished(pending.id);
  }
  // Marking it failed (the store): try the whole thing again later.
  Retry(std::move(pending), marked.error());
}

void SagaRecovery::Report(const RecoveryEvent& event) const {
  if (options_.report) options_.report(event);
}

void SagaRecovery::Finished(const Uuid& id) {
  {
    MutexLock lock(mu_);
    --remaining_;
  }
  if (options_.finished) options_.finished(id);
  changed_.notify_all();
}

Result<std::vector<std::pair<Uuid, SagaOutcome>>> SagaExecutor::RecoverAll() {
  Mutex mu;
  std::map<Uuid, SagaOutcome> outcomes;  // under mu while the recovery runs
  RecoveryOptions options;
  options.report = [&](const RecoveryEvent& e) {
    if (e.kind == RecoveryEvent::Kind::kRetrying) return;
    MutexLock lock(mu);
    outcomes[e.saga_id] = e.outcome;
  };
  auto recovery = FP_TRY(SagaRecovery::Start(*this, std::move(options)));
  recovery->Wait();
  recovery->Stop();
  std::vector<std::pair<Uuid, SagaOutcome>> out;
  for (const Uuid& id : recovery->sagas()) {
    if (auto it = outcomes.find(id); it != outcomes.end()) out.emplace_back(id, it->second);
  }
  return out;
}

}  // namespace fp::saga
