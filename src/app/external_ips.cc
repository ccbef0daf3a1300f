// Live attach and detach of floating and ephemeral IPs (omicron-behaviour.md §4.1-§4.3).
//
// ip_attach: begin (database: the IP becomes `attaching`, held by this saga, and its NAT row
// is written if the instance runs on a sled) -> dataplane (the switch is told and the sled's
// port gains the address) -> complete (database: `attached`). ip_detach mirrors it. With the
// saga row written in the first node's transaction and the dataplane node unlogged, an attach
// or detach costs two durable commits.

#include <fmt/format.h>

#include "app/instances.h"
#include "app/saga_params.h"
#include "common/log.h"
#include "db/attach.h"
#include "db/nat.h"

namespace fp::app {

namespace {

using saga::Action;
using saga::ActionContext;
using saga::Json;

Json StepJson(const db::AttachStep& step) {
  return Json{{"ip_id", step.ip.id.ToString()},
              {"do_saga", step.do_saga},
              {"sled_id", step.sled ? Json(step.sled->id.ToString()) : Json(nullptr)},
              {"ip", step.ip.ip.ToString()}};
}

Result<std::optional<Uuid>> SledOfStep(const Json& step) {
  if (!step.contains("sled_id") || step["sled_id"].is_null()) return std::optional<Uuid>();
  return std::optional<Uuid>(FP_TRY(UuidParam(step, "sled_id")));
}

model::PoolSelector SelectorFromJson(const Json& p) {
  model::PoolSelector s;
  if (p.contains("pool") && p["pool"].is_string()) {
    s.mode = model::PoolSelector::Mode::kExplicitPool;
    s.pool = *NameOrId::Parse(p["pool"].get<std::string>());
  } else if (p.contains("ip_version") && p["ip_version"].is_string()) {
    s.ip_version = ParseIpVersion(p["ip_version"].get<std::string>());
  }
  return s;
}

// The IP row as the complete node's transaction left it: the reply is built from it, not from a
// later read that a concurrent detach or instance delete could already have changed.
Json IpRecord(const model::ExternalIp& e) {
  auto opt = [](const auto& v) { return v ? Json(*v) : Json(nullptr); };
  return Json{{"id", e.id.ToString()},
              {"name", opt(e.name)},
              {"description", opt(e.description)},
              {"pool_id", e.pool_id.ToString()},
              {"range_id", e.range_id.ToString()},
              {"parent_id", OptUuidJson(e.parent_id)},
              {"kind", ToString(e.kind)},
              {"ip", e.ip.ToString()},
              {"first_port", e.first_port},
              {"last_port", e.last_port},
              {"project_id", OptUuidJson(e.project_id)},
              {"state", ToString(e.state)},
              {"time_created", e.time_created},
              {"time_modified", e.time_modified}};
}

Result<model::ExternalIp> IpFromRecord(const Json& r) {
  auto opt_text = [&](const char* key) -> std::optional<std::string> {
    if (!r.contains(key) || !r[key].is_string()) return std::nullopt;
    return r[key].get<std::string>();
  };
  try {
    model::ExternalIp e;
    e.id = FP_TRY(UuidParam(r, "id"));
    e.name = opt_text("name");
    e.description = opt_text("description");
    e.pool_id = FP_TRY(UuidParam(r, "pool_id"));
    e.range_id = FP_TRY(UuidParam(r, "range_id"));
    e.parent_id = FP_TRY(OptUuidParam(r, "parent_id"));
    e.kind = model::ParseIpKind(r.at("kind").get<std::string>());
    e.ip = FP_TRY(IpAddr::Parse(r.at("ip").get<std::string>()));
    e.first_port = r.at("first_port").get<int>();
    e.last_port = r.at("last_port").get<int>();
    e.project_id = FP_TRY(OptUuidParam(r, "project_id"));
    e.state = model::ParseAttachState(r.at("state").get<std::string>());
    e.time_created = r.at("time_created").get<Timestamp>();
    e.time_modified = r.at("time_modified").get<Timestamp>();
    return e;
  } catch (const Json::exception& ex) {
    return Fail(Error::Internal(fmt::format("saga output \"ip\" is malformed: {}", ex.what())));
  }
}

// The reply of an attach or detach saga: the row its complete node recorded. Sagas logged
// before the record was added carry only the id; their row is read again.
Result<model::ExternalIp> IpOfOutcome(db::Datastore& ds, const Json& output) {
  if (output.contains("ip") && output["ip"].is_object()) return IpFromRecord(output["ip"]);
  Uuid ip_id = FP_TRY(UuidParam(output, "ip_id"));
  return ds.Read<model::ExternalIp>([&](db::Tx& tx) { return db::ExternalIpGetIn(tx, ip_id); });
}

void LogBestEffort(std::string_view what, const Error& e) {
  LogEvent("warn", "best-effort saga step failed", {{"step", what}, {"error", e.message()}});
}

// Tells the switch, then the sled. On failure undoes what it did on the sled, so that the
// failed (unlogged) node leaves nothing behind; the caller's undo removes the NAT row.
Status ProgramAttach(InstanceSagaDeps& d, const Uuid& instance_id, const Uuid& sled_id,
                     const IpAddr& ip) {
  FP_CHECK_OK(d.nat.Sync());
  agents::SledAgentClient* sled = FP_TRY(d.dataplane.Sled(sled_id));
  Status added = sled->AddExternalIp(instance_id, ip);
  if (!added) {
    if (auto s = sled->RemoveExternalIp(instance_id, ip); !s)
      LogBestEffort("sled remove", s.error());
    return added;
  }
  return Ok();
}

Status ProgramDetach(InstanceSagaDeps& d, const Uuid& instance_id, const Uuid& sled_id,
                     const IpAddr& ip) {
  FP_CHECK_OK(d.nat.Sync());
  agents::SledAgentClient* sled = FP_TRY(d.dataplane.Sled(sled_id));
  Status removed = sled->RemoveExternalIp(instance_id, ip);
  if (!removed) {
    if (auto s = sled->AddExternalIp(instance_id, ip); !s) LogBestEffort("sled re-add", s.error());
    return removed;
  }
  return Ok();
}

// The dataplane node of ip_attach (`attach`) or ip_detach: nothing to do unless the begin node
// moved the IP of an instance that runs on a sled.
Result<Json> RunDataplane(InstanceSagaDeps& d, const ActionContext& ctx, bool attach) {
  Json step = FP_TRY(ctx.Lookup("begin"));
  auto sled = FP_TRY(SledOfStep(step));
  if (!step.value("do_saga", false) || !sled) return Json::object();
  Uuid instance_id = FP_TRY(UuidParam(ctx.params(), "instance_id"));
  IpAddr ip = FP_TRY(IpAddr::Parse(step["ip"].get<std::string>()));
  FP_CHECK_OK(attach ? ProgramAttach(d, instance_id, *sled, ip)
                     : ProgramDetach(d, instance_id, *sled, ip));
  return Json::object();
}

// Undo of a dataplane node on the sled's port (best effort: the watcher reconciles ports).
Status UndoPortChange(InstanceSagaDeps& d, const ActionContext& ctx, bool was_attach) {
  Json step = FP_TRY(ctx.Lookup("begin"));
  auto sled_id = FP_TRY(SledOfStep(step));
  if (!step.value("do_saga", false) || !sled_id) return Ok();
  auto sled = d.dataplane.Sled(*sled_id);
  if (!sled) return Ok();
  Uuid instance_id = FP_TRY(UuidParam(ctx.params(), "instance_id"));
  IpAddr ip = FP_TRY(IpAddr::Parse(step["ip"].get<std::string>()));
  Status s = was_attach ? (*sled)->RemoveExternalIp(instance_id, ip)
                        : (*sled)->AddExternalIp(instance_id, ip);
  if (!s) LogBestEffort(was_attach ? "sled remove" : "sled re-add", s.error());
  return Ok();
}

}  // namespace

void RegisterExternalIpActions(saga::ActionRegistry& r, InstanceSagaDeps& d) {
  r.Add(Action{
      .name = "ip_attach.begin",
      .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
        const Json& p = ctx.params();
        Uuid instance_id = FP_TRY(UuidParam(p, "instance_id"));
        db::AttachRequest req;
        req.instance_id = instance_id;
        req.saga_id = ctx.saga_id();
        if (p.value("kind", "floating") == "ephemeral") {
          req.kind = model::IpKind::kEphemeral;
          req.ip_id = FP_TRY(UuidParam(p, "ip_id"));
          // One ephemeral IP per version: an existing one is the answer (Oxide's idempotency).
          model::PoolSelector selector = SelectorFromJson(p);
          std::optional<IpVersion> version = selector.ip_version;
          if (selector.mode == model::PoolSelector::Mode::kExplicitPool) {
            version =
                FP_TRY(db::ResolvePoolIn(tx, FP_TRY(UuidParam(p, "silo_id")), selector)).ip_version;
          }
          if (version) {
            if (auto existing = FP_TRY(db::EphemeralOfVersionIn(tx, instance_id, *version))) {
              if (existing->id != req.ip_id) {
                req.ip_id = existing->id;
                if (existing->state == model::AttachState::kAttached) {
                  return StepJson(db::AttachStep{*existing, false, std::nullopt});
                }
              }
            }
          }
          // Allocates under this saga's id, or returns the row already there (a re-run, or the
          // instance's existing ephemeral IP of this version).
          FP_TRY(db::EphemeralAllocateIn(tx, req.ip_id, FP_TRY(UuidParam(p, "silo_id")), selector));
        } else {
          req.ip_id = FP_TRY(UuidParam(p, "ip_id"));
        }
        db::AttachStep step = FP_TRY(db::BeginAttachIn(tx, req));
        if (step.do_saga && step.sled) {
          FP_TRY(db::NatEnsureForIpIn(tx, step.ip, instance_id, *step.sled));
        }
        return StepJson(step);
      },
      .undo = [&d](const ActionContext& ctx) -> Status {
        Json step = FP_TRY(ctx.Lookup("begin"));
        if (!step.value("do_saga", false)) return Ok();
        Uuid ip_id = FP_TRY(UuidParam(step, "ip_id"));
        FP_TRY(d.ds.Write<bool>([&](db::Tx& tx) -> Result<bool> {
          // Run again after a crash inside it, this undo may find the address attached since
          // by a later operation: its NAT row is not this saga's to remove.
          if (!FP_TRY(db::IpHeldBySagaIn(tx, ip_id, ctx.saga_id()))) return false;
          auto ip = FP_TRY(db::ExternalIpGetIn(tx, ip_id));
          FP_CHECK_OK(db::NatRemoveForIpIn(tx, ip));
          FP_TRY(db::CompleteOpIn(tx, ip_id, model::AttachState::kAttaching,
                                  model::AttachState::kDetached));
          return true;
        }));
        if (auto s = d.nat.Sync(); !s) LogBestEffort("NAT sync", s.error());
        return Ok();
      }});
  r.Add(Action{.name = "ip_attach.dataplane",
               .run = [&d](const ActionContext& ctx) { return RunDataplane(d, ctx, true); },
               .undo = [&d](const ActionContext& ctx) { return UndoPortChange(d, ctx, true); },
               .unlogged = true});
  r.Add(Action{.name = "ip_attach.complete",
               .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 Json step = FP_TRY(ctx.Lookup("begin"));
                 Uuid ip_id = FP_TRY(UuidParam(step, "ip_id"));
                 if (step.value("do_saga", false)) {
                   auto done = db::CompleteOpIn(tx, ip_id, model::AttachState::kAttaching,
                                                model::AttachState::kAttached);
                   if (!done && done.error().kind() == ErrorKind::kNotFound) {
                     // The instance was deleted underneath: answer as for a missing instance.
                     return Fail(Error::NotFoundById(
                         "instance", FP_TRY(UuidParam(ctx.params(), "instance_id")).ToString()));
                   }
                   FP_TRY(done);
                 }
                 auto ip = FP_TRY(db::ExternalIpGetIn(tx, ip_id));
                 return Json{{"ip_id", ip_id.ToString()}, {"ip", IpRecord(ip)}};
               }});

  r.Add(Action{.name = "ip_detach.begin",
               .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 const Json& p = ctx.params();
                 db::AttachRequest req;
                 req.instance_id = FP_TRY(UuidParam(p, "instance_id"));
                 req.saga_id = ctx.saga_id();
                 req.kind = p.value("kind", "floating") == "ephemeral" ? model::IpKind::kEphemeral
                                                                       : model::IpKind::kFloating;
                 req.ip_id = FP_TRY(UuidParam(p, "ip_id"));
                 db::AttachStep step = FP_TRY(db::BeginDetachIn(tx, req));
                 if (step.do_saga && step.sled) FP_CHECK_OK(db::NatRemoveForIpIn(tx, step.ip));
                 return StepJson(step);
               },
               .undo = [&d](const ActionContext& ctx) -> Status {
                 Json step = FP_TRY(ctx.Lookup("begin"));
                 if (!step.value("do_saga", false)) return Ok();
                 Uuid ip_id = FP_TRY(UuidParam(step, "ip_id"));
                 Uuid instance_id = FP_TRY(UuidParam(ctx.params(), "instance_id"));
                 auto sled_id = FP_TRY(SledOfStep(step));
                 FP_TRY(d.ds.Write<bool>([&](db::Tx& tx) -> Result<bool> {
                   // Run again after a crash inside it, this undo may find the address detached
                   // since by a later operation: it must not bring its NAT row back.
                   if (!FP_TRY(db::IpHeldBySagaIn(tx, ip_id, ctx.saga_id()))) return false;
                   auto ip = FP_TRY(db::ExternalIpGetIn(tx, ip_id));
                   if (sled_id) {
                     FP_TRY(db::NatEnsureForIpIn(tx, ip, instance_id,
                                                 FP_TRY(db::SledGetIn(tx, *sled_id))));
                   }
                   FP_TRY(db::CompleteOpIn(tx, ip_id, model::AttachState::kDetaching,
                                           model::AttachState::kAttached));
                   return true;
                 }));
                 if (auto s = d.nat.Sync(); !s) LogBestEffort("NAT sync", s.error());
                 return Ok();
               }});
  r.Add(Action{.name = "ip_detach.dataplane",
               .run = [&d](const ActionContext& ctx) { return RunDataplane(d, ctx, false); },
               .undo = [&d](const ActionContext& ctx) { return UndoPortChange(d, ctx, false); },
               .unlogged = true});
  r.Add(Action{.name = "ip_detach.complete",
               .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 Json step = FP_TRY(ctx.Lookup("begin"));
                 Uuid ip_id = FP_TRY(UuidParam(step, "ip_id"));
                 if (step.value("do_saga", false)) {
                   FP_TRY(db::CompleteOpIn(tx, ip_id, model::AttachState::kDetaching,
                                           model::AttachState::kDetached));
                 }
                 auto ip = FP_TRY(db::ExternalIpGetIn(tx, ip_id));
                 return Json{{"ip_id", ip_id.ToString()},
                             {"did_detach", step.value("do_saga", false)},
                             {"ip", IpRecord(ip)}};
               }});
}

