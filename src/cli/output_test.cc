#include "cli/output.h"

#include <gtest/gtest.h>

namespace fp::cli {
namespace {

// The oxide CLI prints what its typed client re-serialises: optional fields that are null are
// left out, a tagged enum's tag comes first, and timestamps are chrono's.
TEST(PrettyJson, PrintsAnObjectAsTheOxideCliDoes) {
  nlohmann::json fip = {{"name", "www"},
                        {"instance_id", nullptr},
                        {"time_created", "2026-12-01T14:19:23.461000Z"},
                        {"time_modified", "2026-12-01T14:19:23.000000Z"}};
  EXPECT_EQ(PrettyJson(fip),
            "{\n"
            "  \"name\": \"www\",\n"
            "  \"time_created\": \"2026-12-01T14:19:23.461Z\",\n"
            "  \"time_modified\": \"2026-12-01T14:19:23Z\"\n"
            "}\n");
  nlohmann::json snat = {{"first_port", 0},
                         {"ip", "10.0.0.1"},
                         {"ip_pool_id", "p"},
                         {"kind", "snat"},
                         {"last_port", 16383}};
  EXPECT_EQ(PrettyJson(snat),
            "{\n"
            "  \"kind\": \"snat\",\n"
            "  \"first_port\": 0,\n"
            "  \"ip\": \"10.0.0.1\",\n"
            "  \"ip_pool_id\": \"p\",\n"
            "  \"last_port\": 16383\n"
            "}\n");
  // Microseconds stay when they are needed; other strings are left alone.
  EXPECT_EQ(PrettyJson({{"time_created", "2026-12-01T14:19:23.461898Z"}, {"name", "a.000Z"}}),
            "{\n  \"name\": \"a.000Z\",\n  \"time_created\": \"2026-12-01T14:19:23.461898Z\"\n}\n");
}

TEST(OutputFormat, ParsesJsonTableAndTableColumns) {
  EXPECT_FALSE(ParseOutputFormat("json")->table);
  auto table = ParseOutputFormat("table:name,ip");
  ASSERT_TRUE(table);
  EXPECT_TRUE(table->table);
  EXPECT_EQ(table->columns, (std::vector<std::string>{"name", "ip"}));
  auto bad = ParseOutputFormat("yaml");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().exit, Exit::kUsage);
  EXPECT_FALSE(ParseOutputFormat("table:name,,ip"));
}

}  // namespace
}  // namespace fp::cli
