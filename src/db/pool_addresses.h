#pragma once

// Who holds which address of a pool (issue 25): an operator's list before removing a range.

#include <cstdint>
#include <string>
#include <vector>

#include "db/datastore.h"
#include "model/external_ips.h"

namespace fp::db {

// The addresses allocated from a pool (optionally one of its ranges, which must exist), with
// their holders, in address order. InvalidRequest naming the range if the pool has no such
// range; NotFound for a pool that does not exist.
Result<std::vector<model::PoolAddress>> PoolAddresses(Datastore& ds, const Uuid& pool_id,
                                                      const model::PoolAddressPage& page);

// Who holds the first `n` allocations of a range, in address order, each as a message names
// it: `floating IP "web" (10.0.0.1)`, `the SNAT of instance "vm" (10.0.0.0 ports 0-16383)`.
Result<std::vector<std::string>> FirstHoldersIn(Tx& tx, const Uuid& range_id, int64_t n);

}  // namespace fp::db
