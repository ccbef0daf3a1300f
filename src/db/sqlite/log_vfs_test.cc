// The datastore's VFS (sqlite/log_vfs.h): a log frame reaches the file in one write, and what a
// commit wrote is in the files when the commit returns: another connection reads it, and a copy
// of the files taken then, as a crash would leave them, holds every committed row.

#include "db/sqlite/log_vfs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "db/sqlite/connection.h"

namespace fp::db::sqlite {
namespace {

class LogVfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/floatplane-log-vfs-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  static int64_t One(SqliteConnection& conn, const std::string& sql) {
    auto rows = conn.Query(sql, {});
    EXPECT_TRUE(rows) << rows.error().message();
    return rows && !rows->empty() ? rows->front().Int(0) : -1;
  }
  int64_t LogBytes() const {
    std::error_code ec;
    auto size = std::filesystem::file_size(dir_ + "/t.db-wal", ec);
    return ec ? 0 : static_cast<int64_t>(size);
  }
  // A connection to a copy of the database and its log, taken now.
  std::unique_ptr<SqliteConnection> CopiedAsACrashLeavesThem() const {
    const std::string copy = dir_ + "/copy";
    std::filesystem::create_directory(copy);
    std::filesystem::copy_file(dir_ + "/t.db", copy + "/t.db");
    std::filesystem::copy_file(dir_ + "/t.db-wal", copy + "/t.db-wal");
    return std::move(*SqliteConnection::Open(copy + "/t.db"));
  }
  std::string dir_;
};

TEST_F(LogVfsTest, AFrameIsOneWriteAndACommitIsInTheFilesWhenItReturns) {
  auto conn = std::move(*SqliteConnection::Open(dir_ + "/t.db"));
  ASSERT_TRUE(conn->ExecScript("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)"));
  const int64_t frame = 24 + One(*conn, "PRAGMA page_size");
  for (int commit = 0; commit < 3; ++commit) {
    const int64_t log_before = LogBytes();
    const LogVfsWrites before = LogVfsWriteCounts();
    ASSERT_TRUE(conn->ExecScript("BEGIN IMMEDIATE"));
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(conn->Exec("INSERT INTO t (v) VALUES (?)", {std::string(500, 'a' + commit)}));
    }
    ASSERT_TRUE(conn->ExecScript("COMMIT"));
    const LogVfsWrites after = LogVfsWriteCounts();
    // The log is appended to (no checkpoint in between); every byte of it on disk already.
    const int64_t frames = (LogBytes() - log_before) / frame;
    ASSERT_GT(frames, 10);
    EXPECT_EQ((LogBytes() - log_before) % frame, 0) << "whole frames";
    EXPECT_EQ(after.asked - before.asked, 2 * frames) << "SQLite writes a header, then a page";
    EXPECT_EQ(after.made - before.made, frames) << "one write reached the file per frame";
    EXPECT_EQ(after.held_sent_alone, before.held_sent_alone) << "every header joined";
  }
  // Another connection of this process reads through its own handle on the log.
  auto reader = std::move(*SqliteConnection::Open(dir_ + "/t.db"));
  EXPECT_EQ(One(*reader, "SELECT count(*) FROM t"), 300);
  reader.reset();
  // The files as a crash would leave them, the writer still open.
  auto recovered = CopiedAsACrashLeavesThem();
  EXPECT_EQ(One(*recovered, "SELECT count(*) FROM t"), 300);
  EXPECT_EQ(One(*recovered, "SELECT count(*) FROM t WHERE v = printf('%.*c', 500, 'c')"), 100);
  auto check = recovered->Query("PRAGMA integrity_check", {});
  ASSERT_TRUE(check);
  EXPECT_EQ(check->front().Text(0), "ok");
}

// A transaction larger than the page cache spills pages to the log before its commit; when such
// a page changes again, SQLite rewrites the checksums of the frames from there at the commit:
// it reads each frame and writes its header alone. The last of those headers is the commit
// frame's: it must be in the file when the commit returns (a copy of the files then, as a crash
// leaves them, holds the transaction), not held for a next call that may never come.
TEST_F(LogVfsTest, HeadersRewrittenAfterASpillAreInTheFilesWhenTheCommitReturns) {
  auto conn = std::move(*SqliteConnection::Open(dir_ + "/t.db"));
  ASSERT_TRUE(conn->ExecScript("PRAGMA cache_size = 10"));  // pages
  ASSERT_TRUE(conn->ExecScript("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)"));
  const int64_t frame = 24 + One(*conn, "PRAGMA page_size");
  const int64_t log_before = LogBytes();
  const LogVfsWrites before = LogVfsWriteCounts();
  ASSERT_TRUE(conn->ExecScript("BEGIN IMMEDIATE"));
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(conn->Exec("INSERT INTO t (v) VALUES (?)", {std::string(500, 'a')}));
  }
  ASSERT_TRUE(conn->ExecScript("UPDATE t SET v = printf('%.*c', 500, 'b')"));
  ASSERT_TRUE(conn->ExecScript("COMMIT"));
  const LogVfsWrites after = LogVfsWriteCounts();
  // The case at hand: more writes than two per frame, the rewritten headers.
  const int64_t frames = (LogBytes() - log_before) / frame;
  ASSERT_GT(after.asked - before.asked, 2 * frames) << "no header was rewritten";
  EXPECT_EQ(after.held_sent_alone, before.held_sent_alone) << "every held header joined";
  // The files as a crash would leave them, the writer still open.
  auto recovered = CopiedAsACrashLeavesThem();
  EXPECT_EQ(One(*recovered, "SELECT count(*) FROM t WHERE v = printf('%.*c', 500, 'b')"), 200);
  auto check = recovered->Query("PRAGMA integrity_check", {});
  ASSERT_TRUE(check);
  EXPECT_EQ(check->front().Text(0), "ok");
}

}  // namespace
}  // namespace fp::db::sqlite
