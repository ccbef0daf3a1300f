#include "saga/saga.h"

#include <fmt/format.h>

#include "saga/execution.h"

namespace fp::saga {

namespace {
constexpr int64_t kEngineVersion = 1;
}  // namespace

SagaExecutor::SagaExecutor(SagaStore& store, const ActionRegistry& registry, std::string sec,
                           const Clock& clock, Random& random)
    : store_(store), clock_(clock), random_(random), registry_(registry), sec_(std::move(sec)) {}

void SagaExecutor::SetFaultPlanForTest(std::optional<FaultPlan> plan) {
  MutexLock lock(faults_mu_);
  faults_ = std::move(plan);
}

std::optional<FaultPlan> SagaExecutor::FaultsFor(const std::string& saga_name) const {
  MutexLock lock(faults_mu_);
  if (!faults_) return std::nullopt;
  if (faults_->saga_name && *faults_->saga_name != saga_name) return std::nullopt;
  return faults_;
}

class SagaExecutor::RunningGuard {
 public:
  RunningGuard(SagaExecutor& exec, const Uuid& id) : exec_(exec), id_(id) {}
  ~RunningGuard() {
    MutexLock lock(exec_.running_mu_);
    exec_.running_.erase(id_);
  }
  RunningGuard(const RunningGuard&) = delete;
  RunningGuard& operator=(const RunningGuard&) = delete;

