#pragma once

// Allocation of addresses and SNAT port blocks from a pool's free space (ip_allocation.cc).

#include <string_view>

#include "common/ip.h"
#include "db/datastore.h"

namespace fp::db {

// Low-level allocation primitives over a pool's free space, run inside a caller's write
// transaction. The cost of each is O(log n) in the number of allocated addresses: free
// addresses are kept as maximal spans per range (ip_free_span), and SNAT addresses with free
// port blocks in snat_address.
struct AllocatedAddress {
  Uuid range_id;
  IpAddr ip;
  int first_port = 0;
  int last_port = 65535;
};
Result<AllocatedAddress> AllocateLowestAddress(Tx& tx, const Uuid& pool_id);
// InvalidRequest "Requested external IP address not available" when the address is in use
// (wholly or by an SNAT port block) or not in any live range of the pool.
Result<AllocatedAddress> AllocateExplicitAddress(Tx& tx, const Uuid& pool_id, const IpAddr& ip);
// The lowest free (address, 16384-port block) of the pool.
Result<AllocatedAddress> AllocateSnatBlock(Tx& tx, const Uuid& pool_id);
// Returns a whole address (first_port 0, last_port 65535) or an SNAT block to the free space.
Status ReleaseAddress(Tx& tx, const Uuid& pool_id, const AllocatedAddress& a);
// An allocation's `error`, naming the pool and what the address was for (`purpose`, e.g.
// `for floating IP "www"`) when the pool had none free; other errors as they are. Oxide's
// message stays its start ("Insufficient capacity: No external IP addresses available").
Error NoneFreeIn(Tx& tx, const Error& error, const Uuid& pool_id, std::string_view purpose);

}  // namespace fp::db