std::vector<saga::Node> IpAttachNodes() {
  return {{"begin", "ip_attach.begin"},
          {"dataplane", "ip_attach.dataplane"},
          {"complete", "ip_attach.complete"}};
}

std::vector<saga::Node> IpDetachNodes() {
  return {{"begin", "ip_detach.begin"},
          {"dataplane", "ip_detach.dataplane"},
          {"complete", "ip_detach.complete"}};
}

Result<model::ExternalIp> Instances::RunAttachSaga(const Json& params) {
  saga::SagaDag dag;
  dag.name = "ip_attach";
  dag.params = params;
  dag.nodes = IpAttachNodes();
  auto outcome = FP_TRY(exec_.RunNew(dag));
  if (outcome.kind != saga::SagaResultKind::kDone) {
    return Fail(outcome.error ? *outcome.error : Error::Internal("attach did not complete"));
  }
  return IpOfOutcome(ds_, outcome.output);
}

Result<std::optional<model::ExternalIp>> Instances::RunDetachSaga(const Json& params) {
  saga::SagaDag dag;
  dag.name = "ip_detach";
  dag.params = params;
  dag.nodes = IpDetachNodes();
  auto outcome = FP_TRY(exec_.RunNew(dag));
  if (outcome.kind != saga::SagaResultKind::kDone) {
    return Fail(outcome.error ? *outcome.error : Error::Internal("detach did not complete"));
  }
  return std::optional<model::ExternalIp>(FP_TRY(IpOfOutcome(ds_, outcome.output)));
}

