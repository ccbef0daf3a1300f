// IP pools: the system's (/v1/system/ip-pools: pools, ranges, silo links, utilization; fleet
// admin) and as the actor's silo sees them (/v1/ip-pools).

#include <fmt/format.h>

#include <charconv>
#include <string_view>

#include "api/bodies.h"
#include "api/endpoint.h"
#include "api/pagination.h"
#include "api/views.h"

namespace fp::api {

namespace {

std::pair<std::string, std::string> PoolKeys(const model::IpPool& p) {
  return {p.name, p.id.ToString()};
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

Result<model::PoolCreate> ParsePoolCreate(const Json& body) {
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
  return p;
}

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

void AddPoolRoutes(Routes& r) {
  r.Add("GET", "/v1/system/ip-pools", [](const Ctx& c) -> Result<Reply> {
    auto filter = FP_TRY(ParsePoolFilter(c.query, true));
    auto page = FP_TRY(ParsePage(c.query));
    auto items = FP_TRY(c.app.ip_pools.List(c.actor, filter, page));
    return Reply{200,
                 PageBody<model::IpPool>(items, page, &IpPoolView, PoolKeys, FilterScope(filter))};
  });
  r.Add("POST", "/v1/system/ip-pools", [](const Ctx& c) -> Result<Reply> {
    model::PoolCreate p = FP_TRY(ParsePoolCreate(FP_TRY(c.Body())));
    return Reply{
        201,
        IpPoolView(FP_TRY(c.app.ip_pools.Create(c.Effect<model::IpPool>(201, &IpPoolView), p)))};
  });
  r.Add("GET", "/v1/system/ip-pools/{pool}", [](const Ctx& c) -> Result<Reply> {
    return Reply{200,
                 IpPoolView(FP_TRY(c.app.ip_pools.View(c.actor, FP_TRY(c.PathNameOrId("pool")))))};
  });
  r.Add("PUT", "/v1/system/ip-pools/{pool}", [](const Ctx& c) -> Result<Reply> {
    auto selector = FP_TRY(c.PathNameOrId("pool"));
    auto update = FP_TRY(ParseIdentityUpdate(FP_TRY(c.Body())));
    return Reply{200, IpPoolView(FP_TRY(c.app.ip_pools.Update(
                          c.Effect<model::IpPool>(200, &IpPoolView), selector, update)))};
  });
  r.Add("DELETE", "/v1/system/ip-pools/{pool}", [](const Ctx& c) -> Result<Reply> {
    FP_CHECK_OK(c.app.ip_pools.Delete(c.NoContent(), FP_TRY(c.PathNameOrId("pool"))));
    return Reply{204, nullptr};
  });
  r.Add("GET", "/v1/system/ip-pools/{pool}/utilization", [](const Ctx& c) -> Result<Reply> {
    return Reply{200, UtilizationView(FP_TRY(
                          c.app.ip_pools.Utilization(c.actor, FP_TRY(c.PathNameOrId("pool")))))};
  });
}

void AddRangeRoutes(Routes& r) {
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
    auto items = FP_TRY(c.app.ip_pools.RangeList(c.actor, pool, after, limit));
    Json arr = Json::array();
    for (const auto& item : items) arr.push_back(IpPoolRangeView(item));
    Json next = nullptr;
    if (static_cast<int64_t>(items.size()) == limit) {
      next = MakePageToken("range", items.back().range.first.ToString());
    }
    return Reply{200, Json{{"items", arr}, {"next_page", next}}};
  });
  // floatplane's extension (issue 25): who holds which address of a pool, in address order;
  // `first` and `last` narrow it to one range.
  r.Add("GET", "/v1/system/ip-pools/{pool}/addresses", [](const Ctx& c) -> Result<Reply> {
    auto pool = FP_TRY(c.PathNameOrId("pool"));
    model::PoolAddressPage page;
    page.limit = FP_TRY(ParseLimit(c.query));
    auto first = c.query.Get("first");
    auto last = c.query.Get("last");
    if (first.has_value() != last.has_value()) {
      return Fail(BadQuery(first ? "last" : "first", "a range takes both first and last"));
    }
    if (first) {
      auto a = IpAddr::Parse(*first);
      if (!a) return Fail(BadQuery("first", "not an IP address"));
      auto b = IpAddr::Parse(*last);
      if (!b) return Fail(BadQuery("last", "not an IP address"));
      page.range = IpRange{*a, *b};
    }
    // The token carries the range it lists (its scope, "first-last" or empty), so that a
    // next page needs no filter; a filter that disagrees with it is refused.
    std::string scope = page.range ? page.range->ToString() : std::string();
    if (auto token = FP_TRY(ParsePageToken(c.query))) {
      const size_t slash = token->key.rfind('/');
      auto ip = IpAddr::Parse(token->key.substr(0, slash));
      int port = -1;
      if (slash != std::string::npos) {
        std::string_view digits = std::string_view(token->key).substr(slash + 1);
        auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
        if (ec != std::errc() || end != digits.data() + digits.size() || port > 65535) port = -1;
      }
      if (token->order != "address" || !ip || port < 0) {
        return Fail(BadQuery("page_token", "not a page token returned by this server"));
      }
      if (!page.range && !token->scope.empty()) {
        const size_t dash = token->scope.find('-');
        auto a = IpAddr::Parse(token->scope.substr(0, dash));
        auto b = IpAddr::Parse(dash == std::string::npos ? "" : token->scope.substr(dash + 1));
        if (!a || !b)
          return Fail(BadQuery("page_token", "not a page token returned by this server"));
        page.range = IpRange{*a, *b};
        scope = token->scope;
      } else if (token->scope != scope) {
        return Fail(BadQuery("page_token", "a page token of another range (first, last)"));
      }
      page.after = std::pair(*ip, port);
    }
    auto items = FP_TRY(c.app.ip_pools.AddressList(c.actor, pool, page));
    Json arr = Json::array();
    for (const auto& item : items) arr.push_back(PoolAddressView(item));
    Json next = nullptr;
    if (static_cast<int64_t>(items.size()) == page.limit) {
      next = MakePageToken(
          "address", fmt::format("{}/{}", items.back().ip.ToString(), items.back().first_port),
          scope);
    }
    return Reply{200, Json{{"items", arr}, {"next_page", next}}};
  });
  r.Add("POST", "/v1/system/ip-pools/{pool}/ranges/add", [](const Ctx& c) -> Result<Reply> {
    auto pool = FP_TRY(c.PathNameOrId("pool"));
    IpRange range = FP_TRY(ParseIpRange(FP_TRY(c.Body())));
    return Reply{201, IpPoolRangeView(FP_TRY(c.app.ip_pools.RangeAdd(
                          c.Effect<model::IpPoolRange>(201, &IpPoolRangeView), pool, range)))};
  });
  r.Add("POST", "/v1/system/ip-pools/{pool}/ranges/remove", [](const Ctx& c) -> Result<Reply> {
    auto pool = FP_TRY(c.PathNameOrId("pool"));
    IpRange range = FP_TRY(ParseIpRange(FP_TRY(c.Body())));
    FP_CHECK_OK(c.app.ip_pools.RangeRemove(c.NoContent(), pool, range));
    return Reply{204, nullptr};
  });
}

void AddSiloLinkRoutes(Routes& r) {
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
    auto items = FP_TRY(c.app.ip_pools.LinkList(c.actor, pool, after, limit));
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
    return Reply{201, SiloLinkView(FP_TRY(c.app.ip_pools.Link(
                          c.Effect<model::SiloLink>(201, &SiloLinkView), pool, silo, is_default)))};
  });
  r.Add("PUT", "/v1/system/ip-pools/{pool}/silos/{silo}", [](const Ctx& c) -> Result<Reply> {
    auto pool = FP_TRY(c.PathNameOrId("pool"));
    auto silo = FP_TRY(c.PathNameOrId("silo"));
    Json body = FP_TRY(c.Body());
    bool is_default = FP_TRY(Fields(body, "").Bool("is_default"));
    return Reply{200, SiloLinkView(FP_TRY(c.app.ip_pools.LinkUpdate(
                          c.Effect<model::SiloLink>(200, &SiloLinkView), pool, silo, is_default)))};
  });
  r.Add("DELETE", "/v1/system/ip-pools/{pool}/silos/{silo}", [](const Ctx& c) -> Result<Reply> {
    FP_CHECK_OK(c.app.ip_pools.Unlink(c.NoContent(), FP_TRY(c.PathNameOrId("pool")),
                                      FP_TRY(c.PathNameOrId("silo"))));
    return Reply{204, nullptr};
  });
}

void AddSiloScopedPoolRoutes(Routes& r) {
  r.Add("GET", "/v1/ip-pools", [](const Ctx& c) -> Result<Reply> {
    auto filter = FP_TRY(ParsePoolFilter(c.query, false));
    auto page = FP_TRY(ParsePage(c.query));
    auto items = FP_TRY(c.app.ip_pools.SiloScopedList(c.actor, filter, page));
    return Reply{200, PageBody<model::SiloIpPool>(items, page, &SiloIpPoolView, SiloPoolKeys,
                                                  FilterScope(filter))};
  });
  r.Add("GET", "/v1/ip-pools/{pool}", [](const Ctx& c) -> Result<Reply> {
    return Reply{200, SiloIpPoolView(FP_TRY(
                          c.app.ip_pools.SiloScopedView(c.actor, FP_TRY(c.PathNameOrId("pool")))))};
  });
}

}  // namespace

void AddIpPoolRoutes(Routes& r) {
  AddPoolRoutes(r);
  AddRangeRoutes(r);
  AddSiloLinkRoutes(r);
  AddSiloScopedPoolRoutes(r);
}

}  // namespace fp::api
