#include "app/sagas/instance_create.h"

#include <fmt/format.h>

#include "app/sagas/sagas.h"
#include "db/attach.h"
#include "db/snat.h"

namespace fp::app {

namespace {

using saga::Action;
using saga::ActionContext;
using saga::Json;

// Outputs no later node reads, kept for operators reading the log.
struct InstanceRecorded {
  Uuid instance_id;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(InstanceRecorded, instance_id)

struct SnatAllocated {
  std::optional<IpAddr> snat_ip;
  int first_port = 0;
  std::optional<IpAddr> snat6_ip;
  int snat6_first_port = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SnatAllocated, snat_ip, first_port, snat6_ip,
                                                snat6_first_port)

struct ExternalIpAttached {
  Uuid ip_id;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ExternalIpAttached, ip_id)

// The requested IP of node "external_ip_<k>".
Result<InstanceCreateExternalIp> RequestedIpOf(const ActionContext& ctx,
                                               const InstanceCreateSagaParams& p) {
  size_t k = std::stoul(ctx.node().substr(ctx.node().rfind('_') + 1));
  if (k >= p.external_ips.size()) {
    return Fail(Error::Internal(fmt::format("saga node {} has no requested IP", ctx.node())));
  }
  return p.external_ips[k];
}

Result<Json> Record(db::Tx& tx, const ActionContext& ctx) {
  auto p = FP_TRY(ParamsOf<InstanceCreateSagaParams>(ctx));
  model::InstanceCreate c;
  c.id = p.instance_id;
  c.nic_id = p.nic_id;
  c.project_id = p.project_id;
  c.name = p.name;
  c.description = p.description;
  c.hostname = p.hostname;
  c.ncpus = p.ncpus;
  c.memory = p.memory;
  c.nic = p.nic;
  model::Instance i = FP_TRY(db::InstanceCreateRecordIn(tx, c));
  return Json(InstanceRecorded{i.id});
}

Status UndoRecord(db::Tx& tx, const ActionContext& ctx) {
  auto p = FP_TRY(ParamsOf<InstanceCreateSagaParams>(ctx));
  return db::InstanceDeleteRecordIn(tx, p.instance_id);
}

Result<Json> Snat(db::Tx& tx, const ActionContext& ctx) {
  auto p = FP_TRY(ParamsOf<InstanceCreateSagaParams>(ctx));
  // None when the create asked for none.
  if (!p.snat) return Json::object();
  SnatAllocated out;
  if (p.nic == model::NicKind::kIpv4 || p.nic == model::NicKind::kDualStack) {
    model::ExternalIp snat = FP_TRY(db::SnatAllocateIn(tx, p.snat_id, p.instance_id, p.silo_id));
    out.snat_ip = snat.ip;
    out.first_port = snat.first_port;
  }
  // A dual-stack instance's IPv6 too, from the silo's default IPv6 pool when it has one
  // (product.md; Oxide has no IPv6 SNAT since #9785: its instances go out over IPv6 only
  // through an ephemeral or floating address). An IPv6-only instance takes none, as in Oxide.
  if (p.snat6_id && p.nic == model::NicKind::kDualStack &&
      FP_TRY(db::SiloHasDefaultPoolIn(tx, p.silo_id, IpVersion::kV6))) {
    // Only where the quotas and the pool have room: a create never fails for a block it did
    // not ask for.
    auto snat =
        FP_TRY(db::SnatAllocateIfRoomIn(tx, *p.snat6_id, p.instance_id, p.silo_id, IpVersion::kV6));
    if (snat) {
      out.snat6_ip = snat->ip;
      out.snat6_first_port = snat->first_port;
    }
  }
  return Json(out);
}

Status UndoSnat(db::Tx& tx, const ActionContext& ctx) {
  auto p = FP_TRY(ParamsOf<InstanceCreateSagaParams>(ctx));
  if (p.snat6_id) FP_CHECK_OK(db::ExternalIpReleaseIn(tx, *p.snat6_id));
  return db::ExternalIpReleaseIn(tx, p.snat_id);
}

Result<Json> AttachRequested(db::Tx& tx, const ActionContext& ctx) {
  auto p = FP_TRY(ParamsOf<InstanceCreateSagaParams>(ctx));
  InstanceCreateExternalIp e = FP_TRY(RequestedIpOf(ctx, p));
  db::AttachRequest req;
  req.instance_id = p.instance_id;
  req.ip_id = e.ip_id;
  req.saga_id = ctx.saga_id();
  req.creating = true;
  if (e.type == model::IpKind::kEphemeral) {
    req.kind = model::IpKind::kEphemeral;
    FP_TRY(db::EphemeralAllocateIn(tx, req.ip_id, p.instance_id, p.silo_id,
                                   SelectorOf(e.pool, e.ip_version)));
  }
  db::AttachStep step = FP_TRY(db::BeginAttachIn(tx, req));
  if (step.do_saga) {
    FP_TRY(db::CompleteOpIn(tx, req.ip_id, model::AttachState::kAttaching,
                            model::AttachState::kAttached));
  }
  return Json(ExternalIpAttached{req.ip_id});
}

Status UndoAttachRequested(db::Tx& tx, const ActionContext& ctx) {
  auto p = FP_TRY(ParamsOf<InstanceCreateSagaParams>(ctx));
  InstanceCreateExternalIp e = FP_TRY(RequestedIpOf(ctx, p));
  if (e.type == model::IpKind::kEphemeral) return db::ExternalIpReleaseIn(tx, e.ip_id);
  return db::ReleaseFloatingFromInstanceIn(tx, e.ip_id, p.instance_id);
}

Result<Json> Finish(db::Tx& tx, const ActionContext& ctx) {
  auto p = FP_TRY(ParamsOf<InstanceCreateSagaParams>(ctx));
  FP_CHECK_OK(db::InstanceFinishCreateIn(tx, p.instance_id));
  // The created row: what a replay of the request answers (InstanceOfSaga).
  return Json(InstanceCreated{FP_TRY(db::InstanceGetIn(tx, p.instance_id))});
}

}  // namespace

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

saga::SagaDag InstanceCreateSaga(const InstanceCreateSagaParams& params) {
  return saga::SagaDag{.name = kInstanceCreateSaga,
                       .params = Json(params),
                       .nodes = InstanceCreateNodes(params.external_ips.size())};
}

void RegisterInstanceCreateActions(saga::ActionRegistry& r) {
  r.Add(Action{
      .name = "instance_create.record", .run_in_tx = InTx<Record>, .undo_in_tx = InTx<UndoRecord>});
  r.Add(Action{
      .name = "instance_create.snat", .run_in_tx = InTx<Snat>, .undo_in_tx = InTx<UndoSnat>});
  r.Add(Action{.name = "instance_create.external_ip",
               .run_in_tx = InTx<AttachRequested>,
               .undo_in_tx = InTx<UndoAttachRequested>});
  r.Add(Action{.name = "instance_create.finish", .run_in_tx = InTx<Finish>});
}

}  // namespace fp::app