Result<model::ExternalIp> Instances::AttachFloating(const Actor& actor, const NameOrId& fip,
                                                    const std::optional<NameOrId>& fip_project,
                                                    const NameOrId& instance) {
  db::Datastore::DeferredDurability checks(ds_);  // the saga's commits cover them
  model::ExternalIp ip = FP_TRY(floating_ips_.View(actor, fip, fip_project));
  if (!actor.can_write()) return Fail(Error::Forbidden());
  // A parent named by name is looked up in the floating IP's project.
  model::Instance i = instance.is_id()
                          ? FP_TRY(Lookup(actor, instance, std::nullopt))
                          : FP_TRY(db::InstanceByName(ds_, *ip.project_id, instance.name().str()));
  if (i.project_id != *ip.project_id) {
    return Fail(Error::InvalidRequest("floating IP must be in the same project as the instance"));
  }
  // Already attached to this instance: the saga would change nothing and answer with the IP as
  // it is, so answer now and write no saga.
  if (ip.parent_id == i.id && ip.state == model::AttachState::kAttached) return ip;
  return RunAttachSaga(Json{{"kind", "floating"},
                            {"ip_id", ip.id.ToString()},
                            {"instance_id", i.id.ToString()},
                            {"silo_id", actor.silo_id.ToString()}});
}

