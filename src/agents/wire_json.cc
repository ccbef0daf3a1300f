// The agents' wire types as JSON (agents.h): the one codec of the control plane's calls to the
// agents, used by the clients (agent_clients.cc) and the agents' servers alike.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <limits>

#include "agents/agents.h"
#include "agents/json_fields.h"

namespace fp::agents {

using Json = nlohmann::json;

namespace wire {

Result<NatEntry> ParseNatEntry(const Json& j, std::string path) {
  JsonFields f = FP_TRY(JsonFields::Of(j, std::move(path)));
  NatEntry e;
  e.external_ip = FP_TRY(f.Ip("external_ip"));
  e.first_port = static_cast<int>(FP_TRY(f.Int("first_port", 0, 65535)));
  e.last_port = static_cast<int>(FP_TRY(f.Int("last_port", 0, 65535)));
  if (e.first_port > e.last_port) {
    return Fail(f.Invalid("last_port", fmt::format("must not be below first_port ({} < {})",
                                                   e.last_port, e.first_port)));
  }
  e.sled_address = FP_TRY(f.Ip("sled_address"));
  e.vni = FP_TRY(f.Int("vni", 0, kMaxVni));
  e.mac = FP_TRY(f.Mac("mac"));
  return e;
}

}  // namespace wire

namespace {

// A string as nlohmann writes it (text that is not UTF-8 replaced, as the clients' dump does).
void AppendJsonText(std::string& out, std::string_view s) {
  out += Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// NatEntry::ToJson's text, its fields in the order nlohmann writes them (its objects are
// sorted).
void AppendNatEntryText(std::string& out, const NatEntry& e) {
  fmt::format_to(std::back_inserter(out),
                 R"({{"external_ip":"{}","first_port":{},"last_port":{},"mac":)",
                 e.external_ip.ToString(), e.first_port, e.last_port);
  AppendJsonText(out, e.mac);
  fmt::format_to(std::back_inserter(out), R"(,"sled_address":"{}","vni":{}}})",
                 e.sled_address.ToString(), e.vni);
}

using wire::JsonFields;
using wire::kMaxVni;
using wire::ParseNatEntry;

Json IpList(const std::vector<IpAddr>& ips) {
  Json out = Json::array();
  for (const IpAddr& ip : ips) out.push_back(ip.ToString());
  return out;
}

Json OptIp(const std::optional<IpAddr>& ip) { return ip ? Json(ip->ToString()) : Json(nullptr); }

Result<NatChange> ParseNatChange(const Json& j, std::string path) {
  JsonFields f = FP_TRY(JsonFields::Of(j, path));
  NatChange c;
  c.entry = FP_TRY(ParseNatEntry(*FP_TRY(f.Get("entry")), f.PathOf("entry")));
  c.gen = FP_TRY(f.Int("gen", 1, std::numeric_limits<int64_t>::max()));
  c.deleted = FP_TRY(f.Bool("deleted"));
  return c;
}

Result<SledInstance> ParseSledInstance(const Json& j, std::string path) {
  JsonFields f = FP_TRY(JsonFields::Of(j, std::move(path)));
  SledInstance s;
  s.id = FP_TRY(f.Id("id"));
  std::string state = FP_TRY(f.String("state"));
  auto parsed = ParseVmState(state);
  if (!parsed) return Fail(f.Invalid("state", fmt::format("unknown state \"{}\"", state)));
  s.state = *parsed;
  s.external_ips = FP_TRY(f.IpList("external_ips"));
  s.snat_ip = FP_TRY(f.OptIp("snat_ip"));
  s.snat6_ip = FP_TRY(f.OptIp("snat6_ip"));
  s.boots = FP_TRY(f.OptInt("boots", 0, std::numeric_limits<int64_t>::max(), 0));
  return s;
}

}  // namespace

// ---- wire types ----

Json NatEntry::ToJson() const {
  return {{"external_ip", external_ip.ToString()},
          {"first_port", first_port},
          {"last_port", last_port},
          {"sled_address", sled_address.ToString()},
          {"vni", vni},
          {"mac", mac}};
}

Result<NatEntry> NatEntry::FromJson(const Json& j) { return ParseNatEntry(j, ""); }

Json NatChange::ToJson() const {
  return {{"entry", entry.ToJson()}, {"gen", gen}, {"deleted", deleted}};
}

Result<NatChange> NatChange::FromJson(const Json& j) { return ParseNatChange(j, ""); }

Json NatTable::ToJson() const {
  Json list = Json::array();
  for (const NatEntry& e : entries) list.push_back(e.ToJson());
  return {{"generation", generation}, {"entries", std::move(list)}};
}

Result<NatTable> NatTable::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  NatTable t;
  t.generation = FP_TRY(f.Int("generation", 0, std::numeric_limits<int64_t>::max()));
  for (const auto& [element, path] : FP_TRY(f.Array("entries"))) {
    t.entries.push_back(FP_TRY(ParseNatEntry(*element, path)));
  }
  return t;
}

Result<NatTable> NatTable::Parse(std::string_view text) {
  NatTable t;
  std::optional<Error> failed;
  bool in_entries = false;  // inside the top-level object's "entries" array
  // Depths as nlohmann counts them: the top-level object's keys at 1, an element of one of
  // its arrays at 2.
  auto each = [&](int depth, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    if (depth == 1 && event == E::key) {
      in_entries = parsed == "entries";
      // A field given twice: the last one stands, as in the tree FromJson reads.
      if (in_entries) {
        t.entries.clear();
        failed.reset();
      }
    }
    if (depth == 1 && event == E::array_end) in_entries = false;
    const bool element_done = event == E::object_end || event == E::array_end || event == E::value;
    if (!in_entries || depth != 2 || !element_done) return true;
    if (!failed) {
      auto entry = ParseNatEntry(parsed, fmt::format("entries[{}]", t.entries.size()));
      if (entry) {
        t.entries.push_back(std::move(*entry));
      } else {
        failed = entry.error();
      }
    }
    return false;  // decoded: not kept in the tree
  };
  Json rest = Json::parse(text.begin(), text.end(), each, /*allow_exceptions=*/false);
  if (rest.is_discarded()) return Fail(Error::InvalidRequest("the NAT table is not valid JSON"));
  if (failed) return Fail(*failed);
  JsonFields f = FP_TRY(JsonFields::Of(rest, ""));
  t.generation = FP_TRY(f.Int("generation", 0, std::numeric_limits<int64_t>::max()));
  // What the parser left of "entries" (nothing when every element was decoded above): it must
  // still be an array.
  FP_TRY(f.Array("entries"));
  return t;
}

uint64_t wire::HashText(std::string_view text) {
  // FNV-1a, then a finalizer that spreads every input bit over the word (a sum of raw FNV
  // values would let similar entries cancel out less evenly).
  uint64_t h = 0xcbf29ce484222325u;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3u;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9u;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebu;
  h ^= h >> 31;
  return h;
}

Result<uint64_t> wire::ParseDigest(const Json& j, std::string_view path) {
  std::string text = j.is_string() ? j.get<std::string>() : "";
  uint64_t d = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d, 16);
  if (text.size() != 16 || ec != std::errc() || end != text.data() + text.size()) {
    return Fail(Error::InvalidRequest(
        fmt::format("field \"{}\": expected a digest of 16 hex digits", path)));
  }
  return d;
}

