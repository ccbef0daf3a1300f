#include "cmd/database_url.h"

#include <gtest/gtest.h>

namespace fp::cmd {
namespace {

TEST(ParseDatabaseSetting, AbsentIsTheSqliteFileInTheDataDir) {
  auto s = ParseDatabaseSetting("", "/var/lib/fp");
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(s->engine, DatabaseEngine::kSqlite);
  EXPECT_EQ(s->target, "/var/lib/fp/floatplane.db");
}

TEST(ParseDatabaseSetting, SqlitePathIsTakenAsGiven) {
  auto s = ParseDatabaseSetting("sqlite:relative/fp.db", "/var/lib/fp");
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(s->engine, DatabaseEngine::kSqlite);
  EXPECT_EQ(s->target, "relative/fp.db");
}

TEST(ParseDatabaseSetting, SqliteWithoutPathIsRefused) {
  auto s = ParseDatabaseSetting("sqlite:", "d");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind(), ErrorKind::kInvalidRequest);
  EXPECT_NE(s.error().message().find("file path"), std::string::npos) << s.error().message();
}

TEST(ParseDatabaseSetting, PostgresUrlsIncludingMultiHostPassThroughToLibpq) {
  for (std::string url :
       {"postgres://fp@db1:5432/floatplane", "postgresql://fp:secret@127.0.0.1/fp",
        "postgres://fp@h1:5432,h2:5432/fp?target_session_attrs=read-write"}) {
    auto s = ParseDatabaseSetting(url, "d");
    ASSERT_TRUE(s) << url << ": " << s.error().message();
    EXPECT_EQ(s->engine, DatabaseEngine::kPostgres) << url;
    EXPECT_EQ(s->target, url);
  }
}

TEST(ParseDatabaseSetting, UnknownSchemesAreRefusedWithoutEchoingAPassword) {
  for (std::string value :
       {"mysql://u:hunter2@h/db", "floatplane.db", "postgres:/x", "postgres://"}) {
    auto s = ParseDatabaseSetting(value, "d");
    ASSERT_FALSE(s) << value;
    EXPECT_EQ(s.error().kind(), ErrorKind::kInvalidRequest);
    EXPECT_EQ(s.error().message().find("hunter2"), std::string::npos) << s.error().message();
  }
}

TEST(RedactDatabaseUrl, HidesTheUserPassword) {
  EXPECT_EQ(RedactDatabaseUrl("postgres://fp:s3cr%40t@db1:5432,db2:5432/fp?"
                              "target_session_attrs=read-write"),
            "postgres://fp:redacted@db1:5432,db2:5432/fp?target_session_attrs=read-write");
  // An '@' inside the password: the user part ends at the last '@' of the authority.
  EXPECT_EQ(RedactDatabaseUrl("postgresql://fp:a@b@db/fp"), "postgresql://fp:redacted@db/fp");
  EXPECT_EQ(RedactDatabaseUrl("postgres://fp:pw@db"), "postgres://fp:redacted@db");
}

TEST(RedactDatabaseUrl, HidesPasswordQueryParameters) {
  EXPECT_EQ(RedactDatabaseUrl("postgres://db/fp?user=fp&password=pw&sslmode=require"),
            "postgres://db/fp?user=fp&password=redacted&sslmode=require");
  EXPECT_EQ(RedactDatabaseUrl("postgres://db/fp?PASSWORD=pw"),
            "postgres://db/fp?PASSWORD=redacted");
  EXPECT_EQ(RedactDatabaseUrl("postgres://db/fp?password=pw#frag"),
            "postgres://db/fp?password=redacted#frag");
}

TEST(RedactDatabaseUrl, LeavesUrlsWithoutPasswordAsTheyAre) {
  for (std::string url : {"postgres://fp@db/fp", "postgres://db", "postgres://db:5432/fp?a=b",
                          "sqlite:/var/fp.db", "postgres://fp@db/fp?passwordless=1"}) {
    EXPECT_EQ(RedactDatabaseUrl(url), url);
  }
}

TEST(DescribeDatabase, NamesTheEngineAndRedacts) {
  EXPECT_EQ(DescribeDatabase({DatabaseEngine::kSqlite, "/d/floatplane.db"}),
            "sqlite /d/floatplane.db");
  EXPECT_EQ(DescribeDatabase({DatabaseEngine::kPostgres, "postgres://u:pw@h/db"}),
            "postgres postgres://u:redacted@h/db");
}

}  // namespace
}  // namespace fp::cmd
