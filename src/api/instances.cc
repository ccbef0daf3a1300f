// Instances: /v1/instances, their start/stop/reboot, and migration (fleet admin).

#include <fmt/format.h>

#include "api/bodies.h"
#include "api/endpoint.h"
#include "api/pagination.h"
#include "api/views.h"
#include "app/ephemeral_ip_requests.h"

namespace fp::api {

namespace {

std::pair<std::string, std::string> InstanceKeys(const model::Instance& i) {
  return {i.name, i.id.ToString()};
}

// The replay of an instance operation carried by a saga (see Instances::InstanceOfSaga).
SagaReplay InstanceFromSaga(int status) {
  return [status](const Ctx& c, const Json& params, const Json& output) -> Result<Reply> {
    return Reply{
        status,
        InstanceView(FP_TRY(FP_TRY(c.Compute())->InstanceOfSaga(c.Saga(status), params, output)))};
  };
}

// Hostname: RFC 1123 labels separated by dots, at most 253 characters.
Status CheckHostname(const std::string& h) {
  auto bad = [] {
    return BodyError("hostname",
                     "must be DNS labels of letters, digits and '-' "
                     "separated by '.', at most 253 characters");
  };
  if (h.empty() || h.size() > 253) return Fail(bad());
  size_t start = 0;
  while (start <= h.size()) {
    size_t dot = h.find('.', start);
    std::string_view label(h.data() + start, (dot == std::string::npos ? h.size() : dot) - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return Fail(bad());
    }
    for (char ch : label) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') return Fail(bad());
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return Ok();
}

// An instance's vCPU count and memory as the API's types allow them (uint16 and uint64): the
// limits are the application's (app::CheckInstanceSize), decided after the lookups as Oxide
// does.
Result<app::InstanceSize> ParseInstanceSize(const Fields& f) {
  app::InstanceSize size;
  size.ncpus = static_cast<int64_t>(FP_TRY(f.Unsigned("ncpus", UINT16_MAX)));
  size.memory = FP_TRY(f.Unsigned("memory", UINT64_MAX));
  return size;
}

Result<model::NicKind> ParseNetworkInterfaces(const Fields& f) {
  Fields nics = FP_TRY(f.Object("network_interfaces"));
  std::string type = FP_TRY(nics.String("type"));
  if (type == "default_ipv4") return model::NicKind::kIpv4;
  if (type == "default_ipv6") return model::NicKind::kIpv6;
  if (type == "default_dual_stack") return model::NicKind::kDualStack;
  if (type == "none") return model::NicKind::kNone;
  if (type == "create") {
    return Fail(BodyError("network_interfaces.type",
                          "\"create\" is not supported; use \"default_ipv4\", "
                          "\"default_ipv6\", \"default_dual_stack\" or \"none\""));
  }
  return Fail(BodyError("network_interfaces.type",
                        "expected one of \"default_ipv4\", \"default_ipv6\", "
                        "\"default_dual_stack\", \"none\", \"create\""));
}

// `external_ips` of InstanceCreate in request order. Their combination is the application's
// to check (app::CheckEphemeralIpRequests).
Result<std::vector<app::RequestedExternalIp>> ParseRequestedExternalIps(const Json& body) {
  std::vector<app::RequestedExternalIp> out;
  auto it = body.find("external_ips");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_array()) return Fail(BodyError("external_ips", "expected an array"));
  if (it->size() > 32) {
    return Fail(
        Error::InvalidRequest("An instance may not have more than 32 external IP addresses"));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& item = (*it)[i];
    std::string path = fmt::format("external_ips[{}]", i);
    if (!item.is_object()) return Fail(BodyError(path, "expected an object"));
    Fields f(item, path);
    std::string type = FP_TRY(f.String("type"));
    if (type == "ephemeral") {
      model::PoolSelector sel;
      if (!f.IsNullOrAbsent("pool_selector")) {
        sel = FP_TRY(ParsePoolSelector(FP_TRY(f.Object("pool_selector"))));
      }
      out.push_back(app::RequestedExternalIp{true, sel, NameOrId(Uuid())});
    } else if (type == "floating") {
      out.push_back(app::RequestedExternalIp{false, {}, FP_TRY(f.NameOrIdField("floating_ip"))});
    } else {
      return Fail(BodyError(f.FieldPath("type"), "expected \"ephemeral\" or \"floating\""));
    }
  }
  return out;
}

Result<Reply> CreateInstance(const Ctx& c) {
  auto project = FP_TRY(c.query.RequiredNameOrId("project"));
  Json body = FP_TRY(c.Body());
  Fields f(body, "");
  app::InstanceCreateParams p;
  p.name = FP_TRY(f.NameField("name")).str();
  p.description = FP_TRY(f.Description("description"));
  p.hostname = FP_TRY(f.String("hostname"));
  FP_CHECK_OK(CheckHostname(p.hostname));
  app::InstanceSize size = FP_TRY(ParseInstanceSize(f));
  p.ncpus = size.ncpus;
  p.memory = size.memory;
  if (auto start = FP_TRY(f.OptBool("start"))) p.start = *start;
  // floatplane's additive field: false creates the instance without an outbound SNAT block
  // (no external connectivity unless an ephemeral or floating IP is attached).
  if (auto snat = FP_TRY(f.OptBool("snat"))) p.snat = *snat;
  if (!f.IsNullOrAbsent("network_interfaces")) p.nic = FP_TRY(ParseNetworkInterfaces(f));
  p.external_ips = FP_TRY(ParseRequestedExternalIps(body));
  FP_CHECK_OK(app::CheckEphemeralIpRequests(c.app.ip_pools, c.actor, p.external_ips));
  auto* compute = FP_TRY(c.Compute());
  return Reply{201, InstanceView(FP_TRY(compute->Create(c.Saga(201), project, p)))};
}

}  // namespace

void AddInstanceRoutes(Routes& r) {
  r.Add("GET", "/v1/instances", [](const Ctx& c) -> Result<Reply> {
    auto page = FP_TRY(ParsePage(c.query));
    NameOrId project = FP_TRY(ListProject(c.query));
    auto items = FP_TRY(FP_TRY(c.Compute())->List(c.actor, project, page));
    std::string scope = items.empty() ? std::string() : items.front().project_id.ToString();
    return Reply{200, PageBody<model::Instance>(items, page, &InstanceView, InstanceKeys, scope)};
  });
  r.Add("POST", "/v1/instances", Endpoint(CreateInstance, InstanceFromSaga(201)));
  r.Add("GET", "/v1/instances/{instance}", [](const Ctx& c) -> Result<Reply> {
    auto instance = FP_TRY(c.PathNameOrId("instance"));
    auto project = FP_TRY(c.query.OptNameOrId("project"));
    return Reply{200,
                 InstanceView(FP_TRY(FP_TRY(c.Compute())->Lookup(c.actor, instance, project)))};
  });
  r.Add("PUT", "/v1/instances/{instance}", [](const Ctx& c) -> Result<Reply> {
    auto instance = FP_TRY(c.PathNameOrId("instance"));
    auto project = FP_TRY(c.query.OptNameOrId("project"));
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    app::InstanceSize size = FP_TRY(ParseInstanceSize(f));
    return Reply{200,
                 InstanceView(FP_TRY(FP_TRY(c.Compute())
                                         ->Update(c.Effect<model::Instance>(200, &InstanceView),
                                                  instance, project, size)))};
  });
  r.Add("DELETE", "/v1/instances/{instance}",
        Endpoint(
            [](const Ctx& c) -> Result<Reply> {
              auto instance = FP_TRY(c.PathNameOrId("instance"));
              auto project = FP_TRY(c.query.OptNameOrId("project"));
              FP_CHECK_OK(FP_TRY(c.Compute())->Delete(c.Saga(204), instance, project));
              return Reply{204, nullptr};
            },
            NoContentFromSaga));
  using Op = Result<model::Instance> (app::Instances::*)(
      const app::Request<model::Instance>&, const NameOrId&, const std::optional<NameOrId>&);
  for (auto [verb, op] : {std::pair<const char*, Op>{"start", &app::Instances::Start},
                          std::pair<const char*, Op>{"stop", &app::Instances::Stop},
                          std::pair<const char*, Op>{"reboot", &app::Instances::Reboot}}) {
    // Start runs a saga. Stop ends with its one write, of the instance's run state, which
    // records the answer. Reboot writes the run state before it talks to the sled, then again
    // after: only that last write records the answer, once the reboot succeeded (a 202
    // replayed for a reboot that failed would be false), and a crash in between makes the
    // retry run it again.
    r.Add("POST", fmt::format("/v1/instances/{{instance}}/{}", verb),
          Endpoint(
              [op = op](const Ctx& c) -> Result<Reply> {
                auto instance = FP_TRY(c.PathNameOrId("instance"));
                auto project = FP_TRY(c.query.OptNameOrId("project"));
                app::Instances* compute = FP_TRY(c.Compute());
                return Reply{
                    202, InstanceView(FP_TRY((compute->*op)(
                             c.Effect<model::Instance>(202, &InstanceView), instance, project)))};
              },
              InstanceFromSaga(202)));
  }
  r.Add("POST", "/v1/system/instances/{instance}/migrate",
        Endpoint(
            [](const Ctx& c) -> Result<Reply> {
              auto instance = FP_TRY(c.PathNameOrId("instance"));
              auto project = FP_TRY(c.query.OptNameOrId("project"));
              Json body = FP_TRY(c.Body());
              Fields f(body, "");
              std::string dst_text = FP_TRY(f.String("dst_sled_id"));
              auto dst = Uuid::Parse(dst_text);
              if (!dst) return Fail(BodyError("dst_sled_id", "expected a UUID"));
              return Reply{
                  202, InstanceView(FP_TRY(
                           FP_TRY(c.Compute())->Migrate(c.Saga(202), instance, project, *dst)))};
            },
            InstanceFromSaga(202)));
}

}  // namespace fp::api
