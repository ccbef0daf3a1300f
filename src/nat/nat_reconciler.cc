#include "nat/nat_reconciler.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/log.h"
#include "http/client.h"

namespace fp::nat {

namespace {
constexpr int64_t kBatch = 500;

bool EntryLess(const agents::NatEntry& a, const agents::NatEntry& b) {
  return std::tie(a.external_ip, a.first_port) < std::tie(b.external_ip, b.first_port);
}
}  // namespace

agents::NatEntry NatReconciler::ToEntry(const model::NatEntry& row) {
  return agents::NatEntry{row.external_ip,  row.first_port, row.last_port,
                          row.sled_address, row.vni,        row.mac};
}

template <typename T, typename Exchange>
Result<T> NatReconciler::UnlessHung(Exchange exchange) {
  auto began = std::chrono::steady_clock::now();
  if (hung_ && began < hung_->until) return Fail(hung_->error);
  Result<T> result = exchange();
  if (!result && http::IsTimeout(result.error())) {
    auto ended = std::chrono::steady_clock::now();
    hung_ = Hung{ended + (ended - began), result.error()};
  } else {
    hung_.reset();
  }
  return result;
}

Status NatReconciler::Sync() {
  std::lock_guard lock(sync_mu_);
  return UnlessHung<void>([&] { return SyncLocked(); });
}

Status NatReconciler::SyncLocked() {
  if (!known_generation_) {
    // Ask the switch where it is (after a start, or after an error: it may have restarted).
    int64_t desired = FP_TRY(db::NatCurrentVersion(ds_));
    agents::NatTable installed = FP_TRY(switch_.GetNat());
    if (installed.generation > desired) {
      // The switch is ahead of the datastore (e.g. a restored database): resend everything.
      return RepairLocked().map([](bool) {});
    }
    known_generation_ = installed.generation;
  }
  int64_t at = *known_generation_;
  // The current version and the first batch after the switch's position, in one read.
  db::NatFeed feed = FP_TRY(db::NatChangesSince(ds_, at, kBatch));
  const int64_t desired = feed.current_version;
  if (at >= desired) return Ok();  // nothing new
  // Any failure below leaves the switch's position unknown until it is asked again.
  known_generation_.reset();
  while (at < desired) {
    if (feed.changes.empty()) break;
    std::vector<agents::NatChange> batch;
    for (const auto& c : feed.changes) batch.push_back({ToEntry(c.row), c.version, c.deleted});
    int64_t reached = FP_TRY(switch_.ApplyChanges(batch));
    if (reached < batch.back().gen) {
      return Fail(Error::Unavailable(
          fmt::format("switch agent at {} stopped at NAT generation {} of {}; retry later",
                      switch_.address(), reached, batch.back().gen)));
    }
    at = reached;
    if (at < desired) feed = FP_TRY(db::NatChangesSince(ds_, at, kBatch));
  }
  known_generation_ = at;
  return Ok();
}

Result<bool> NatReconciler::Repair() {
  std::lock_guard lock(sync_mu_);
  return UnlessHung<bool>([&] { return RepairLocked(); });
}

Result<bool> NatReconciler::RepairLocked() {
  // The switch first, then the datastore: every change the switch holds was committed before
  // it was sent, so the datastore read after it holds it too (other servers' Syncs included).
  agents::NatTable installed = FP_TRY(switch_.GetNat());
  // The desired version before the rows: rows are read at or after it, so the table sent is
  // at least as new as the generation it is labelled with.
  int64_t version = FP_TRY(db::NatCurrentVersion(ds_));
  std::vector<agents::NatEntry> desired;
  for (const auto& row : FP_TRY(db::NatLive(ds_))) desired.push_back(ToEntry(row));
  std::sort(desired.begin(), desired.end(), EntryLess);
  std::sort(installed.entries.begin(), installed.entries.end(), EntryLess);
  if (installed.entries == desired && installed.generation >= version) return false;
  known_generation_.reset();
  // Only over the table just compared: another server's Sync may have sent a newer change
  // since, which this replacement would take away; the next pass compares again.
  auto replaced = FP_TRY(switch_.ReplaceAllIf(
      agents::NatTable{std::max(version, installed.generation), desired}, installed.generation));
  if (!replaced) {
    return Fail(Error::Unavailable(fmt::format(
        "switch agent at {}: its NAT table changed during the repair; the next pass compares "
        "again",
        switch_.address())));
  }
  LogEvent("warn", "NAT drift repaired",
           {{"switch_agent", switch_.address()},
            {"installed_entries", installed.entries.size()},
            {"desired_entries", desired.size()},
            {"generation", version}});
  return true;
}

Result<int64_t> NatReconciler::CollectGarbage(Timestamp now) {
  int64_t below = FP_TRY(db::NatCurrentVersion(ds_));
  agents::NatTable installed = FP_TRY(switch_.GetNat());
  below = std::min(below, installed.generation);
  return db::NatCollectGarbage(ds_, below, now - kGarbageRetention);
}

void NatReconciler::StartBackground(int period_ms, db::TaskLeaseKeeper* lease) {
  lease_ = lease;
  bg_ = std::thread([this, period_ms] {
    auto next_collection = std::chrono::steady_clock::now() + kGarbagePeriod;
    std::unique_lock lock(bg_mu_);
    while (!bg_stop_) {
      lock.unlock();
      // Repair and garbage collection compare whole tables: one server at a time does them.
      const bool lead = !lease_ || lease_->Held();
      if (auto s = Sync(); !s) {
        LogEvent("warn", "NAT sync failed", {{"error", s.error().message()}});
      } else if (!lead) {
        // Another server repairs.
      } else if (auto r = Repair(); !r) {
        LogEvent("warn", "NAT repair failed", {{"error", r.error().message()}});
      }
      if (lead && std::chrono::steady_clock::now() >= next_collection) {
        next_collection = std::chrono::steady_clock::now() + kGarbagePeriod;
        if (auto g = CollectGarbage(ds_.clock().Now()); !g) {
          LogEvent("warn", "NAT garbage collection failed", {{"error", g.error().message()}});
        } else if (*g > 0) {
          LogEvent("info", "NAT garbage collected", {{"removed_rows", *g}});
        }
      }
      lock.lock();
      bg_cv_.wait_for(lock, std::chrono::milliseconds(period_ms), [&] { return bg_stop_; });
    }
  });
}

void NatReconciler::StopBackground() {
  {
    std::lock_guard lock(bg_mu_);
    bg_stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_.joinable()) {
    bg_.join();
    if (lease_) lease_->Release();
  }
}

}  // namespace fp::nat
