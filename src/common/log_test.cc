#include "common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace fp {
namespace {

// What the process writes to stderr while `write` runs.
template <typename F>
std::string Stderr(F write) {
  std::fflush(stderr);
  FILE* file = std::tmpfile();
  EXPECT_NE(file, nullptr);
  if (file == nullptr) return "";
  const int saved = dup(STDERR_FILENO);
  dup2(fileno(file), STDERR_FILENO);
  write();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string out;
  std::rewind(file);
  for (int c = std::fgetc(file); c != EOF; c = std::fgetc(file))
    out.push_back(static_cast<char>(c));
  std::fclose(file);
  return out;
}

// Request logs are written by LogFields, every other line by LogEvent: one format for both, so
// that whatever reads the log (an operator's jq, a collector) sees no difference. A field
// named time stands in for the clock here, which is how a field of the line's own names
// replaces it.
TEST(LogFieldsTest, WritesTheLineLogEventWritesForTheSameFields) {
  const std::vector<std::string> texts = {
      "/v1/floating-ips/fip-1/attach",
      "a \"quoted\" name",
      "a back\\slash",
      "newline \n tab \t bell \x07",
      "delete \x7f",  // written as it is by both
      "caf\xc3\xa9 and a byte that is not UTF-8: \xff",
      "",
  };
  for (const std::string& text : texts) {
    for (double latency : {3.0, 0.1, 1e-05, 12345.678}) {
      const std::vector<LogField> fields{{"time", std::string_view("2026-12-06T20:00:00Z")},
                                         {"path", text},
                                         {"status", int64_t{-404}},
                                         {"latency_ms", latency},
                                         {"zeta", std::string_view("last")},
                                         {"alpha", std::string_view("first")}};
      nlohmann::json object{{"time", "2026-12-06T20:00:00Z"}, {"path", text},   {"status", -404},
                            {"latency_ms", latency},          {"zeta", "last"}, {"alpha", "first"}};
      const std::string expected = Stderr([&] { LogEvent("warn", "request", object); });
      ASSERT_FALSE(expected.empty());
      EXPECT_EQ(Stderr([&] { LogFields(LogLevel::kWarn, "request", fields); }), expected)
          << "path "
          << nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
}

TEST(LogFieldsTest, AFieldNamedAsTheLinesOwnReplacesItAndTheLaterOfTwoNamesWins) {
  const std::vector<LogField> fields{{"time", std::string_view("then")},
                                     {"msg", std::string_view("the field's")},
                                     {"id", int64_t{1}},
                                     {"id", int64_t{2}}};
  EXPECT_EQ(Stderr([&] { LogFields(LogLevel::kError, "the line's", fields); }),
            "{\"id\":2,\"level\":\"error\",\"msg\":\"the field's\",\"time\":\"then\"}\n");
}

TEST(LogFieldsTest, ALineBelowTheProcesssLevelIsNotWritten) {
  const std::vector<LogField> fields{{"path", std::string_view("/ping")}};
  EXPECT_FALSE(LogEnabled(LogLevel::kDebug));  // info unless set
  EXPECT_EQ(Stderr([&] { LogFields(LogLevel::kDebug, "request", fields); }), "");
  SetLogLevel(LogLevel::kDebug);
  EXPECT_NE(Stderr([&] { LogFields(LogLevel::kDebug, "request", fields); }), "");
  SetLogLevel(LogLevel::kInfo);
}

}  // namespace
}  // namespace fp
