#include "cmd/server_metrics.h"

#include <map>

#include "api/middleware.h"
#include "common/metrics.h"
#include "common/version.h"
#include "db/datastore.h"
#include "db/ip_pools.h"
#include "loops/nat_reconciler.h"
#include "loops/sled_watcher.h"
#include "saga/saga.h"

namespace fp::cmd {

namespace {

using metrics::Render;
using metrics::Sample;

double Seconds(Timestamp us) { return static_cast<double>(us) / 1e6; }

void RenderSagas(std::string& out, const ServerMetricsSources& s) {
  std::map<std::string, saga::SagaExecutor::Counts> counts = s.executor.CountsByName();
  for (const std::string& name : s.saga_names) counts.try_emplace(name);
  std::vector<Sample> started, finished, in_flight;
  for (const auto& [name, c] : counts) {
    started.push_back({{{"saga", name}}, static_cast<double>(c.started)});
    for (auto [outcome, n] : {std::pair{"done", c.done}, std::pair{"unwound", c.unwound},
                              std::pair{"stuck", c.stuck}}) {
      finished.push_back({{{"saga", name}, {"outcome", outcome}}, static_cast<double>(n)});
    }
    in_flight.push_back({{{"saga", name}}, static_cast<double>(c.in_flight)});
  }
  Render(out, "floatplane_sagas_started_total", "Sagas this server created, by saga.", "counter",
         started);
  Render(out, "floatplane_sagas_finished_total",
         "Sagas this server drove to rest (new or resumed), by saga and outcome.", "counter",
         finished);
  Render(out, "floatplane_sagas_in_flight", "Sagas this server is driving now, by saga.", "gauge",
         in_flight);
}

void RenderNat(std::string& out, const ServerMetricsSources& s) {
  const int64_t version = s.nat.desired_version();
  Render(out, "floatplane_nat_datastore_version",
         "The datastore's NAT version as this server last read it (at least every ten NAT "
         "heartbeats): the generation every switch should reach.",
         "gauge", {{{}, static_cast<double>(version)}});
  std::vector<Sample> up, applied, lag, reconciled, repaired, reloads, restarts, waiting;
  for (const loops::SwitchNatStatus& sw : s.nat.SwitchStatuses()) {
    metrics::Labels l{{"switch", sw.address}};
    up.push_back({l, sw.reachable ? 1.0 : 0.0});
    applied.push_back({l, static_cast<double>(sw.applied_generation)});
    lag.push_back({l, static_cast<double>(std::max<int64_t>(0, version - sw.applied_generation))});
    reconciled.push_back({l, Seconds(sw.last_full_reconcile)});
    for (auto [kind, n] :
         {std::pair{"missing", sw.repaired_missing}, std::pair{"extra", sw.repaired_extra},
          std::pair{"wrong", sw.repaired_wrong}}) {
      repaired.push_back({{{"switch", sw.address}, {"kind", kind}}, static_cast<double>(n)});
    }
    reloads.push_back({l, static_cast<double>(sw.reloads)});
    restarts.push_back({l, static_cast<double>(sw.restarts_seen)});
    waiting.push_back({l, static_cast<double>(sw.waiting_syncs)});
  }
  Render(out, "floatplane_nat_switch_up", "Whether the switch agent answered its last exchange.",
         "gauge", up);
  Render(out, "floatplane_nat_applied_generation",
         "The NAT generation the switch agent reported at its last exchange.", "gauge", applied);
  Render(out, "floatplane_nat_lag_versions",
         "NAT versions the switch is behind the datastore, as of its last exchange.", "gauge", lag);
  Render(out, "floatplane_nat_last_full_reconcile_timestamp_seconds",
         "When the switch's whole table was last found (by digest) or made equal to the "
         "datastore's (0: never).",
         "gauge", reconciled);
  Render(out, "floatplane_nat_entries_repaired_total",
         "NAT entries put right on the switch by repairs and reloads: missing ones installed, "
         "extra ones removed, wrong ones retargeted.",
         "counter", repaired);
  Render(out, "floatplane_nat_reloads_total",
         "Whole-table loads of a switch agent found empty (restarted or new).", "counter", reloads);
  Render(out, "floatplane_nat_switch_restarts_total",
         "Times the switch agent's run (boot id) changed under this server.", "counter", restarts);
  const loops::NatReconciler::KeptReadCounts kept = s.nat.KeptReads();
  Render(out, "floatplane_nat_feed_reads_at_commit_total",
         "Reads of the NAT change feed made as the transaction of the change they push commits "
         "(in it on SQLite, right after it on PostgreSQL), by what became of them: used by that "
         "push, or dropped unused (too many pushes waiting, or too many changes to keep).",
         "counter",
         {{{{"outcome", "used"}}, static_cast<double>(kept.used)},
          {{{"outcome", "dropped"}}, static_cast<double>(kept.dropped)}});
  Render(out, "floatplane_nat_pushes_without_kept_read_total",
         "Pushes of a change to the switches that found no read made at its commit and read the "
         "change feed themselves (after a drop, a saga resumed after a restart, or a read not "
         "made because no switch had answered yet, or on PostgreSQL one that failed).",
         "counter", {{{}, static_cast<double>(kept.missed)}});
  Render(out, "floatplane_nat_switch_waiting_syncs",
         "Requests waiting now for an exchange in flight with the switch agent (a slow switch "
         "makes them queue).",
         "gauge", waiting);
}

void RenderSleds(std::string& out, const ServerMetricsSources& s) {
  std::vector<Sample> up, last, reports, restarts, set_aside;
  for (const loops::SledWatchStatus& sled : s.watcher.SledStatuses()) {
    metrics::Labels l{{"sled", sled.sled_id.ToString()}};
    up.push_back({l, sled.reachable ? 1.0 : 0.0});
    last.push_back({l, Seconds(sled.last_report)});
    reports.push_back({l, static_cast<double>(sled.reports)});
    restarts.push_back({l, static_cast<double>(sled.restarts_seen)});
    set_aside.push_back({l, static_cast<double>(sled.calls_set_aside)});
  }
  Render(out, "floatplane_sled_up", "Whether the sled agent answered its last report call.",
         "gauge", up);
  Render(out, "floatplane_sled_last_report_timestamp_seconds",
         "When the sled's last report (of its changes, or its whole list) was applied (0: "
         "never).",
         "gauge", last);
  Render(out, "floatplane_sled_reports_total", "Reports applied from the sled.", "counter",
         reports);
  Render(out, "floatplane_sled_agent_restarts_total",
         "Times the sled agent's run (boot id) changed under this server.", "counter", restarts);
  Render(out, "floatplane_sled_report_calls_set_aside_total",
         "Report calls to the sled that returned after this server lost the sled-watcher lease, "
         "or in a later tenure of it (their answers left to the lease's holder, or to this "
         "server's next look from a full list).",
         "counter", set_aside);
}

void RenderPools(std::string& out, const ServerMetricsSources& s) {
  auto pools = db::PoolUsageAll(s.ds);
  if (!pools) return;  // the families are left out of this scrape rather than reported wrong
  std::vector<Sample> capacity, allocated;
  for (const db::PoolUsage& p : *pools) {
    capacity.push_back({{{"pool", p.name}, {"ip_version", p.ip_version}}, p.capacity});
    for (auto [kind, n] : {std::pair{"floating", p.floating}, std::pair{"ephemeral", p.ephemeral},
                           std::pair{"snat", p.snat}}) {
      allocated.push_back({{{"pool", p.name}, {"kind", kind}}, static_cast<double>(n)});
    }
  }
  Render(out, "floatplane_ip_pool_capacity_addresses", "Addresses in the pool's ranges.", "gauge",
         capacity);
  Render(out, "floatplane_ip_pool_allocated_addresses",
         "Addresses allocated from the pool, by kind (an address holding SNAT port blocks "
         "counts once).",
         "gauge", allocated);
}

}  // namespace

void RenderServerMetrics(std::string& out, const ServerMetricsSources& sources) {
  Render(out, "floatplane_build_info", "The running build (always 1).", "gauge",
         {{{{"version", std::string(BuildVersion())},
            {"revision", std::string(BuildCommit())},
            {"api_version", std::string(api::kServedApiVersion)}},
           1}});
  RenderSagas(out, sources);
  RenderNat(out, sources);
  RenderSleds(out, sources);
  RenderPools(out, sources);
}

}  // namespace fp::cmd
