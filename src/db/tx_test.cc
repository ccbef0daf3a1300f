// Tx runs on the engine's Connection interface, whatever the engine: each statement is one
// call to the connection, with its parameters converted to SQL values.

#include <gtest/gtest.h>

#include "db/datastore.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

// Records every statement; answers Query with `rows` and Exec with `changes`.
class RecordingConnection final : public Connection {
 public:
  struct Call {
    std::string kind;
    std::string sql;
    std::vector<SqlValue> params;
  };

  Result<std::vector<Row>> Query(std::string_view sql,
                                 const std::vector<SqlValue>& params) override {
    calls.push_back({"query", std::string(sql), params});
    return rows;
  }
  Result<int64_t> Exec(std::string_view sql, const std::vector<SqlValue>& params) override {
    calls.push_back({"exec", std::string(sql), params});
    return changes;
  }
  Dialect dialect() const override { return Dialect::kSqlite; }

  std::vector<Call> calls;
  std::vector<Row> rows;
  int64_t changes = 0;
};

TEST(Tx, ExecIsOneStatementOnTheConnectionAndReturnsItsChanges) {
  RecordingConnection conn;
  conn.changes = 3;
  SeededRandom random(1);
  Tx tx(conn, 42, random);
  Uuid id = Uuid::Random();
  auto changed = tx.Exec("UPDATE t SET a = ? WHERE id = ? AND b = ?", true, id, nullptr);
  ASSERT_TRUE(changed);
  EXPECT_EQ(*changed, 3);
  ASSERT_EQ(conn.calls.size(), 1u);
  EXPECT_EQ(conn.calls[0].kind, "exec");
  ASSERT_EQ(conn.calls[0].params.size(), 3u);
  EXPECT_EQ(std::get<int64_t>(conn.calls[0].params[0]), 1);
  EXPECT_EQ(std::get<std::string>(conn.calls[0].params[1]), id.ToString());
  EXPECT_TRUE(std::holds_alternative<std::nullptr_t>(conn.calls[0].params[2]));
  EXPECT_EQ(tx.now(), 42);
}

TEST(Tx, QueryRowIsTheFirstRowOfOneQuery) {
  RecordingConnection conn;
  conn.rows = {Row({SqlValue(int64_t{7})}), Row({SqlValue(int64_t{8})})};
  SeededRandom random(1);
  Tx tx(conn, 0, random);
  auto row = tx.QueryRow("SELECT v FROM t WHERE ip = ?", *IpAddr::Parse("10.0.0.1"));
  ASSERT_TRUE(row);
  ASSERT_TRUE(row->has_value());
  EXPECT_EQ((*row)->Int(0), 7);
  ASSERT_EQ(conn.calls.size(), 1u);
  EXPECT_EQ(conn.calls[0].kind, "query");
  // Addresses are stored as their sortable key, a BLOB.
  EXPECT_TRUE(std::holds_alternative<Blob>(conn.calls[0].params[0]));
  conn.rows.clear();
  EXPECT_FALSE(tx.QueryRow("SELECT v FROM t")->has_value());
}

// A write held back (ExecLater) on an engine that does not hold writes back (SQLite's, the
// Connection default) runs at once; a count other than one is the caller's error at once.
TEST(Tx, ExecLaterRunsAtOnceWhereTheEngineHoldsNothingBackAndChecksTheCount) {
  RecordingConnection conn;
  conn.changes = 1;
  SeededRandom random(1);
  Tx tx(conn, 0, random);
  ASSERT_TRUE(tx.ExecLater("UPDATE t SET a = ?", 5));
  ASSERT_TRUE(tx.ExecLaterOne(Error::NotFound("t"), "UPDATE t SET a = ?", 6));
  ASSERT_EQ(conn.calls.size(), 2u);
  EXPECT_EQ(conn.calls[1].kind, "exec");
  EXPECT_EQ(std::get<int64_t>(conn.calls[1].params[0]), 6);
  conn.changes = 0;
  EXPECT_TRUE(tx.ExecLater("UPDATE t SET a = ?", 7)) << "any count";
  Status one = tx.ExecLaterOne(Error::NotFound("row 8"), "UPDATE t SET a = ?", 8);
  ASSERT_FALSE(one);
  EXPECT_EQ(one.error().kind(), ErrorKind::kNotFound);
  EXPECT_EQ(one.error().message(), "not found: row 8");
  conn.changes = 2;
  EXPECT_FALSE(tx.ExecLaterOne(Error::NotFound("row 9"), "UPDATE t SET a = ?", 9));
}

