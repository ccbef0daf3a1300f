// A switch's NAT table in buckets (agents.h: NatEntryBucket, GET and POST /nat/buckets): the
// bucket of an entry, the wire types' JSON, and the default client calls the test doubles use.

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "agents/agents.h"
#include "agents/json_fields.h"

namespace fp::agents {

using wire::Json;
using wire::JsonFields;

namespace {
constexpr int64_t kMaxGeneration = std::numeric_limits<int64_t>::max();

Result<uint32_t> BucketCount(const JsonFields& f) {
  return static_cast<uint32_t>(FP_TRY(f.Int("count", 1, kMaxNatBuckets)));
}
}  // namespace

uint64_t NatKeyHash(const NatEntry& e) {
  // Of the key only: an entry and a wrong entry for the same key fall in the same bucket.
  return wire::HashText(fmt::format("{}|{}", e.external_ip.ToString(), e.first_port));
}

NatBuckets NatBuckets::Of(const std::vector<NatEntry>& entries, uint32_t count) {
  NatBuckets b;
  b.digests.assign(count, 0);
  b.entries.assign(count, 0);
  for (const NatEntry& e : entries) {
    uint32_t k = NatEntryBucket(e, count);
    b.digests[k] += NatEntryHash(e);
    ++b.entries[k];
  }
  return b;
}

uint64_t NatBuckets::digest() const {
  uint64_t sum = 0;
  for (uint64_t d : digests) sum += d;
  return sum;
}

Json NatBuckets::ToJson() const {
  Json digest_list = Json::array();
  for (uint64_t d : digests) digest_list.push_back(FormatNatDigest(d));
  return {{"boot_id", boot_id},
          {"generation", generation},
          {"digests", std::move(digest_list)},
          {"entries", entries}};
}

Result<NatBuckets> NatBuckets::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  NatBuckets b;
  b.boot_id = FP_TRY(f.String("boot_id"));
  b.generation = FP_TRY(f.Int("generation", 0, kMaxGeneration));
  for (const auto& [element, path] : FP_TRY(f.Array("digests"))) {
    b.digests.push_back(FP_TRY(wire::ParseDigest(*element, path)));
  }
  for (const auto& [element, path] : FP_TRY(f.Array("entries"))) {
    if (!element->is_number_integer() || element->get<int64_t>() < 0) {
      return Fail(Error::InvalidRequest(
          fmt::format("field \"{}\": expected a count (a non-negative integer)", path)));
    }
    b.entries.push_back(element->get<int64_t>());
  }
  if (b.digests.size() != b.entries.size() || b.digests.empty() ||
      b.digests.size() > kMaxNatBuckets) {
    return Fail(Error::InvalidRequest(
        fmt::format("fields \"digests\" and \"entries\": expected one of each per bucket, from 1 "
                    "to {} buckets (got {} and {})",
                    kMaxNatBuckets, b.digests.size(), b.entries.size())));
  }
  return b;
}

Result<NatBucketsRepair> NatBucketsRepair::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  NatBucketsRepair r;
  r.count = FP_TRY(BucketCount(f));
  for (const auto& [element, path] : FP_TRY(f.Array("buckets"))) {
    if (!element->is_number_integer() || element->get<int64_t>() < 0 ||
        element->get<int64_t>() >= r.count) {
      return Fail(Error::InvalidRequest(
          fmt::format("field \"{}\": expected a bucket from 0 to {}", path, r.count - 1)));
    }
    r.buckets.push_back(element->get<uint32_t>());
  }
  std::vector<bool> listed(r.count, false);
  for (uint32_t b : r.buckets) listed[b] = true;
  for (const auto& [element, path] : FP_TRY(f.Array("entries"))) {
    NatEntry e = FP_TRY(wire::ParseNatEntry(*element, path));
    if (uint32_t b = NatEntryBucket(e, r.count); !listed[b]) {
      return Fail(Error::InvalidRequest(
          fmt::format("field \"{}\": the entry for {} port {} falls in bucket {} of {}, which "
                      "\"buckets\" does not list",
                      path, e.external_ip.ToString(), e.first_port, b, r.count)));
    }
    r.entries.push_back(std::move(e));
  }
  r.generation = FP_TRY(f.Int("generation", 0, kMaxGeneration));
  r.if_generation = FP_TRY(f.Int("if_generation", 0, kMaxGeneration));
  r.if_digest = FP_TRY(f.Digest("if_digest"));
  r.if_boot_id = FP_TRY(f.String("if_boot_id"));
  return r;
}

