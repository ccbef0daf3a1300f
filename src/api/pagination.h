#pragma once

// Pagination as Oxide's API has it: `limit`, `sort_by` and an opaque `page_token` in the query,
// `{"items": [...], "next_page": token or null}` in the answer.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/json_input.h"
#include "model/page.h"

namespace fp::api {

constexpr int64_t kDefaultPageSize = 100;
constexpr int64_t kMaxPageSize = 10000;

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
                          const std::string& scope = {});

// InvalidRequest "unable to parse query string: parameter "<param>": <msg>".
Error BadQuery(std::string_view param, std::string_view msg);

// `limit`: kDefaultPageSize when absent, at most kMaxPageSize; BadQuery unless a positive
// integer.
Result<int64_t> ParseLimit(const Query& q);
// `page_token`, if given; BadQuery("page_token") unless one MakePageToken made.
Result<std::optional<PageToken>> ParsePageToken(const Query& q);
// `page_token` of a list paged by id whose next_page is the last id (tokens, users): the id
// after which the page starts, if given; BadQuery("page_token") unless an id.
Result<std::optional<Uuid>> ParseIdPageToken(const Query& q);
// Parses limit, page_token and sort_by for lists sorted by name or id. A page token's order
// wins over `sort_by`.
Result<model::PageRequest> ParsePage(const Query& q);

// The project a project-scoped list reads: the `project` parameter on the first page; on later
// pages the project id carried in the page token (so a rename between pages cannot change
// which list is read, and clients may follow next_page with only limit and page_token).
// BadQuery("project", "required") without either.
Result<NameOrId> ListProject(const Query& q);

// The sort keys (name, id) of an item, for the next page token.
template <typename T>
using PageKeys = std::function<std::pair<std::string, std::string>(const T&)>;

// The name the order is written as in page tokens and `sort_by`.
std::string_view ToString(model::SortOrder o);

// A results page; a full page gets a next_page token (carrying `scope`).
template <typename T>
Json PageBody(const std::vector<T>& items, const model::PageRequest& page, Json (*view)(const T&),
              const PageKeys<T>& name_and_id, const std::string& scope = {}) {
  Json arr = Json::array();
  for (const T& item : items) arr.push_back(view(item));
  Json next = nullptr;
  if (static_cast<int64_t>(items.size()) == page.limit && !items.empty()) {
    auto [name, id] = name_and_id(items.back());
    next = MakePageToken(ToString(page.order),
                         page.order == model::SortOrder::kIdAscending ? id : name, scope);
  }
  return Json{{"items", std::move(arr)}, {"next_page", std::move(next)}};
}

}  // namespace fp::api
