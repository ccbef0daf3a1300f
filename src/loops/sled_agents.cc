#include "loops/sled_agents.h"

#include <fmt/format.h>

#include "common/log.h"
#include "db/instances.h"

namespace fp::loops {

bool VmRemovals::RemoveIf(const Uuid& instance_id, const std::function<bool()>& is_orphan,
                          const std::function<void()>& remove) {
  {
    // The judgement and the mark are atomic with respect to AwaitNone: a placement that passed
    // AwaitNone before the judgement had committed its placement, which the judgement then saw.
    MutexLock lock(mu_);
    if (removing_.count(instance_id) || !is_orphan()) return false;
    removing_.insert(instance_id);
  }
  remove();
  {
    MutexLock lock(mu_);
    removing_.erase(instance_id);
  }
  done_.notify_all();
  return true;
}

void VmRemovals::AwaitNone(const Uuid& instance_id) {
  MutexLock lock(mu_);
  lock.Wait(done_, [&]() FP_REQUIRES(mu_) { return removing_.count(instance_id) == 0; });
}

Result<agents::SledAgentClient*> SledAgents::Sled(const Uuid& sled_id) const {
  auto it = sleds.find(sled_id);
  if (it == sleds.end()) {
    return Fail(Error::Unavailable(
        fmt::format("no sled agent is configured for sled {}", sled_id.ToString())));
  }
  return it->second;
}

Result<agents::InstanceSpec> BuildInstanceSpec(db::Datastore& ds, const Uuid& instance_id) {
  auto instance = FP_TRY(
      ds.Read<model::Instance>([&](db::Tx& tx) { return db::InstanceGetIn(tx, instance_id); }));
  agents::InstanceSpec spec;
  spec.id = instance.id;
  spec.hostname = instance.hostname;
  spec.ncpus = instance.ncpus;
  spec.memory = instance.memory;
  if (auto nic = FP_TRY(db::PrimaryNic(ds, instance_id))) {
    spec.vni = nic->vni;
    spec.mac = nic->mac;
    spec.private_ipv4 = nic->ipv4;
    spec.private_ipv6 = nic->ipv6;
  }
  for (const model::ExternalIp& e : FP_TRY(db::InstanceExternalIps(ds, instance_id))) {
    if (e.state != model::AttachState::kAttached) continue;
    if (e.kind == model::IpKind::kSnat && e.ip.version() == IpVersion::kV4) {
      spec.snat_ip = e.ip;
      spec.snat_first_port = e.first_port;
      spec.snat_last_port = e.last_port;
    } else if (e.kind == model::IpKind::kSnat) {
      spec.snat6_ip = e.ip;
      spec.snat6_first_port = e.first_port;
      spec.snat6_last_port = e.last_port;
    } else {
      spec.external_ips.push_back(e.ip);
    }
  }
  return spec;
}

}  // namespace fp::loops

namespace fp::loops {

Result<int> RestartLostVms(db::Datastore& ds, const SledAgents& sled_agents) {
  int restarted = 0;
  for (const auto& [sled_id, sled] : sled_agents.sleds) {
    for (const model::Instance& i : FP_TRY(db::InstancesOnSled(ds, sled_id))) {
      if (i.state != model::InstanceState::kVmm || i.run_state != model::RunState::kRunning ||
          i.migration_id) {
        continue;  // starts and migrations belong to their sagas, which recovery resumes
      }
      if (auto vm = sled->Get(i.id); vm || vm.error().kind() != ErrorKind::kNotFound) continue;
      auto spec = BuildInstanceSpec(ds, i.id);
      Status registered =
          spec ? sled->EnsureRunning(*spec).map([](auto&&) {}) : Status(Fail(spec.error()));
      if (!registered) {
        LogEvent("warn", "could not restart an instance its in-process sled lost",
                 {{"instance_id", i.id.ToString()}, {"error", registered.error().message()}});
        continue;
      }
      ++restarted;
    }
  }
  return restarted;
}

}  // namespace fp::loops
