// SqliteConnection: single statements run from the statement cache, scripts still run every
// statement, an error leaves the connection usable for the next call, and the database is this
// process's alone while it is open.

#include "db/sqlite/connection.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "common/testing/wait_for.h"

namespace fp::db::sqlite {
namespace {

class ExecScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/floatplane-sqlite-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto opened = SqliteConnection::Open(dir_ + "/t.db");
    ASSERT_TRUE(opened) << opened.error().message();
    conn_ = std::move(*opened);
    ASSERT_TRUE(conn_->ExecScript("CREATE TABLE t (v INTEGER NOT NULL); INSERT INTO t VALUES (1)"));
  }
  int64_t Count() {
    auto rows = conn_->Query("SELECT count(*) FROM t", {});
    EXPECT_TRUE(rows) << rows.error().message();
    return rows ? (*rows)[0].Int(0) : -1;
  }

  void TearDown() override {
    conn_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string dir_;
  std::unique_ptr<SqliteConnection> conn_;
};

TEST_F(ExecScriptTest, ACachedStatementRunsAgainAtEachCall) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(conn_->ExecScript("BEGIN IMMEDIATE"));
    EXPECT_TRUE(conn_->InTransaction());
    ASSERT_TRUE(conn_->ExecScript("INSERT INTO t VALUES (2)"));
    ASSERT_TRUE(conn_->ExecScript("COMMIT"));
    EXPECT_FALSE(conn_->InTransaction());
  }
  EXPECT_EQ(Count(), 4);
  // Savepoints nest and undo only their own part, call after call.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(conn_->ExecScript("BEGIN IMMEDIATE"));
    ASSERT_TRUE(conn_->ExecScript("SAVEPOINT write"));
    ASSERT_TRUE(conn_->ExecScript("INSERT INTO t VALUES (3)"));
    ASSERT_TRUE(conn_->ExecScript("RELEASE write"));
    ASSERT_TRUE(conn_->ExecScript("SAVEPOINT write"));
    ASSERT_TRUE(conn_->ExecScript("INSERT INTO t VALUES (4)"));
    ASSERT_TRUE(conn_->ExecScript("ROLLBACK TO write"));
    ASSERT_TRUE(conn_->ExecScript("RELEASE write"));
    ASSERT_TRUE(conn_->ExecScript("COMMIT"));
  }
  EXPECT_EQ(Count(), 6);
}

TEST_F(ExecScriptTest, AFailedStatementReportsItsErrorAndTheNextCallWorks) {
  Status commit = conn_->ExecScript("COMMIT");  // no transaction is open
  ASSERT_FALSE(commit);
  EXPECT_NE(commit.error().message().find("no transaction is active"), std::string::npos)
      << commit.error().message();
  Status again = conn_->ExecScript("COMMIT");  // the cached statement fails the same way
  EXPECT_FALSE(again);
  EXPECT_FALSE(conn_->ExecScript("INSERT INTO missing VALUES (1)"));
  ASSERT_TRUE(conn_->ExecScript("BEGIN"));
  ASSERT_TRUE(conn_->ExecScript("COMMIT"));
  EXPECT_TRUE(conn_->ExecScript("   "));  // nothing to run
}

// Memory statistics are off (they put every SQLite allocation behind one global mutex), so
// SQLite reports no memory in use however much it allocated.
TEST_F(ExecScriptTest, SqliteKeepsNoMemoryStatistics) {
  ASSERT_TRUE(
      conn_->ExecScript("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                        "WHERE i < 1000) INSERT INTO t SELECT i FROM n"));
  EXPECT_EQ(Count(), 1001);
  sqlite3_int64 current = -1;
  sqlite3_int64 highwater = -1;
  ASSERT_EQ(sqlite3_status64(SQLITE_STATUS_MEMORY_USED, &current, &highwater, 0), SQLITE_OK);
  EXPECT_EQ(current, 0);
  EXPECT_EQ(highwater, 0);
}

// The database opens with SQLite's "unix-excl" VFS: this process's connections share it (with
// the log's index on the heap and no file locks per transaction), another process cannot read
// it while it is open, and can again once it is closed.
TEST_F(ExecScriptTest, OnlyThisProcessReadsTheDatabaseWhileItIsOpen) {
  auto second = SqliteConnection::Open(dir_ + "/t.db");
  ASSERT_TRUE(second) << second.error().message();
  auto rows = (*second)->Query("SELECT count(*) FROM t", {});
  ASSERT_TRUE(rows) << rows.error().message();
  EXPECT_EQ((*rows)[0].Int(0), 1);
  const std::string other_process =
      "/usr/bin/python3 -c \"import sqlite3, sys; sqlite3.connect(sys.argv[1], "
      "timeout=0).execute('SELECT count(*) FROM t')\" " +
      dir_ + "/t.db 2>/dev/null";
  EXPECT_NE(std::system(other_process.c_str()), 0) << "another process read the open database";
  second->reset();
  conn_.reset();
  EXPECT_EQ(std::system(other_process.c_str()), 0) << "closed, it is still not readable";
}

TEST_F(ExecScriptTest, AScriptRunsEveryStatement) {
  ASSERT_TRUE(conn_->ExecScript("INSERT INTO t VALUES (5); INSERT INTO t VALUES (6);"));
  EXPECT_EQ(Count(), 3);
}

// Another thread stops a statement that runs for a long time (how a signal cancels the schema
// migration at start: db::OpenInterrupt). It fails "interrupted", and the connection runs the
// next statement. The stopper asks until the statement has ended: an interrupt while none runs
// does nothing. (Not stopped, the count ends after some 10 s, and the test fails.)
TEST_F(ExecScriptTest, InterruptFromAnotherThreadStopsTheStatementRunning) {
  std::atomic<bool> ended{false};
  std::thread stopper([&] {
    fp::testing::WaitFor(
        [&] {
          conn_->Interrupt();
          return ended.load();
        },
        std::chrono::seconds(60), std::chrono::milliseconds(5));
  });
  auto endless = conn_->Query(
      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) "
      "SELECT count(*) FROM n",
      {});
  ended = true;
  stopper.join();
  ASSERT_FALSE(endless);
  EXPECT_NE(endless.error().message().find("interrupted"), std::string::npos)
      << endless.error().message();
  EXPECT_EQ(Count(), 1);
}

}  // namespace
}  // namespace fp::db::sqlite
