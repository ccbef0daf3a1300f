#include "app/instances.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "app/sagas/instance_create.h"
#include "app/sagas/instance_delete.h"
#include "app/sagas/instance_migrate.h"
#include "app/sagas/instance_start.h"
#include "common/bytes.h"
#include "common/log.h"
#include "db/external_ips.h"
#include "db/instances.h"
#include "db/request_effect.h"
#include "db/sleds.h"
#include "loops/nat_reconciler.h"
#include "loops/sled_agents.h"
#include "loops/sled_watcher.h"

namespace fp::app {

namespace {

// Whom a request's own agent calls (a stop, a reboot) are made for.
agents::CallContext CallFor(const RequestContext& rq) {
  agents::CallContext call;
  if (rq.effect != nullptr) call.request_id = rq.effect->entry().request_id;
  return call;
}

// What a replay reads of the parameters of instance_create, instance_start or
// instance_migrate: each names the instance; only the create's say whether to start it.
struct InstanceSagaReplay {
  Uuid instance_id;
  bool start = true;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(InstanceSagaReplay, instance_id, start)

}  // namespace

Status CheckInstanceSize(const InstanceSize& size) {
  if (size.ncpus > kMaxVcpusPerInstance) {
    return Fail(Error::InvalidRequest(
        fmt::format("cannot have more than {} vCPUs per instance", kMaxVcpusPerInstance)));
  }
  if (size.ncpus < 1) {
    return Fail(Error::InvalidRequest("cannot have fewer than 1 vCPU per instance"));
  }
  if (size.memory < kMinMemoryBytesPerInstance) {
    return Fail(Error::InvalidValue(
        "size",
        fmt::format("memory must be at least {}", ShowByteCount(kMinMemoryBytesPerInstance))));
  }
  if (size.memory % kMinMemoryBytesPerInstance != 0) {
    return Fail(Error::InvalidValue(
        "size",
        fmt::format("memory must be divisible by {}", ShowByteCount(kMinMemoryBytesPerInstance))));
  }
  if (size.memory > kMaxMemoryBytesPerInstance) {
    return Fail(
        Error::InvalidValue("size", fmt::format("memory must be less than or equal to {}",
                                                ShowByteCount(kMaxMemoryBytesPerInstance))));
  }
  return Ok();
}

Result<model::Instance> Instances::Lookup(const Actor& actor, const NameOrId& instance,
                                          const std::optional<NameOrId>& project,
                                          db::DeferredDurability* deferred) {
  if (instance.is_id()) {
    if (project) {
      return Fail(Error::InvalidRequest(
          "when providing instance as an ID project should not be specified"));
    }
    return db::InstanceById({ds_, deferred}, actor.silo_id, instance.id());
  }
  if (!project) {
    return Fail(
        Error::InvalidRequest("instance should either be UUID or project should be specified"));
  }
  model::Project p = FP_TRY(projects_.View(actor, *project, deferred));
  return db::InstanceByName({ds_, deferred}, p.id, instance.name().str());
}

Result<std::vector<model::Instance>> Instances::List(const Actor& actor, const NameOrId& project,
                                                     const model::PageRequest& page) {
  model::Project p = FP_TRY(projects_.View(actor, project));
  return db::InstanceList(ds_, p.id, page);
}

Result<model::Instance> Instances::AfterSaga(const Uuid& instance_id,
                                             const saga::SagaOutcome& outcome) {
  if (outcome.kind != saga::SagaResultKind::kDone) {
    if (outcome.error) return Fail(*outcome.error);
    return Fail(Error::Internal("saga did not complete"));
  }
  return ds_.Read<model::Instance>([&](db::Tx& tx) { return db::InstanceGetIn(tx, instance_id); });
}

Result<model::Instance> Instances::Create(const RequestContext& rq, const NameOrId& project,
                                          const InstanceCreateParams& params) {
  const Actor& actor = rq.actor;
  model::Project p = FP_TRY(projects_.View(actor, project));
  FP_CHECK_OK(RequireWrite(actor));
  FP_CHECK_OK(CheckInstanceSize(InstanceSize{params.ncpus, params.memory}));
  // A name in use is refused from a read, before the saga writes anything; the record node
  // checks again inside its transaction for a create racing this one.
  if (auto existing = db::InstanceByName(ds_, p.id, params.name)) {
    return Fail(Error::AlreadyExists("instance", params.name));
  } else if (existing.error().kind() != ErrorKind::kNotFound) {
    return Fail(existing.error());
  }
  InstanceCreateSagaParams saga_params{.instance_id = ds_.random().NewUuid(),
                                       .nic_id = ds_.random().NewUuid(),
                                       .snat_id = ds_.random().NewUuid(),
                                       .project_id = p.id,
                                       .silo_id = actor.silo_id,
                                       .name = params.name,
                                       .description = params.description,
                                       .hostname = params.hostname,
                                       .ncpus = params.ncpus,
                                       // at most 1536 GiB: checked above
                                       .memory = static_cast<int64_t>(params.memory),
                                       .nic = params.nic,
                                       .start = params.start,
                                       .external_ips = {},
                                       .snat = params.snat,
                                       .snat6_id = ds_.random().NewUuid()};
  // Floating IPs are resolved now, so that lookup errors (404, other project) come before
  // anything is created.
  for (const RequestedExternalIp& r : params.external_ips) {
    if (r.ephemeral) {
      auto [pool, ip_version] = SelectorFields(r.selector);
      saga_params.external_ips.push_back(InstanceCreateExternalIp{.type = model::IpKind::kEphemeral,
                                                                  .ip_id = ds_.random().NewUuid(),
                                                                  .pool = pool,
                                                                  .ip_version = ip_version});
    } else {
      model::ExternalIp fip = r.floating_ip.is_id()
                                  ? FP_TRY(floating_ips_.View(actor, r.floating_ip, std::nullopt))
                                  : FP_TRY(db::FloatingIpByName(ds_, p.id, r.floating_ip));
      if (fip.project_id != p.id) {
        return Fail(
            Error::InvalidRequest("floating IP must be in the same project as the instance"));
      }
      saga_params.external_ips.push_back(
          InstanceCreateExternalIp{.type = model::IpKind::kFloating, .ip_id = fip.id});
    }
  }
  // With a start, the start saga's end completes the request's audit entry.
  db::RequestSaga origin(rq.effect, /*ends_request=*/!params.start);
  auto outcome = FP_TRY(exec_.RunNew(InstanceCreateSaga(saga_params), &origin));
  model::Instance created = FP_TRY(AfterSaga(saga_params.instance_id, outcome));
  if (!params.start) return created;
  return RunStartSaga(rq, created);
}

Result<model::Instance> Instances::RunStartSaga(const RequestContext& rq,
                                                const model::Instance& instance) {
  db::RequestSaga origin(rq.effect, /*ends_request=*/true);
  auto outcome = FP_TRY(exec_.RunNew(InstanceStartSaga({.instance_id = instance.id}), &origin));
  return AfterSaga(instance.id, outcome);
}

Result<model::Instance> Instances::InstanceOfSaga(const RequestContext& rq,
                                                  const saga::Json& params,
                                                  const saga::Json& output) {
  const Actor& actor = rq.actor;
  auto replayed = FP_TRY(Decode<InstanceSagaReplay>(params, "parameters"));
  if (replayed.instance_id.IsNil()) {
    return Fail(Error::Internal("saga parameters name no instance"));
  }
  std::optional<model::Instance> recorded;
  if (output.is_object()) {
    recorded = FP_TRY(Decode<InstanceCreated>(output, "output")).instance;
    if (recorded && !replayed.start) return *recorded;
  }
  auto now = Lookup(actor, NameOrId(replayed.instance_id), std::nullopt);
  if (!now && now.error().kind() == ErrorKind::kNotFound && recorded) return *recorded;
  if (now && recorded && now->state == model::InstanceState::kNoVmm &&
      now->time_run_state_updated == recorded->time_run_state_updated) {
    // A create that asked for a start, whose run state has not changed since its create saga
    // recorded the row: the start never began (the server died, or the start failed, between
    // the two sagas). Do it now, as the request would have, rather than answer "stopped" for
    // good. Any start attempt, or a stop since, changes the run state's time.
    FP_CHECK_OK(RequireWrite(actor));
    return RunStartSaga(rq, *now);
  }
  return now;
}

Result<model::Instance> Instances::Start(const Request<model::Instance>& rq,
                                         const NameOrId& instance,
                                         const std::optional<NameOrId>& project) {
  const Actor& actor = rq.actor;
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  FP_CHECK_OK(RequireWrite(actor));
  if (i.state == model::InstanceState::kVmm && i.run_state != model::RunState::kStopping)
    return i;  // idempotent
  if (i.state != model::InstanceState::kNoVmm && i.state != model::InstanceState::kFailed) {
    return Fail(Error::InvalidRequest(fmt::format(
        "instance \"{}\" cannot be started while it is {}", i.name, model::ToString(i.run_state))));
  }
  return RunStartSaga(rq, i);
}

Result<model::Instance> Instances::Stop(const Request<model::Instance>& rq,
                                        const NameOrId& instance,
                                        const std::optional<NameOrId>& project) {
  const Actor& actor = rq.actor;
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  FP_CHECK_OK(RequireWrite(actor));
  // A failed instance runs nowhere: stopping it records it stopped, so that it can be
  // started, changed and deleted as any stopped instance.
  if (i.state == model::InstanceState::kFailed) {
    return db::InstanceStopFailed(ds_, i.id, db::EffectOf<model::Instance>(rq));
  }
  if (i.state != model::InstanceState::kVmm || !i.sled_id) return i;  // already stopped
  if (i.migration_id) {
    return Fail(Error::Unavailable(
        fmt::format("instance \"{}\" is migrating; retry when the migration completes", i.name)));
  }
  agents::SledAgentClient* sled = FP_TRY(sled_agents_.Sled(*i.sled_id));
  // The sled is told before the write that records the stop: the entry goes first.
  if (rq.effect != nullptr) FP_CHECK_OK(rq.effect->RecordIntent(ds_));
  if (i.run_state == model::RunState::kStarting) {
    // A start saga that has not registered the VM on its sled yet (in flight, or waiting for
    // recovery after a restart) still owns the instance: a stop now would find no VM, and the
    // watcher would take the missing VM for a failed one.
    auto vm = sled->Get(i.id);
    if (!vm && vm.error().kind() == ErrorKind::kNotFound) {
      return Fail(Error::Unavailable(
          fmt::format("instance \"{}\" is starting; retry the stop when it is running", i.name)));
    }
  }
  FP_TRY(sled->Stop(i.id, CallFor(rq)));
  return db::InstanceSetRunState(ds_, i.id, model::RunState::kStopping,
                                 db::EffectOf<model::Instance>(rq));
}

Result<model::Instance> Instances::Reboot(const Request<model::Instance>& rq,
                                          const NameOrId& instance,
                                          const std::optional<NameOrId>& project) {
  const Actor& actor = rq.actor;
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  FP_CHECK_OK(RequireWrite(actor));
  if (i.state != model::InstanceState::kVmm || i.run_state != model::RunState::kRunning ||
      !i.sled_id) {
    return Fail(Error::InvalidRequest(
        fmt::format("instance \"{}\" can only be rebooted while running (it is {})", i.name,
                    model::ToString(i.run_state))));
  }
  agents::SledAgentClient* sled = FP_TRY(sled_agents_.Sled(*i.sled_id));
  // A reboot changes the instance and its sled before the write that records its answer.
  if (rq.effect != nullptr) FP_CHECK_OK(rq.effect->RecordIntent(ds_));
  // The watcher leaves rebooting instances alone, so the stop below is not taken for a stop.
  FP_TRY(db::InstanceSetRunState(ds_, i.id, model::RunState::kRebooting));
  const agents::CallContext call = CallFor(rq);
  auto restarted = [&]() -> Status {
    FP_TRY(sled->Stop(i.id, call));
    const Clock& clock = ds_.clock();
    const MonoTime deadline = clock.Deadline(std::chrono::seconds(10));
    for (;;) {
      auto vm = sled->Get(i.id);
      if (!vm || vm->state == agents::VmState::kStopped) break;
      if (clock.Monotonic() > deadline) {
        return Fail(Error::Unavailable(fmt::format(
            "sled agent at {} did not stop instance \"{}\" within 10 s", sled->address(), i.name)));
      }
      clock.SleepFor(std::chrono::milliseconds(10));
    }
    agents::InstanceSpec spec = FP_TRY(loops::BuildInstanceSpec(ds_, i.id));
    FP_TRY(sled->EnsureRunning(spec, call));
    return Ok();
  }();
  if (!restarted) {
    // Back to running, so that the watcher judges the instance by what its sled holds (a VM
    // the stop took down settles stopped, a silent sled's instance fails) instead of leaving
    // it rebooting for good.
    (void)db::InstanceSetRunState(ds_, i.id, model::RunState::kRunning);
    return Fail(restarted.error());
  }
  return db::InstanceSetRunState(ds_, i.id, model::RunState::kStarting,
                                 db::EffectOf<model::Instance>(rq));
}

Result<model::Instance> Instances::Migrate(const RequestContext& rq, const NameOrId& instance,
                                           const std::optional<NameOrId>& project,
                                           const Uuid& dst_sled) {
  const Actor& actor = rq.actor;
  FP_CHECK_OK(RequireFleetAdmin(actor));
  // A /v1/system operation: by id, the fleet admin reaches instances of every silo (as the
  // sled views list them). Names stay scoped to the token's silo, where they are unique.
  model::Instance i = instance.is_id() && !project
                          ? FP_TRY(ds_.Read<model::Instance>(
                                [&](db::Tx& tx) { return db::InstanceGetIn(tx, instance.id()); }))
                          : FP_TRY(Lookup(actor, instance, project));
  FP_TRY(db::SledGet(ds_, dst_sled));
  if (i.state != model::InstanceState::kVmm || i.run_state != model::RunState::kRunning ||
      !i.sled_id) {
    return Fail(Error::InvalidRequest(
        fmt::format("instance \"{}\" can only be migrated while running (it is {})", i.name,
                    model::ToString(i.run_state))));
  }
  if (*i.sled_id == dst_sled) {
    return Fail(Error::InvalidRequest(
        fmt::format("instance \"{}\" already runs on sled {}", i.name, dst_sled.ToString())));
  }
  FP_TRY(sled_agents_.Sled(dst_sled));
  db::RequestSaga origin(rq.effect, /*ends_request=*/true);
  auto outcome = FP_TRY(exec_.RunNew(InstanceMigrateSaga({.instance_id = i.id,
                                                          .src_sled_id = *i.sled_id,
                                                          .dst_sled_id = dst_sled,
                                                          .migration_id = ds_.random().NewUuid()}),
                                     &origin));
  return AfterSaga(i.id, outcome);
}

Result<model::Instance> Instances::Update(const Request<model::Instance>& rq,
                                          const NameOrId& instance,
                                          const std::optional<NameOrId>& project,
                                          const InstanceSize& size) {
  const Actor& actor = rq.actor;
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  FP_CHECK_OK(RequireWrite(actor));
  FP_CHECK_OK(CheckInstanceSize(size));
  model::InstanceUpdate update;
  update.ncpus = size.ncpus;
  update.memory = static_cast<int64_t>(size.memory);  // at most 1536 GiB: checked above
  return db::InstanceUpdateFields(ds_, i.id, update, db::EffectOf<model::Instance>(rq));
}

Status Instances::Delete(const RequestContext& rq, const NameOrId& instance,
                         const std::optional<NameOrId>& project) {
  const Actor& actor = rq.actor;
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  FP_CHECK_OK(RequireWrite(actor));
  // Refused before anything changes (product.md difference 11); the saga's first node checks
  // again inside its transaction.
  if (i.state == model::InstanceState::kVmm) {
    return Fail(Error::InvalidRequest(fmt::format(
        "cannot delete instance: instance is running or has not yet fully stopped (instance "
        "\"{}\" is {}; stop it first)",
        i.name, model::ToString(i.run_state))));
  }
  db::RequestSaga origin(rq.effect, /*ends_request=*/true);
  auto outcome = FP_TRY(exec_.RunNew(InstanceDeleteSaga({.instance_id = i.id}), &origin));
  if (outcome.kind != saga::SagaResultKind::kDone) {
    return Fail(outcome.error ? *outcome.error : Error::Internal("delete did not complete"));
  }
  // The instance's NAT rows went with it; tell the switch now (the reconciler retries if the
  // switch does not answer).
  if (auto s = nat_.Sync(CallFor(rq)); !s) {
    LogEvent("warn", "NAT sync after delete failed", {{"error", s.error().message()}});
  }
  // A stopped VM whose unregister failed may still be on a sled, holding the addresses just
  // released: the reaper removes it from whichever sled holds it, now rather than at its next
  // pass. Not here: a hung sled would hold up every delete.
  watcher_.Wake();
  return Ok();
}

}  // namespace fp::app
