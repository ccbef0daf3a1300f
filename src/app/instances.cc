#include "app/instances.h"

#include <fmt/format.h>

#include <chrono>
#include <set>

#include "common/log.h"

namespace fp::app {

namespace {

std::string_view NicName(model::NicKind k) {
  switch (k) {
    case model::NicKind::kIpv4:
      return "ipv4";
    case model::NicKind::kIpv6:
      return "ipv6";
    case model::NicKind::kDualStack:
      return "dual_stack";
    case model::NicKind::kNone:
      return "none";
  }
  return "none";
}

std::string RunStateOf(agents::VmState s) { return std::string(agents::ToString(s)); }

// A byte count the way Oxide's ByteCount displays it: in the largest binary unit that divides
// it ("1 GiB", "1536 GiB").
std::string ShowBytes(uint64_t bytes) {
  constexpr std::pair<uint64_t, const char*> kUnits[] = {
      {uint64_t{1} << 40, "TiB"}, {uint64_t{1} << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}};
  for (const auto& [unit, name] : kUnits) {
    if (bytes >= unit && bytes % unit == 0) return fmt::format("{} {}", bytes / unit, name);
  }
  return fmt::format("{} B", bytes);
}

}  // namespace

Status CheckInstanceSize(const InstanceSize& size) {
  if (size.ncpus > kMaxVcpusPerInstance) {
    return Fail(Error::InvalidRequest(
        fmt::format("cannot have more than {} vCPUs per instance", kMaxVcpusPerInstance)));
  }
  if (size.ncpus < 1) {
    return Fail(Error::InvalidRequest("cannot have fewer than 1 vCPU per instance"));
  }
  if (size.memory < kMinMemoryBytesPerInstance) {
    return Fail(Error::InvalidValue(
        "size", fmt::format("memory must be at least {}", ShowBytes(kMinMemoryBytesPerInstance))));
  }
  if (size.memory % kMinMemoryBytesPerInstance != 0) {
    return Fail(Error::InvalidValue("size", fmt::format("memory must be divisible by {}",
                                                        ShowBytes(kMinMemoryBytesPerInstance))));
  }
  if (size.memory > kMaxMemoryBytesPerInstance) {
    return Fail(Error::InvalidValue("size", fmt::format("memory must be less than or equal to {}",
                                                        ShowBytes(kMaxMemoryBytesPerInstance))));
  }
  return Ok();
}

bool VmRemovals::RemoveIf(const Uuid& instance_id, const std::function<bool()>& is_orphan,
                          const std::function<void()>& remove) {
  {
    // The judgement and the mark are atomic with respect to AwaitNone: a placement that passed
    // AwaitNone before the judgement had committed its placement, which the judgement then saw.
    std::lock_guard lock(mu_);
    if (removing_.count(instance_id) || !is_orphan()) return false;
    removing_.insert(instance_id);
  }
  remove();
  {
    std::lock_guard lock(mu_);
    removing_.erase(instance_id);
  }
  done_.notify_all();
  return true;
}

void VmRemovals::AwaitNone(const Uuid& instance_id) {
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return removing_.count(instance_id) == 0; });
}

Result<agents::SledAgentClient*> Dataplane::Sled(const Uuid& sled_id) const {
  auto it = sleds.find(sled_id);
  if (it == sleds.end()) {
    return Fail(Error::Unavailable(
        fmt::format("no sled agent is configured for sled {}", sled_id.ToString())));
  }
  return it->second;
}

Result<model::Instance> Instances::Lookup(const Actor& actor, const NameOrId& instance,
                                          const std::optional<NameOrId>& project) {
  if (instance.is_id()) {
    if (project) {
      return Fail(Error::InvalidRequest(
          "when providing instance as an ID project should not be specified"));
    }
    return db::InstanceById(ds_, actor.silo_id, instance.id());
  }
  if (!project) {
    return Fail(
        Error::InvalidRequest("instance should either be UUID or project should be specified"));
  }
  model::Project p = FP_TRY(projects_.View(actor, *project));
  return db::InstanceByName(ds_, p.id, instance.name().str());
}

Result<std::vector<model::Instance>> Instances::List(const Actor& actor, const NameOrId& project,
                                                     const model::PageRequest& page) {
  model::Project p = FP_TRY(projects_.View(actor, project));
  return db::InstanceList(ds_, p.id, page);
}