 private:
  SagaExecutor& exec_;
  Uuid id_;
};

Result<std::unique_ptr<SagaExecutor::RunningGuard>> SagaExecutor::MarkRunning(const Uuid& saga_id) {
  MutexLock lock(running_mu_);
  if (!running_.insert(saga_id).second) {
    return Fail(Error::Unavailable(
        fmt::format("saga {} is running in this server already; retry later", saga_id.ToString())));
  }
  return std::make_unique<RunningGuard>(*this, saga_id);
}

bool SagaExecutor::IsRunning(const Uuid& saga_id) const {
  MutexLock lock(running_mu_);
  return running_.count(saga_id) != 0;
}

void SagaExecutor::SetStartGate(std::function<Status()> gate) { start_gate_ = std::move(gate); }

void SagaExecutor::SetLeftUnfinishedHook(std::function<void()> hook) {
  left_unfinished_ = std::move(hook);
}

void SagaExecutor::LeftUnfinished(const Error& error) {
  if (!left_unfinished_ || quiesced()) return;
  // Gone from the log, or another executor's now: nothing of ours to take up.
  if (error.kind() == ErrorKind::kNotFound || IsLostSaga(error)) return;
  left_unfinished_();
}

Result<SagaOutcome> SagaExecutor::Run(const Uuid& saga_id, const SagaDag& dag,
                                      const SagaOrigin* origin) {
  return Start(saga_id, dag, /*may_exist=*/true, origin);
}

Result<SagaOutcome> SagaExecutor::RunNew(const SagaDag& dag, const SagaOrigin* origin,
                                         const CreateCheck* check) {
  // Time-ordered: the saga and saga_node_event tables, keyed by saga id, then grow at their
  // end, so the writes of a group-commit batch share pages (see Uuid::TimeOrdered).
  return Start(random_.NewTimeOrderedUuid(clock_.Now()), dag, /*may_exist=*/false, origin, check);
}

Result<SagaOutcome> SagaExecutor::Start(const Uuid& saga_id, const SagaDag& dag, bool may_exist,
                                        const SagaOrigin* origin, const CreateCheck* check) {
  bool written = false;
  Result<SagaOutcome> outcome = StartRunning(saga_id, dag, may_exist, origin, check, written);
  if (!outcome && written) LeftUnfinished(outcome.error());
  return outcome;
}

Result<SagaOutcome> SagaExecutor::StartRunning(const Uuid& saga_id, const SagaDag& dag,
                                               bool may_exist, const SagaOrigin* origin,
                                               const CreateCheck* check, bool& written) {
  // Before the saga can be in the store: recovery never takes a saga a request runs here.
  auto running = FP_TRY(MarkRunning(saga_id));
  for (const Node& n : dag.nodes) {
    if (!registry_.Find(n.action)) {
      return Fail(Error::Internal(
          fmt::format("saga \"{}\": action \"{}\" is not registered", dag.name, n.action)));
    }
  }
  SagaRow row;
  row.id = saga_id;
  row.name = dag.name;
  row.dag = dag.ToText();
  row.owner = SagaOwner{sec_, 1};
  row.engine_version = kEngineVersion;
  if (origin) row.origin = origin->Describe();
  const Action* first = dag.nodes.empty() ? nullptr : registry_.Find(dag.nodes.front().action);
  if (may_exist) {
    auto existing = store_.Load(saga_id);
    // An idempotent retry of a saga already created: no new saga, so no start gate.
    if (existing) {
      written = true;
      return ResumeRunning(saga_id, std::nullopt);
    }
    if (existing.error().kind() != ErrorKind::kNotFound) return Fail(existing.error());
  }
  if (start_gate_) FP_CHECK_OK(start_gate_());
  if (first && first->run_in_tx) {
    SagaLog log;
    log.saga = row;
    Execution run(*this, std::move(log), dag, row, origin, check);
    // With a check, counted by the run once the check passed.
    if (check == nullptr) CountStarted(dag.name);
    written = true;  // with the first node's transaction, if that commits
    Result<SagaOutcome> outcome = DriveCounted(run, dag.name);
    if (run.refused_by_check()) written = false;  // nothing of the saga was written
    return outcome;
  }
  if (check != nullptr) {
    return Fail(Error::Internal(fmt::format(
        "saga \"{}\": a create check needs a first node in the store's transaction", dag.name)));
  }
  if (!FP_TRY(store_.Create(row, origin))) {
    return Fail(SagaExistsError(saga_id));
  }
  written = true;
  CountStarted(dag.name);
  return ResumeRunning(saga_id, std::nullopt, origin);
}

Result<SagaOutcome> SagaExecutor::Resume(const Uuid& saga_id) {
  Result<SagaOutcome> outcome = [&]() -> Result<SagaOutcome> {
    auto running = FP_TRY(MarkRunning(saga_id));
    return ResumeRunning(saga_id, std::nullopt);
  }();
  // Not when another call runs it here (that one is driving it).
  if (!outcome && IsRunning(saga_id)) return outcome;
  if (!outcome) LeftUnfinished(outcome.error());
  return outcome;
}

Result<SagaOutcome> SagaExecutor::ResumeOwned(const Uuid& saga_id, int64_t generation) {
  auto running = FP_TRY(MarkRunning(saga_id));
  return ResumeRunning(saga_id, generation);
}

Result<std::optional<int64_t>> SagaExecutor::Claim(const Uuid& saga_id, int64_t generation) {
  return store_.Claim(saga_id, SagaOwner{sec_, generation});
}

Result<SagaOutcome> SagaExecutor::ResumeRunning(const Uuid& saga_id,
                                                std::optional<int64_t> generation,
                                                const SagaOrigin* origin) {
  SagaLog log = FP_TRY(store_.Load(saga_id));
  bool at_rest = log.saga.state != SagaState::kRunning && log.saga.state != SagaState::kUnwinding;
  if (generation && !at_rest &&
      (log.saga.owner.sec != sec_ || log.saga.owner.generation != *generation)) {
    return Fail(LostSagaError(saga_id, SagaOwner{sec_, *generation}));
  }
  if (log.saga.engine_version > kEngineVersion) {
    return Fail(Error::Internal(fmt::format("saga {} was written by a newer engine (version {})",
                                            saga_id.ToString(), log.saga.engine_version)));
  }
  Json dag_json = Json::parse(log.saga.dag, nullptr, false);
  SagaDag dag = FP_TRY(SagaDag::FromJson(dag_json));
  std::string name = dag.name;
  Execution run(*this, std::move(log), std::move(dag), std::nullopt, origin);
  return DriveCounted(run, name);
}

void SagaExecutor::CountStarted(const std::string& name) {
  MutexLock lock(counts_mu_);
  ++counts_[name].started;
}

Result<SagaOutcome> SagaExecutor::DriveCounted(Execution& run, const std::string& name) {
  {
    MutexLock lock(counts_mu_);
    ++counts_[name].in_flight;
  }
  Result<SagaOutcome> outcome = run.Drive();
  MutexLock lock(counts_mu_);
  Counts& c = counts_[name];
  --c.in_flight;
  if (outcome) {
    switch (outcome->kind) {
      case SagaResultKind::kDone:
        ++c.done;
        break;
      case SagaResultKind::kUnwound:
        ++c.unwound;
        break;
      case SagaResultKind::kStuck:
        ++c.stuck;
        break;
    }
  }
  return outcome;
}

std::map<std::string, SagaExecutor::Counts> SagaExecutor::CountsByName() const {
  MutexLock lock(counts_mu_);
  return counts_;
}

Result<std::optional<Error>> SagaExecutor::WhyNotResumable(const Uuid& saga_id) {
  SagaLog log = FP_TRY(store_.Load(saga_id));
  if (log.saga.engine_version > kEngineVersion) {
    return Error::Internal(fmt::format("saga {} was written by a newer engine (version {})",
                                       saga_id.ToString(), log.saga.engine_version));
  }
  auto dag = SagaDag::FromJson(Json::parse(log.saga.dag, nullptr, false));
  if (!dag) return dag.error();
  for (const Node& n : dag->nodes) {
    if (!registry_.Find(n.action)) {
      return Error::Internal(
          fmt::format("saga {}: action \"{}\" is not registered", saga_id.ToString(), n.action));
    }
  }
  return std::optional<Error>();
}

Result<std::vector<OwnedSaga>> SagaExecutor::ListUnfinished() {
  return store_.ListUnfinished(sec_);
}

Result<bool> SagaExecutor::MarkStuck(const Uuid& saga_id, int64_t generation, const Error& why) {
  Json result = ErrorToJson(why);
  result["cannot_resume"] = true;
  return store_.MarkStuck(saga_id, SagaOwner{sec_, generation}, result.dump());
}

void SagaExecutor::Quiesce() { quiesced_.store(true); }

}  // namespace fp::saga
