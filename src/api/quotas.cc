// Quotas and utilization: a silo's quotas (/v1/system/silos/{silo}/quotas,
// /v1/system/silo-quotas; fleet admins) in Oxide's SiloQuotas shape with floatplane's IP quotas
// as additive fields, a project's IP quotas (/v1/system/projects/{project}/quotas,
// floatplane's extension; silo admins set them), and utilization (/v1/utilization for the
// silo's users, /v1/system/utilization/silos for fleet admins) in Oxide's shapes with the same
// IP fields and `ip_pools`: what the silo holds of each pool linked to it, by kind, and the
// pool's capacity (and for fleet admins what is left of it).
//
// The IP fields: `ipv4_addresses`, `ipv6_addresses` (the limit in addresses, null: none) and
// `ipv4_addresses_used`, `ipv6_addresses_used` (a number: an SNAT block counts a quarter). In
// an update a limit field left out stays as it is and null removes the limit.

#include <fmt/format.h>

#include "api/endpoint.h"
#include "api/pagination.h"

namespace fp::api {

namespace {

// Limits past 2^53 addresses would not survive a JSON double; no pool holds that many IPv4
// addresses and an IPv6 quota that large is no limit.
constexpr uint64_t kMaxLimit = uint64_t{1} << 53;

// Quarters as addresses: a whole number as an integer (2, not 2.0), else 2.25.
Json Addresses(int64_t quarters) {
  if (quarters % model::kQuartersPerAddress == 0) {
    return Json(quarters / model::kQuartersPerAddress);
  }
  return Json(static_cast<double>(quarters) / static_cast<double>(model::kQuartersPerAddress));
}

Json Limit(const std::optional<int64_t>& v) { return v ? Json(*v) : Json(nullptr); }

void AddIpFields(Json& j, const model::IpQuota& q, const model::IpUse& use) {
  j["ipv4_addresses"] = Limit(q.ipv4);
  j["ipv6_addresses"] = Limit(q.ipv6);
  j["ipv4_addresses_used"] = Addresses(use.ipv4_quarters);
  j["ipv6_addresses_used"] = Addresses(use.ipv6_quarters);
}

Json SiloQuotasView(const model::SiloQuotas& q) {
  Json j{{"silo_id", q.silo_id.ToString()},
         {"cpus", q.cpus},
         {"memory", q.memory},
         {"storage", q.storage}};
  AddIpFields(j, q.ip, q.ip_use);
  return j;
}

Json ProjectQuotasView(const model::ProjectQuotas& q) {
  Json j{{"project_id", q.project_id.ToString()}, {"silo_id", q.silo_id.ToString()}};
  AddIpFields(j, q.ip, q.ip_use);
  return j;
}

Json VirtualResourcesView(const model::VirtualResources& r) {
  return Json{{"cpus", r.cpus}, {"memory", r.memory}, {"storage", r.storage}};
}

Json QuotaResources(const model::SiloQuotas& q) {
  return VirtualResourcesView({q.cpus, q.memory, q.storage});
}

// `fleet`: the pool's free addresses too. A silo's own users do not see them: with the pool's
// capacity and the silo's holdings they would tell what other silos hold.
void AddUtilizationFields(Json& j, const model::SiloUtilization& u, bool fleet) {
  AddIpFields(j, u.quotas.ip, u.quotas.ip_use);
  Json pools = Json::array();
  for (const model::SiloPoolUse& p : u.pools) {
    Json pool{{"id", p.pool_id.ToString()},
              {"name", p.pool_name},
              {"ip_version", std::string(ToString(p.ip_version))},
              {"capacity", p.capacity},
              {"floating", p.floating},
              {"ephemeral", p.ephemeral},
              {"snat_blocks", p.snat_blocks}};
    if (fleet) pool["remaining"] = p.remaining;
    pools.push_back(std::move(pool));
  }
  j["ip_pools"] = std::move(pools);
}

// Oxide's Utilization: the silo's capacity is its quotas.
Json UtilizationView(const model::SiloUtilization& u) {
  Json j{{"capacity", QuotaResources(u.quotas)},
         {"provisioned", VirtualResourcesView(u.provisioned)}};
  AddUtilizationFields(j, u, /*fleet=*/false);
  return j;
}

Json SiloUtilizationView(const model::SiloUtilization& u) {
  Json j{{"silo_id", u.silo_id.ToString()},
         {"silo_name", u.silo_name},
         {"allocated", QuotaResources(u.quotas)},
         {"provisioned", VirtualResourcesView(u.provisioned)}};
  AddUtilizationFields(j, u, /*fleet=*/true);
  return j;
}

std::pair<std::string, std::string> SiloUtilizationKeys(const model::SiloUtilization& u) {
  return {u.silo_name, u.silo_id.ToString()};
}

std::pair<std::string, std::string> SiloQuotasKeys(const model::SiloQuotas& q) {
  return {q.silo_id.ToString(), q.silo_id.ToString()};
}

// Oxide's fields: absent or null leaves the value as it is.
Result<std::optional<int64_t>> OptCount(const Fields& f, std::string_view field) {
  if (f.IsNullOrAbsent(field)) return std::optional<int64_t>();
  return std::optional<int64_t>(
      static_cast<int64_t>(FP_TRY(f.Unsigned(field, std::numeric_limits<int64_t>::max()))));
}

// An IP limit: absent leaves it, null removes it.
Result<std::optional<std::optional<int64_t>>> OptLimit(const Fields& f, std::string_view field) {
  using Change = std::optional<std::optional<int64_t>>;
  if (!f.Has(field)) return Change();
  if (f.IsNullOrAbsent(field)) return Change(std::optional<int64_t>());
  return Change(static_cast<int64_t>(FP_TRY(f.Unsigned(field, kMaxLimit))));
}

}  // namespace

void AddQuotaRoutes(Routes& r) {
  r.Add("GET", "/v1/utilization", [](const Ctx& c) -> Result<Reply> {
    return Reply{200, UtilizationView(FP_TRY(c.app.silos.CurrentUtilization(c.actor)))};
  });
  r.Add("GET", "/v1/system/utilization/silos", [](const Ctx& c) -> Result<Reply> {
    auto page = FP_TRY(ParsePage(c.query));
    auto items = FP_TRY(c.app.silos.UtilizationList(c.actor, page));
    return Reply{200, PageBody<model::SiloUtilization>(items, page, &SiloUtilizationView,
                                                       SiloUtilizationKeys)};
  });
  r.Add("GET", "/v1/system/utilization/silos/{silo}", [](const Ctx& c) -> Result<Reply> {
    return Reply{200, SiloUtilizationView(FP_TRY(
                          c.app.silos.UtilizationView(c.actor, FP_TRY(c.PathNameOrId("silo")))))};
  });
  r.Add("GET", "/v1/system/silo-quotas", [](const Ctx& c) -> Result<Reply> {
    // Oxide's list is by silo id only (IdSortMode).
    if (auto sort = c.query.Get("sort_by"); sort && *sort != "id_ascending") {
      return Fail(BadQuery("sort_by", "expected \"id_ascending\""));
    }
    model::PageRequest page = FP_TRY(ParsePage(c.query));
    page.order = model::SortOrder::kIdAscending;
    auto items = FP_TRY(c.app.silos.QuotasList(c.actor, page));
    return Reply{200, PageBody<model::SiloQuotas>(items, page, &SiloQuotasView, SiloQuotasKeys)};
  });
  r.Add("GET", "/v1/system/silos/{silo}/quotas", [](const Ctx& c) -> Result<Reply> {
    return Reply{200, SiloQuotasView(
                          FP_TRY(c.app.silos.QuotasView(c.actor, FP_TRY(c.PathNameOrId("silo")))))};
  });
  r.Add("PUT", "/v1/system/silos/{silo}/quotas", [](const Ctx& c) -> Result<Reply> {
    auto silo = FP_TRY(c.PathNameOrId("silo"));
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    model::SiloQuotasUpdate u;
    u.cpus = FP_TRY(OptCount(f, "cpus"));
    u.memory = FP_TRY(OptCount(f, "memory"));
    u.storage = FP_TRY(OptCount(f, "storage"));
    u.ipv4 = FP_TRY(OptLimit(f, "ipv4_addresses"));
    u.ipv6 = FP_TRY(OptLimit(f, "ipv6_addresses"));
    return Reply{200, SiloQuotasView(FP_TRY(c.app.silos.QuotasUpdate(
                          c.Effect<model::SiloQuotas>(200, &SiloQuotasView), silo, u)))};
  });
  r.Add("GET", "/v1/system/projects/{project}/quotas", [](const Ctx& c) -> Result<Reply> {
    return Reply{200, ProjectQuotasView(FP_TRY(
                          c.app.projects.QuotasView(c.actor, FP_TRY(c.PathNameOrId("project")))))};
  });
  r.Add("PUT", "/v1/system/projects/{project}/quotas", [](const Ctx& c) -> Result<Reply> {
    auto project = FP_TRY(c.PathNameOrId("project"));
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    model::ProjectQuotasUpdate u;
    u.ipv4 = FP_TRY(OptLimit(f, "ipv4_addresses"));
    u.ipv6 = FP_TRY(OptLimit(f, "ipv6_addresses"));
    return Reply{200, ProjectQuotasView(FP_TRY(c.app.projects.QuotasUpdate(
                          c.Effect<model::ProjectQuotas>(200, &ProjectQuotasView), project, u)))};
  });
}

}  // namespace fp::api
