#include "app/ephemeral_ip_requests.h"

#include <fmt/format.h>

namespace fp::app {

Status CheckEphemeralIpRequests(IpPools& pools, const Actor& actor,
                                const std::vector<RequestedExternalIp>& requested) {
  std::vector<model::PoolSelector> ephemeral;
  for (const RequestedExternalIp& r : requested) {
    if (r.ephemeral) ephemeral.push_back(r.selector);
  }
  if (ephemeral.size() > 2) {
    return Fail(
        Error::InvalidRequest("An instance may not have more than 2 ephemeral IP addresses"));
  }
  if (ephemeral.size() < 2) return Ok();
  using Mode = model::PoolSelector::Mode;
  const auto& a = ephemeral[0];
  const auto& b = ephemeral[1];
  auto vague = [](const model::PoolSelector& s) {
    return s.mode == Mode::kDefault && !s.ip_version;
  };
  if (vague(a) || vague(b)) {
    return Fail(Error::InvalidRequest(
        "when requesting two ephemeral IPs, IP version or explicit pool name must be specified "
        "on each"));
  }
  auto version_of = [&](const model::PoolSelector& s) -> Result<IpVersion> {
    if (s.mode == Mode::kDefault) return *s.ip_version;
    return FP_TRY(pools.SiloScopedView(actor, *s.pool)).pool.ip_version;
  };
  if (a.mode == Mode::kDefault && b.mode == Mode::kDefault) {
    if (*a.ip_version == *b.ip_version) {
      return Fail(Error::InvalidRequest(fmt::format(
          "cannot request two ephemeral IPs of the same version ({})", ToString(*a.ip_version))));
    }
  } else if (a.mode == Mode::kExplicitPool && b.mode == Mode::kExplicitPool) {
    if (a.pool->ToString() == b.pool->ToString()) {
      return Fail(Error::InvalidRequest("cannot request two ephemeral IPs from the same pool"));
    }
    IpVersion va = FP_TRY(version_of(a));
    if (va == FP_TRY(version_of(b))) {
      return Fail(Error::InvalidRequest(fmt::format(
          "cannot request two ephemeral IPs of the same version ({0}): both pools are {0}",
          ToString(va))));
    }
  } else {
    IpVersion va = FP_TRY(version_of(a));
    if (va == FP_TRY(version_of(b))) {
      return Fail(Error::InvalidRequest(fmt::format(
          "cannot request two ephemeral IPs of the same version ({0}): explicit pool and auto "
          "selection both specify {0}",
          ToString(va))));
    }
  }
  return Ok();
}

}  // namespace fp::app