uint64_t NatEntryHash(const NatEntry& e) {
  // Over a canonical text of the entry.
  return wire::HashText(fmt::format("{}|{}|{}|{}|{}|{}", e.external_ip.ToString(), e.first_port,
                                    e.last_port, e.sled_address.ToString(), e.vni, e.mac));
}

std::string FormatNatDigest(uint64_t digest) { return fmt::format("{:016x}", digest); }

Json NatStatus::ToJson() const {
  return {{"boot_id", boot_id},
          {"generation", generation},
          {"entries", entries},
          {"digest", FormatNatDigest(digest)}};
}

Result<NatStatus> NatStatus::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  NatStatus s;
  s.boot_id = FP_TRY(f.String("boot_id"));
  s.generation = FP_TRY(f.Int("generation", 0, std::numeric_limits<int64_t>::max()));
  s.entries = FP_TRY(f.Int("entries", 0, std::numeric_limits<int64_t>::max()));
  s.digest = FP_TRY(f.Digest("digest"));
  return s;
}

namespace {
constexpr std::array<std::pair<VmState, std::string_view>, 6> kVmStateNames = {{
    {VmState::kStarting, "starting"},
    {VmState::kRunning, "running"},
    {VmState::kStopping, "stopping"},
    {VmState::kStopped, "stopped"},
    {VmState::kMigrating, "migrating"},
    {VmState::kFailed, "failed"},
}};
}  // namespace

