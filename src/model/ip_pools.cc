#include "model/ip_pools.h"

namespace fp::model {

std::string_view ToString(PoolType t) { return t == PoolType::kUnicast ? "unicast" : "multicast"; }
std::string_view ToString(PoolAssignment a) {
  return a == PoolAssignment::kSilos ? "silos" : "system_services";
}
std::optional<PoolType> ParsePoolType(std::string_view text) {
  if (text == "unicast") return PoolType::kUnicast;
  if (text == "multicast") return PoolType::kMulticast;
  return std::nullopt;
}
std::optional<PoolAssignment> ParsePoolAssignment(std::string_view text) {
  if (text == "silos") return PoolAssignment::kSilos;
  if (text == "system_services") return PoolAssignment::kSystemServices;
  return std::nullopt;
}

}  // namespace fp::model
