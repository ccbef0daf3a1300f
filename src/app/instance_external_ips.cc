// The live attach and detach operations of the instances service (omicron-behaviour.md
// §4.1-§4.3): the checks an operation makes before its saga (app/sagas/ip_attach.h,
// ip_detach.h), and the replies rebuilt from those sagas.

#include "app/instances.h"
#include "app/ip_pools.h"
#include "app/sagas/ip_steps.h"
#include "db/attach.h"
#include "db/datastore.h"
#include "db/instances.h"
#include "db/request_effect.h"

namespace fp::app {

namespace {

// What an attach's or a detach's check refuses its saga with when the IP is as asked already
// (the IP as it is is then the answer), and whether `result` is that refusal: any other
// outcome is the store's own (a COMMIT that failed after the check), not an answer.
Error NothingToDo() { return Error::InvalidRequest("the IP is as asked already: no saga to run"); }
template <typename T>
bool RefusedAsNothingToDo(const Result<T>& result) {
  const Error nothing = NothingToDo();
  return !result && result.error().kind() == nothing.kind() &&
         result.error().message() == nothing.message();
}

}  // namespace

Result<model::ExternalIp> Instances::RunAttachSaga(const RequestContext& rq,
                                                   const IpAttachSagaParams& params,
                                                   const saga::CreateCheck* check) {
  db::RequestSaga origin(rq.effect, /*ends_request=*/true);
  auto outcome = FP_TRY(exec_.RunNew(IpAttachSaga(params), &origin, check));
  if (outcome.kind != saga::SagaResultKind::kDone) {
    return Fail(outcome.error ? *outcome.error : Error::Internal("attach did not complete"));
  }
  return IpOfOutcome(ds_, outcome.output);
}

Result<model::ExternalIp> Instances::RunDetachSaga(const RequestContext& rq,
                                                   const IpDetachSagaParams& params,
                                                   const saga::CreateCheck* check) {
  db::RequestSaga origin(rq.effect, /*ends_request=*/true);
  auto outcome = FP_TRY(exec_.RunNew(IpDetachSaga(params), &origin, check));
  if (outcome.kind != saga::SagaResultKind::kDone) {
    return Fail(outcome.error ? *outcome.error : Error::Internal("detach did not complete"));
  }
  return IpOfOutcome(ds_, outcome.output);
}

Result<model::ExternalIp> Instances::AttachFloating(const RequestContext& rq, const NameOrId& fip,
                                                    const std::optional<NameOrId>& fip_project,
                                                    const NameOrId& instance,
                                                    bool allow_reassociation) {
  const Actor& actor = rq.actor;
  // The checks after the IP's lookup and the actor's right to write, in the order their errors
  // are decided. Already attached to this instance: the saga would change nothing and answer
  // with the IP as it is, so the answer is the IP now and no saga is written (`unchanged`).
  auto checked = [](const model::ExternalIp& ip, const Result<model::Instance>& i,
                    std::optional<model::ExternalIp>& unchanged) -> Status {
    if (!i) return Fail(i.error());
    if (i->project_id != *ip.project_id) {
      return Fail(Error::InvalidRequest("floating IP must be in the same project as the instance"));
    }
    if (ip.parent_id == i->id && ip.state == model::AttachState::kAttached) unchanged = ip;
    return Ok();
  };
  std::optional<model::ExternalIp> unchanged;
  if (fip.is_id() && !fip_project && instance.is_id()) {
    // Both by id (the usual API call): the checks run in the transaction that creates the
    // saga, before it (saga::CreateCheck), so they cost no read transaction of their own;
    // an IP attached already refuses the saga there, and is the answer.
    const saga::CreateCheck check = [&](saga::StoreTx& stx, saga::Json&) -> Status {
      unchanged.reset();  // the transaction may run again
      db::AttachTargets both = FP_TRY(db::FloatingIpAndInstanceByIdIn(
          dynamic_cast<db::Tx&>(stx), actor.silo_id, fip.id(), instance.id()));
      FP_CHECK_OK(RequireWrite(actor));
      FP_CHECK_OK(checked(both.ip, both.instance, unchanged));
      if (unchanged) return Fail(NothingToDo());
      return Ok();
    };
    auto attached = RunAttachSaga(rq,
                                  {.kind = model::IpKind::kFloating,
                                   .ip_id = fip.id(),
                                   .instance_id = instance.id(),
                                   .silo_id = actor.silo_id,
                                   .allow_reassociation = allow_reassociation},
                                  &check);
    if (unchanged && RefusedAsNothingToDo(attached)) return *unchanged;
    return attached;
  }
  db::DeferredDurability checks(ds_);  // the saga's commits cover them
  model::ExternalIp ip = FP_TRY(floating_ips_.View(actor, fip, fip_project, &checks));
  FP_CHECK_OK(RequireWrite(actor));
  // A parent named by name is looked up in the floating IP's project.
  Result<model::Instance> i =
      instance.is_id() ? Lookup(actor, instance, std::nullopt, &checks)
                       : db::InstanceByName({ds_, &checks}, *ip.project_id, instance.name().str());
  FP_CHECK_OK(checked(ip, i, unchanged));
  if (unchanged) return ip;
  return RunAttachSaga(rq, {.kind = model::IpKind::kFloating,
                            .ip_id = ip.id,
                            .instance_id = i->id,
                            .silo_id = actor.silo_id,
                            .allow_reassociation = allow_reassociation});
}

Result<model::ExternalIp> Instances::DetachFloating(const RequestContext& rq, const NameOrId& fip,
                                                    const std::optional<NameOrId>& fip_project) {
  const Actor& actor = rq.actor;
  if (fip.is_id() && !fip_project) {
    // By id (the usual API call): the checks run in the transaction that creates the saga,
    // before it (saga::CreateCheck), as an attach's do; the instance the saga detaches the IP
    // from is its holder there. Detached already: the IP unchanged is the answer, no saga.
    std::optional<model::ExternalIp> unchanged;
    const saga::CreateCheck check = [&](saga::StoreTx& stx, saga::Json& params) -> Status {
      unchanged.reset();  // the transaction may run again
      model::ExternalIp ip =
          FP_TRY(db::FloatingIpLookupByIdIn(dynamic_cast<db::Tx&>(stx), actor.silo_id, fip.id()));
      FP_CHECK_OK(RequireWrite(actor));
      if (!ip.parent_id) {
        unchanged = std::move(ip);
        return Fail(NothingToDo());
      }
      params = saga::Json(IpDetachSagaParams{
          .kind = model::IpKind::kFloating, .ip_id = ip.id, .instance_id = *ip.parent_id});
      return Ok();
    };
    // The instance is the check's to fill in.
    auto detached = RunDetachSaga(
        rq, {.kind = model::IpKind::kFloating, .ip_id = fip.id(), .instance_id = Uuid()}, &check);
    if (unchanged && RefusedAsNothingToDo(detached)) return *unchanged;
    return detached;
  }
  db::DeferredDurability checks(ds_);  // the saga's commits cover them
  model::ExternalIp ip = FP_TRY(floating_ips_.View(actor, fip, fip_project, &checks));
  FP_CHECK_OK(RequireWrite(actor));
  if (!ip.parent_id) return ip;  // already detached: 202 with the IP unchanged
  return RunDetachSaga(
      rq, {.kind = model::IpKind::kFloating, .ip_id = ip.id, .instance_id = *ip.parent_id});
}

Result<model::ExternalIp> Instances::AttachEphemeral(const RequestContext& rq,
                                                     const NameOrId& instance,
                                                     const std::optional<NameOrId>& project,
                                                     const model::PoolSelector& selector) {
  const Actor& actor = rq.actor;
  auto [pool, ip_version] = SelectorFields(selector);
  IpAttachSagaParams params{.kind = model::IpKind::kEphemeral,
                            .ip_id = ds_.random().NewUuid(),
                            .silo_id = actor.silo_id,
                            .pool = pool,
                            .ip_version = ip_version};
  Result<model::ExternalIp> attached = Fail(Error::Internal("not run"));
  if (instance.is_id() && !project) {
    // By id (the usual API call): the instance's lookup runs in the saga's first transaction,
    // before it (saga::CreateCheck), as a floating IP's attach's does.
    const saga::CreateCheck check = [&](saga::StoreTx& stx, saga::Json&) -> Status {
      FP_TRY(db::InstanceByIdIn(dynamic_cast<db::Tx&>(stx), actor.silo_id, instance.id()));
      return RequireWrite(actor);
    };
    params.instance_id = instance.id();
    attached = RunAttachSaga(rq, params, &check);
  } else {
    db::DeferredDurability checks(ds_);  // the saga's commits cover them
    params.instance_id = FP_TRY(Lookup(actor, instance, project, &checks)).id;
    FP_CHECK_OK(RequireWrite(actor));
    attached = RunAttachSaga(rq, params);
  }
  if (!attached) return Fail(ExplainUnlinkedPool(ds_, actor, selector, attached.error()));
  return attached;
}

Status Instances::DetachEphemeral(const RequestContext& rq, const NameOrId& instance,
                                  const std::optional<NameOrId>& project,
                                  std::optional<IpVersion> version) {
  const Actor& actor = rq.actor;
  // The instance's one ephemeral IP (of `version`, if given) among its addresses.
  auto ephemeral_of = [&](const std::vector<model::ExternalIp>& ips) -> Result<Uuid> {
    std::vector<Uuid> ephemeral;
    for (const model::ExternalIp& e : ips) {
      if (e.kind == model::IpKind::kEphemeral && (!version || e.ip.version() == *version)) {
        ephemeral.push_back(e.id);
      }
    }
    if (ephemeral.size() > 1) {
      return Fail(Error::InvalidRequest(
          "instance has two ephemeral IPs; specify ip_version to select which to detach"));
    }
    if (ephemeral.empty()) {
      return Fail(Error::InvalidRequest("instance does not have an ephemeral IP attached"));
    }
    return ephemeral.front();
  };
  if (instance.is_id() && !project) {
    // By id (the usual API call): the checks run in the saga's first transaction, before it
    // (saga::CreateCheck), which completes the saga's params with the IP they find.
    const saga::CreateCheck check = [&](saga::StoreTx& stx, saga::Json& params) -> Status {
      db::Tx& tx = dynamic_cast<db::Tx&>(stx);
      model::Instance i = FP_TRY(db::InstanceByIdIn(tx, actor.silo_id, instance.id()));
      FP_CHECK_OK(RequireWrite(actor));
      const Uuid ip_id = FP_TRY(ephemeral_of(FP_TRY(db::InstanceExternalIpsIn(tx, i.id))));
      params = saga::Json(IpDetachSagaParams{
          .kind = model::IpKind::kEphemeral, .ip_id = ip_id, .instance_id = i.id});
      return Ok();
    };
    // The IP is the check's to fill in.
    FP_TRY(RunDetachSaga(
        rq, {.kind = model::IpKind::kEphemeral, .ip_id = Uuid(), .instance_id = instance.id()},
        &check));
    return Ok();
  }
  db::DeferredDurability checks(ds_);  // the saga's commits cover them
  model::Instance i = FP_TRY(Lookup(actor, instance, project, &checks));
  FP_CHECK_OK(RequireWrite(actor));
  const Uuid ip_id = FP_TRY(ephemeral_of(FP_TRY(db::InstanceExternalIps({ds_, &checks}, i.id))));
  FP_TRY(
      RunDetachSaga(rq, {.kind = model::IpKind::kEphemeral, .ip_id = ip_id, .instance_id = i.id}));
  return Ok();
}

Result<model::ExternalIp> Instances::IpOfSagaOutput(const saga::Json& output) {
  return IpOfOutcome(ds_, output);
}

Result<std::vector<model::ExternalIp>> Instances::ExternalIps(
    const Actor& actor, const NameOrId& instance, const std::optional<NameOrId>& project) {
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  std::vector<model::ExternalIp> out;
  for (const model::ExternalIp& e : FP_TRY(db::InstanceExternalIps(ds_, i.id))) {
    if (e.state == model::AttachState::kAttached) out.push_back(e);
  }
  return out;
}

}  // namespace fp::app