std::string_view ToString(VmState s) {
  for (const auto& [state, name] : kVmStateNames) {
    if (state == s) return name;
  }
  return "failed";
}

std::optional<VmState> ParseVmState(std::string_view text) {
  for (const auto& [state, name] : kVmStateNames) {
    if (name == text) return state;
  }
  return std::nullopt;
}

Json InstanceSpec::ToJson() const {
  return {{"id", id.ToString()},
          {"hostname", hostname},
          {"ncpus", ncpus},
          {"memory", memory},
          {"vni", vni},
          {"mac", mac},
          {"private_ipv4", OptIp(private_ipv4)},
          {"private_ipv6", OptIp(private_ipv6)},
          {"external_ips", IpList(external_ips)},
          {"snat_ip", OptIp(snat_ip)},
          {"snat_first_port", snat_first_port},
          {"snat_last_port", snat_last_port},
          {"snat6_ip", OptIp(snat6_ip)},
          {"snat6_first_port", snat6_first_port},
          {"snat6_last_port", snat6_last_port}};
}

Result<InstanceSpec> InstanceSpec::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  InstanceSpec s;
  s.id = FP_TRY(f.Id("id"));
  if (!f.IsNullOrAbsent("hostname")) s.hostname = FP_TRY(f.String("hostname"));
  s.ncpus = FP_TRY(f.OptInt("ncpus", 1, kMax, s.ncpus));
  s.memory = FP_TRY(f.OptInt("memory", 0, kMax, s.memory));
  s.vni = FP_TRY(f.OptInt("vni", 0, kMaxVni, s.vni));
  // An instance without a network interface has no MAC: "" (or null, or absent).
  if (!f.IsNullOrAbsent("mac") && *FP_TRY(f.Get("mac")) != "") s.mac = FP_TRY(f.Mac("mac"));
  s.private_ipv4 = FP_TRY(f.OptIp("private_ipv4"));
  s.private_ipv6 = FP_TRY(f.OptIp("private_ipv6"));
  if (!f.IsNullOrAbsent("external_ips")) s.external_ips = FP_TRY(f.IpList("external_ips"));
  s.snat_ip = FP_TRY(f.OptIp("snat_ip"));
  s.snat_first_port = static_cast<int>(FP_TRY(f.OptInt("snat_first_port", 0, 65535, 0)));
  s.snat_last_port = static_cast<int>(FP_TRY(f.OptInt("snat_last_port", 0, 65535, 0)));
  if (s.snat_first_port > s.snat_last_port) {
    return Fail(f.Invalid("snat_last_port", "must not be below snat_first_port"));
  }
  s.snat6_ip = FP_TRY(f.OptIp("snat6_ip"));
  s.snat6_first_port = static_cast<int>(FP_TRY(f.OptInt("snat6_first_port", 0, 65535, 0)));
  s.snat6_last_port = static_cast<int>(FP_TRY(f.OptInt("snat6_last_port", 0, 65535, 0)));
  if (s.snat6_first_port > s.snat6_last_port) {
    return Fail(f.Invalid("snat6_last_port", "must not be below snat6_first_port"));
  }
  return s;
}

