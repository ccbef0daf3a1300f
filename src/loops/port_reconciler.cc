#include "loops/port_reconciler.h"

#include <set>

#include "common/log.h"
#include "db/external_ips.h"

namespace fp::loops {

void ReconcilePort(db::Datastore& ds, const model::Instance& instance,
                   agents::SledAgentClient& sled, const agents::SledInstance& vm) {
  // `vm` was read from the sled before the datastore is read here: an address an attach or
  // detach saga is still moving is left alone, and a settled one that the sled disagrees
  // with (a call it applied after its saga gave up) is put right.
  auto ips = db::InstanceExternalIps(ds, instance.id);
  if (!ips) return;
  ReconcilePort(instance, *ips, sled, vm);
}

namespace {

// The port's addresses against the instance's: attached, being moved by a saga, on the port.
struct PortAddresses {
  std::set<IpAddr> attached, moving, on_port;
  PortAddresses(const std::vector<model::ExternalIp>& ips, const agents::SledInstance& vm) {
    for (const model::ExternalIp& e : ips) {
      if (e.kind == model::IpKind::kSnat) continue;
      (e.state == model::AttachState::kAttached ? attached : moving).insert(e.ip);
    }
    for (const IpAddr& ip : vm.external_ips) {
      if (ip != vm.snat_ip && ip != vm.snat6_ip) on_port.insert(ip);
    }
  }
  bool Unwanted(const IpAddr& ip) const { return !attached.count(ip) && !moving.count(ip); }
};

}  // namespace

bool PortAgrees(const std::vector<model::ExternalIp>& ips, const agents::SledInstance& vm) {
  PortAddresses a(ips, vm);
  for (const IpAddr& ip : a.on_port) {
    if (a.Unwanted(ip)) return false;
  }
  for (const IpAddr& ip : a.attached) {
    if (!a.on_port.count(ip)) return false;
  }
  return true;
}

void ReconcilePort(const model::Instance& instance, const std::vector<model::ExternalIp>& ips,
                   agents::SledAgentClient& sled, const agents::SledInstance& vm) {
  const PortAddresses a(ips, vm);
  const std::set<IpAddr>& attached = a.attached;
  const std::set<IpAddr>& on_port = a.on_port;
  for (const IpAddr& ip : on_port) {
    if (!a.Unwanted(ip)) continue;
    LogEvent("warn", "removing an address the sled's port should not have",
             {{"instance", instance.id.ToString()}, {"ip", ip.ToString()}});
    if (auto s = sled.RemoveExternalIp(instance.id, ip); !s) {
      LogEvent("warn", "could not remove the address", {{"error", s.error().message()}});
    }
  }
  for (const IpAddr& ip : attached) {
    if (on_port.count(ip)) continue;
    LogEvent("warn", "restoring an address missing from the sled's port",
             {{"instance", instance.id.ToString()}, {"ip", ip.ToString()}});
    if (auto s = sled.AddExternalIp(instance.id, ip); !s) {
      LogEvent("warn", "could not restore the address", {{"error", s.error().message()}});
    }
  }
}

}  // namespace fp::loops