std::string NatReplaceWriter::FinishBuckets(uint32_t count, const std::vector<uint32_t>& buckets,
                                            int64_t generation, const NatBuckets& compared) && {
  fmt::format_to(std::back_inserter(text_),
                 R"(],"count":{},"buckets":[{}],"generation":{},"if_generation":{},)"
                 R"("if_digest":"{}","if_boot_id":{}}})",
                 count, fmt::join(buckets, ","), generation, compared.generation,
                 FormatNatDigest(compared.digest()),
                 Json(compared.boot_id).dump(-1, ' ', false, Json::error_handler_t::replace));
  return std::move(text_);
}

Json NatBucketsRepaired::ToJson() const {
  return {{"generation", generation}, {"replaced", replaced}, {"boot_id", boot_id},
          {"added", added},           {"removed", removed},   {"changed", changed}};
}

Result<NatBucketsRepaired> NatBucketsRepaired::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  NatBucketsRepaired r;
  r.generation = FP_TRY(f.Int("generation", 0, kMaxGeneration));
  r.replaced = FP_TRY(f.Bool("replaced"));
  r.boot_id = FP_TRY(f.String("boot_id"));
  r.added = FP_TRY(f.Int("added", 0, kMaxGeneration));
  r.removed = FP_TRY(f.Int("removed", 0, kMaxGeneration));
  r.changed = FP_TRY(f.Int("changed", 0, kMaxGeneration));
  return r;
}

Result<NatBuckets> SwitchAgentClient::GetNatBuckets(uint32_t count) {
  NatStatus status = FP_TRY(GetStatus());
  NatTable table = FP_TRY(GetNat());
  NatBuckets b = NatBuckets::Of(table.entries, count);
  b.boot_id = status.boot_id;
  b.generation = table.generation;
  return b;
}

Result<NatBucketsRepaired> SwitchAgentClient::RepairBucketsWritten(std::string body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Fail(Error::InvalidRequest("the request body is not valid JSON"));
  NatBucketsRepair repair = FP_TRY(NatBucketsRepair::FromJson(j));
  // The condition as the agent checks it, in three calls rather than one step: for test
  // doubles, whose tables nothing else changes meanwhile.
  NatStatus status = FP_TRY(GetStatus());
  NatTable table = FP_TRY(GetNat());
  NatBucketsRepaired answer{
      .generation = table.generation, .replaced = false, .boot_id = status.boot_id};
  uint64_t digest = 0;
  for (const NatEntry& e : table.entries) digest += NatEntryHash(e);
  if (status.boot_id != repair.if_boot_id || table.generation != repair.if_generation ||
      digest != repair.if_digest) {
    return answer;
  }
  std::vector<bool> listed(repair.count, false);
  for (uint32_t b : repair.buckets) listed[b] = true;
  using Key = std::tuple<IpAddr, int>;
  std::map<Key, NatEntry> before;
  NatTable replacement{repair.generation, {}};
  for (NatEntry& e : table.entries) {
    if (listed[NatEntryBucket(e, repair.count)]) {
      before.emplace(Key(e.external_ip, e.first_port), e);
    } else {
      replacement.entries.push_back(std::move(e));
    }
  }
  for (const NatEntry& e : repair.entries) {
    auto old = before.find(Key(e.external_ip, e.first_port));
    if (old == before.end()) {
      ++answer.added;
    } else {
      if (!(old->second == e)) ++answer.changed;
      before.erase(old);
    }
    replacement.entries.push_back(e);
  }
  answer.removed = static_cast<int64_t>(before.size());
  std::optional<int64_t> replaced = FP_TRY(ReplaceAllIf(replacement, repair.if_generation));
  if (!replaced) return NatBucketsRepaired{table.generation, false, status.boot_id};
  answer.replaced = true;
  answer.generation = *replaced;
  // A lower generation starts a new run.
  if (*replaced < table.generation) answer.boot_id = FP_TRY(GetStatus()).boot_id;
  return answer;
}

}  // namespace fp::agents
