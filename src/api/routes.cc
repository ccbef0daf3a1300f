#include "api/routes.h"

#include <fmt/format.h>

#include <charconv>
#include <mutex>
#include <set>
#include <type_traits>

#include "api/json_input.h"
#include "api/views.h"
#include "common/log.h"
#include "db/idempotency.h"
#include "db/saga_log.h"
#include "db/tokens.h"
#include "http/router.h"
#include "saga/saga.h"

namespace fp::api {

namespace {

using http::PathParams;
using http::Router;

constexpr int64_t kDefaultPageSize = 100;
constexpr int64_t kMaxPageSize = 10000;

// A successful reply: status and JSON body (null body for 204).
struct Reply {
  int status = 200;
  Json body;
};

struct Ctx {
  const HttpRequest& req;
  const PathParams& params;
  const Query& query;
  const app::Actor& actor;
  app::ControlPlane& cp;
  app::Instances* instances;
  // Set while a request with an Idempotency-Key runs: what its effect's commit records.
  db::IdempotencyScope* idempotency;

  Result<app::Instances*> Compute() const {
    if (!instances) return Fail(Error::Unavailable("this server runs without sled agents"));
    return instances;
  }

  Result<NameOrId> PathNameOrId(const std::string& name) const {
    auto it = params.find(name);
    std::string raw = it == params.end() ? std::string() : it->second;
    auto v = NameOrId::Parse(raw);
    if (!v) {
      return Fail(Error::InvalidRequest(
          fmt::format("bad path parameter \"{}\": {}", name, v.error().message())));
    }
    return *v;
  }
  Result<Uuid> PathUuid(const std::string& name) const {
    auto it = params.find(name);
    auto v = Uuid::Parse(it == params.end() ? std::string() : it->second);
    if (!v) {
      return Fail(
          Error::InvalidRequest(fmt::format("bad path parameter \"{}\": expected a UUID", name)));
    }
    return *v;
  }
  Result<Json> Body(bool allow_empty = false) const {
    return ParseBodyObject(req.body, allow_empty);
  }
};

using Handler = std::function<Result<Reply>(const Ctx&)>;
// Rebuilds the answer of a request carried by a saga from the saga's parameters and the output
// of its last node, for a retry with the request's Idempotency-Key (db/idempotency.h).
using SagaReplay = std::function<Result<Reply>(const Ctx&, const Json& params, const Json& output)>;

// What routes are written as: lambdas from a request's context to its reply.
template <typename F>
concept HandlerLike = (std::is_invocable_r_v<Result<Reply>, F, const Ctx&>);

struct Endpoint {
  template <HandlerLike F>
  Endpoint(F handler) : run(std::move(handler)) {}  // NOLINT: implicit: routes are lambdas
  Endpoint(Handler handler, SagaReplay replay)
      : run(std::move(handler)), from_saga(std::move(replay)) {}

