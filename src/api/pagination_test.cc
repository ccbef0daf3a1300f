#include "api/pagination.h"

#include <gtest/gtest.h>

namespace fp::api {
namespace {

Query Q(const std::string& raw) { return *Query::Parse(raw); }

TEST(PageToken, RoundTripsOrderKeyAndScope) {
  std::string token = MakePageToken("name_descending", "pool-7", "scope-1");
  auto parsed = ParsePageToken(Q("page_token=" + token));
  ASSERT_TRUE(parsed);
  ASSERT_TRUE(parsed->has_value());
  EXPECT_EQ((*parsed)->order, "name_descending");
  EXPECT_EQ((*parsed)->key, "pool-7");
  EXPECT_EQ((*parsed)->scope, "scope-1");
  // Opaque to clients: hex only.
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(PageToken, ATokenNotMadeHereIs400NamingTheParameter) {
  for (const char* bad : {"zz", "abc", "7b7d", "6e756c6c"}) {  // not hex, odd, {}, null
    auto parsed = ParsePageToken(Q(std::string("page_token=") + bad));
    ASSERT_FALSE(parsed) << bad;
    EXPECT_EQ(parsed.error().HttpStatus(), 400);
    EXPECT_EQ(parsed.error().message(),
              "unable to parse query string: parameter \"page_token\": not a page token returned "
              "by this server")
        << bad;
  }
  EXPECT_TRUE(ParsePageToken(Q("")));
  EXPECT_FALSE(ParsePageToken(Q(""))->has_value());
}

TEST(ParsePage, TheTokensOrderAndKeyWinOverSortBy) {
  std::string token = MakePageToken("id_ascending", "k9");
  auto page = ParsePage(Q("sort_by=name_descending&limit=5&page_token=" + token));
  ASSERT_TRUE(page) << page.error().message();
  EXPECT_EQ(page->order, model::SortOrder::kIdAscending);
  EXPECT_EQ(page->after, "k9");
  EXPECT_EQ(page->limit, 5);
}

TEST(ParsePage, BadSortByOrLimitIs400NamingTheParameter) {
  auto sort = ParsePage(Q("sort_by=size"));
  ASSERT_FALSE(sort);
  EXPECT_EQ(sort.error().message(),
            "unable to parse query string: parameter \"sort_by\": expected one of "
            "\"name_ascending\", \"name_descending\", \"id_ascending\"");
  // An order smuggled in a token is the token's fault.
  auto smuggled = ParsePage(Q("page_token=" + MakePageToken("range", "1.2.3.4")));
  ASSERT_FALSE(smuggled);
  EXPECT_NE(smuggled.error().message().find("parameter \"page_token\""), std::string::npos);
  for (const char* limit : {"0", "-1", "ten", "5x", ""}) {
    auto bad = ParsePage(Q(std::string("limit=") + limit));
    ASSERT_FALSE(bad) << limit;
    EXPECT_EQ(bad.error().message(),
              "unable to parse query string: parameter \"limit\": expected a positive integer");
  }
}

TEST(ParseLimit, DefaultsAndCaps) {
  EXPECT_EQ(*ParseLimit(Q("")), kDefaultPageSize);
  EXPECT_EQ(*ParseLimit(Q("limit=1")), 1);
  EXPECT_EQ(*ParseLimit(Q("limit=99999999")), kMaxPageSize);
}

TEST(ListProject, FromTheQueryOrElseFromTheTokensScope) {
  Uuid project = Uuid::Random();
  auto given = ListProject(Q("project=web"));
  ASSERT_TRUE(given);
  EXPECT_EQ(given->ToString(), "web");
  auto scoped =
      ListProject(Q("page_token=" + MakePageToken("name_ascending", "a", project.ToString())));
  ASSERT_TRUE(scoped);
  EXPECT_EQ(scoped->ToString(), project.ToString());
  auto missing = ListProject(Q("limit=3"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message(),
            "unable to parse query string: parameter \"project\": required");
}

struct Item {
  std::string name;
  std::string id;
};
Json ItemView(const Item& i) { return Json{{"name", i.name}}; }
std::pair<std::string, std::string> ItemKeys(const Item& i) { return {i.name, i.id}; }

TEST(PageBody, OnlyAFullPageGetsANextPageTokenWithTheLastKeyOfItsOrder) {
  model::PageRequest page;
  page.limit = 2;
  page.order = model::SortOrder::kIdAscending;
  std::vector<Item> full{{"a", "id-a"}, {"b", "id-b"}};
  Json body = PageBody<Item>(full, page, &ItemView, ItemKeys, "s");
  EXPECT_EQ(body["items"].size(), 2u);
  auto next = ParsePageToken(Q("page_token=" + body["next_page"].get<std::string>()));
  ASSERT_TRUE(next && next->has_value());
  EXPECT_EQ((*next)->order, "id_ascending");
  EXPECT_EQ((*next)->key, "id-b");
  EXPECT_EQ((*next)->scope, "s");
  std::vector<Item> short_page{{"a", "id-a"}};
  EXPECT_TRUE(PageBody<Item>(short_page, page, &ItemView, ItemKeys)["next_page"].is_null());
}

}  // namespace
}  // namespace fp::api