Json SledInstance::ToJson() const {
  return {{"id", id.ToString()},
          {"state", ToString(state)},
          {"external_ips", IpList(external_ips)},
          {"snat_ip", OptIp(snat_ip)},
          {"snat6_ip", OptIp(snat6_ip)},
          {"boots", boots}};
}

Result<SledInstance> SledInstance::FromJson(const Json& j) { return ParseSledInstance(j, ""); }

Json SledReport::ToJson() const {
  Json list = Json::array();
  for (const SledInstance& i : instances) list.push_back(i.ToJson());
  Json gone = Json::array();
  for (const Uuid& id : removed) gone.push_back(id.ToString());
  return {{"boot_id", boot_id},
          {"generation", generation},
          {"full", full},
          {"instances", std::move(list)},
          {"removed", std::move(gone)}};
}

Result<SledReport> SledReport::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  SledReport r;
  r.boot_id = FP_TRY(f.String("boot_id"));
  r.generation = FP_TRY(f.Int("generation", 0, std::numeric_limits<int64_t>::max()));
  r.full = FP_TRY(f.Bool("full"));
  for (const auto& [element, path] : FP_TRY(f.Array("instances"))) {
    r.instances.push_back(FP_TRY(ParseSledInstance(*element, path)));
  }
  for (const auto& [element, path] : FP_TRY(f.Array("removed"))) {
    auto id = element->is_string() ? Uuid::Parse(element->get<std::string>()) : std::nullopt;
    if (!id) {
      return Fail(Error::InvalidRequest(fmt::format("field \"{}\": expected a UUID", path)));
    }
    r.removed.push_back(*id);
  }
  return r;
}

Json NatChangesRequest::ToJson() const {
  Json list = Json::array();
  for (const NatChange& c : changes) list.push_back(c.ToJson());
  Json j = {{"changes", std::move(list)}};
  if (boot_id) j["boot_id"] = *boot_id;
  return j;
}

std::string NatChangesRequest::Encode(const std::vector<NatChange>& changes,
                                      const std::optional<std::string>& boot_id) {
  // ToJson's text, in the order nlohmann writes its sorted objects: "boot_id" before
  // "changes", and in a change "deleted", "entry", "gen".
  std::string text;
  text.reserve(32 + changes.size() * 200);
  text += '{';
  if (boot_id) {
    text += R"("boot_id":)";
    AppendJsonText(text, *boot_id);
    text += ',';
  }
  text += R"("changes":[)";
  for (size_t i = 0; i < changes.size(); ++i) {
    const NatChange& c = changes[i];
    if (i > 0) text += ',';
    text += c.deleted ? R"({"deleted":true,"entry":)" : R"({"deleted":false,"entry":)";
    AppendNatEntryText(text, c.entry);
    fmt::format_to(std::back_inserter(text), R"(,"gen":{}}})", c.gen);
  }
  text += "]}";
  return text;
}

Result<NatChangesRequest> NatChangesRequest::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  NatChangesRequest r;
  for (const auto& [element, path] : FP_TRY(f.Array("changes"))) {
    r.changes.push_back(FP_TRY(ParseNatChange(*element, path)));
  }
  r.boot_id = FP_TRY(f.OptString("boot_id"));
  return r;
}

Json NatApplied::ToJson() const {
  Json j = {{"generation", generation}, {"boot_id", boot_id}};
  if (boot_mismatch) j["boot_mismatch"] = true;
  if (failed_gen) {
    j["failed_gen"] = *failed_gen;
    j["message"] = message;
  }
  return j;
}

