#include "agents/daemon/switch_agent.h"

#include <fmt/format.h>

#include "http/url.h"

namespace fp::agents::daemon {

using Json = nlohmann::json;

Result<std::unique_ptr<SwitchAgentDaemon>> SwitchAgentDaemon::Start(
    const DaemonOptions& options, std::unique_ptr<NatDataplane> dataplane) {
  std::unique_ptr<SwitchAgentDaemon> sim(new SwitchAgentDaemon(options, std::move(dataplane)));
  SwitchAgentDaemon* self = sim.get();
  sim->server_ = FP_TRY(AgentServer::Start(
      options, "switch agent", sim->Routes(), [self] { self->Reset(); }, sim->faults_));
  return sim;
}

SwitchAgentDaemon::~SwitchAgentDaemon() { Stop(); }

void SwitchAgentDaemon::Stop() {
  if (server_) server_->Stop();
}

NatTable SwitchAgentDaemon::Nat() const {
  MutexLock lock(mu_);
  NatTable table;
  table.generation = generation_;
  table.entries.reserve(entries_.size());
  for (const auto& [key, held] : entries_) table.entries.push_back(held.entry);
  return table;
}

NatStatus SwitchAgentDaemon::CurrentStatus() const {
  MutexLock lock(mu_);
  return NatStatus{.boot_id = boot_id_,
                   .generation = generation_,
                   .entries = static_cast<int64_t>(entries_.size()),
                   .digest = digest_};
}

void SwitchAgentDaemon::Reset() {
  MutexLock lock(mu_);
  if (dataplane_) (void)dataplane_->ReplaceAll({});
  entries_.clear();
  generation_ = 0;
  digest_ = 0;
  boot_id_ = random_.NewUuid().ToString();
}

bool SwitchAgentDaemon::Install(Table& table, const NatEntry& entry,
                                const std::function<void(const EntryKey&)>& touch) const {
  std::vector<EntryKey> overlapping;
  for (auto it = table.lower_bound({entry.external_ip, 0});
       it != table.end() && it->first.first == entry.external_ip; ++it) {
    const NatEntry& held = it->second.entry;
    if (held.first_port <= entry.last_port && entry.first_port <= held.last_port) {
      overlapping.push_back(it->first);
    }
  }
  if (nat_capacity_ != 0 && table.size() - overlapping.size() + 1 > nat_capacity_) return false;
  const EntryKey key{entry.external_ip, entry.first_port};
  if (touch) {
    for (const EntryKey& k : overlapping) touch(k);
    touch(key);
  }
  for (const EntryKey& k : overlapping) table.erase(k);
  table.insert_or_assign(key, Held(entry));
  return true;
}

NatApplied SwitchAgentDaemon::Apply(const std::vector<NatChange>& changes,
                                    std::optional<int64_t> limit, std::string_view limit_reason,
                                    const std::optional<std::string>& boot_id) {
  MutexLock lock(mu_);
  NatApplied outcome;
  outcome.boot_id = boot_id_;
  if (boot_id && *boot_id != boot_id_) {
    outcome.generation = generation_;
    outcome.boot_mismatch = true;
    return outcome;
  }
  const int64_t generation_before = generation_;
  std::optional<int64_t> first_applied;
  // Each key's entry before this request first touched it: to tell the dataplane what changed,
  // and to put the table back if the dataplane refuses.
  Before before;
  auto touch = [&](const EntryKey& key) FP_REQUIRES(mu_) { Touch(before, key); };
  for (size_t i = 0; i < changes.size(); ++i) {
    const NatChange& change = changes[i];
    if (change.gen <= generation_) continue;
    if (limit && static_cast<int64_t>(i) >= *limit) {
      outcome.failed_gen = change.gen;
      outcome.message = std::string(limit_reason);
      break;
    }
    const NatEntry& e = change.entry;
    if (change.deleted) {
      auto it = entries_.find({e.external_ip, e.first_port});
      if (it != entries_.end() && it->second.entry.last_port == e.last_port) {
        touch(it->first);
        entries_.erase(it);
      }
    } else {
      Status holdable = dataplane_ ? dataplane_->Check(e) : Ok();
      if (!holdable) {
        outcome.failed_gen = change.gen;
        outcome.message = fmt::format("cannot install the NAT entry at generation {}: {}",
                                      change.gen, holdable.error().message());
        break;
      }
      if (!Install(entries_, e, touch)) {
        outcome.failed_gen = change.gen;
        outcome.message = fmt::format(
            "cannot install the NAT entry for {} ports {}-{} at generation {}: the table is "
            "full ({} entries)",
            e.external_ip.ToString(), e.first_port, e.last_port, change.gen, nat_capacity_);
        break;
      }
    }
    if (!first_applied) first_applied = change.gen;
    generation_ = change.gen;
  }
  if (Status settled = Settle(before); !settled) {
    generation_ = generation_before;
    outcome.failed_gen = first_applied;
    outcome.message = fmt::format("the dataplane refused the changes from generation {}: {}",
                                  first_applied.value_or(0), settled.error().message());
    outcome.generation = generation_;
    return outcome;
  }
  outcome.generation = generation_;
  return outcome;
}

void SwitchAgentDaemon::Touch(Before& before, const EntryKey& key) const {
  if (before.count(key) != 0) return;
  auto it = entries_.find(key);
  before.emplace(key, it == entries_.end() ? std::nullopt : std::optional<Held>(it->second));
}

void SwitchAgentDaemon::PutBack(const Before& before) {
  for (const auto& [key, old] : before) {
    if (old) {
      entries_.insert_or_assign(key, *old);
    } else {
      entries_.erase(key);
    }
  }
}

Status SwitchAgentDaemon::Settle(const Before& before) {
  if (dataplane_ && !before.empty()) {
    std::vector<NatEntry> removed, installed;
    for (const auto& [key, old] : before) {
      auto now = entries_.find(key);
      bool same = old && now != entries_.end() && old->entry == now->second.entry;
      if (same) continue;
      // A replaced entry is also removed: the dataplane may file the two under different keys
      // (a full range and a port block of one address live in different maps).
      if (old) removed.push_back(old->entry);
      if (now != entries_.end()) installed.push_back(now->second.entry);
    }
    if (Status applied = dataplane_->Apply(removed, installed); !applied) {
      PutBack(before);
      return applied;
    }
  }
  for (const auto& [key, old] : before) {
    if (old) digest_ -= old->hash;
    auto now = entries_.find(key);
    if (now != entries_.end()) digest_ += now->second.hash;
  }
  return Ok();
}

NatBuckets SwitchAgentDaemon::Buckets(uint32_t count) const {
  MutexLock lock(mu_);
  NatBuckets b;
  b.boot_id = boot_id_;
  b.generation = generation_;
  b.digests.assign(count, 0);
  b.entries.assign(count, 0);
  for (const auto& [key, held] : entries_) {
    uint32_t k = NatEntryBucket(held.key_hash, count);
    b.digests[k] += held.hash;
    ++b.entries[k];
  }
  return b;
}

Result<NatBucketsRepaired> SwitchAgentDaemon::RepairBuckets(const NatBucketsRepair& repair) {
  if (dataplane_) {
    for (const NatEntry& e : repair.entries) FP_CHECK_OK(dataplane_->Check(e));
  }
  MutexLock lock(mu_);
  NatBucketsRepaired answer{.generation = generation_, .replaced = false, .boot_id = boot_id_};
  // Judged on another table than this one: it moved on since (a change, another server's
  // repair at the same generation, a restart).
  if (repair.if_boot_id != boot_id_ || repair.if_generation != generation_ ||
      repair.if_digest != digest_) {
    return answer;
  }
  std::vector<bool> listed(repair.count, false);
  for (uint32_t b : repair.buckets) listed[b] = true;
  Before before;
  auto touch = [&](const EntryKey& key) FP_REQUIRES(mu_) { Touch(before, key); };
  // The listed buckets' entries out, the repair's in.
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (listed[NatEntryBucket(it->second.key_hash, repair.count)]) {
      touch(it->first);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  for (const NatEntry& e : repair.entries) {
    if (!Install(entries_, e, touch)) {
      PutBack(before);
      return Fail(Error::InsufficientCapacity(
          fmt::format("the NAT table holds at most {} entries", nat_capacity_)));
    }
  }
  if (Status settled = Settle(before); !settled) {
    return Fail(Error(settled.error().kind(),
                      fmt::format("the dataplane refused the repair of {} NAT buckets: {}",
                                  repair.buckets.size(), settled.error().message())));
  }
  for (const auto& [key, old] : before) {
    auto now = entries_.find(key);
    if (now == entries_.end()) {
      answer.removed += old ? 1 : 0;
    } else if (!old) {
      ++answer.added;
    } else if (!(old->entry == now->second.entry)) {
      ++answer.changed;
    }
  }
  // As PUT /nat: a lower generation starts a new run.
  if (repair.generation < generation_) boot_id_ = random_.NewUuid().ToString();
  generation_ = repair.generation;
  answer.generation = generation_;
  answer.replaced = true;
  answer.boot_id = boot_id_;
  return answer;
}

EndpointRoutes SwitchAgentDaemon::Routes() {
  EndpointRoutes routes;
  routes.Add("GET", "/nat", [this](const http::HttpRequest&, const PathParams&) {
    return Result<Json>(Nat().ToJson());
  });

  routes.Add("GET", "/nat/status", [this](const http::HttpRequest&, const PathParams&) {
    return Result<Json>(CurrentStatus().ToJson());
  });

  routes.Add("GET", "/nat/buckets",
             [this](const http::HttpRequest& request, const PathParams&) -> Result<Json> {
               http::QueryParams query = FP_TRY(http::ParseQuery(request.query));
               int64_t count = FP_TRY(QueryInt(query, "count", 1, kMaxNatBuckets, 1));
               return Buckets(static_cast<uint32_t>(count)).ToJson();
             });

  routes.Add("POST", "/nat/buckets",
             [this](const http::HttpRequest& request, const PathParams&) -> Result<Json> {
               NatBucketsRepair body =
                   FP_TRY(NatBucketsRepair::FromJson(FP_TRY(ParseBody(request))));
               return FP_TRY(RepairBuckets(body)).ToJson();
             });

  routes.Add("POST", "/nat/changes",
             [this](const http::HttpRequest& request, const PathParams&) -> Result<Json> {
               NatChangesRequest body =
                   FP_TRY(NatChangesRequest::FromJson(FP_TRY(ParseBody(request))));
               std::optional<int64_t> limit = faults().ApplyFirst(request.method, request.path);
               NatApplied applied =
                   Apply(body.changes, limit,
                         fmt::format("injected fault: apply_first {} on \"POST /nat/changes\"",
                                     limit.value_or(0)),
                         body.boot_id);
               return applied.ToJson();
             });

  routes.Add(
      "PUT", "/nat", [this](const http::HttpRequest& request, const PathParams&) -> Result<Json> {
        NatReplaceRequest body = FP_TRY(NatReplaceRequest::FromJson(FP_TRY(ParseBody(request))));
        const NatTable& table = body.table;
        Table replacement;
        for (const NatEntry& e : table.entries) {
          if (dataplane_) FP_CHECK_OK(dataplane_->Check(e));
          if (!Install(replacement, e)) {
            return Fail(Error::InsufficientCapacity(
                fmt::format("the NAT table holds at most {} entries", nat_capacity_)));
          }
        }
        MutexLock lock(mu_);
        // A conditional replace: refused if the table moved on since it was read.
        if (body.if_generation && *body.if_generation != generation_) {
          return NatReplaced{generation_, false, boot_id_}.ToJson();
        }
        if (dataplane_) {
          std::vector<NatEntry> all;
          all.reserve(replacement.size());
          for (const auto& [key, held] : replacement) all.push_back(held.entry);
          FP_CHECK_OK(dataplane_->ReplaceAll(all));
        }
        uint64_t digest = 0;
        for (const auto& [key, held] : replacement) digest += held.hash;
        // A lower generation (the control plane took back changes a crash undid) starts a new
        // run: changes meant for the old one, at generations this table no longer has, are
        // refused rather than skipped as installed.
        if (table.generation < generation_) boot_id_ = random_.NewUuid().ToString();
        entries_ = std::move(replacement);
        generation_ = table.generation;
        digest_ = digest;
        return NatReplaced{generation_, true, boot_id_}.ToJson();
      });
  return routes;
}

}  // namespace fp::agents::daemon