Result<model::ExternalIp> Instances::DetachFloating(const Actor& actor, const NameOrId& fip,
                                                    const std::optional<NameOrId>& fip_project) {
  db::Datastore::DeferredDurability checks(ds_);  // the saga's commits cover them
  model::ExternalIp ip = FP_TRY(floating_ips_.View(actor, fip, fip_project));
  if (!actor.can_write()) return Fail(Error::Forbidden());
  if (!ip.parent_id) return ip;  // already detached: 202 with the IP unchanged
  auto detached = FP_TRY(RunDetachSaga(Json{{"kind", "floating"},
                                            {"ip_id", ip.id.ToString()},
                                            {"instance_id", ip.parent_id->ToString()}}));
  return detached ? *detached : ip;
}

Result<model::ExternalIp> Instances::AttachEphemeral(const Actor& actor, const NameOrId& instance,
                                                     const std::optional<NameOrId>& project,
                                                     const model::PoolSelector& selector) {
  db::Datastore::DeferredDurability checks(ds_);  // the saga's commits cover them
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  if (!actor.can_write()) return Fail(Error::Forbidden());
  Json params{{"kind", "ephemeral"},
              {"ip_id", Uuid::Random().ToString()},
              {"instance_id", i.id.ToString()},
              {"silo_id", actor.silo_id.ToString()}};
  if (selector.mode == model::PoolSelector::Mode::kExplicitPool) {
    params["pool"] = selector.pool->ToString();
  } else if (selector.ip_version) {
    params["ip_version"] = ToString(*selector.ip_version);
  }
  return RunAttachSaga(params);
}