  Handler run;
  SagaReplay from_saga;  // set for endpoints whose effect a saga carries
};

HttpResponse JsonResponse(int status, const Json& body);

// Inside a keyed request, the first committed write whose result is a `T` records
// (status, view(result)) as the answer, in the write's own transaction.
template <typename T>
void AnswerWrite(const Ctx& c, int status, Json (*view)(const T&)) {
  if (c.idempotency == nullptr) return;
  c.idempotency->AnswerWith<T>([status, view](const T& result) {
    HttpResponse r = JsonResponse(status, view(result));
    return db::IdempotencyScope::Answer{r.status, std::move(r.body)};
  });
}

// Same for a request whose effect is a write that returns only success (a delete): 204.
void AnswerNoContent(const Ctx& c) {
  if (c.idempotency != nullptr) c.idempotency->AnswerWithoutResult({204, ""});
}

// The replay of a 204 request carried by a saga.
Result<Reply> NoContentFromSaga(const Ctx&, const Json&, const Json&) {
  return Reply{204, nullptr};
}

// The replay of an instance operation carried by a saga (see Instances::InstanceOfSaga).
SagaReplay InstanceFromSaga(int status) {
  return [status](const Ctx& c, const Json& params, const Json& output) -> Result<Reply> {
    return Reply{
        status, InstanceView(FP_TRY(FP_TRY(c.Compute())->InstanceOfSaga(c.actor, params, output)))};
  };
}

// --- pagination ---

std::string_view ToString(model::SortOrder o) {
  switch (o) {
    case model::SortOrder::kNameAscending:
      return "name_ascending";
    case model::SortOrder::kNameDescending:
      return "name_descending";
    case model::SortOrder::kIdAscending:
      return "id_ascending";
  }
  return "name_ascending";
}

std::string HexEncode(std::string_view in) {
  std::string out;
  for (unsigned char c : in) out += fmt::format("{:02x}", c);
  return out;
}

std::optional<std::string> HexDecode(std::string_view in) {
  if (in.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < in.size(); i += 2) {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(in.data() + i, in.data() + i + 2, v, 16);
    if (ec != std::errc() || p != in.data() + i + 2) return std::nullopt;
    out.push_back(static_cast<char>(v));
  }
  return out;
}

// A decoded page token: the sort order, the last key returned, and the scope the list was
// taken in (the project of a floating IP list), so that following `next_page` needs no other
// parameters, as with Oxide's API.
struct PageToken {
  std::string order;
  std::string key;
  std::string scope;
};

// Page tokens are opaque to clients: the hex of {"o": order, "k": last key, "s": scope}.
std::string MakePageToken(std::string_view order, const std::string& key,
                          const std::string& scope = {}) {
  return HexEncode(Json{{"v", 1}, {"o", order}, {"k", key}, {"s", scope}}.dump());
}

Error BadQuery(std::string_view param, std::string_view msg) {
  return Error::InvalidRequest(
      fmt::format("unable to parse query string: parameter \"{}\": {}", param, msg));
}

Result<int64_t> ParseLimit(const Query& q) {
  auto raw = q.Get("limit");
  if (!raw) return kDefaultPageSize;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(raw->data(), raw->data() + raw->size(), v);
  if (ec != std::errc() || p != raw->data() + raw->size() || v < 1) {
    return Fail(BadQuery("limit", "expected a positive integer"));
  }
  return std::min(v, kMaxPageSize);
}

Result<std::optional<PageToken>> ParsePageToken(const Query& q) {
  auto raw = q.Get("page_token");
  if (!raw) return std::optional<PageToken>();
  auto text = HexDecode(*raw);
  Json j = text ? Json::parse(*text, nullptr, false) : Json();
  auto is_string = [&](const char* k) {
    return j.is_object() && j.contains(k) && j[k].is_string();
  };
  if (!is_string("o") || !is_string("k") || !is_string("s")) {
    return Fail(BadQuery("page_token", "not a page token returned by this server"));
  }
  return std::optional<PageToken>(
      PageToken{j["o"].get<std::string>(), j["k"].get<std::string>(), j["s"].get<std::string>()});
}

// Parses limit, page_token and sort_by for lists sorted by name or id.
Result<model::PageRequest> ParsePage(const Query& q) {
  model::PageRequest page;
  page.limit = FP_TRY(ParseLimit(q));
  std::string order = q.Get("sort_by").value_or("name_ascending");
  auto token = FP_TRY(ParsePageToken(q));
  if (token) order = token->order;
  if (order == "name_ascending") {
    page.order = model::SortOrder::kNameAscending;
  } else if (order == "name_descending") {
    page.order = model::SortOrder::kNameDescending;
  } else if (order == "id_ascending") {
    page.order = model::SortOrder::kIdAscending;
  } else {
    return Fail(BadQuery(token ? "page_token" : "sort_by",
                         "expected one of \"name_ascending\", \"name_descending\", "
                         "\"id_ascending\""));
  }
  if (token) page.after = token->key;
  return page;
}

// Builds a results page; `key` gives the sort key of an item for the next page token.
template <typename T>
Reply PageReply(const std::vector<T>& items, const model::PageRequest& page, Json (*view)(const T&),
                const std::function<std::pair<std::string, std::string>(const T&)>& name_and_id,
                const std::string& scope = {}) {
  Json arr = Json::array();
  for (const T& item : items) arr.push_back(view(item));
  Json next = nullptr;
  if (static_cast<int64_t>(items.size()) == page.limit && !items.empty()) {
    auto [name, id] = name_and_id(items.back());
    next = MakePageToken(ToString(page.order),
                         page.order == model::SortOrder::kIdAscending ? id : name, scope);
  }
  return Reply{200, Json{{"items", std::move(arr)}, {"next_page", std::move(next)}}};
}

// --- body parsing ---

Result<model::IdentityUpdate> ParseIdentityUpdate(const Json& body) {
  Fields f(body, "");
  model::IdentityUpdate u;
  if (auto name = FP_TRY(f.OptName("name"))) u.name = name->str();
  u.description = FP_TRY(f.OptDescription("description"));
  return u;
}

Result<IpRange> ParseIpRange(const Json& body) {
  Fields f(body, "");
  IpAddr first = FP_TRY(f.Ip("first"));
  IpAddr last = FP_TRY(f.Ip("last"));
  auto range = IpRange::Make(first, last);
  if (!range) {
    // The range's own messages are the API's, prefixed with the field they are about.
    return Fail(BodyError(first.version() != last.version() ? "first, last" : "last",
                          range.error().message()));
  }
  return *range;
}

Result<model::PoolSelector> ParsePoolSelector(const Fields& f) {
  model::PoolSelector s;
  std::string type = FP_TRY(f.String("type"));
  if (type == "explicit") {
    s.mode = model::PoolSelector::Mode::kExplicitPool;
    s.pool = FP_TRY(f.NameOrIdField("pool"));
  } else if (type == "auto") {
    s.mode = model::PoolSelector::Mode::kDefault;
    if (auto v = FP_TRY(f.OptString("ip_version"))) {
      auto version = ParseIpVersion(*v);
      if (!version) return Fail(BodyError(f.FieldPath("ip_version"), "expected \"v4\" or \"v6\""));
      s.ip_version = *version;
    }
  } else {
    return Fail(BodyError(f.FieldPath("type"), "expected \"explicit\" or \"auto\""));
  }
  return s;
}

Result<model::AddressRequest> ParseAddressAllocator(const Fields& body) {
  model::AddressRequest req;
  if (body.IsNullOrAbsent("address_allocator")) return req;
  Fields f = FP_TRY(body.Object("address_allocator"));
  std::string type = FP_TRY(f.String("type"));
  if (type == "explicit") {
    req.explicit_ip = FP_TRY(f.Ip("ip"));
  } else if (type == "auto") {
    if (!f.IsNullOrAbsent("pool_selector")) {
      req.selector = FP_TRY(ParsePoolSelector(FP_TRY(f.Object("pool_selector"))));
    }
  } else {
    return Fail(BodyError(f.FieldPath("type"), "expected \"explicit\" or \"auto\""));
  }
  return req;
}

template <typename E>
Result<E> ParseEnumField(const Fields& f, std::string_view field,
                         std::optional<E> (*parse)(std::string_view), E fallback,
                         std::string_view allowed) {
  auto raw = FP_TRY(f.OptString(field));
  if (!raw) return fallback;
  auto v = parse(*raw);
  if (!v) return Fail(BodyError(f.FieldPath(field), fmt::format("expected one of {}", allowed)));
  return *v;
}

std::optional<IpVersion> ParseVersionText(std::string_view s) { return ParseIpVersion(s); }

// The pool filters as a page-token scope, so that later pages keep the first page's filter.
std::string FilterScope(const model::IpPoolFilter& f) {
  return Json{{"ip_version", f.ip_version ? Json(ToString(*f.ip_version)) : Json()},
              {"pool_type", f.pool_type ? Json(model::ToString(*f.pool_type)) : Json()},
              {"assignment", f.assignment ? Json(model::ToString(*f.assignment)) : Json()}}
      .dump();
}

// Filters come from the query on the first page and from the page token after that; a query
// that names a different filter than its token is refused.
Result<model::IpPoolFilter> ParsePoolFilter(const Query& q, bool with_assignment) {
  model::IpPoolFilter f;
  f.ip_version = FP_TRY(q.OptIpVersion("ip_version"));
  if (auto t = q.Get("pool_type")) {
    f.pool_type = model::ParsePoolType(*t);
    if (!f.pool_type) return Fail(BadQuery("pool_type", "expected \"unicast\" or \"multicast\""));
  }
  if (with_assignment) {
    if (auto a = q.Get("assignment")) {
      f.assignment = model::ParsePoolAssignment(*a);
      if (!f.assignment) {
        return Fail(BadQuery("assignment", "expected \"silos\" or \"system_services\""));
      }
    }
  }
  auto token = FP_TRY(ParsePageToken(q));
  if (!token) return f;
  Json scope = Json::parse(token->scope, nullptr, false);
  if (!scope.is_object()) return Fail(BadQuery("page_token", "not a page token of this list"));
  model::IpPoolFilter from_token;
  if (scope.value("ip_version", Json()).is_string()) {
    from_token.ip_version = ParseIpVersion(scope["ip_version"].get<std::string>());
  }
  if (scope.value("pool_type", Json()).is_string()) {
    from_token.pool_type = model::ParsePoolType(scope["pool_type"].get<std::string>());
  }
  if (scope.value("assignment", Json()).is_string()) {
    from_token.assignment = model::ParsePoolAssignment(scope["assignment"].get<std::string>());
  }
  bool given =
      q.Get("ip_version") || q.Get("pool_type") || (with_assignment && q.Get("assignment"));
  if (given && FilterScope(f) != FilterScope(from_token)) {
    return Fail(BadQuery("page_token", "the filters differ from those of the first page"));
  }
  return from_token;
}

std::pair<std::string, std::string> SiloKeys(const model::Silo& s) {
  return {s.name, s.id.ToString()};
}
std::pair<std::string, std::string> ProjectKeys(const model::Project& p) {
  return {p.name, p.id.ToString()};
}
std::pair<std::string, std::string> PoolKeys(const model::IpPool& p) {
  return {p.name, p.id.ToString()};
}
std::pair<std::string, std::string> SiloPoolKeys(const model::SiloIpPool& p) {
  return {p.pool.name, p.pool.id.ToString()};
}
std::pair<std::string, std::string> FipKeys(const model::ExternalIp& e) {
  return {e.name.value_or(""), e.id.ToString()};
}

// --- endpoints ---

void AddSiloRoutes(Router<Endpoint>& r) {
  r.Add("GET", "/v1/system/silos", [](const Ctx& c) -> Result<Reply> {
    auto page = FP_TRY(ParsePage(c.query));
    auto items = FP_TRY(c.cp.SiloList(c.actor, page));
    return PageReply<model::Silo>(items, page, &SiloView, SiloKeys);
  });
  r.Add("POST", "/v1/system/silos", [](const Ctx& c) -> Result<Reply> {
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    model::SiloCreate p;
    p.name = FP_TRY(f.NameField("name")).str();
    p.description = FP_TRY(f.Description("description"));
    p.discoverable = FP_TRY(f.Bool("discoverable"));
    p.identity_mode = FP_TRY(f.String("identity_mode"));
    if (p.identity_mode != "local_only" && p.identity_mode != "saml_jit" &&
        p.identity_mode != "saml_scim") {
      return Fail(BodyError("identity_mode",
                            "expected one of \"local_only\", \"saml_jit\", \"saml_scim\""));
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
    auto certs = body.find("tls_certificates");
    if (certs == body.end()) {
      return Fail(
          Error::InvalidRequest("unable to parse JSON body: missing field \"tls_certificates\""));
    }
    if (!certs->is_array()) return Fail(BodyError("tls_certificates", "expected an array"));
    if (!certs->empty()) {
      return Fail(BodyError("tls_certificates",
                            "floatplane does not serve TLS itself; pass an empty list"));
    }
    AnswerWrite<model::Silo>(c, 201, &SiloView);
    return Reply{201, SiloView(FP_TRY(c.cp.SiloCreate(c.actor, p)))};
  });
  r.Add("GET", "/v1/system/silos/{silo}", [](const Ctx& c) -> Result<Reply> {
    return Reply{200, SiloView(FP_TRY(c.cp.SiloView(c.actor, FP_TRY(c.PathNameOrId("silo")))))};
  });
  r.Add("DELETE", "/v1/system/silos/{silo}", [](const Ctx& c) -> Result<Reply> {
    AnswerNoContent(c);
    FP_CHECK_OK(c.cp.SiloDelete(c.actor, FP_TRY(c.PathNameOrId("silo"))));
    return Reply{204, nullptr};
  });
  r.Add("GET", "/v1/system/silos/{silo}/ip-pools", [](const Ctx& c) -> Result<Reply> {
    auto page = FP_TRY(ParsePage(c.query));
    auto items = FP_TRY(c.cp.SiloPoolList(c.actor, FP_TRY(c.PathNameOrId("silo")), page));
    return PageReply<model::SiloIpPool>(items, page, &SiloIpPoolView, SiloPoolKeys);
  });
}

void AddProjectRoutes(Router<Endpoint>& r) {
  r.Add("GET", "/v1/projects", [](const Ctx& c) -> Result<Reply> {
    auto page = FP_TRY(ParsePage(c.query));
    auto items = FP_TRY(c.cp.ProjectList(c.actor, page));
    return PageReply<model::Project>(items, page, &ProjectView, ProjectKeys);
  });
  r.Add("POST", "/v1/projects", [](const Ctx& c) -> Result<Reply> {
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    std::string name = FP_TRY(f.NameField("name")).str();
    std::string description = FP_TRY(f.Description("description"));
    AnswerWrite<model::Project>(c, 201, &ProjectView);
    return Reply{201, ProjectView(FP_TRY(c.cp.ProjectCreate(c.actor, name, description)))};
  });
  r.Add("GET", "/v1/projects/{project}", [](const Ctx& c) -> Result<Reply> {
    return Reply{200,
                 ProjectView(FP_TRY(c.cp.ProjectView(c.actor, FP_TRY(c.PathNameOrId("project")))))};
  });
  r.Add("PUT", "/v1/projects/{project}", [](const Ctx& c) -> Result<Reply> {
    auto selector = FP_TRY(c.PathNameOrId("project"));
    auto update = FP_TRY(ParseIdentityUpdate(FP_TRY(c.Body())));
    AnswerWrite<model::Project>(c, 200, &ProjectView);
    return Reply{200, ProjectView(FP_TRY(c.cp.ProjectUpdate(c.actor, selector, update)))};
  });
  r.Add("DELETE", "/v1/projects/{project}", [](const Ctx& c) -> Result<Reply> {
    AnswerNoContent(c);
    FP_CHECK_OK(c.cp.ProjectDelete(c.actor, FP_TRY(c.PathNameOrId("project"))));
    return Reply{204, nullptr};
  });
}

void AddPoolRoutes(Router<Endpoint>& r) {
  r.Add("GET", "/v1/system/ip-pools", [](const Ctx& c) -> Result<Reply> {
    auto filter = FP_TRY(ParsePoolFilter(c.query, true));
    auto page = FP_TRY(ParsePage(c.query));
    auto items = FP_TRY(c.cp.PoolList(c.actor, filter, page));
    return PageReply<model::IpPool>(items, page, &IpPoolView, PoolKeys, FilterScope(filter));
  });
  r.Add("POST", "/v1/system/ip-pools", [](const Ctx& c) -> Result<Reply> {
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    model::PoolCreate p;
    p.name = FP_TRY(f.NameField("name")).str();
    p.description = FP_TRY(f.Description("description"));
    p.ip_version = FP_TRY(ParseEnumField<IpVersion>(f, "ip_version", &ParseVersionText,
                                                    IpVersion::kV4, "\"v4\", \"v6\""));
    p.pool_type = FP_TRY(ParseEnumField<model::PoolType>(f, "pool_type", &model::ParsePoolType,
                                                         model::PoolType::kUnicast,
                                                         "\"unicast\", \"multicast\""));
    p.assignment = FP_TRY(ParseEnumField<model::PoolAssignment>(
        f, "assignment", &model::ParsePoolAssignment, model::PoolAssignment::kSilos,
        "\"silos\", \"system_services\""));
    AnswerWrite<model::IpPool>(c, 201, &IpPoolView);
    return Reply{201, IpPoolView(FP_TRY(c.cp.PoolCreate(c.actor, p)))};
  });
  r.Add("GET", "/v1/system/ip-pools/{pool}", [](const Ctx& c) -> Result<Reply> {
    return Reply{200, IpPoolView(FP_TRY(c.cp.PoolView(c.actor, FP_TRY(c.PathNameOrId("pool")))))};
  });
  r.Add("PUT", "/v1/system/ip-pools/{pool}", [](const Ctx& c) -> Result<Reply> {
    auto selector = FP_TRY(c.PathNameOrId("pool"));
    auto update = FP_TRY(ParseIdentityUpdate(FP_TRY(c.Body())));
    AnswerWrite<model::IpPool>(c, 200, &IpPoolView);
    return Reply{200, IpPoolView(FP_TRY(c.cp.PoolUpdate(c.actor, selector, update)))};
  });
  r.Add("DELETE", "/v1/system/ip-pools/{pool}", [](const Ctx& c) -> Result<Reply> {
    AnswerNoContent(c);
    FP_CHECK_OK(c.cp.PoolDelete(c.actor, FP_TRY(c.PathNameOrId("pool"))));
    return Reply{204, nullptr};
  });
  r.Add("GET", "/v1/system/ip-pools/{pool}/ranges", [](const Ctx& c) -> Result<Reply> {
    auto pool = FP_TRY(c.PathNameOrId("pool"));
    int64_t limit = FP_TRY(ParseLimit(c.query));
    std::optional<IpAddr> after;
    if (auto token = FP_TRY(ParsePageToken(c.query))) {
      auto ip = IpAddr::Parse(token->key);
      if (token->order != "range" || !ip) {
        return Fail(BadQuery("page_token", "not a page token returned by this server"));
      }
      after = *ip;
    }
    auto items = FP_TRY(c.cp.RangeList(c.actor, pool, after, limit));
    Json arr = Json::array();
    for (const auto& item : items) arr.push_back(IpPoolRangeView(item));
    Json next = nullptr;
    if (static_cast<int64_t>(items.size()) == limit) {
      next = MakePageToken("range", items.back().range.first.ToString());
    }
    return Reply{200, Json{{"items", arr}, {"next_page", next}}};
  });
  r.Add("POST", "/v1/system/ip-pools/{pool}/ranges/add", [](const Ctx& c) -> Result<Reply> {
    auto pool = FP_TRY(c.PathNameOrId("pool"));
    IpRange range = FP_TRY(ParseIpRange(FP_TRY(c.Body())));
    AnswerWrite<model::IpPoolRange>(c, 201, &IpPoolRangeView);
    return Reply{201, IpPoolRangeView(FP_TRY(c.cp.RangeAdd(c.actor, pool, range)))};
  });
  r.Add("POST", "/v1/system/ip-pools/{pool}/ranges/remove", [](const Ctx& c) -> Result<Reply> {
    auto pool = FP_TRY(c.PathNameOrId("pool"));
    IpRange range = FP_TRY(ParseIpRange(FP_TRY(c.Body())));
    AnswerNoContent(c);
    FP_CHECK_OK(c.cp.RangeRemove(c.actor, pool, range));
    return Reply{204, nullptr};
  });
  r.Add("GET", "/v1/system/ip-pools/{pool}/silos", [](const Ctx& c) -> Result<Reply> {
    auto pool = FP_TRY(c.PathNameOrId("pool"));
    int64_t limit = FP_TRY(ParseLimit(c.query));
    if (auto s = c.query.Get("sort_by"); s && *s != "id_ascending") {
      return Fail(BadQuery("sort_by", "expected \"id_ascending\""));
    }
    std::optional<Uuid> after;
    if (auto token = FP_TRY(ParsePageToken(c.query))) {
      after = Uuid::Parse(token->key);
      if (token->order != "silo" || !after) {
        return Fail(BadQuery("page_token", "not a page token returned by this server"));
      }
    }
    auto items = FP_TRY(c.cp.LinkList(c.actor, pool, after, limit));
    Json arr = Json::array();
    for (const auto& item : items) arr.push_back(SiloLinkView(item));
    Json next = nullptr;
    if (static_cast<int64_t>(items.size()) == limit) {
      next = MakePageToken("silo", items.back().silo_id.ToString());
    }
    return Reply{200, Json{{"items", arr}, {"next_page", next}}};
  });
  r.Add("POST", "/v1/system/ip-pools/{pool}/silos", [](const Ctx& c) -> Result<Reply> {
    auto pool = FP_TRY(c.PathNameOrId("pool"));
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    NameOrId silo = FP_TRY(f.NameOrIdField("silo"));
    bool is_default = FP_TRY(f.Bool("is_default"));
    AnswerWrite<model::SiloLink>(c, 201, &SiloLinkView);
    return Reply{201, SiloLinkView(FP_TRY(c.cp.Link(c.actor, pool, silo, is_default)))};
  });
  r.Add("PUT", "/v1/system/ip-pools/{pool}/silos/{silo}", [](const Ctx& c) -> Result<Reply> {
    auto pool = FP_TRY(c.PathNameOrId("pool"));
    auto silo = FP_TRY(c.PathNameOrId("silo"));
    Json body = FP_TRY(c.Body());
    bool is_default = FP_TRY(Fields(body, "").Bool("is_default"));
    AnswerWrite<model::SiloLink>(c, 200, &SiloLinkView);
    return Reply{200, SiloLinkView(FP_TRY(c.cp.LinkUpdate(c.actor, pool, silo, is_default)))};
  });
  r.Add("DELETE", "/v1/system/ip-pools/{pool}/silos/{silo}", [](const Ctx& c) -> Result<Reply> {
    AnswerNoContent(c);
    FP_CHECK_OK(
        c.cp.Unlink(c.actor, FP_TRY(c.PathNameOrId("pool")), FP_TRY(c.PathNameOrId("silo"))));
    return Reply{204, nullptr};
  });
  r.Add("GET", "/v1/system/ip-pools/{pool}/utilization", [](const Ctx& c) -> Result<Reply> {
    return Reply{
        200, UtilizationView(FP_TRY(c.cp.Utilization(c.actor, FP_TRY(c.PathNameOrId("pool")))))};
  });
  r.Add("GET", "/v1/ip-pools", [](const Ctx& c) -> Result<Reply> {
    auto filter = FP_TRY(ParsePoolFilter(c.query, false));
    auto page = FP_TRY(ParsePage(c.query));
    auto items = FP_TRY(c.cp.SiloScopedPoolList(c.actor, filter, page));
    return PageReply<model::SiloIpPool>(items, page, &SiloIpPoolView, SiloPoolKeys,
                                        FilterScope(filter));
  });
  r.Add("GET", "/v1/ip-pools/{pool}", [](const Ctx& c) -> Result<Reply> {
    return Reply{
        200,
        SiloIpPoolView(FP_TRY(c.cp.SiloScopedPoolView(c.actor, FP_TRY(c.PathNameOrId("pool")))))};
  });
}

// The project a project-scoped list reads: the `project` parameter on the first page; on later
// pages the project id carried in the page token (so a rename between pages cannot change
// which list is read, and clients may follow next_page with only limit and page_token).
Result<NameOrId> ListProject(const Query& q) {
  if (auto given = FP_TRY(q.OptNameOrId("project"))) return *given;
  auto token = FP_TRY(ParsePageToken(q));
  auto scoped = token ? Uuid::Parse(token->scope) : std::nullopt;
  if (!scoped) return Fail(BadQuery("project", "required"));
  return NameOrId(*scoped);
}

void AddFloatingIpRoutes(Router<Endpoint>& r) {
  r.Add("GET", "/v1/floating-ips", [](const Ctx& c) -> Result<Reply> {
    auto page = FP_TRY(ParsePage(c.query));
    NameOrId project = FP_TRY(ListProject(c.query));
    auto items = FP_TRY(c.cp.FloatingIpList(c.actor, project, page));
    std::string scope;
    if (!items.empty() && items.front().project_id) scope = items.front().project_id->ToString();
    return PageReply<model::ExternalIp>(items, page, &FloatingIpView, FipKeys, scope);
  });
  r.Add("POST", "/v1/floating-ips", [](const Ctx& c) -> Result<Reply> {
    auto project = FP_TRY(c.query.RequiredNameOrId("project"));
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    std::string name = FP_TRY(f.NameField("name")).str();
    std::string description = FP_TRY(f.Description("description"));
    auto address = FP_TRY(ParseAddressAllocator(f));
    AnswerWrite<model::ExternalIp>(c, 201, &FloatingIpView);
    return Reply{201, FloatingIpView(FP_TRY(
                          c.cp.FloatingIpCreate(c.actor, project, name, description, address)))};
  });
  r.Add("GET", "/v1/floating-ips/{floating_ip}", [](const Ctx& c) -> Result<Reply> {
    auto fip = FP_TRY(c.PathNameOrId("floating_ip"));
    auto project = FP_TRY(c.query.OptNameOrId("project"));
    return Reply{200, FloatingIpView(FP_TRY(c.cp.FloatingIpView(c.actor, fip, project)))};
  });
  r.Add("PUT", "/v1/floating-ips/{floating_ip}", [](const Ctx& c) -> Result<Reply> {
    auto fip = FP_TRY(c.PathNameOrId("floating_ip"));
    auto project = FP_TRY(c.query.OptNameOrId("project"));
    auto update = FP_TRY(ParseIdentityUpdate(FP_TRY(c.Body())));
    AnswerWrite<model::ExternalIp>(c, 200, &FloatingIpView);
    return Reply{200, FloatingIpView(FP_TRY(c.cp.FloatingIpUpdate(c.actor, fip, project, update)))};
  });
  r.Add("DELETE", "/v1/floating-ips/{floating_ip}", [](const Ctx& c) -> Result<Reply> {
    auto fip = FP_TRY(c.PathNameOrId("floating_ip"));
    auto project = FP_TRY(c.query.OptNameOrId("project"));
    AnswerNoContent(c);
    FP_CHECK_OK(c.cp.FloatingIpDelete(c.actor, fip, project));
    return Reply{204, nullptr};
  });
}

std::pair<std::string, std::string> InstanceKeys(const model::Instance& i) {
  return {i.name, i.id.ToString()};
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

// Validates `external_ips` of InstanceCreate up front (omicron-behaviour.md §2.3) and returns
// them in request order.
Result<std::vector<app::RequestedExternalIp>> ParseRequestedExternalIps(const Ctx& c,
                                                                        const Json& body) {
  std::vector<app::RequestedExternalIp> out;
  auto it = body.find("external_ips");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_array()) return Fail(BodyError("external_ips", "expected an array"));
  if (it->size() > 32) {
    return Fail(
        Error::InvalidRequest("An instance may not have more than 32 external IP addresses"));
  }
  std::vector<model::PoolSelector> ephemeral;
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
      ephemeral.push_back(sel);
      out.push_back(app::RequestedExternalIp{true, sel, NameOrId(Uuid())});
    } else if (type == "floating") {
      out.push_back(app::RequestedExternalIp{false, {}, FP_TRY(f.NameOrIdField("floating_ip"))});
    } else {
      return Fail(BodyError(f.FieldPath("type"), "expected \"ephemeral\" or \"floating\""));
    }
  }
  if (ephemeral.size() > 2) {
    return Fail(
        Error::InvalidRequest("An instance may not have more than 2 ephemeral IP addresses"));
  }
  if (ephemeral.size() == 2) {
    using Mode = model::PoolSelector::Mode;
    const auto& a = ephemeral[0];
    const auto& b = ephemeral[1];
    auto vague = [](const model::PoolSelector& s) {
      return s.mode == Mode::kDefault && !s.ip_version;
    };
    if (vague(a) || vague(b)) {
      return Fail(Error::InvalidRequest(
          "when requesting two ephemeral IPs, IP version or explicit pool name must be specified "
          "on each"));
    }
    auto version_of = [&](const model::PoolSelector& s) -> Result<IpVersion> {
      if (s.mode == Mode::kDefault) return *s.ip_version;
      return FP_TRY(c.cp.SiloScopedPoolView(c.actor, *s.pool)).pool.ip_version;
    };
    if (a.mode == Mode::kDefault && b.mode == Mode::kDefault) {
      if (*a.ip_version == *b.ip_version) {
        return Fail(Error::InvalidRequest(fmt::format(
            "cannot request two ephemeral IPs of the same version ({})", ToString(*a.ip_version))));
      }
    } else if (a.mode == Mode::kExplicitPool && b.mode == Mode::kExplicitPool) {
      if (a.pool->ToString() == b.pool->ToString()) {
        return Fail(Error::InvalidRequest("cannot request two ephemeral IPs from the same pool"));
      }
      IpVersion va = FP_TRY(version_of(a));
      if (va == FP_TRY(version_of(b))) {
        return Fail(Error::InvalidRequest(fmt::format(
            "cannot request two ephemeral IPs of the same version ({0}): both pools are {0}",
            ToString(va))));
      }
    } else {
      IpVersion va = FP_TRY(version_of(a));
      if (va == FP_TRY(version_of(b))) {
        return Fail(Error::InvalidRequest(fmt::format(
            "cannot request two ephemeral IPs of the same version ({0}): explicit pool and auto "
            "selection both specify {0}",
            ToString(va))));
      }
    }
  }
  return out;
}

void AddInstanceRoutes(Router<Endpoint>& r) {
  r.Add("GET", "/v1/instances", [](const Ctx& c) -> Result<Reply> {
    auto page = FP_TRY(ParsePage(c.query));
    NameOrId project = FP_TRY(ListProject(c.query));
    auto items = FP_TRY(FP_TRY(c.Compute())->List(c.actor, project, page));
    std::string scope = items.empty() ? std::string() : items.front().project_id.ToString();
    return PageReply<model::Instance>(items, page, &InstanceView, InstanceKeys, scope);
  });
  r.Add("POST", "/v1/instances",
        Endpoint(
            [](const Ctx& c) -> Result<Reply> {
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
              if (!f.IsNullOrAbsent("network_interfaces")) {
                Fields nics = FP_TRY(f.Object("network_interfaces"));
                std::string type = FP_TRY(nics.String("type"));
                if (type == "default_ipv4") {
                  p.nic = model::NicKind::kIpv4;
                } else if (type == "default_ipv6") {
                  p.nic = model::NicKind::kIpv6;
                } else if (type == "default_dual_stack") {
                  p.nic = model::NicKind::kDualStack;
                } else if (type == "none") {
                  p.nic = model::NicKind::kNone;
                } else if (type == "create") {
                  return Fail(BodyError("network_interfaces.type",
                                        "\"create\" is not supported; use \"default_ipv4\", "
                                        "\"default_ipv6\", \"default_dual_stack\" or \"none\""));
                } else {
                  return Fail(BodyError("network_interfaces.type",
                                        "expected one of \"default_ipv4\", \"default_ipv6\", "
                                        "\"default_dual_stack\", \"none\", \"create\""));
                }
              }
              p.external_ips = FP_TRY(ParseRequestedExternalIps(c, body));
              auto* compute = FP_TRY(c.Compute());
              return Reply{201, InstanceView(FP_TRY(compute->Create(c.actor, project, p)))};
            },
            InstanceFromSaga(201)));
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
    AnswerWrite<model::Instance>(c, 200, &InstanceView);
    return Reply{
        200, InstanceView(FP_TRY(FP_TRY(c.Compute())->Update(c.actor, instance, project, size)))};
  });
  r.Add("DELETE", "/v1/instances/{instance}",
        Endpoint(
            [](const Ctx& c) -> Result<Reply> {
              auto instance = FP_TRY(c.PathNameOrId("instance"));
              auto project = FP_TRY(c.query.OptNameOrId("project"));
              FP_CHECK_OK(FP_TRY(c.Compute())->Delete(c.actor, instance, project));
              return Reply{204, nullptr};
            },
            NoContentFromSaga));
  using Op = Result<model::Instance> (app::Instances::*)(const app::Actor&, const NameOrId&,
                                                         const std::optional<NameOrId>&);
  for (auto [verb, op] : {std::pair<const char*, Op>{"start", &app::Instances::Start},
                          std::pair<const char*, Op>{"stop", &app::Instances::Stop},
                          std::pair<const char*, Op>{"reboot", &app::Instances::Reboot}}) {
    // Start runs a saga. Stop ends with its one write, of the instance's run state, which
    // records the answer. Reboot writes the run state before it talks to the sled, then again
    // after: its answer is recorded only once it succeeded (a 202 replayed for a reboot that
    // failed would be false), and a crash in between makes the retry run it again.
    const bool answer_with_write = std::string_view(verb) == "stop";
    r.Add("POST", fmt::format("/v1/instances/{{instance}}/{}", verb),
          Endpoint(
              [op = op, answer_with_write](const Ctx& c) -> Result<Reply> {
                auto instance = FP_TRY(c.PathNameOrId("instance"));
                auto project = FP_TRY(c.query.OptNameOrId("project"));
                app::Instances* compute = FP_TRY(c.Compute());
                if (answer_with_write) AnswerWrite<model::Instance>(c, 202, &InstanceView);
                return Reply{202, InstanceView(FP_TRY((compute->*op)(c.actor, instance, project)))};
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
                  202, InstanceView(
                           FP_TRY(FP_TRY(c.Compute())->Migrate(c.actor, instance, project, *dst)))};
            },
            InstanceFromSaga(202)));
  r.Add("GET", "/v1/system/hardware/sleds", [](const Ctx& c) -> Result<Reply> {
    auto sleds = FP_TRY(FP_TRY(c.Compute())->SledList(c.actor));
    Json items = Json::array();
    for (const auto& s : sleds) items.push_back(SledView(s));
    return Reply{200, Json{{"items", items}, {"next_page", nullptr}}};
  });
  r.Add("GET", "/v1/system/hardware/sleds/{sled_id}", [](const Ctx& c) -> Result<Reply> {
    return Reply{
        200,
        SledView(FP_TRY(FP_TRY(c.Compute())->SledView(c.actor, FP_TRY(c.PathUuid("sled_id")))))};
  });
  r.Add("GET", "/v1/system/hardware/sleds/{sled_id}/instances", [](const Ctx& c) -> Result<Reply> {
    auto list = FP_TRY(FP_TRY(c.Compute())->SledInstances(c.actor, FP_TRY(c.PathUuid("sled_id"))));
    Json items = Json::array();
    for (const auto& s : list)
      items.push_back(SledInstanceView(s.instance, s.project_name, s.silo_name));
    return Reply{200, Json{{"items", items}, {"next_page", nullptr}}};
  });
}

