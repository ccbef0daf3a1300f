// The instance sagas' actions. Identifiers a later node needs come from the saga parameters
// (chosen before the saga starts) or from an earlier node's recorded output, so a re-run after
// a crash reuses them. Dataplane undo steps are best effort: they log and succeed when an
// agent cannot be reached, because the NAT reconciler and the instance watcher converge that
// state anyway; database undo steps are strict.

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

Result<model::NicKind> NicParam(const Json& p) {
  std::string nic = p.value("nic", "dual_stack");
  if (nic == "ipv4") return model::NicKind::kIpv4;
  if (nic == "ipv6") return model::NicKind::kIpv6;
  if (nic == "dual_stack") return model::NicKind::kDualStack;
  if (nic == "none") return model::NicKind::kNone;
  return Fail(Error::Internal("bad nic parameter"));
}

void LogBestEffort(std::string_view what, const Error& e) {
  LogEvent("warn", "best-effort saga undo step failed", {{"step", what}, {"error", e.message()}});
}

// Starts the instance on `sled` or, if that fails, leaves nothing behind on the sled (a failed
// action must have no effect: it is never undone).
Result<Json> EnsureRunningOn(InstanceSagaDeps& d, const Uuid& instance_id, const Uuid& sled_id) {
  agents::SledAgentClient* sled = FP_TRY(d.dataplane.Sled(sled_id));
  agents::InstanceSpec spec = FP_TRY(BuildInstanceSpec(d.ds, instance_id));
  // A removal of a leftover VM of this instance, judged before the placement committed, must
  // not land after the registration below.
  d.dataplane.removals.AwaitNone(instance_id);
  auto vm = sled->EnsureRunning(spec);
  if (!vm) {
    if (auto s = sled->Unregister(instance_id); !s) LogBestEffort("sled unregister", s.error());
    return Fail(vm.error());
  }
  return Json{{"state", agents::ToString(vm->state)}};
}

void UnregisterFrom(InstanceSagaDeps& d, const Uuid& instance_id, const Uuid& sled_id) {
  auto sled = d.dataplane.Sled(sled_id);
  if (!sled) return LogBestEffort("sled unregister", sled.error());
  if (auto s = (*sled)->Unregister(instance_id); !s) LogBestEffort("sled unregister", s.error());
}

void SyncNatBestEffort(InstanceSagaDeps& d) {
  if (auto s = d.nat.Sync(); !s) LogBestEffort("NAT sync", s.error());
}

// An instance row as a saga output records it, and back.
Json InstanceRecord(const model::Instance& i) {
  return Json{{"id", i.id.ToString()},
              {"project_id", i.project_id.ToString()},
              {"name", i.name},
              {"description", i.description},
              {"hostname", i.hostname},
              {"ncpus", i.ncpus},
              {"memory", i.memory},
              {"state", model::ToString(i.state)},
              {"run_state", i.run_state},
              {"sled_id", OptUuidJson(i.sled_id)},
              {"start_saga_id", OptUuidJson(i.start_saga_id)},
              {"migration_id", OptUuidJson(i.migration_id)},
              {"time_run_state_updated", i.time_run_state_updated},
              {"time_created", i.time_created},
              {"time_modified", i.time_modified}};
}