Result<NatApplied> NatApplied::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  NatApplied applied;
  applied.generation = FP_TRY(f.Int("generation", 0, std::numeric_limits<int64_t>::max()));
  applied.boot_id = FP_TRY(f.String("boot_id"));
  applied.boot_mismatch = !f.IsNullOrAbsent("boot_mismatch") && FP_TRY(f.Bool("boot_mismatch"));
  if (!f.IsNullOrAbsent("failed_gen")) {
    applied.failed_gen = FP_TRY(f.Int("failed_gen", 1, std::numeric_limits<int64_t>::max()));
    applied.message = FP_TRY(f.OptString("message")).value_or("");
  }
  return applied;
}

NatReplaceWriter::NatReplaceWriter(int64_t expected_entries) {
  // An entry is about 130 characters (an IPv4 address to a sled's IPv6 underlay address).
  text_.reserve(64 + static_cast<size_t>(std::max<int64_t>(expected_entries, 0)) * 150);
  text_ = R"({"entries":[)";
}

void NatReplaceWriter::Add(const NatEntry& e) {
  if (entries_ > 0) text_ += ',';
  AppendNatEntryText(text_, e);
  ++entries_;
}

std::string NatReplaceWriter::Finish(int64_t generation, std::optional<int64_t> if_generation) && {
  fmt::format_to(std::back_inserter(text_), R"(],"generation":{})", generation);
  if (if_generation)
    fmt::format_to(std::back_inserter(text_), R"(,"if_generation":{})", *if_generation);
  text_ += '}';
  return std::move(text_);
}

std::string NatReplaceRequest::Encode(const NatTable& table, std::optional<int64_t> if_generation) {
  NatReplaceWriter writer;
  for (const NatEntry& e : table.entries) writer.Add(e);
  return std::move(writer).Finish(table.generation, if_generation);
}

Result<NatReplaceRequest> NatReplaceRequest::FromJson(const Json& j) {
  NatReplaceRequest r;
  r.table = FP_TRY(NatTable::FromJson(j));
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  if (!f.IsNullOrAbsent("if_generation")) {
    r.if_generation = FP_TRY(f.Int("if_generation", 0, std::numeric_limits<int64_t>::max()));
  }
  return r;
}

Json NatReplaced::ToJson() const {
  return {{"generation", generation}, {"replaced", replaced}, {"boot_id", boot_id}};
}

Result<NatReplaced> NatReplaced::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  NatReplaced r;
  r.generation = FP_TRY(f.Int("generation", 0, std::numeric_limits<int64_t>::max()));
  r.replaced = FP_TRY(f.Bool("replaced"));
  r.boot_id = FP_TRY(f.String("boot_id"));
  return r;
}

Json AgentError::ToJson() const {
  return {{"request_id", request_id}, {"error_code", error_code}, {"message", message}};
}

Result<AgentError> AgentError::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  AgentError e;
  e.request_id = FP_TRY(f.OptString("request_id")).value_or("");
  e.error_code = FP_TRY(f.OptString("error_code")).value_or("");
  e.message = FP_TRY(f.String("message"));
  return e;
}

Json SledIdentity::ToJson() const {
  return Json{{"underlay_address", OptIp(underlay)},
              {"serial", serial ? Json(*serial) : Json(nullptr)}};
}

Result<SledIdentity> SledIdentity::FromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  SledIdentity out;
  out.underlay = FP_TRY(f.OptIp("underlay_address"));
  out.serial = FP_TRY(f.OptString("serial"));
  if (out.serial && out.serial->empty()) out.serial.reset();
  return out;
}

Json SledInstancesToJson(const std::vector<SledInstance>& instances) {
  Json list = Json::array();
  for (const SledInstance& instance : instances) list.push_back(instance.ToJson());
  return Json{{"instances", std::move(list)}};
}

Result<std::vector<SledInstance>> SledInstancesFromJson(const Json& j) {
  JsonFields f = FP_TRY(JsonFields::Of(j, ""));
  std::vector<SledInstance> out;
  for (const auto& [element, path] : FP_TRY(f.Array("instances"))) {
    out.push_back(FP_TRY(ParseSledInstance(*element, path)));
  }
  return out;
}

}  // namespace fp::agents