void AddAttachRoutes(Router<Endpoint>& r) {
  // Attach and detach answer with the row their saga's last node committed.
  auto floating_ip_from_saga = [](const Ctx& c, const Json&, const Json& output) -> Result<Reply> {
    return Reply{202, FloatingIpView(FP_TRY(FP_TRY(c.Compute())->IpOfSagaOutput(output)))};
  };
  r.Add("POST", "/v1/floating-ips/{floating_ip}/attach",
        Endpoint(
            [](const Ctx& c) -> Result<Reply> {
              auto fip = FP_TRY(c.PathNameOrId("floating_ip"));
              auto project = FP_TRY(c.query.OptNameOrId("project"));
              Json body = FP_TRY(c.Body());
              Fields f(body, "");
              std::string kind = FP_TRY(f.String("kind"));
              if (kind != "instance") return Fail(BodyError("kind", "expected \"instance\""));
              NameOrId parent = FP_TRY(f.NameOrIdField("parent"));
              return Reply{
                  202, FloatingIpView(FP_TRY(
                           FP_TRY(c.Compute())->AttachFloating(c.actor, fip, project, parent)))};
            },
            floating_ip_from_saga));
  r.Add("POST", "/v1/floating-ips/{floating_ip}/detach",
        Endpoint(
            [](const Ctx& c) -> Result<Reply> {
              auto fip = FP_TRY(c.PathNameOrId("floating_ip"));
              auto project = FP_TRY(c.query.OptNameOrId("project"));
              return Reply{202, FloatingIpView(FP_TRY(
                                    FP_TRY(c.Compute())->DetachFloating(c.actor, fip, project)))};
            },
            floating_ip_from_saga));
  r.Add("GET", "/v1/instances/{instance}/external-ips", [](const Ctx& c) -> Result<Reply> {
    auto instance = FP_TRY(c.PathNameOrId("instance"));
    auto project = FP_TRY(c.query.OptNameOrId("project"));
    Json items = Json::array();
    for (const auto& e : FP_TRY(FP_TRY(c.Compute())->ExternalIps(c.actor, instance, project))) {
      items.push_back(ExternalIpView(e));
    }
    return Reply{200, Json{{"items", items}, {"next_page", nullptr}}};
  });
  r.Add(
      "POST", "/v1/instances/{instance}/external-ips/ephemeral",
      Endpoint(
          [](const Ctx& c) -> Result<Reply> {
            auto instance = FP_TRY(c.PathNameOrId("instance"));
            auto project = FP_TRY(c.query.OptNameOrId("project"));
            Json body = FP_TRY(c.Body(/*allow_empty=*/true));
            Fields f(body, "");
            model::PoolSelector selector;
            if (!f.IsNullOrAbsent("pool_selector")) {
              selector = FP_TRY(ParsePoolSelector(FP_TRY(f.Object("pool_selector"))));
            }
            return Reply{
                202,
                ExternalIpView(FP_TRY(
                    FP_TRY(c.Compute())->AttachEphemeral(c.actor, instance, project, selector)))};
          },
          [](const Ctx& c, const Json&, const Json& output) -> Result<Reply> {
            return Reply{202, ExternalIpView(FP_TRY(FP_TRY(c.Compute())->IpOfSagaOutput(output)))};
          }));
  r.Add(
      "DELETE", "/v1/instances/{instance}/external-ips/ephemeral",
      Endpoint(
          [](const Ctx& c) -> Result<Reply> {
            auto instance = FP_TRY(c.PathNameOrId("instance"));
            auto project = FP_TRY(c.query.OptNameOrId("project"));
            auto version = FP_TRY(c.query.OptIpVersion("ip_version"));
            FP_CHECK_OK(FP_TRY(c.Compute())->DetachEphemeral(c.actor, instance, project, version));
            return Reply{204, nullptr};
          },
          NoContentFromSaga));
}

