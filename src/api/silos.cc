// Silos (fleet admin): /v1/system/silos.

#include <fmt/format.h>

#include "api/endpoint.h"
#include "api/pagination.h"
#include "api/views.h"

namespace fp::api {

namespace {

std::pair<std::string, std::string> SiloKeys(const model::Silo& s) {
  return {s.name, s.id.ToString()};
}

// SiloCreate as Oxide's schema has it; its CPU, memory and storage quotas are recorded (not
// enforced), TLS certificates checked for shape only (a silo's own TLS is not served).
Result<model::SiloCreate> ParseSiloCreate(const Json& body) {
  Fields f(body, "");
  model::SiloCreate p;
  p.name = FP_TRY(f.NameField("name")).str();
  p.description = FP_TRY(f.Description("description"));
  p.discoverable = FP_TRY(f.Bool("discoverable"));
  p.identity_mode = FP_TRY(f.String("identity_mode"));
  if (p.identity_mode != "local_only" && p.identity_mode != "saml_jit" &&
      p.identity_mode != "saml_scim") {
    return Fail(
        BodyError("identity_mode", "expected one of \"local_only\", \"saml_jit\", \"saml_scim\""));
  }
  p.admin_group_name = FP_TRY(f.OptString("admin_group_name"));
  if (p.admin_group_name && p.admin_group_name->size() > 512) {
    return Fail(BodyError("admin_group_name", "may contain at most 512 characters"));
  }
  Fields quotas = FP_TRY(f.Object("quotas"));
  for (const char* q : {"cpus", "memory", "storage"}) {
    auto it = body["quotas"].find(q);
    if (it == body["quotas"].end()) {
      return Fail(Error::InvalidRequest(
          fmt::format("unable to parse JSON body: missing field \"{}\"", quotas.FieldPath(q))));
    }
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return Fail(BodyError(quotas.FieldPath(q), "expected a non-negative integer"));
    }
  }
  p.cpus_quota = body["quotas"]["cpus"].get<int64_t>();
  p.memory_quota = body["quotas"]["memory"].get<int64_t>();
  p.storage_quota = body["quotas"]["storage"].get<int64_t>();
  auto certs = body.find("tls_certificates");
  if (certs == body.end()) {
    return Fail(
        Error::InvalidRequest("unable to parse JSON body: missing field \"tls_certificates\""));
  }
  if (!certs->is_array()) return Fail(BodyError("tls_certificates", "expected an array"));
  if (!certs->empty()) {
    return Fail(
        BodyError("tls_certificates", "floatplane does not serve TLS itself; pass an empty list"));
  }
  return p;
}

}  // namespace

void AddSiloRoutes(Routes& r) {
  r.Add("GET", "/v1/system/silos", [](const Ctx& c) -> Result<Reply> {
    auto page = FP_TRY(ParsePage(c.query));
    auto items = FP_TRY(c.app.silos.List(c.actor, page));
    return Reply{200, PageBody<model::Silo>(items, page, &SiloView, SiloKeys)};
  });
  r.Add("POST", "/v1/system/silos", [](const Ctx& c) -> Result<Reply> {
    Json body = FP_TRY(c.Body());
    model::SiloCreate p = FP_TRY(ParseSiloCreate(body));
    return Reply{201,
                 SiloView(FP_TRY(c.app.silos.Create(c.Effect<model::Silo>(201, &SiloView), p)))};
  });
  r.Add("GET", "/v1/system/silos/{silo}", [](const Ctx& c) -> Result<Reply> {
    return Reply{200, SiloView(FP_TRY(c.app.silos.View(c.actor, FP_TRY(c.PathNameOrId("silo")))))};
  });
  r.Add("DELETE", "/v1/system/silos/{silo}", [](const Ctx& c) -> Result<Reply> {
    FP_CHECK_OK(c.app.silos.Delete(c.NoContent(), FP_TRY(c.PathNameOrId("silo"))));
    return Reply{204, nullptr};
  });
  r.Add("GET", "/v1/system/silos/{silo}/ip-pools", [](const Ctx& c) -> Result<Reply> {
    auto page = FP_TRY(ParsePage(c.query));
    auto items = FP_TRY(c.app.silos.PoolList(c.actor, FP_TRY(c.PathNameOrId("silo")), page));
    return Reply{200, PageBody<model::SiloIpPool>(items, page, &SiloIpPoolView, SiloPoolKeys)};
  });
}

}  // namespace fp::api