Result<model::Instance> InstanceFromRecord(const Json& r) {
  try {
    model::Instance i;
    i.id = FP_TRY(UuidParam(r, "id"));
    i.project_id = FP_TRY(UuidParam(r, "project_id"));
    i.name = r.at("name").get<std::string>();
    i.description = r.at("description").get<std::string>();
    i.hostname = r.at("hostname").get<std::string>();
    i.ncpus = r.at("ncpus").get<int64_t>();
    i.memory = r.at("memory").get<int64_t>();
    std::string state = r.at("state").get<std::string>();
    bool known = false;
    for (model::InstanceState s :
         {model::InstanceState::kCreating, model::InstanceState::kNoVmm, model::InstanceState::kVmm,
          model::InstanceState::kFailed, model::InstanceState::kDestroyed}) {
      if (model::ToString(s) == state) {
        i.state = s;
        known = true;
      }
    }
    if (!known) return Fail(Error::Internal("saga output \"instance\" has an unknown state"));
    i.run_state = r.at("run_state").get<std::string>();
    i.sled_id = FP_TRY(OptUuidParam(r, "sled_id"));
    i.start_saga_id = FP_TRY(OptUuidParam(r, "start_saga_id"));
    i.migration_id = FP_TRY(OptUuidParam(r, "migration_id"));
    i.time_run_state_updated = r.at("time_run_state_updated").get<Timestamp>();
    i.time_created = r.at("time_created").get<Timestamp>();
    i.time_modified = r.at("time_modified").get<Timestamp>();
    return i;
  } catch (const Json::exception& ex) {
    return Fail(
        Error::Internal(fmt::format("saga output \"instance\" is malformed: {}", ex.what())));
  }
}

}  // namespace

Result<model::Instance> Instances::InstanceOfSaga(const Actor& actor, const Json& params,
                                                  const Json& output) {
  Uuid id = FP_TRY(UuidParam(params, "instance_id"));
  std::optional<model::Instance> recorded;
  if (output.is_object() && output.contains("instance")) {
    recorded = FP_TRY(InstanceFromRecord(output["instance"]));
    if (!params.value("start", true)) return *recorded;
  }
  auto now = Lookup(actor, NameOrId(id), std::nullopt);
  if (!now && now.error().kind() == ErrorKind::kNotFound && recorded) return *recorded;
  if (now && recorded && now->state == model::InstanceState::kNoVmm &&
      now->time_run_state_updated == recorded->time_run_state_updated) {
    // A create that asked for a start, whose run state has not changed since its create saga
    // recorded the row: the start never began (the server died, or the start failed, between
    // the two sagas). Do it now, as the request would have, rather than answer "stopped" for
    // good. Any start attempt, or a stop since, changes the run state's time.
    if (!actor.can_write()) return Fail(Error::Forbidden());
    return RunStartSaga(*now);
  }
  return now;
}

Result<agents::InstanceSpec> BuildInstanceSpec(db::Datastore& ds, const Uuid& instance_id) {
  auto instance = FP_TRY(
      ds.Read<model::Instance>([&](db::Tx& tx) { return db::InstanceGetIn(tx, instance_id); }));
  agents::InstanceSpec spec;
  spec.id = instance.id;
  spec.ncpus = instance.ncpus;
  spec.memory = instance.memory;
  if (auto nic = FP_TRY(db::PrimaryNic(ds, instance_id))) {
    spec.vni = nic->vni;
    spec.mac = nic->mac;
    spec.private_ipv4 = nic->ipv4;
    spec.private_ipv6 = nic->ipv6;
  }
  for (const model::ExternalIp& e : FP_TRY(db::InstanceExternalIps(ds, instance_id))) {
    if (e.state != model::AttachState::kAttached) continue;
    if (e.kind == model::IpKind::kSnat) {
      spec.snat_ip = e.ip;
      spec.snat_first_port = e.first_port;
      spec.snat_last_port = e.last_port;
    } else {
      spec.external_ips.push_back(e.ip);
    }
  }
  return spec;
}

std::vector<saga::Node> InstanceCreateNodes(size_t external_ips) {
  std::vector<saga::Node> nodes = {{"record", "instance_create.record"},
                                   {"snat", "instance_create.snat"}};
  // Each requested IP is a node of its own, in request order (§4.4).
  for (size_t k = 0; k < external_ips; ++k) {
    nodes.push_back({fmt::format("external_ip_{}", k), "instance_create.external_ip"});
  }
  nodes.push_back({"finish", "instance_create.finish"});
  return nodes;
}

std::vector<saga::Node> InstanceStartNodes() {
  return {{"place", "instance_start.place"},
          {"nat", "instance_start.nat"},
          {"sled", "instance_start.sled"},
          {"switch", "instance_start.switch"}};
}

std::vector<saga::Node> InstanceMigrateNodes() {
  return {{"begin", "instance_migrate.begin"},
          {"destination", "instance_migrate.destination"},
          {"finish", "instance_migrate.finish"},
          {"switch", "instance_migrate.switch"},
          {"source", "instance_migrate.source"}};
}