void AddSagaRoutes(Router<Endpoint>& r) {
  // Extension for operators and tests: recent sagas and where they rest. A stuck saga shows
  // here until someone repairs it.
  r.Add("GET", "/v1/system/sagas", [](const Ctx& c) -> Result<Reply> {
    if (!c.actor.is_fleet_admin()) return Fail(Error::Forbidden());
    int64_t limit = FP_TRY(ParseLimit(c.query));
    Json items = Json::array();
    for (const auto& [id, name, state] : FP_TRY(db::SagaListStates(c.cp.datastore(), limit))) {
      items.push_back(Json{{"id", id.ToString()}, {"name", name}, {"state", db::ToString(state)}});
    }
    return Reply{200, Json{{"items", items}, {"next_page", nullptr}}};
  });
}

void AddTokenRoutes(Router<Endpoint>& r) {
  r.Add("POST", "/v1/system/tokens", [](const Ctx& c) -> Result<Reply> {
    Json body = FP_TRY(c.Body());
    Fields f(body, "");
    NameOrId silo = FP_TRY(f.NameOrIdField("silo"));
    std::string role_text = FP_TRY(f.String("role"));
    auto role = model::ParseRole(role_text);
    if (!role) {
      return Fail(BodyError("role",
                            "expected one of \"fleet_admin\", \"silo_admin\", "
                            "\"silo_collaborator\", \"silo_viewer\""));
    }
    std::string name = FP_TRY(f.String("name"));
    if (name.empty() || name.size() > 255) {
      return Fail(BodyError("name", "must be between 1 and 255 characters"));
    }
    auto issued = FP_TRY(c.cp.TokenCreate(c.actor, silo, *role, name));
    return Reply{201, Json{{"id", issued.token.id.ToString()}, {"token", issued.secret}}};
  });
  r.Add("DELETE", "/v1/system/tokens/{id}", [](const Ctx& c) -> Result<Reply> {
    AnswerNoContent(c);
    FP_CHECK_OK(c.cp.TokenRevoke(c.actor, FP_TRY(c.PathUuid("id"))));
    return Reply{204, nullptr};
  });
}