// A read's last statement (QueryLast) ends what the read may run, on either engine (on
// PostgreSQL it carries the COMMIT): a statement after it fails, naming QueryLast, and the
// read still answers what it read; the next reads run as usual; in a write, QueryLast is an
// ordinary statement.
TEST(Tx, NothingRunsAfterAReadsLastStatementOnEitherEngine) {
  testing::TempDatastore ds;
  auto read = ds->Read<int64_t>([](Tx& tx) -> Result<int64_t> {
    auto last = FP_TRY(tx.QueryRowLast("SELECT 1"));
    auto after = tx.QueryRow("SELECT 2");
    EXPECT_FALSE(after) << "a statement ran after the read's last";
    if (!after) {
      EXPECT_NE(after.error().message().find("QueryLast"), std::string::npos);
    }
    return last->Int(0);
  });
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(*read, 1);
  for (int k = 0; k < 3; ++k) {
    auto next = ds->Read<int64_t>([](Tx& tx) -> Result<int64_t> {
      FP_TRY(tx.QueryRow("SELECT 1"));
      return FP_TRY(tx.QueryRow("SELECT 3"))->Int(0);
    });
    ASSERT_TRUE(next) << next.error().message();
    EXPECT_EQ(*next, 3);
  }
  auto write = ds->Write<int64_t>([](Tx& tx) -> Result<int64_t> {
    FP_TRY(tx.QueryRowLast("SELECT 1"));
    return FP_TRY(tx.QueryRow("SELECT 4"))->Int(0);
  });
  ASSERT_TRUE(write) << write.error().message();
  EXPECT_EQ(*write, 4);
}

// A held-back read (QueryLater) is a write's: in a read, whose commit no OnOutcome reports,
// it is refused on either engine; in a write its rows reach the sink.
TEST(Tx, AHeldBackReadIsRefusedInAReadOnEitherEngine) {
  testing::TempDatastore ds;
  bool sunk = false;
  auto read = ds->Read<int64_t>([&](Tx& tx) -> Result<int64_t> {
    Status later = tx.QueryLater([&](Result<std::vector<Row>>) { sunk = true; }, "SELECT 1");
    EXPECT_FALSE(later) << "a held-back read ran in a read transaction";
    if (!later) {
      EXPECT_NE(later.error().message().find("QueryLater"), std::string::npos);
    }
    return FP_TRY(tx.QueryRow("SELECT 2"))->Int(0);
  });
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(*read, 2);
  EXPECT_FALSE(sunk);
  int64_t got = 0;
  ASSERT_TRUE(ds->Write([&](Tx& tx) -> Status {
    return tx.QueryLater(
        [&](Result<std::vector<Row>> rows) {
          if (rows && !rows->empty()) got = rows->front().Int(0);
        },
        "SELECT 5");
  }));
  EXPECT_EQ(got, 5);
}

// A read's last statements, one statement with several parameter lists: their rows in the
// lists' order, on PostgreSQL all of them with the COMMIT in one exchange; one that fails fails
// the read.
TEST(Tx, AReadsLastStatementsComeBackInOrderInOneExchange) {
  testing::TempDatastore ds;
  const std::vector<std::vector<SqlValue>> params = {{int64_t{1}}, {int64_t{5}}, {int64_t{9}}};
  const int64_t trips = ds->round_trips();
  auto read = ds->Read<std::vector<int64_t>>([&](Tx& tx) -> Result<std::vector<int64_t>> {
    std::vector<int64_t> out;
    for (const std::vector<Row>& rows : FP_TRY(tx.QueryEachLast("SELECT ? + 1", params))) {
      out.push_back(rows.at(0).Int(0));
    }
    return out;
  });
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(*read, (std::vector<int64_t>{2, 6, 10}));
  if (ds.postgres()) {
    EXPECT_EQ(ds->round_trips() - trips, 1);
  }
  auto failed = ds->Read<size_t>([&](Tx& tx) -> Result<size_t> {
    return FP_TRY(tx.QueryEachLast("SELECT 10 / ?", {{int64_t{1}}, {int64_t{0}}, {int64_t{2}}}))
        .size();
  });
  if (ds.postgres()) {
    EXPECT_FALSE(failed) << "a division by zero among them";
  } else {
    // SQLite answers NULL for a division by zero.
    ASSERT_TRUE(failed) << failed.error().message();
    EXPECT_EQ(*failed, 3u);
  }
}

}  // namespace
}  // namespace fp::db
