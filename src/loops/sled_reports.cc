// The sled watcher's report path (sled_watcher.h): a sled's report of what changed, judged VM
// by VM against the datastore; most reports only confirm what the control plane itself did.

#include <map>
#include <optional>
#include <set>

#include "db/instances.h"
#include "loops/port_reconciler.h"
#include "loops/sled_watcher.h"

namespace fp::loops {

namespace {

// Whether judging `vm` against the instance placed on its sled (WatchInstance, with the
// instance's external IPs `ips` read after `vm` was taken) would change nothing: the VM runs
// as the instance is recorded running, and its port needs no repair (PortAgrees: an address a
// saga is moving is left to the saga). An instance migrating or rebooting is its saga's or
// request's: the watcher leaves it alone either way.
bool Agrees(const model::Instance& i, const std::vector<model::ExternalIp>& ips,
            const agents::SledInstance& vm) {
  if (i.migration_id || i.run_state == model::RunState::kRebooting) return true;
  return vm.state == agents::VmState::kRunning && i.run_state == model::RunState::kRunning &&
         PortAgrees(ips, vm);
}

}  // namespace

int SledWatcher::ApplyReport(const Uuid& sled_id, agents::SledAgentClient& sled,
                             const agents::SledReport& report, bool* confirmed_only,
                             const db::LeaseFence* fence) {
  bool confirmed = report.removed.empty();  // so far, every VM agreed as reported
  std::map<Uuid, const agents::SledInstance*> reported;
  for (const agents::SledInstance& vm : report.instances) reported.emplace(vm.id, &vm);
  std::set<Uuid> ids;
  for (const agents::SledInstance& vm : report.instances) ids.insert(vm.id);
  ids.insert(report.removed.begin(), report.removed.end());
  // A request may outrun a judgement again (each one that does made a change of its own), but
  // not forever: after this many the next full comparison judges.
  constexpr int kJudgements = 4;
  int failures = 0;
  // The first judgement of every VM the report names is made on one read (a report under load
  // names several: about 8 at 16 clients of bench_attach). Its scope is waited for once, before
  // the first VM judged on it is acted on; a later judgement, or one whose shared read failed
  // (so that one row it cannot decode does not hold up the others), reads on its own.
  db::DeferredDurability first_seen(ds_);
  const auto first_read =
      db::InstancesAnyStateWithIps({ds_, &first_seen}, std::vector<Uuid>(ids.begin(), ids.end()));
  std::optional<bool> first_durable;  // whether first_seen's wait succeeded, once waited
  for (const Uuid& id : ids) {
    bool outran = true;
    bool agreed = false;
    for (int judged = 0; outran && judged < kJudgements; ++judged) {
      outran = false;
      db::DeferredDurability seen(ds_);
      const bool shared = judged == 0 && first_read.has_value();
      Result<db::InstanceAndIps> read = [&]() -> Result<db::InstanceAndIps> {
        if (!shared) return db::InstanceAnyStateWithIps({ds_, &seen}, id);
        if (auto found = first_read->find(id); found != first_read->end()) return found->second;
        return Fail(Error::NotFoundById("instance", id.ToString()));  // no row
      }();
      if (!read && read.error().kind() != ErrorKind::kNotFound) {
        seen.Dismiss();  // nothing is done on a failed read: the next pass judges
        break;
      }
      const model::Instance* instance = read ? &read->instance : nullptr;
      bool here =
          instance && instance->sled_id == sled_id && instance->state == model::InstanceState::kVmm;
      // Most reports carry what the control plane itself just did (a start, an address
      // added): when the reported VM, taken before the read, already agrees with it, there is
      // nothing to judge, and a later change on the sled comes with a later report. Nothing is
      // done on that read, so it need not wait for the sync of what it saw (at 16 clients of
      // bench_attach most such reads saw another operation's commit not yet synced).
      if (auto r = reported.find(id);
          judged == 0 && here && r != reported.end() && Agrees(*instance, read->ips, *r->second)) {
        seen.Dismiss();
        agreed = true;
        break;
      }
      // What is done from here on (a call to the sled, a write) acts on the read: durable first.
      if (shared) {
        if (!first_durable) first_durable = first_seen.Wait().has_value();
        if (!*first_durable) break;  // the log cannot be synced: the next pass judges
      } else if (!seen.Wait()) {
        break;
      }
      // What the sled holds now, asked after the datastore read (see WatchSled).
      auto vm = sled.Get(id);
      if (!vm && vm.error().kind() != ErrorKind::kNotFound) break;  // the next pass judges
      if (here) {
        failures += WatchInstance(*instance, sled,
                                  vm ? std::optional<agents::SledInstance>(*vm) : std::nullopt,
                                  nullptr, &outran, fence);
      } else if (vm) {
        failures += ReapIfOrphan(sled_id, sled, *vm, fence);
      }
    }
    confirmed = confirmed && agreed;
  }
  // Whatever was done on the first read waited for it above; the rest acted on nothing.
  first_seen.Dismiss();
  if (confirmed_only) *confirmed_only = confirmed;
  return failures;
}

}  // namespace fp::loops