HttpResponse JsonResponse(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  if (!body.is_null()) r.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return r;
}

HttpResponse ErrorResponse(const HttpRequest& req, const Error& e) {
  std::string message = e.message();
  if (e.kind() == ErrorKind::kInternal) {
    LogEvent("error", "internal error", {{"request_id", req.request_id}, {"detail", message}});
    message = "Internal Server Error";
  }
  HttpResponse r = JsonResponse(
      e.HttpStatus(),
      Json{{"request_id", req.request_id}, {"error_code", e.ErrorCode()}, {"message", message}});
  if (e.kind() == ErrorKind::kServiceUnavailable) {
    r.headers.emplace_back("retry-after", std::to_string(std::max(1, e.retry_after_seconds())));
  }
  return r;
}

// The (token, Idempotency-Key) pairs of requests running in this process. "In progress" is
// kept here only, never in the datastore (db/idempotency.h): a server that dies leaves no claim
// behind. Thread-safe.
class KeysInFlight {
 public:
  // False if a request with this (token, key) is running.
  bool Claim(const std::string& id) {
    std::lock_guard lock(mu_);
    return keys_.insert(id).second;
  }
  void Release(const std::string& id) {
    std::lock_guard lock(mu_);
    keys_.erase(id);
  }

 private:
  std::mutex mu_;
  std::set<std::string> keys_;  // guarded by mu_
};

