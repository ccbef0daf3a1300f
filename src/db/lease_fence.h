#pragma once

// A write's proof that its server still holds a task's lease (db/leases.h), checked inside the
// write's own transaction: a fencing token. A server that lost the lease while one of its
// decisions was under way (a sled's report being applied, an orphan VM's removal being marked)
// would otherwise still write that decision beside the new holder's; fenced, the write changes
// nothing and answers ServiceUnavailable. The check reads the lease row in the transaction, so
// the datastore orders the write against the lease's takeover: a write that commits is ordered
// before any takeover (on SQLite it ran before; on PostgreSQL, SERIALIZABLE, it may commit a
// moment after a takeover that wrote nothing it read, and then counts as before it).
//
// The token is the holder's name for one tenure (TaskLeaseKeeper: a server that lost the lease
// takes it back under a new name), taken when the judgement begins: so a server that lost the
// lease and took it back while one of its judgements was under way is fenced off from it too.

#include <string>

#include "db/datastore.h"

namespace fp::db {

struct LeaseFence {
  std::string task;
  std::string holder;
};

// ServiceUnavailable naming the task unless `fence.holder` holds task `fence.task` now (its
// row names it; a lease run out that nobody took over yet still counts: no one else acts on it).
Status LeaseFenceCheckIn(Tx& tx, const LeaseFence& fence);

}  // namespace fp::db