Result<model::Instance> Instances::AfterSaga(const Uuid& instance_id,
                                             const saga::SagaOutcome& outcome) {
  if (outcome.kind != saga::SagaResultKind::kDone) {
    if (outcome.error) return Fail(*outcome.error);
    return Fail(Error::Internal("saga did not complete"));
  }
  return ds_.Read<model::Instance>([&](db::Tx& tx) { return db::InstanceGetIn(tx, instance_id); });
}

Result<model::Instance> Instances::Create(const Actor& actor, const NameOrId& project,
                                          const InstanceCreateParams& params) {
  model::Project p = FP_TRY(projects_.View(actor, project));
  FP_CHECK_OK(RequireWrite(actor));
  FP_CHECK_OK(CheckInstanceSize(InstanceSize{params.ncpus, params.memory}));
  // A name in use is refused from a read, before the saga writes anything; the record node
  // checks again inside its transaction for a create racing this one.
  if (auto existing = db::InstanceByName(ds_, p.id, params.name)) {
    return Fail(Error::AlreadyExists("instance", params.name));
  } else if (existing.error().kind() != ErrorKind::kNotFound) {
    return Fail(existing.error());
  }
  Uuid instance_id = Uuid::Random();
  saga::SagaDag dag;
  dag.name = "instance_create";
  dag.params = saga::Json{{"instance_id", instance_id.ToString()},
                          {"nic_id", Uuid::Random().ToString()},
                          {"snat_id", Uuid::Random().ToString()},
                          {"project_id", p.id.ToString()},
                          {"silo_id", actor.silo_id.ToString()},
                          {"name", params.name},
                          {"description", params.description},
                          {"hostname", params.hostname},
                          {"ncpus", params.ncpus},
                          {"memory", params.memory},
                          {"nic", NicName(params.nic)},
                          {"start", params.start}};
  // Floating IPs are resolved now, so that lookup errors (404, other project) come before
  // anything is created.
  saga::Json requested = saga::Json::array();
  for (size_t k = 0; k < params.external_ips.size(); ++k) {
    const RequestedExternalIp& r = params.external_ips[k];
    if (r.ephemeral) {
      saga::Json e{{"type", "ephemeral"}, {"ip_id", Uuid::Random().ToString()}};
      if (r.selector.mode == model::PoolSelector::Mode::kExplicitPool) {
        e["pool"] = r.selector.pool->ToString();
      } else if (r.selector.ip_version) {
        e["ip_version"] = ToString(*r.selector.ip_version);
      }
      requested.push_back(e);
    } else {
      model::ExternalIp fip = r.floating_ip.is_id()
                                  ? FP_TRY(floating_ips_.View(actor, r.floating_ip, std::nullopt))
                                  : FP_TRY(db::FloatingIpByName(ds_, p.id, r.floating_ip));
      if (fip.project_id != p.id) {
        return Fail(
            Error::InvalidRequest("floating IP must be in the same project as the instance"));
      }
      requested.push_back(saga::Json{{"type", "floating"}, {"ip_id", fip.id.ToString()}});
    }
  }
  dag.params["external_ips"] = requested;
  dag.nodes = InstanceCreateNodes(params.external_ips.size());
  auto outcome = FP_TRY(exec_.RunNew(dag));
  model::Instance created = FP_TRY(AfterSaga(instance_id, outcome));
  if (!params.start) return created;
  return RunStartSaga(created);
}

Result<model::Instance> Instances::RunStartSaga(const model::Instance& instance) {
  saga::SagaDag dag;
  dag.name = "instance_start";
  dag.params = saga::Json{{"instance_id", instance.id.ToString()}};
  dag.nodes = InstanceStartNodes();
  auto outcome = FP_TRY(exec_.RunNew(dag));
  return AfterSaga(instance.id, outcome);
}

Result<model::Instance> Instances::Start(const Actor& actor, const NameOrId& instance,
                                         const std::optional<NameOrId>& project) {
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  FP_CHECK_OK(RequireWrite(actor));
  if (i.state == model::InstanceState::kVmm && i.run_state != "stopping") return i;  // idempotent
  if (i.state != model::InstanceState::kNoVmm) {
    return Fail(Error::InvalidRequest(
        fmt::format("instance \"{}\" cannot be started while it is {}", i.name, i.run_state)));
  }
  return RunStartSaga(i);
}

