#include "db/counters.h"

#include <fmt/format.h>

#include <optional>

namespace fp::db {

Status CounterAddIn(Tx& tx, std::string_view name, int64_t n) {
  if (n == 0) return Ok();
  FP_TRY(
      tx.Exec("INSERT INTO counter (name, value) VALUES (?, ?) "
              "ON CONFLICT (name) DO UPDATE SET value = counter.value + excluded.value",
              name, n));
  return Ok();
}

Result<int64_t> CounterValueIn(Tx& tx, std::string_view name) {
  auto row = FP_TRY(tx.QueryRow("SELECT value FROM counter WHERE name = ?", name));
  return row ? row->Int(0) : int64_t{0};
}

Result<int64_t> CounterNextIn(Tx& tx, std::string_view name, int64_t first) {
  std::optional<Row> row;
  if (tx.postgres()) {
    // One statement (RETURNING): one round trip on PostgreSQL, where every NAT change takes it.
    row = FP_TRY(
        tx.QueryRow("INSERT INTO counter (name, value) VALUES (?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = counter.value + 1 RETURNING value",
                    name, first));
  } else {
    // SQLite collects a RETURNING's rows in a temporary b-tree, built and freed at each run:
    // two statements cost less.
    FP_TRY(
        tx.Exec("INSERT INTO counter (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = counter.value + 1",
                name, first));
    row = FP_TRY(tx.QueryRow("SELECT value FROM counter WHERE name = ?", name));
  }
  if (!row) return Fail(Error::Internal(fmt::format("counter {} returned no value", name)));
  return row->Int(0);
}

}  // namespace fp::db
