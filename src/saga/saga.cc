#include "saga/saga.h"

#include <fmt/format.h>

#include "saga/execution.h"

namespace fp::saga {

namespace {
constexpr int64_t kEngineVersion = 1;
}  // namespace

SagaExecutor::SagaExecutor(SagaStore& store, const ActionRegistry& registry, std::string sec)
    : store_(store), registry_(registry), sec_(std::move(sec)) {}

void SagaExecutor::SetFaultPlanForTest(std::optional<FaultPlan> plan) {
  std::lock_guard lock(faults_mu_);
  faults_ = std::move(plan);
}

std::optional<FaultPlan> SagaExecutor::FaultsFor(const std::string& saga_name) const {
  std::lock_guard lock(faults_mu_);
  if (!faults_) return std::nullopt;
  if (faults_->saga_name && *faults_->saga_name != saga_name) return std::nullopt;
  return faults_;
}

Result<SagaOutcome> SagaExecutor::Run(const Uuid& saga_id, const SagaDag& dag) {
  return Start(saga_id, dag, /*may_exist=*/true);
}

Result<SagaOutcome> SagaExecutor::RunNew(const SagaDag& dag) {
  // Time-ordered: the saga and saga_node_event tables, keyed by saga id, then grow at their
  // end, so the writes of a group-commit batch share pages (see Uuid::TimeOrdered).
  return Start(Uuid::TimeOrdered(), dag, /*may_exist=*/false);
}

Result<SagaOutcome> SagaExecutor::Start(const Uuid& saga_id, const SagaDag& dag, bool may_exist) {
  for (const Node& n : dag.nodes) {
    if (!registry_.Find(n.action)) {
      return Fail(Error::Internal(
          fmt::format("saga \"{}\": action \"{}\" is not registered", dag.name, n.action)));
    }
  }
  SagaRow row;
  row.id = saga_id;
  row.name = dag.name;
  row.dag = dag.ToJson().dump();
  row.owner = SagaOwner{sec_, 1};
  row.engine_version = kEngineVersion;
  const Action* first = dag.nodes.empty() ? nullptr : registry_.Find(dag.nodes.front().action);
  if (first && first->run_in_tx) {
    if (may_exist) {
      auto existing = store_.Load(saga_id);
      if (existing) return Resume(saga_id);  // an idempotent retry of a saga already created
      if (existing.error().kind() != ErrorKind::kNotFound) return Fail(existing.error());
    }
    SagaLog log;
    log.saga = row;
    Execution run(*this, std::move(log), dag, row);
    return run.Drive();
  }
  FP_TRY(store_.Create(row));
  return Resume(saga_id);
}

Result<SagaOutcome> SagaExecutor::Resume(const Uuid& saga_id) {
  SagaLog log = FP_TRY(store_.Load(saga_id));
  if (log.saga.engine_version > kEngineVersion) {
    return Fail(Error::Internal(fmt::format("saga {} was written by a newer engine (version {})",
                                            saga_id.ToString(), log.saga.engine_version)));
  }
  Json dag_json = Json::parse(log.saga.dag, nullptr, false);
  SagaDag dag = FP_TRY(SagaDag::FromJson(dag_json));
  Execution run(*this, std::move(log), std::move(dag));
  return run.Drive();
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

Result<std::vector<Uuid>> SagaExecutor::ListUnfinished() { return store_.ListUnfinished(sec_); }

Result<bool> SagaExecutor::MarkStuck(const Uuid& saga_id, const Error& why) {
  Json result = ErrorToJson(why);
  result["cannot_resume"] = true;
  return store_.MarkStuck(saga_id, sec_, result.dump());
}

void SagaExecutor::Quiesce() { quiesced_.store(true); }

}  // namespace fp::saga
