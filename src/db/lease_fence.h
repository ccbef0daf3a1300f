#pragma once

// A write's proof that its server still holds a task's lease (db/leases.h), checked inside the
// write's own transaction: a fencing token. A server that lost the lease while one of its
// decisions was under way (a sled's report being applied, an orphan VM's removal being marked)
// would otherwise still write that decision beside the new holder's; fenced, the write changes
// nothing and answers ServiceUnavailable. The check reads the lease row in the transaction, so
// the datastore orders the write against the lease's takeover: a write that commits does so
// while its server held the lease.

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
