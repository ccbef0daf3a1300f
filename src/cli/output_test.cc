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

// Tables are for people: byte counts in binary units and whole numbers carried as floats
// without ".0" (issue 23 item 8); the JSON output keeps the raw values.
TEST(FieldColumn, ShowsByteCountsAndWholeFloatsAsPeopleReadThem) {
  nlohmann::json instance = {{"memory", uint64_t{1} << 30}, {"ncpus", 2}};
  EXPECT_EQ(FieldColumn("memory").cell(instance), "1 GiB");
  EXPECT_EQ(FieldColumn("ncpus").cell(instance), "2");
  nlohmann::json utilization = {{"capacity", 256.0}, {"remaining", 1.5}};
  EXPECT_EQ(FieldColumn("capacity").cell(utilization), "256");
  EXPECT_EQ(FieldColumn("remaining").cell(utilization), "1.5");
}

}  // namespace
}  // namespace fp::cli
