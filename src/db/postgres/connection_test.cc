// The libpq layer: placeholder translation and decoding without a server; parameter and
// result types against the test cluster (FLOATPLANE_TEST_POSTGRES; skipped without one).

#include "db/postgres/connection.h"

#include <gtest/gtest.h>

#include "db/postgres/libpq.h"
#include "db/testing/temp_datastore.h"

namespace fp::db::postgres {
namespace {

using testing::OnPostgres;
using testing::TempPostgresDatabase;

TEST(PgTranslate, NumbersPlaceholdersInOrderOutsideQuotesAndComments) {
  int n = 0;
  EXPECT_EQ(TranslatePlaceholders("SELECT a FROM t WHERE b = ? AND c IN (?, ?)", n),
            "SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)");
  EXPECT_EQ(n, 3);
  EXPECT_EQ(TranslatePlaceholders("SELECT '?', 'it''s ?', \"odd?name\", ? -- why?\n, ?", n),
            "SELECT '?', 'it''s ?', \"odd?name\", $1 -- why?\n, $2");
  EXPECT_EQ(n, 2);
  EXPECT_EQ(TranslatePlaceholders("SELECT 1", n), "SELECT 1");
  EXPECT_EQ(n, 0);
  // An unterminated literal is copied as it is (the server reports the syntax error).
  EXPECT_EQ(TranslatePlaceholders("SELECT ?, 'x?", n), "SELECT $1, 'x?");
  EXPECT_EQ(n, 1);
}

TEST(PgTranslate, DecodesByteaHex) {
  std::string out;
  ASSERT_TRUE(DecodeByteaHex("\\x00ff10Ab", out));
  EXPECT_EQ(out, std::string("\x00\xff\x10\xab", 4));
  ASSERT_TRUE(DecodeByteaHex("\\x", out));
  EXPECT_EQ(out, "");
  EXPECT_FALSE(DecodeByteaHex("00ff", out));
  EXPECT_FALSE(DecodeByteaHex("\\x0", out));
  EXPECT_FALSE(DecodeByteaHex("\\xzz", out));
}

TEST(PgTranslate, ReplacesTheDatabaseOfAConnectionString) {
  std::string s = WithDatabase("postgres://u@127.0.0.1:5433/postgres?connect_timeout=3", "x_1");
  EXPECT_NE(s.find("host='127.0.0.1'"), std::string::npos) << s;
  EXPECT_NE(s.find("port='5433'"), std::string::npos) << s;
  EXPECT_NE(s.find("user='u'"), std::string::npos) << s;
  EXPECT_NE(s.find("connect_timeout='3'"), std::string::npos) << s;
  EXPECT_NE(s.find("dbname='x_1'"), std::string::npos) << s;
  EXPECT_EQ(s.find("postgres'"), std::string::npos) << s;
  EXPECT_EQ(WithDatabase("postgres://[bad", "x"), "");
}

class PgConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!OnPostgres()) GTEST_SKIP() << "FLOATPLANE_TEST_POSTGRES is not set";
    db_ = std::make_unique<TempPostgresDatabase>();
    conn_ = std::move(PgConnection::Open(db_->url()).value());
  }
  std::unique_ptr<TempPostgresDatabase> db_;
  std::unique_ptr<PgConnection> conn_;
};

TEST_F(PgConnectionTest, ParametersAndResultsRoundTripByType) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  auto rows = conn_->Query(
      "SELECT ?, ?, ?, ?, ?",
      {int64_t{-9007199254740993}, std::string("h\xc3\xa9llo '?'"), Blob{bytes}, 2.5, nullptr});
  ASSERT_TRUE(rows) << rows.error().message();
  ASSERT_EQ(rows->size(), 1u);
  const Row& r = rows->front();
  EXPECT_EQ(r.Int(0), -9007199254740993);
  EXPECT_EQ(r.Text(1), "h\xc3\xa9llo '?'");
  EXPECT_EQ(r.Text(2), bytes);
  EXPECT_EQ(r.Double(3), 2.5);
  EXPECT_TRUE(r.IsNull(4));

  rows = conn_->Query(
      "SELECT 7::int2, 8::int4, 9::numeric, 1.5::numeric, true, false, 0.25::float4, "
      "'\\x0102'::bytea, now()::date - now()::date, NULL::bigint",
      {});
  ASSERT_TRUE(rows) << rows.error().message();
  const Row& t = rows->front();
  EXPECT_EQ(t.Int(0), 7);
  EXPECT_EQ(t.Int(1), 8);
  EXPECT_EQ(t.Int(2), 9);
  EXPECT_EQ(t.Double(3), 1.5);
  EXPECT_EQ(t.Int(4), 1);
  EXPECT_EQ(t.Int(5), 0);
  EXPECT_EQ(t.Double(6), 0.25);
  EXPECT_EQ(t.Text(7), std::string("\x01\x02"));
  EXPECT_EQ(t.Int(8), 0);  // int4
  EXPECT_TRUE(t.IsNull(9));
}