HttpResponse Replayed(HttpResponse r) {
  r.headers.emplace_back("idempotent-replayed", "true");
  return r;
}

Error KeyInProgress(const std::string& key) {
  return Error::Unavailable(fmt::format(
      "a request with Idempotency-Key \"{}\" is still in progress; retry when it completes", key));
}

// The answer a request with `key` gets from the key's record: the stored answer, the answer
// rebuilt from the outcome of the saga that carries it, 503 while that saga runs, 422 for
// another request under the key. std::nullopt if the request is to run: no record, or a saga
// that unwound (its effect undone) with a 5xx error, whose link is then forgotten.
std::optional<HttpResponse> AnswerFromRecord(const Endpoint& endpoint, const Ctx& c,
                                             const std::string& key, const std::string& hash) {
  db::Datastore& ds = c.cp.datastore();
  auto record = db::IdempotencyLookup(ds, c.actor.token_id, key);
  if (!record) return ErrorResponse(c.req, record.error());
  if (!*record) return std::nullopt;
  const db::IdempotencyRecord& r = **record;
  if (r.request_sha256 != hash) {
    return ErrorResponse(c.req, Error::Unprocessable(fmt::format(
                                    "Idempotency-Key \"{}\" was already used for a different "
                                    "request; use a new key for a new request",
                                    key)));
  }
  if (r.done) {
    HttpResponse answer;
    answer.status = r.status;
    answer.body = r.body;
    return Replayed(std::move(answer));
  }
  auto log = db::SagaLoad(ds, *r.saga_id);
  if (!log) {
    if (log.error().kind() != ErrorKind::kNotFound) return ErrorResponse(c.req, log.error());
    return ErrorResponse(c.req, Error::Unprocessable(fmt::format(
                                    "Idempotency-Key \"{}\" names an operation whose history "
                                    "was pruned; its answer cannot be replayed",
                                    key)));
  }
  // An answer rebuilt from a finished saga is kept as the key's answer: later retries get the
  // same one, even once the saga's history is pruned.
  auto keep = [&](HttpResponse answer) {
    if (auto s = db::IdempotencyFinish(ds, c.actor.token_id, key, hash, answer.status, answer.body);
        !s) {
      LogEvent("warn", "could not record an idempotent response", {{"error", s.error().message()}});
    }
    return Replayed(std::move(answer));
  };
  Json result = Json::parse(log->saga.result.value_or("null"), nullptr, false);
  switch (log->saga.state) {
    case db::SagaState::kRunning:
    case db::SagaState::kUnwinding:
      return ErrorResponse(c.req, KeyInProgress(key));
    case db::SagaState::kDone: {
      Json dag = Json::parse(log->saga.dag, nullptr, false);
      Json params = dag.is_object() ? dag.value("params", Json::object()) : Json::object();
      if (!endpoint.from_saga) {
        return ErrorResponse(c.req, Error::Internal("no replay for the saga of this request"));
      }
      auto reply = endpoint.from_saga(c, params, result);
      if (!reply) return Replayed(ErrorResponse(c.req, reply.error()));
      return keep(JsonResponse(reply->status, reply->body));
    }
    case db::SagaState::kUnwound:
    case db::SagaState::kStuck:
      break;
  }
  Error error = saga::ErrorFromJson(result);
  if (log->saga.state == db::SagaState::kUnwound && error.HttpStatus() >= 500) {
    if (auto s = db::IdempotencyForgetSaga(ds, c.actor.token_id, key, *r.saga_id); !s) {
      return ErrorResponse(c.req, s.error());
    }
    return std::nullopt;
  }
  if (error.HttpStatus() >= 500) return Replayed(ErrorResponse(c.req, error));  // stuck
  return keep(ErrorResponse(c.req, error));
}

