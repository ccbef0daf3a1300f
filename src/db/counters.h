#pragma once

// Named counters kept in the database (table counter), for totals that must survive a restart
// (e.g. the rows history pruning removed).

#include <cstdint>
#include <string_view>

#include "db/datastore.h"

namespace fp::db {

// Adds `n` to the counter `name` (created at 0 if absent).
Status CounterAddIn(Tx& tx, std::string_view name, int64_t n);
// The next value of a monotonic counter (`first` if absent), bumped in this transaction.
Result<int64_t> CounterNextIn(Tx& tx, std::string_view name, int64_t first);
// The counter's value; 0 if absent.
Result<int64_t> CounterValueIn(Tx& tx, std::string_view name);

}  // namespace fp::db