// A database (or role) whose bytea_output is 'escape' still round-trips bytes: the connection
// pins the hex format it decodes.
TEST_F(PgConnectionTest, BytesRoundTripWhateverTheDatabasesByteaOutput) {
  ASSERT_TRUE(conn_->Run("ALTER DATABASE " + db_->name() + " SET bytea_output = 'escape'"));
  auto fresh = std::move(PgConnection::Open(db_->url()).value());
  const std::string bytes("\x00\xff\\x41'", 5);
  auto rows = fresh->Query("SELECT ?::bytea", {Blob{bytes}});
  ASSERT_TRUE(rows) << rows.error().message();
  EXPECT_EQ(rows->front().Text(0), bytes);
  // The format set inside a session is refused, not decoded as bytes.
  ASSERT_TRUE(fresh->Run("SET bytea_output = 'escape'"));
  auto escaped = fresh->Query("SELECT ?::bytea", {Blob{bytes}});
  ASSERT_FALSE(escaped);
  EXPECT_EQ(escaped.error().kind(), ErrorKind::kInternal);
}

TEST_F(PgConnectionTest, ExecCountsRowsAndStatementsArePreparedPerTypeSignature) {
  ASSERT_TRUE(conn_->Run("CREATE TABLE t (k BIGINT, v TEXT, b BYTEA)"));
  for (int64_t k = 1; k <= 3; ++k) {
    // The same text with a NULL or a text value: two prepared statements, both correct.
    auto n = conn_->Exec("INSERT INTO t (k, v, b) VALUES (?, ?, ?)",
                         {k, k == 2 ? SqlValue(nullptr) : SqlValue(std::string("v")),
                          Blob{std::string(1, static_cast<char>(k))}});
    ASSERT_TRUE(n) << n.error().message();
    EXPECT_EQ(*n, 1);
  }
  auto updated = conn_->Exec("UPDATE t SET v = ? WHERE k >= ?", {std::string("w"), int64_t{2}});
  ASSERT_TRUE(updated) << updated.error().message();
  EXPECT_EQ(*updated, 2);
  // Byte order of bytea comparisons is the unsigned order SQLite uses for BLOBs.
  auto rows = conn_->Query("SELECT k FROM t WHERE b > ? ORDER BY b", {Blob{std::string("\x01")}});
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].Int(0), 2);
}

// A read's last statement ends its transaction: nothing more runs in that attempt, but the
// connection, back in the pool, serves the next one, whose engine may run a statement of its
// own before it begins (ending a lost attempt's server process).
TEST_F(PgConnectionTest, AReadsLastStatementEndsItsAttemptNotTheConnection) {
  conn_->StartAttempt();
  conn_->DeferBegin({"BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY"}, 1, false);
  auto last = conn_->QueryLast("SELECT 1", {});
  ASSERT_TRUE(last) << last.error().message();
  EXPECT_TRUE(conn_->ended());
  EXPECT_FALSE(conn_->in_transaction()) << "committed in the same exchange";
  EXPECT_FALSE(conn_->Query("SELECT 2", {})) << "a statement after the transaction's last";

  conn_->StartAttempt();
  EXPECT_FALSE(conn_->ended());
  auto next = conn_->Query("SELECT 3", {});
  ASSERT_TRUE(next) << next.error().message();
  EXPECT_EQ(next->front().Int(0), 3);
}

TEST_F(PgConnectionTest, ReportsErrorsWithSqlStateAndRemembersRetryableOnes) {
  auto bad = conn_->Query("SELECT * FROM no_such_table WHERE a = ?", {int64_t{1}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind(), ErrorKind::kInternal);
  EXPECT_NE(bad.error().message().find("42P01"), std::string::npos) << bad.error().message();
  EXPECT_FALSE(conn_->retryable());
  Status conflict = conn_->Run("DO $$BEGIN RAISE EXCEPTION USING ERRCODE = '40001'; END$$");
  ASSERT_FALSE(conflict);
  EXPECT_TRUE(conn_->retryable());
  conn_->StartAttempt();
  EXPECT_FALSE(conn_->retryable());
  EXPECT_FALSE(conn_->broken());
  (void)conn_->Query("SELECT pg_terminate_backend(pg_backend_pid())", {});
  EXPECT_TRUE(conn_->broken());
}

}  // namespace
}  // namespace fp::db::postgres
