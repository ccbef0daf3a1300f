#pragma once

// JSON views of resources, exactly as the Oxide OpenAPI schemas define them.

#include <nlohmann/json.hpp>

#include "db/instances.h"
#include "db/models.h"

namespace fp::api {

nlohmann::json SiloView(const db::Silo& s);
nlohmann::json ProjectView(const db::Project& p);
nlohmann::json IpPoolView(const db::IpPool& p);
nlohmann::json SiloIpPoolView(const db::SiloIpPool& p);
nlohmann::json IpRangeView(const IpRange& r);
nlohmann::json IpPoolRangeView(const db::IpPoolRange& r);
nlohmann::json SiloLinkView(const db::SiloLink& l);
nlohmann::json FloatingIpView(const db::ExternalIp& e);
nlohmann::json UtilizationView(const db::PoolUtilization& u);
nlohmann::json InstanceView(const db::Instance& i);
// Oxide's ExternalIp: tagged by kind (snat, ephemeral, floating).
nlohmann::json ExternalIpView(const db::ExternalIp& e);
nlohmann::json SledView(const db::Sled& s);
nlohmann::json SledInstanceView(const db::Instance& i, const std::string& project_name,
                                const std::string& silo_name);

}  // namespace fp::api