std::vector<saga::Node> InstanceDeleteNodes() {
  // One node: the delete commits atomically or not at all, so there is nothing to unwind.
  return {{"record", "instance_delete.record"}};
}

void RegisterInstanceActions(saga::ActionRegistry& r, InstanceSagaDeps& d) {
  // --- instance_create ---
  r.Add(Action{.name = "instance_create.record",
               .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 const Json& p = ctx.params();
                 model::InstanceCreate c;
                 c.id = FP_TRY(UuidParam(p, "instance_id"));
                 c.nic_id = FP_TRY(UuidParam(p, "nic_id"));
                 c.project_id = FP_TRY(UuidParam(p, "project_id"));
                 c.name = p.value("name", "");
                 c.description = p.value("description", "");
                 c.hostname = p.value("hostname", "");
                 c.ncpus = p.value("ncpus", int64_t{1});
                 c.memory = p.value("memory", int64_t{0});
                 c.nic = FP_TRY(NicParam(p));
                 model::Instance i = FP_TRY(db::InstanceCreateRecordIn(tx, c));
                 return Json{{"instance_id", i.id.ToString()}};
               },
               .undo_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Status {
                 return db::InstanceDeleteRecordIn(tx,
                                                   FP_TRY(UuidParam(ctx.params(), "instance_id")));
               }});
  r.Add(Action{.name = "instance_create.snat",
               .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 const Json& p = ctx.params();
                 model::NicKind nic = FP_TRY(NicParam(p));
                 // SNAT only for an IPv4 stack: no automatic IPv6 SNAT (Oxide #9683).
                 if (nic != model::NicKind::kIpv4 && nic != model::NicKind::kDualStack)
                   return Json::object();
                 model::ExternalIp snat = FP_TRY(db::SnatAllocateIn(
                     tx, FP_TRY(UuidParam(p, "snat_id")), FP_TRY(UuidParam(p, "instance_id")),
                     FP_TRY(UuidParam(p, "silo_id"))));
                 return Json{{"snat_ip", snat.ip.ToString()}, {"first_port", snat.first_port}};
               },
               .undo_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Status {
                 return db::ExternalIpReleaseIn(tx, FP_TRY(UuidParam(ctx.params(), "snat_id")));
               }});
  // One requested external IP (node "external_ip_<k>" attaches params.external_ips[k]). The
  // instance is `creating`, which keeps API attach/detach away, so attach completes at once;
  // its NAT is programmed when the instance starts.
  r.Add(Action{
      .name = "instance_create.external_ip",
      .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
        const Json& p = ctx.params();
        size_t k = std::stoul(ctx.node().substr(ctx.node().rfind('_') + 1));
        const Json& e = p.at("external_ips").at(k);
        db::AttachRequest req;
        req.instance_id = FP_TRY(UuidParam(p, "instance_id"));
        req.ip_id = FP_TRY(UuidParam(e, "ip_id"));
        req.saga_id = ctx.saga_id();
        req.creating = true;
        if (e.value("type", "") == "ephemeral") {
          req.kind = model::IpKind::kEphemeral;
          model::PoolSelector selector;
          if (e.contains("pool")) {
            selector.mode = model::PoolSelector::Mode::kExplicitPool;
            selector.pool = FP_TRY(NameOrId::Parse(e["pool"].get<std::string>()));
          } else if (e.contains("ip_version")) {
            selector.ip_version = ParseIpVersion(e["ip_version"].get<std::string>());
          }
          FP_TRY(db::EphemeralAllocateIn(tx, req.ip_id, FP_TRY(UuidParam(p, "silo_id")), selector));
        }
        db::AttachStep step = FP_TRY(db::BeginAttachIn(tx, req));
        if (step.do_saga) {
          FP_TRY(db::CompleteOpIn(tx, req.ip_id, model::AttachState::kAttaching,
                                  model::AttachState::kAttached));
        }
        return Json{{"ip_id", req.ip_id.ToString()}};
      },
      .undo_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Status {
        const Json& p = ctx.params();
        size_t k = std::stoul(ctx.node().substr(ctx.node().rfind('_') + 1));
        const Json& e = p.at("external_ips").at(k);
        Uuid ip_id = FP_TRY(UuidParam(e, "ip_id"));
        if (e.value("type", "") == "ephemeral") return db::ExternalIpReleaseIn(tx, ip_id);
        return db::ReleaseFloatingFromInstanceIn(tx, ip_id, FP_TRY(UuidParam(p, "instance_id")));
      }});
  r.Add(Action{.name = "instance_create.finish",
               .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 Uuid id = FP_TRY(UuidParam(ctx.params(), "instance_id"));
                 FP_CHECK_OK(db::InstanceFinishCreateIn(tx, id));
                 // The created row: what a replay of the request answers (InstanceOfSaga).
                 return Json{{"instance", InstanceRecord(FP_TRY(db::InstanceGetIn(tx, id)))}};
               }});

  // --- instance_start ---
  r.Add(Action{.name = "instance_start.place",
               .run_in_tx = [&d](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 Uuid instance_id = FP_TRY(UuidParam(ctx.params(), "instance_id"));
                 // A re-run keeps the placement this saga made (placement is not deterministic).
                 model::Instance i = FP_TRY(db::InstanceGetIn(tx, instance_id));
                 if (i.start_saga_id == ctx.saga_id() && i.sled_id) {
                   return Json{{"sled_id", i.sled_id->ToString()}};
                 }
                 std::vector<Uuid> candidates;
                 for (const auto& [id, client] : d.dataplane.sleds) candidates.push_back(id);
                 Uuid sled = FP_TRY(db::PickSledIn(tx, candidates));
                 FP_TRY(db::InstanceBeginStartIn(tx, instance_id, sled, ctx.saga_id()));
                 return Json{{"sled_id", sled.ToString()}};
               },
               .undo_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Status {
                 Json placed = FP_TRY(ctx.Lookup("place"));
                 return db::InstanceUndoStartIn(tx, FP_TRY(UuidParam(ctx.params(), "instance_id")),
                                                FP_TRY(UuidParam(placed, "sled_id")));
               }});
  r.Add(Action{.name = "instance_start.nat",
               .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 Json placed = FP_TRY(ctx.Lookup("place"));
                 model::Sled sled = FP_TRY(db::SledGetIn(tx, FP_TRY(UuidParam(placed, "sled_id"))));
                 auto rows = FP_TRY(db::NatEnsureForInstanceIn(
                     tx, FP_TRY(UuidParam(ctx.params(), "instance_id")), sled));
                 return Json{{"nat_entries", rows.size()}};
               },
               .undo = [&d](const ActionContext& ctx) -> Status {
                 Uuid instance_id = FP_TRY(UuidParam(ctx.params(), "instance_id"));
                 FP_TRY(d.ds.Write<bool>([&](db::Tx& tx) -> Result<bool> {
                   FP_CHECK_OK(db::NatRemoveForInstanceIn(tx, instance_id));
                   return true;
                 }));
                 SyncNatBestEffort(d);
                 return Ok();
               }});
  r.Add(Action{.name = "instance_start.sled",
               .run = [&d](const ActionContext& ctx) -> Result<Json> {
                 Json placed = FP_TRY(ctx.Lookup("place"));
                 return EnsureRunningOn(d, FP_TRY(UuidParam(ctx.params(), "instance_id")),
                                        FP_TRY(UuidParam(placed, "sled_id")));
               },
               .undo = [&d](const ActionContext& ctx) -> Status {
                 Json placed = FP_TRY(ctx.Lookup("place"));
                 UnregisterFrom(d, FP_TRY(UuidParam(ctx.params(), "instance_id")),
                                FP_TRY(UuidParam(placed, "sled_id")));
                 return Ok();
               }});
  r.Add(Action{.name = "instance_start.switch", .run = [&d](const ActionContext&) -> Result<Json> {
                 FP_CHECK_OK(d.nat.Sync());
                 return Json::object();
               }});

  // --- instance_delete ---
  r.Add(Action{.name = "instance_delete.record",
               .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 FP_CHECK_OK(
                     db::InstanceDeleteIn(tx, FP_TRY(UuidParam(ctx.params(), "instance_id"))));
                 return Json::object();
               }});

  // --- instance_migrate ---
  r.Add(Action{.name = "instance_migrate.begin",
               .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 const Json& p = ctx.params();
                 FP_TRY(db::InstanceBeginMigrateIn(tx, FP_TRY(UuidParam(p, "instance_id")),
                                                   FP_TRY(UuidParam(p, "dst_sled_id")),
                                                   FP_TRY(UuidParam(p, "migration_id"))));
                 return Json::object();
               },
               .undo = [&d](const ActionContext& ctx) -> Status {
                 // Runs last when unwinding, after NAT was pointed back at the source sled: push
                 // it.
                 const Json& p = ctx.params();
                 Uuid instance_id = FP_TRY(UuidParam(p, "instance_id"));
                 Uuid migration_id = FP_TRY(UuidParam(p, "migration_id"));
                 FP_TRY(d.ds.Write<bool>([&](db::Tx& tx) -> Result<bool> {
                   FP_CHECK_OK(db::InstanceUndoMigrateIn(tx, instance_id, migration_id));
                   return true;
                 }));
                 SyncNatBestEffort(d);
                 return Ok();
               }});
  r.Add(Action{.name = "instance_migrate.destination",
               .run = [&d](const ActionContext& ctx) -> Result<Json> {
                 const Json& p = ctx.params();
                 return EnsureRunningOn(d, FP_TRY(UuidParam(p, "instance_id")),
                                        FP_TRY(UuidParam(p, "dst_sled_id")));
               },
               .undo = [&d](const ActionContext& ctx) -> Status {
                 const Json& p = ctx.params();
                 UnregisterFrom(d, FP_TRY(UuidParam(p, "instance_id")),
                                FP_TRY(UuidParam(p, "dst_sled_id")));
                 return Ok();
               }});
  r.Add(Action{.name = "instance_migrate.finish",
               .run_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Result<Json> {
                 const Json& p = ctx.params();
                 FP_CHECK_OK(db::InstanceFinishMigrateIn(tx, FP_TRY(UuidParam(p, "instance_id")),
                                                         FP_TRY(UuidParam(p, "dst_sled_id")),
                                                         FP_TRY(UuidParam(p, "migration_id"))));
                 return Json::object();
               },
               .undo_in_tx = [](db::Tx& tx, const ActionContext& ctx) -> Status {
                 const Json& p = ctx.params();
                 return db::InstanceRevertMigrateIn(tx, FP_TRY(UuidParam(p, "instance_id")),
                                                    FP_TRY(UuidParam(p, "src_sled_id")),
                                                    FP_TRY(UuidParam(p, "migration_id")));
               }});
  r.Add(Action{.name = "instance_migrate.switch",
               .run = [&d](const ActionContext&) -> Result<Json> {
                 FP_CHECK_OK(d.nat.Sync());
                 return Json::object();
               },
               .undo = [&d](const ActionContext&) -> Status {
                 SyncNatBestEffort(d);
                 return Ok();
               }});
  r.Add(Action{
      .name = "instance_migrate.source", .run = [&d](const ActionContext& ctx) -> Result<Json> {
        const Json& p = ctx.params();
        Uuid instance_id = FP_TRY(UuidParam(p, "instance_id"));
        UnregisterFrom(d, instance_id, FP_TRY(UuidParam(p, "src_sled_id")));
        // Only now is the source VM no longer the instance's: until here the migration mark
        // kept the reaper and the watcher away from both ends (InstanceFinishMigrateIn).
        FP_TRY(d.ds.Write<bool>([&](db::Tx& tx) -> Result<bool> {
          FP_CHECK_OK(
              db::InstanceEndMigrateIn(tx, instance_id, FP_TRY(UuidParam(p, "migration_id"))));
          return true;
        }));
        return Json::object();
      }});
}

}  // namespace fp::app
