#pragma once

// JSON views of resources, exactly as the Oxide OpenAPI schemas define them.

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "model/external_ips.h"
#include "model/instances.h"
#include "model/ip_pools.h"
#include "model/silos.h"

namespace fp::api {

nlohmann::json SiloView(const model::Silo& s);
nlohmann::json ProjectView(const model::Project& p);
nlohmann::json IpPoolView(const model::IpPool& p);
nlohmann::json SiloIpPoolView(const model::SiloIpPool& p);
// A silo's linked pool's pagination keys (name, id), for PageBody.
std::pair<std::string, std::string> SiloPoolKeys(const model::SiloIpPool& p);
nlohmann::json IpRangeView(const IpRange& r);
nlohmann::json IpPoolRangeView(const model::IpPoolRange& r);
// floatplane's extension: an allocated address and its holder (null where none).
nlohmann::json PoolAddressView(const model::PoolAddress& a);
nlohmann::json SiloLinkView(const model::SiloLink& l);
nlohmann::json FloatingIpView(const model::ExternalIp& e);
nlohmann::json UtilizationView(const model::PoolUtilization& u);
nlohmann::json InstanceView(const model::Instance& i);
// Oxide's ExternalIp: tagged by kind (snat, ephemeral, floating).
nlohmann::json ExternalIpView(const model::ExternalIp& e);
nlohmann::json SledView(const model::Sled& s);
nlohmann::json SledInstanceView(const model::Instance& i, const std::string& project_name,
                                const std::string& silo_name);

}  // namespace fp::api
