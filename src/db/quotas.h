#pragma once

// Quotas of silos and projects (quotas.cc): IP quotas enforced where addresses are allocated,
// and Oxide's CPU, memory and storage quotas of a silo, recorded.

#include <string_view>
#include <vector>

#include "db/datastore.h"
#include "model/page.h"
#include "model/quotas.h"

namespace fp::db {

// What an allocation would add to the use of IP quotas.
struct IpCharge {
  IpVersion version = IpVersion::kV4;
  int64_t quarters = model::kQuartersPerAddress;  // 1 for an SNAT block
  std::string_view purpose;                       // "the floating IP \"www\""
  bool silo = true;  // false: the address is the silo's already (a transfer between projects)
};

// The project and silo an address counts against (external_ip.quota_project_id, quota_silo_id).
struct QuotaHolder {
  Uuid project_id;
  Uuid silo_id;
};

// Refused (QuotaExceeded, naming the quota, its limit and its use) when `charge` would take
// project `project_id`, or its silo, past an IP quota; otherwise the holder, whose ids the
// allocation's row then carries. Called in the allocating transaction: the use it counts is of
// rows the engine serializes writes on (SQLite: one writer; PostgreSQL: SERIALIZABLE, whose
// conflict a retry resolves), so racing allocations never pass a quota. Without a quota it
// reads two rows and counts nothing.
Result<QuotaHolder> CheckProjectIpQuotaIn(Tx& tx, const Uuid& project_id, const IpCharge& charge);
// The same for an address of instance `instance_id` (its SNAT block, an ephemeral IP).
Result<QuotaHolder> CheckInstanceIpQuotaIn(Tx& tx, const Uuid& instance_id, const IpCharge& charge);

Result<model::SiloQuotas> SiloQuotasView(Datastore& ds, const Uuid& silo_id);
Result<model::SiloQuotas> SiloQuotasIn(Tx& tx, const Uuid& silo_id);
// Live silos by id (Oxide's system_quotas_list).
Result<std::vector<model::SiloQuotas>> SiloQuotasList(Datastore& ds,
                                                      const model::PageRequest& page);
// A limit lowered below use refuses new allocations and frees nothing.
Result<model::SiloQuotas> SiloQuotasUpdate(Datastore& ds, const Uuid& silo_id,
                                           const model::SiloQuotasUpdate& update,
                                           const Effect<model::SiloQuotas>& effect = {});

Result<model::ProjectQuotas> ProjectQuotasView(Datastore& ds, const Uuid& project_id);
Result<model::ProjectQuotas> ProjectQuotasUpdate(Datastore& ds, const Uuid& project_id,
                                                 const model::ProjectQuotasUpdate& update,
                                                 const Effect<model::ProjectQuotas>& effect = {});

// "2", "2.25": quarters of an address as addresses.
std::string AddressCount(int64_t quarters);

}  // namespace fp::db
