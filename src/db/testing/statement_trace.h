#pragma once

// Test helper: the text of every statement SQLite runs on the connections opened while a
// StatementTrace lives (SQLite's automatic extension installs a trace on each as it opens), so
// that a test can read the plans of the statements the code really ran, not hand copies.

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "db/datastore.h"

namespace fp::db::testing {

class StatementTrace {
 public:
  // One at a time per process: the trace is SQLite's, process-wide.
  StatementTrace() {
    MutexLock lock(mu_);
    runs_.clear();
    sqlite3_auto_extension(reinterpret_cast<void (*)()>(&Install));
  }
  ~StatementTrace() { sqlite3_cancel_auto_extension(reinterpret_cast<void (*)()>(&Install)); }
  StatementTrace(const StatementTrace&) = delete;
  StatementTrace& operator=(const StatementTrace&) = delete;

  std::set<std::string> texts() const {
    MutexLock lock(mu_);
    std::set<std::string> out;
    for (const auto& [text, runs] : runs_) out.insert(text);
    return out;
  }
  // How many times statements whose text contains `fragment` ran.
  int Runs(std::string_view fragment) const {
    MutexLock lock(mu_);
    int n = 0;
    for (const auto& [text, runs] : runs_) {
      if (text.find(fragment) != std::string::npos) n += runs;
    }
    return n;
  }
  // The one statement run whose text contains `fragment`, or "" if none or several did.
  std::string Only(std::string_view fragment) const {
    std::string found;
    for (const std::string& text : texts()) {
      if (text.find(fragment) == std::string::npos) continue;
      if (!found.empty()) return "";
      found = text;
    }
    return found;
  }

 private:
  static int Install(sqlite3* db, const char**, const sqlite3_api_routines*) {
    sqlite3_trace_v2(db, SQLITE_TRACE_STMT, &Traced, nullptr);
    return SQLITE_OK;
  }
  static int Traced(unsigned, void*, void* stmt, void*) {
    const char* sql = sqlite3_sql(static_cast<sqlite3_stmt*>(stmt));
    MutexLock lock(mu_);
    if (sql != nullptr) ++runs_[sql];
    return 0;
  }
  static inline Mutex mu_;
  static inline std::map<std::string, int> runs_ FP_GUARDED_BY(mu_);  // by text
};

// SQLite's plan of `sql` on `ds` (EXPLAIN QUERY PLAN), a line per step: for a text that
// StatementTrace::Only gave. Fails the test, and answers "", when `sql` is "" (no such
// statement ran, or several did).
inline std::string QueryPlan(Datastore& ds, const std::string& sql) {
  EXPECT_FALSE(sql.empty()) << "no such statement ran, or several did";
  if (sql.empty()) return "";
  auto plan = ds.Read<std::string>([&](Tx& tx) -> Result<std::string> {
    std::string out;
    for (const Row& r : FP_TRY(tx.Query("EXPLAIN QUERY PLAN " + sql))) out += r.Text(3) + "\n";
    return out;
  });
  EXPECT_TRUE(plan) << plan.error().message();
  return plan ? *plan : "";
}

}  // namespace fp::db::testing