Result<model::Instance> Instances::Stop(const Actor& actor, const NameOrId& instance,
                                        const std::optional<NameOrId>& project) {
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  FP_CHECK_OK(RequireWrite(actor));
  if (i.state != model::InstanceState::kVmm || !i.sled_id) return i;  // already stopped
  if (i.migration_id) {
    return Fail(Error::Unavailable(
        fmt::format("instance \"{}\" is migrating; retry when the migration completes", i.name)));
  }
  agents::SledAgentClient* sled = FP_TRY(dataplane_.Sled(*i.sled_id));
  if (i.run_state == "starting") {
    // A start saga that has not registered the VM on its sled yet (in flight, or waiting for
    // recovery after a restart) still owns the instance: a stop now would find no VM, and the
    // watcher would take the missing VM for a failed one.
    auto vm = sled->Get(i.id);
    if (!vm && vm.error().kind() == ErrorKind::kNotFound) {
      return Fail(Error::Unavailable(
          fmt::format("instance \"{}\" is starting; retry the stop when it is running", i.name)));
    }
  }
  FP_TRY(sled->Stop(i.id));
  return db::InstanceSetRunState(ds_, i.id, "stopping");
}

Result<model::Instance> Instances::Reboot(const Actor& actor, const NameOrId& instance,
                                          const std::optional<NameOrId>& project) {
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  FP_CHECK_OK(RequireWrite(actor));
  if (i.state != model::InstanceState::kVmm || i.run_state != "running" || !i.sled_id) {
    return Fail(Error::InvalidRequest(fmt::format(
        "instance \"{}\" can only be rebooted while running (it is {})", i.name, i.run_state)));
  }
  agents::SledAgentClient* sled = FP_TRY(dataplane_.Sled(*i.sled_id));
  // The watcher leaves rebooting instances alone, so the stop below is not taken for a stop.
  FP_TRY(db::InstanceSetRunState(ds_, i.id, "rebooting"));
  FP_TRY(sled->Stop(i.id));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto vm = sled->Get(i.id);
    if (!vm || vm->state == agents::VmState::kStopped) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return Fail(Error::Unavailable(fmt::format(
          "sled agent at {} did not stop instance \"{}\" within 10 s", sled->address(), i.name)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  agents::InstanceSpec spec = FP_TRY(BuildInstanceSpec(ds_, i.id));
  FP_TRY(sled->EnsureRunning(spec));
  return db::InstanceSetRunState(ds_, i.id, "starting");
}

Result<model::Instance> Instances::Migrate(const Actor& actor, const NameOrId& instance,
                                           const std::optional<NameOrId>& project,
                                           const Uuid& dst_sled) {
  if (!actor.is_fleet_admin()) return Fail(Error::Forbidden());
  // A /v1/system operation: by id, the fleet admin reaches instances of every silo (as the
  // sled views list them). Names stay scoped to the token's silo, where they are unique.
  model::Instance i = instance.is_id() && !project
                          ? FP_TRY(ds_.Read<model::Instance>(
                                [&](db::Tx& tx) { return db::InstanceGetIn(tx, instance.id()); }))
                          : FP_TRY(Lookup(actor, instance, project));
  FP_TRY(db::SledGet(ds_, dst_sled));
  if (i.state != model::InstanceState::kVmm || i.run_state != "running" || !i.sled_id) {
    return Fail(Error::InvalidRequest(fmt::format(
        "instance \"{}\" can only be migrated while running (it is {})", i.name, i.run_state)));
  }
  if (*i.sled_id == dst_sled) {
    return Fail(Error::InvalidRequest(
        fmt::format("instance \"{}\" already runs on sled {}", i.name, dst_sled.ToString())));
  }
  FP_TRY(dataplane_.Sled(dst_sled));
  saga::SagaDag dag;
  dag.name = "instance_migrate";
  dag.params = saga::Json{{"instance_id", i.id.ToString()},
                          {"src_sled_id", i.sled_id->ToString()},
                          {"dst_sled_id", dst_sled.ToString()},
                          {"migration_id", Uuid::Random().ToString()}};
  dag.nodes = InstanceMigrateNodes();
  auto outcome = FP_TRY(exec_.RunNew(dag));
  return AfterSaga(i.id, outcome);
}

Result<model::Instance> Instances::Update(const Actor& actor, const NameOrId& instance,
                                          const std::optional<NameOrId>& project,
                                          const InstanceSize& size) {
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  FP_CHECK_OK(RequireWrite(actor));
  FP_CHECK_OK(CheckInstanceSize(size));
  model::InstanceUpdate update;
  update.ncpus = size.ncpus;
  update.memory = static_cast<int64_t>(size.memory);  // at most 1536 GiB: checked above
  return db::InstanceUpdateFields(ds_, i.id, update);
}

Status Instances::Delete(const Actor& actor, const NameOrId& instance,
                         const std::optional<NameOrId>& project) {
  model::Instance i = FP_TRY(Lookup(actor, instance, project));
  FP_CHECK_OK(RequireWrite(actor));
  // Refused before anything changes (product.md difference 11); the saga's first node checks
  // again inside its transaction.
  if (i.state == model::InstanceState::kVmm) {
    return Fail(Error::InvalidRequest(fmt::format(
        "cannot delete instance: instance is running or has not yet fully stopped (instance "
        "\"{}\" is {}; stop it first)",
        i.name, i.run_state)));
  }
  saga::SagaDag dag;
  dag.name = "instance_delete";
  dag.params = saga::Json{{"instance_id", i.id.ToString()}};
  dag.nodes = InstanceDeleteNodes();
  auto outcome = FP_TRY(exec_.RunNew(dag));
  if (outcome.kind != saga::SagaResultKind::kDone) {
    return Fail(outcome.error ? *outcome.error : Error::Internal("delete did not complete"));
  }
  // The instance's NAT rows went with it; tell the switch now (the reconciler retries if the
  // switch does not answer).
  if (auto s = nat_.Sync(); !s) {
    LogEvent("warn", "NAT sync after delete failed", {{"error", s.error().message()}});
  }
  // A stopped VM whose unregister failed may still be on a sled, holding the addresses just
  // released: the reaper removes it from whichever sled holds it, now rather than at its next
  // pass. Not here: a hung sled would hold up every delete.
  WakeWatcher();
  return Ok();
}

Result<std::vector<model::Sled>> Instances::SledList(const Actor& actor) {
  if (!actor.is_fleet_admin()) return Fail(Error::Forbidden());
  return db::SledList(ds_);
}

Result<model::Sled> Instances::SledView(const Actor& actor, const Uuid& sled_id) {
  if (!actor.is_fleet_admin()) return Fail(Error::Forbidden());
  return db::SledGet(ds_, sled_id);
}

Result<std::vector<Instances::SledInstance>> Instances::SledInstances(const Actor& actor,
                                                                      const Uuid& sled_id) {
  if (!actor.is_fleet_admin()) return Fail(Error::Forbidden());
  FP_TRY(db::SledGet(ds_, sled_id));
  std::vector<SledInstance> out;
  for (const model::Instance& i : FP_TRY(db::InstancesOnSled(ds_, sled_id))) {
    auto names = FP_TRY(db::InstanceNames(ds_, i.id));
    out.push_back(SledInstance{i, names.first, names.second});
  }
  return out;
}

void Instances::SettleStopped(const model::Instance& instance, agents::SledAgentClient& sled,
                              const std::string& run_state) {
  auto recorded = db::InstanceRecordRunState(ds_, instance.id, run_state);
  if (!recorded) {
    LogEvent("warn", "could not record run state",
             {{"instance", instance.id.ToString()}, {"error", recorded.error().message()}});
    return;
  }
  if (auto s = nat_.Sync(); !s) {
    LogEvent("warn", "NAT sync after stop failed", {{"error", s.error().message()}});
  }
  // Through the orphan check: a start may already have placed the instance again.
  auto sled_id = instance.sled_id;
  if (!sled_id) return;
  if (auto removed = RemoveIfOrphan(*sled_id, sled, instance.id); removed && !*removed) {
    LogEvent("warn", "sled unregister after stop failed; the reaper retries",
             {{"instance", instance.id.ToString()},
              {"sled_agent", sled.address()},
              {"error", removed->error().message()}});
  }
}

std::optional<Status> Instances::RemoveIfOrphan(const Uuid& sled_id, agents::SledAgentClient& sled,
                                                const Uuid& instance_id) {
  auto is_orphan = [&] {
    auto instance = db::InstanceAnyState(ds_, instance_id);
    if (!instance) return instance.error().kind() == ErrorKind::kNotFound;
    // Both ends of a migration hold a VM until the migration saga settles which one stays.
    if (instance->migration_id) return false;
    return instance->state != model::InstanceState::kVmm || instance->sled_id != sled_id;
  };
  std::optional<Status> removed;
  dataplane_.removals.RemoveIf(instance_id, is_orphan,
                               [&] { removed = sled.Unregister(instance_id); });
  return removed;
}

void Instances::ReapOrphans() {
  for (const auto& [sled_id, sled] : dataplane_.sleds) {
    // List the sled first, then read the datastore: a VM the sled already holds was placed by a
    // saga that committed before the read, so only true orphans are removed (VmRemovals covers
    // a placement racing the removal).
    auto vms = sled->List();
    if (!vms) {
      LogEvent("warn", "cannot list a sled's VMs", {{"error", vms.error().message()}});
      continue;
    }
    for (const agents::SledInstance& vm : *vms) {
      // E.g. a start whose sled call timed out and unwound, applied by the sled afterwards, or a
      // stopped or deleted instance whose unregister failed.
      auto removed = RemoveIfOrphan(sled_id, *sled, vm.id);
      if (!removed) continue;
      if (*removed) {
        LogEvent("warn", "removed a VM the datastore does not place on this sled",
                 {{"instance", vm.id.ToString()},
                  {"state", agents::ToString(vm.state)},
                  {"sled_agent", sled->address()}});
      } else {
        LogEvent("warn", "could not remove a VM the datastore does not place on this sled",
                 {{"instance", vm.id.ToString()},
                  {"sled_agent", sled->address()},
                  {"error", removed->error().message()}});
      }
    }
  }
}

void Instances::WatchOnce() {
  ReapOrphans();
  auto instances = db::InstancesWithVmm(ds_);
  if (!instances) return;
  for (const model::Instance& i : *instances) {
    if (!i.sled_id || i.migration_id || i.run_state == "rebooting") continue;
    auto sled = dataplane_.Sled(*i.sled_id);
    if (!sled) continue;
    auto vm = (*sled)->Get(i.id);
    if (!vm) {
      // The sled does not know the VM. While starting, the start saga may not have reached the
      // sled yet; afterwards the VM is gone (the sled restarted and lost it).
      if (vm.error().kind() == ErrorKind::kNotFound && i.run_state != "starting") {
        SettleStopped(i, **sled, "failed");
      }
      continue;
    }
    std::string state = RunStateOf(vm->state);
    if (state == "stopped" || state == "failed") {
      if (i.run_state == "starting") continue;  // a start saga still owns this instance
      SettleStopped(i, **sled, state);
      continue;
    }
    if (state != i.run_state) (void)db::InstanceRecordRunState(ds_, i.id, state);
    if (state == "running") ReconcilePort(i, **sled, *vm);
  }
}

void Instances::ReconcilePort(const model::Instance& instance, agents::SledAgentClient& sled,
                              const agents::SledInstance& vm) {
  // `vm` was read from the sled before the datastore is read here: an address an attach or
  // detach saga is still moving is left alone, and a settled one that the sled disagrees
  // with (a call it applied after its saga gave up) is put right.
  auto ips = db::InstanceExternalIps(ds_, instance.id);
  if (!ips) return;
  std::set<IpAddr> attached, moving;
  for (const model::ExternalIp& e : *ips) {
    if (e.kind == model::IpKind::kSnat) continue;
    (e.state == model::AttachState::kAttached ? attached : moving).insert(e.ip);
  }
  std::set<IpAddr> on_port;
  for (const IpAddr& ip : vm.external_ips) {
    if (!vm.snat_ip || ip != *vm.snat_ip) on_port.insert(ip);
  }
  for (const IpAddr& ip : on_port) {
    if (attached.count(ip) || moving.count(ip)) continue;
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

void Instances::StartWatcher(int period_ms) {
  watcher_ = std::thread([this, period_ms] {
    std::unique_lock lock(watch_mu_);
    while (!watch_stop_) {
      lock.unlock();
      WatchOnce();
      lock.lock();
      watch_cv_.wait_for(lock, std::chrono::milliseconds(period_ms),
                         [&] { return watch_stop_ || watch_now_; });
      watch_now_ = false;
    }
  });
}

void Instances::WakeWatcher() {
  {
    std::lock_guard lock(watch_mu_);
    watch_now_ = true;
  }
  watch_cv_.notify_all();
}

void Instances::StopWatcher() {
  {
    std::lock_guard lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

}  // namespace fp::app
