#include "db/counters.h"

#include <fmt/format.h>

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
  // One statement (RETURNING): one round trip on PostgreSQL, where every NAT change takes it.
  auto row = FP_TRY(
      tx.QueryRow("INSERT INTO counter (name, value) VALUES (?, ?) "
                  "ON CONFLICT (name) DO UPDATE SET value = counter.value + 1 RETURNING value",
                  name, first));
  if (!row) return Fail(Error::Internal(fmt::format("counter {} returned no value", name)));
  return row->Int(0);
}

}  // namespace fp::db