// Runs a request with an Idempotency-Key at most once per (token, key): a retry with the same
// request gets the first answer again (header idempotent-replayed: true), also after a crash
// at any instant (db/idempotency.h); a request under a key whose request is still running gets
// 503 with Retry-After; another request under the same key gets 422.
HttpResponse WithIdempotencyKey(const Endpoint& endpoint, Ctx& ctx, const std::string& key,
                                KeysInFlight& in_flight, const std::function<HttpResponse()>& run) {
  const HttpRequest& req = ctx.req;
  if (key.size() > 255) {
    return ErrorResponse(
        req, Error::InvalidRequest("header Idempotency-Key: may contain at most 255 characters"));
  }
  if (req.path == "/v1/system/tokens") {
    // Its answer is the token's secret, shown once: a replay would need it stored in the clear.
    return ErrorResponse(
        req, Error::InvalidRequest("header Idempotency-Key: not accepted when creating a token, "
                                   "whose secret is never stored; send the request without it"));
  }
  db::Datastore& ds = ctx.cp.datastore();
  std::string hash =
      db::HashToken(req.method + "\n" + req.path + "\n" + req.query + "\n" + req.body);
  const std::string flight = ctx.actor.token_id.ToString() + "\n" + key;
  if (!in_flight.Claim(flight)) return ErrorResponse(req, KeyInProgress(key));
  struct Release {
    KeysInFlight& keys;
    const std::string& id;
    ~Release() { keys.Release(id); }
  } release{in_flight, flight};

  if (auto answer = AnswerFromRecord(endpoint, ctx, key, hash)) return *answer;
  HttpResponse response;
  db::IdempotencyScope::Effect effect;
  db::IdempotencyScope::Answer recorded;
  {
    db::IdempotencyScope scope(ds, ctx.actor.token_id, key, hash);
    ctx.idempotency = &scope;
    response = run();
    ctx.idempotency = nullptr;
    effect = scope.effect();
    recorded = scope.answer();
  }
  using Effect = db::IdempotencyScope::Effect;
  if (effect == Effect::kTaken) {
    // Another server on this database ran the request first; this one's effect rolled back.
    if (auto answer = AnswerFromRecord(endpoint, ctx, key, hash)) return *answer;
    return ErrorResponse(req, KeyInProgress(key));
  }
  // A 5xx is not remembered: a retry does the work again, or finds the effect's record.
  if (response.status >= 500) return response;
  if (effect == Effect::kAnswered && recorded.status == response.status &&
      recorded.body == response.body) {
    return response;  // committed with the effect
  }
  if (auto s =
          db::IdempotencyFinish(ds, ctx.actor.token_id, key, hash, response.status, response.body);
      !s) {
    LogEvent("warn", "could not record an idempotent response", {{"error", s.error().message()}});
  }
  return response;
}

