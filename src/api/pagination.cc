#include "api/pagination.h"

#include <fmt/format.h>

#include <charconv>

namespace fp::api {

namespace {

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

}  // namespace

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

std::string MakePageToken(std::string_view order, const std::string& key,
                          const std::string& scope) {
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

Result<std::optional<Uuid>> ParseIdPageToken(const Query& q) {
  auto token = q.Get("page_token");
  if (!token) return std::optional<Uuid>();
  auto id = Uuid::Parse(*token);
  if (!id) return Fail(BadQuery("page_token", "not a page token returned by this server"));
  return std::optional<Uuid>(*id);
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

Result<NameOrId> ListProject(const Query& q) {
  if (auto given = FP_TRY(q.OptNameOrId("project"))) return *given;
  auto token = FP_TRY(ParsePageToken(q));
  auto scoped = token ? Uuid::Parse(token->scope) : std::nullopt;
  if (!scoped) return Fail(BadQuery("project", "required"));
  return NameOrId(*scoped);
}

}  // namespace fp::api
