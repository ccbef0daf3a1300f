#include "sim/invariants.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "db/instances.h"
#include "db/nat.h"
#include "db/sagas.h"
#include "loops/sled_agents.h"

namespace fp::sim {

namespace {

std::string NatLine(const agents::NatEntry& e) {
  return fmt::format("{}:{}-{} -> {} vni {} {}", e.external_ip.ToString(), e.first_port,
                     e.last_port, e.sled_address.ToString(), e.vni, e.mac);
}

}  // namespace

Observed CheckInvariants(Rack& rack, const Ledger& ledger) {
  Observed out;
  auto fail = [&](std::string v) { out.violations.push_back(std::move(v)); };
  db::Datastore& ds = rack.ds();

  // No saga left running, unwinding or stuck.
  auto sagas = db::SagaListStates(ds, 100000);
  if (!sagas) return Observed{{"cannot list sagas: " + sagas.error().message()}, {}};
  for (const auto& s : *sagas) {
    if (s.state != saga::SagaState::kDone && s.state != saga::SagaState::kUnwound) {
      fail(fmt::format("saga {} {} left {}", s.name, s.id.ToString(), saga::ToString(s.state)));
    }
  }

  // Every switch holds exactly the datastore's NAT.
  std::vector<std::string> desired;
  auto live = db::NatLive(ds);
  if (!live) return Observed{{"cannot read NAT: " + live.error().message()}, {}};
  for (const auto& row : *live) desired.push_back(NatLine(loops::NatReconciler::ToEntry(row)));
  std::sort(desired.begin(), desired.end());
  for (size_t i = 0; i < rack.switches().size(); ++i) {
    std::vector<std::string> held;
    for (const auto& e : rack.switches()[i]->Nat().entries) held.push_back(NatLine(e));
    std::sort(held.begin(), held.end());
    if (held != desired) {
      fail(fmt::format("switch {} holds {} NAT entries, the datastore wants {}: [{}] vs [{}]",
                       rack.switch_urls()[i], held.size(), desired.size(), fmt::join(held, "; "),
                       fmt::join(desired, "; ")));
    }
  }
  for (const auto& line : desired) out.state.push_back("nat " + line);

  // Instances: the datastore's placement and what the sleds run.
  struct Row {
    std::string run_state;
    std::string sled;
  };
  auto rows =
      ds.Read<std::map<std::string, Row>>([](db::Tx& tx) -> Result<std::map<std::string, Row>> {
        std::map<std::string, Row> m;
        for (const auto& r : FP_TRY(tx.Query("SELECT id, run_state, coalesce(sled_id, '') FROM "
                                             "instance WHERE time_deleted IS NULL"))) {
          m[r.Text(0)] = Row{r.Text(1), r.Text(2)};
        }
        return m;
      });
  if (!rows) return Observed{{"cannot read instances: " + rows.error().message()}, {}};
  std::map<std::string, std::string> running_on;  // instance id -> sled id, as the sleds say
  for (size_t i = 0; i < rack.sleds().size(); ++i) {
    const std::string sled_id = rack.sled_ids()[i].ToString();
    for (const auto& vm : rack.sleds()[i]->Instances()) {
      if (vm.state != agents::VmState::kRunning) continue;
      running_on[vm.id.ToString()] = sled_id;
      auto row = rows->find(vm.id.ToString());
      if (row == rows->end() || row->second.run_state != "running" || row->second.sled != sled_id) {
        fail(fmt::format("sled {} runs instance {}, which the datastore has {}",
                         rack.sled_urls()[i], vm.id.ToString(),
                         row == rows->end() ? std::string("deleted")
                                            : row->second.run_state + " on " + row->second.sled));
        continue;
      }
      auto spec = loops::BuildInstanceSpec(ds, vm.id);
      if (!spec) {
        fail("cannot build the spec of " + vm.id.ToString() + ": " + spec.error().message());
        continue;
      }
      // The sled lists an instance's SNAT addresses among its external ones.
      std::set<std::string> want, have;
      for (const auto& ip : spec->external_ips) want.insert(ip.ToString());
      for (const auto& snat : {spec->snat_ip, spec->snat6_ip}) {
        if (snat) want.insert(snat->ToString());
      }
      for (const auto& ip : vm.external_ips) have.insert(ip.ToString());
      if (want != have) {
        fail(fmt::format("instance {} has addresses [{}] on its sled, [{}] in the datastore",
                         vm.id.ToString(), fmt::join(have, ", "), fmt::join(want, ", ")));
      }
    }
  }
  for (const auto& [id, row] : *rows) {
    if (row.run_state == "running" && running_on[id] != row.sled) {
      fail(fmt::format("instance {} is running on sled {} in the datastore; no sled runs it", id,
                       row.sled));
    }
    out.state.push_back(fmt::format("instance {} {}", id, row.run_state));
  }

  // Every acknowledged change durable: what a create or delete answered is what the datastore
  // holds, through crashes and restarts.
  auto names = ds.Read<std::set<std::string>>([](db::Tx& tx) -> Result<std::set<std::string>> {
    std::set<std::string> n;
    for (const auto& r : FP_TRY(tx.Query(
             "SELECT name FROM instance WHERE time_deleted IS NULL UNION ALL SELECT name FROM "
             "external_ip WHERE kind = 'floating' AND time_deleted IS NULL"))) {
      n.insert(r.Text(0));
    }
    return n;
  });
  if (!names) return Observed{{"cannot read names: " + names.error().message()}, {}};
  for (const auto& [name, exists] : ledger.acknowledged) {
    if (ledger.uncertain.count(name) == 0 && names->count(name) != (exists ? 1u : 0u)) {
      fail(fmt::format("{} was acknowledged {} but the datastore {}", name,
                       exists ? "created" : "deleted", exists ? "lacks it" : "still has it"));
    }
  }
  for (const auto& name : *names) {
    if (ledger.uncertain.count(name) == 0 && !ledger.acknowledged.count(name)) {
      fail(fmt::format("{} exists but no create of it was answered", name));
    }
  }

  // Addresses: none held twice, none left mid-attach or attached to a deleted instance.
  auto ips = ds.Read<std::vector<std::string>>([](db::Tx& tx) -> Result<std::vector<std::string>> {
    std::vector<std::string> v;
    for (const auto& r : FP_TRY(
             tx.Query("SELECT ip, first_port, count(*) FROM external_ip WHERE time_deleted IS NULL "
                      "GROUP BY ip, first_port HAVING count(*) > 1"))) {
      v.push_back(fmt::format("address {} port {} is held {} times",
                              FP_TRY(db::IpColumn(r, 0)).ToString(), r.Int(1), r.Int(2)));
    }
    for (const auto& r : FP_TRY(tx.Query(
             "SELECT e.id, e.kind, e.state FROM external_ip e LEFT JOIN instance i ON "
             "i.id = e.parent_id AND i.time_deleted IS NULL WHERE e.time_deleted IS NULL AND "
             "(e.state IN ('attaching', 'detaching') OR (e.state = 'attached' AND i.id IS "
             "NULL))"))) {
      v.push_back(fmt::format("{} address {} left {}", r.Text(1), r.Text(0), r.Text(2)));
    }
    return v;
  });
  if (!ips) return Observed{{"cannot read addresses: " + ips.error().message()}, {}};
  for (auto& v : *ips) fail(std::move(v));
  auto held = ds.Read<std::vector<std::string>>([](db::Tx& tx) -> Result<std::vector<std::string>> {
    std::vector<std::string> v;
    for (const auto& r :
         FP_TRY(tx.Query("SELECT ip, kind, state, coalesce(parent_id, '') FROM external_ip WHERE "
                         "time_deleted IS NULL ORDER BY ip, first_port"))) {
      v.push_back(fmt::format("address {} {} {} {}", FP_TRY(db::IpColumn(r, 0)).ToString(),
                              r.Text(1), r.Text(2), r.Text(3)));
    }
    return v;
  });
  if (held) out.state.insert(out.state.end(), held->begin(), held->end());
  return out;
}

}  // namespace fp::sim