// The saga tables' and the database file's size, and what pruning removed (Prometheus text).
Result<std::string> HistoryMetrics(db::Datastore& ds) {
  db::SagaHistoryStats sagas = FP_TRY(db::SagaHistory(ds));
  int64_t keys_pruned = FP_TRY(db::IdempotencyKeysPruned(ds));
  return fmt::format(
      "# HELP floatplane_saga_rows Sagas in the datastore, in any state (finished ones are "
      "pruned after the history retention).\n# TYPE floatplane_saga_rows gauge\n"
      "floatplane_saga_rows {}\n"
      "# HELP floatplane_sagas_pruned_total Finished sagas deleted, with their node events, "
      "after the history retention.\n# TYPE floatplane_sagas_pruned_total counter\n"
      "floatplane_sagas_pruned_total {}\n"
      "# HELP floatplane_idempotency_keys_pruned_total Idempotency keys deleted after the "
      "history retention.\n# TYPE floatplane_idempotency_keys_pruned_total counter\n"
      "floatplane_idempotency_keys_pruned_total {}\n"
      "# HELP floatplane_database_size_bytes Size of the database file (pages freed by "
      "pruning are reused, so it stops growing).\n"
      "# TYPE floatplane_database_size_bytes gauge\nfloatplane_database_size_bytes {}\n"
      "# HELP floatplane_log_size_bytes Size of the write-ahead log file.\n"
      "# TYPE floatplane_log_size_bytes gauge\nfloatplane_log_size_bytes {}\n",
      sagas.saga_rows, sagas.sagas_pruned, keys_pruned, ds.database_file_bytes(),
      ds.log_file_bytes());
}

}  // namespace

// Connection admission counters (HttpServerStats) in Prometheus text format.
std::string AdmissionMetrics(const HttpServerStats& s) {
  return fmt::format(
      "# HELP floatplane_http_connections Client connections open now, idle ones included.\n"
      "# TYPE floatplane_http_connections gauge\nfloatplane_http_connections {}\n"
      "# HELP floatplane_http_refused_total Connections (capacity, per_client) and complete "
      "requests (busy) answered 503 by admission instead of being served.\n"
      "# TYPE floatplane_http_refused_total counter\n"
      "floatplane_http_refused_total{{reason=\"capacity\"}} {}\n"
      "floatplane_http_refused_total{{reason=\"per_client\"}} {}\n"
      "floatplane_http_refused_total{{reason=\"busy\"}} {}\n"
      "# HELP floatplane_http_request_timeouts_total Requests that did not arrive completely "
      "within the request timeout (connection closed, 408 where a request had begun).\n"
      "# TYPE floatplane_http_request_timeouts_total counter\n"
      "floatplane_http_request_timeouts_total {}\n",
      s.open_connections, s.refused_over_capacity, s.refused_per_client, s.refused_busy,
      s.request_timeouts);
}

HttpHandler MakeApiHandler(app::ControlPlane& cp, app::Instances* instances,
                           std::function<HttpServerStats()> http_stats) {
  auto router = std::make_shared<Router<Endpoint>>();
  AddSiloRoutes(*router);
  AddProjectRoutes(*router);
  AddPoolRoutes(*router);
  AddFloatingIpRoutes(*router);
  AddTokenRoutes(*router);
  AddInstanceRoutes(*router);
  AddSagaRoutes(*router);
  AddAttachRoutes(*router);

  auto in_flight = std::make_shared<KeysInFlight>();
  return [router, in_flight, &cp, instances,
          http_stats = std::move(http_stats)](const HttpRequest& req) -> HttpResponse {
    try {
      if (req.method == "GET" && req.path == "/v1/ping") {
        return JsonResponse(200, Json{{"status", "ok"}});
      }
      if (req.method == "GET" && req.path == "/metrics") {
        // Prometheus text format; no secrets here, so no token (like ping).
        HttpResponse r;
        r.content_type = "text/plain; version=0.0.4";
        r.body = fmt::format(
            "# HELP floatplane_durable_commits_total Write transactions committed to the "
            "datastore.\n# TYPE floatplane_durable_commits_total counter\n"
            "floatplane_durable_commits_total {}\n"
            "# HELP floatplane_log_syncs_total Syncs of the datastore's write-ahead log (one "
            "sync makes every commit written before it durable).\n"
            "# TYPE floatplane_log_syncs_total counter\nfloatplane_log_syncs_total {}\n"
            "# HELP floatplane_sqlite_commits_total SQLite transactions that carried the "
            "durable commits (concurrent writes share one).\n"
            "# TYPE floatplane_sqlite_commits_total counter\nfloatplane_sqlite_commits_total {}\n"
            "# HELP floatplane_checkpoints_total Checkpoints of the write-ahead log into the "
            "database file (run in the background).\n"
            "# TYPE floatplane_checkpoints_total counter\nfloatplane_checkpoints_total {}\n"
            "# HELP floatplane_log_restarts_total Times the write-ahead log was emptied after a "
            "checkpoint, so that it starts over instead of growing.\n"
            "# TYPE floatplane_log_restarts_total counter\nfloatplane_log_restarts_total {}\n"
            "# HELP floatplane_log_limit_restarts_total Of those, the restarts made with writes "
            "waiting because the log had reached its limit (checkpoints falling behind).\n"
            "# TYPE floatplane_log_limit_restarts_total counter\n"
            "floatplane_log_limit_restarts_total {}\n",
            cp.datastore().durable_commits(), cp.datastore().log_syncs(),
            cp.datastore().sqlite_commits(), cp.datastore().checkpoints(),
            cp.datastore().log_restarts(), cp.datastore().log_limit_restarts());
        auto history = HistoryMetrics(cp.datastore());
        if (!history) return ErrorResponse(req, history.error());
        r.body += *history;
        if (http_stats) r.body += AdmissionMetrics(http_stats());
        return r;
      }
      auto match = router->Find(req.method, req.path);
      if (!match) {
        if (match.error().kind == http::RouteMiss::Kind::kMethodNotAllowed) {
          HttpResponse r = JsonResponse(405, Json{{"request_id", req.request_id},
                                                  {"error_code", "MethodNotAllowed"},
                                                  {"message", "method not allowed"}});
          return r;
        }
        return ErrorResponse(req, Error(ErrorKind::kNotFound, "Not Found"));
      }
      std::string auth = req.Header("authorization");
      constexpr std::string_view kBearer = "Bearer ";
      if (auth.empty()) {
        return ErrorResponse(
            req, Error::Unauthenticated("credentials missing: send \"Authorization: Bearer "
                                        "<token>\""));
      }
      auto scheme_is_bearer = [&] {
        if (auth.size() <= kBearer.size()) return false;
        for (size_t i = 0; i < kBearer.size(); ++i) {
          if (std::tolower(static_cast<unsigned char>(auth[i])) !=
              std::tolower(static_cast<unsigned char>(kBearer[i]))) {
            return false;
          }
        }
        return true;
      };
      if (!scheme_is_bearer()) {
        return ErrorResponse(
            req, Error::Unauthenticated("credentials invalid: expected \"Authorization: Bearer "
                                        "<token>\""));
      }
      auto actor = cp.Authenticate(auth.substr(kBearer.size()));
      if (!actor) return ErrorResponse(req, actor.error());
      auto query = Query::Parse(req.query);
      if (!query) return ErrorResponse(req, query.error());
      Ctx ctx{req, match->params, *query, *actor, cp, instances, nullptr};
      auto run = [&]() -> HttpResponse {
        auto reply = match->target->run(ctx);
        if (!reply) return ErrorResponse(req, reply.error());
        return JsonResponse(reply->status, reply->body);
      };
      std::string key = req.Header("idempotency-key");
      // Mutating requests take a key (product.md difference 13).
      bool mutating = req.method == "POST" || req.method == "PUT" || req.method == "DELETE";
      if (key.empty() || !mutating) return run();
      return WithIdempotencyKey(*match->target, ctx, key, *in_flight, run);
    } catch (const std::exception& e) {
      return ErrorResponse(req, Error::Internal(std::string("unexpected exception: ") + e.what()));
    }
  };
}

}  // namespace fp::api
