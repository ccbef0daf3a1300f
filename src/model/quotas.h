#pragma once

// Quotas: what a silo or a project may hold. IP quotas (floatplane's, issue 25) limit the
// addresses of each version that floating, ephemeral and SNAT IPs take, counted in quarters of
// an address: a whole address is 4, an SNAT port block (a quarter of the ports) 1. Oxide's CPU,
// memory and storage quotas of a silo are recorded and shown, not enforced.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/ip.h"
#include "common/uuid.h"

namespace fp::model {

inline constexpr int64_t kQuartersPerAddress = 4;

// Limits in whole addresses; std::nullopt: no limit.
struct IpQuota {
  std::optional<int64_t> ipv4;
  std::optional<int64_t> ipv6;

  const std::optional<int64_t>& Of(IpVersion v) const { return v == IpVersion::kV4 ? ipv4 : ipv6; }
};

// What is held, in quarters of an address.
struct IpUse {
  int64_t ipv4_quarters = 0;
  int64_t ipv6_quarters = 0;

  int64_t Of(IpVersion v) const { return v == IpVersion::kV4 ? ipv4_quarters : ipv6_quarters; }
};

struct SiloQuotas {
  Uuid silo_id;
  int64_t cpus = 0;
  int64_t memory = 0;
  int64_t storage = 0;
  IpQuota ip;
  IpUse ip_use;
};

struct ProjectQuotas {
  Uuid project_id;
  Uuid silo_id;
  IpQuota ip;
  IpUse ip_use;
};

// A change: an absent member stays as it is; for the IP limits, a present std::nullopt (the
// JSON null) removes the limit.
struct SiloQuotasUpdate {
  std::optional<int64_t> cpus;
  std::optional<int64_t> memory;
  std::optional<int64_t> storage;
  std::optional<std::optional<int64_t>> ipv4;
  std::optional<std::optional<int64_t>> ipv6;
};

struct ProjectQuotasUpdate {
  std::optional<std::optional<int64_t>> ipv4;
  std::optional<std::optional<int64_t>> ipv6;
};

// Oxide's VirtualResourceCounts.
struct VirtualResources {
  int64_t cpus = 0;
  int64_t memory = 0;
  int64_t storage = 0;
};

// What a silo holds of a pool linked to it, by kind, beside the pool's capacity and what is
// free in it (whole addresses).
struct SiloPoolUse {
  Uuid pool_id;
  std::string pool_name;
  IpVersion ip_version = IpVersion::kV4;
  double capacity = 0;
  double remaining = 0;
  int64_t floating = 0;
  int64_t ephemeral = 0;
  int64_t snat_blocks = 0;
};

// Oxide's SiloUtilization (and, for the silo's own users, Utilization), with the silo's IP
// quotas and what it holds of each pool linked to it.
struct SiloUtilization {
  Uuid silo_id;
  std::string silo_name;
  VirtualResources provisioned;  // the CPUs and memory of its instances that have a VMM
  SiloQuotas quotas;
  std::vector<SiloPoolUse> pools;  // by pool name
};

}  // namespace fp::model