Status Instances::DetachEphemeral(const Actor& actor, const NameOrId& instance,
                                  const std::optional<NameOrId>& project,
                                  std::optional<IpVersion> version) {
  db::Datastore::DeferredDurability checks(ds_);  // the saga's commits cover them
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  if (!actor.can_write()) return Fail(Error::Forbidden());
  std::vector<model::ExternalIp> ephemeral;
  for (const model::ExternalIp& e : FP_TRY(db::InstanceExternalIps(ds_, i.id))) {
    if (e.kind == model::IpKind::kEphemeral && (!version || e.ip.version() == *version)) {
      ephemeral.push_back(e);
    }
  }
  if (ephemeral.size() > 1) {
    return Fail(Error::InvalidRequest(
        "instance has two ephemeral IPs; specify ip_version to select which to detach"));
  }
  if (ephemeral.empty()) {
    return Fail(Error::InvalidRequest("instance does not have an ephemeral IP attached"));
  }
  auto detached = FP_TRY(RunDetachSaga(Json{{"kind", "ephemeral"},
                                            {"ip_id", ephemeral.front().id.ToString()},
                                            {"instance_id", i.id.ToString()}}));
  (void)detached;
  return Ok();
}

Result<model::ExternalIp> Instances::IpOfSagaOutput(const Json& output) {
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
