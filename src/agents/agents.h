#pragma once

// What the control plane asks of the dataplane agents, and the types on their wire. The
// control plane talks to agents over HTTP only (agent_clients.cc); the simulated agents
// (sim/) serve the same HTTP API from memory.
//
// Every client call has a deadline; an agent that does not answer in time, refuses the
// connection or answers 5xx gives ServiceUnavailable whose message names the agent and its
// address. A 4xx answer (a request the agent considers wrong) gives Internal.
//
// A request on a reused keep-alive connection that the agent had closed is sent once more on a
// new connection (HttpClient), so an agent may see a request twice. Every request here is safe
// to repeat: NAT changes carry generations and the switch skips those it already has, and
// adding or removing a VM's external IP is a set operation.
//
// The wire types below convert to and from JSON; FromJson never throws and returns
// InvalidRequest naming the offending field (e.g. `field "entries[2].first_port": ...`).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agents/agent_secret.h"
#include "common/error.h"
#include "common/ip.h"
#include "common/uuid.h"
#include "http/caller.h"

namespace fp::agents {

// Whom a call to an agent is made for: the API request and the saga doing the work, sent with
// the call (kRequestIdHeader, kSagaIdHeader) so that the agent's log lines about it name what
// an operator finds in the server's log, the audit log and the saga's story. Empty for the
// control plane's own background work (heartbeats, reports, repairs).
struct CallContext {
  std::string request_id;
  std::string saga_id;
  // The headers to send: one per field that is set.
  std::vector<std::pair<std::string, std::string>> Headers() const;
};
inline constexpr const char* kRequestIdHeader = "x-floatplane-request-id";
inline constexpr const char* kSagaIdHeader = "x-floatplane-saga-id";

// One NAT mapping on the rack switch: traffic to external_ip, ports first_port..last_port, is
// sent to the sled (its underlay IPv6 address) and delivered to the VM's port (VNI + MAC).
struct NatEntry {
  IpAddr external_ip;
  int first_port = 0;
  int last_port = 65535;
  IpAddr sled_address;
  int64_t vni = 0;
  std::string mac;  // "a8:40:25:00:00:01"

  bool operator==(const NatEntry&) const = default;
  nlohmann::json ToJson() const;
  static Result<NatEntry> FromJson(const nlohmann::json& j);
};

// A NAT change in the switch's change feed: an addition or a removal at generation `gen`.
struct NatChange {
  NatEntry entry;
  int64_t gen = 0;
  bool deleted = false;

  bool operator==(const NatChange&) const = default;
  // {"entry": {...}, "gen": G, "deleted": bool}
  nlohmann::json ToJson() const;
  static Result<NatChange> FromJson(const nlohmann::json& j);
};

struct NatTable {
  int64_t generation = 0;
  std::vector<NatEntry> entries;

  bool operator==(const NatTable&) const = default;
  // {"generation": N, "entries": [...]}
  nlohmann::json ToJson() const;
  static Result<NatTable> FromJson(const nlohmann::json& j);
  // FromJson of the JSON text, without its tree: each entry is decoded as the parser finishes it
  // and then dropped, so a table of 100,000 entries costs its entries, not a JSON tree of them
  // (a few hundred bytes each). Errors as FromJson's; InvalidRequest for text that is no JSON.
  static Result<NatTable> Parse(std::string_view text);
};

// A digest of a NAT table that the switch agent and the control plane compute alike: the sum
// (mod 2^64) of NatEntryHash over the entries, so that adding or removing one entry changes it
// in O(1) and two tables with the same entries have the same digest whatever their order.
uint64_t NatEntryHash(const NatEntry& e);
// 16 lowercase hex digits, as the wire carries it.
std::string FormatNatDigest(uint64_t digest);

// Where a switch agent is (GET /nat/status, the control plane's heartbeat): its run (a
// restarted agent has a new boot_id), its generation, and its table's size and digest.
struct NatStatus {
  std::string boot_id;
  int64_t generation = 0;
  int64_t entries = 0;
  uint64_t digest = 0;

  bool operator==(const NatStatus&) const = default;
  // {"boot_id": ..., "generation": N, "entries": N, "digest": "16 hex digits"}
  nlohmann::json ToJson() const;
  static Result<NatStatus> FromJson(const nlohmann::json& j);
};

// POST /nat/changes: the changes to install, in order; with a boot_id, on that run of the
// agent only.
struct NatChangesRequest {
  std::vector<NatChange> changes;
  std::optional<std::string> boot_id;

  bool operator==(const NatChangesRequest&) const = default;
  // {"changes": [NatChange...], "boot_id": B (absent: whichever run answers)}
  nlohmann::json ToJson() const;
  // The same as JSON text (ToJson().dump()'s, byte for byte), written without a tree and
  // without copying the changes into a request.
  static std::string Encode(const std::vector<NatChange>& changes,
                            const std::optional<std::string>& boot_id);
  static Result<NatChangesRequest> FromJson(const nlohmann::json& j);
};

// What POST /nat/changes answered.
struct NatApplied {
  int64_t generation = 0;
  std::string boot_id;         // the agent's run
  bool boot_mismatch = false;  // another run: nothing was applied
  // The first change the switch did not install (it stopped before it), and why.
  std::optional<int64_t> failed_gen;
  std::string message;

  bool operator==(const NatApplied&) const = default;
  // {"generation": N, "boot_id": ..., "boot_mismatch": true (absent: false),
  //  "failed_gen": G, "message": "..." (both absent: every change was installed)}
  nlohmann::json ToJson() const;
  static Result<NatApplied> FromJson(const nlohmann::json& j);
};

// PUT /nat: the whole table; with if_generation, only if the switch is at that generation still.
struct NatReplaceRequest {
  NatTable table;
  std::optional<int64_t> if_generation;

  bool operator==(const NatReplaceRequest&) const = default;
  // NatTable's {"generation", "entries"} and "if_generation": G (absent: unconditional)
  nlohmann::json ToJson() const { return nlohmann::json::parse(Encode(table, if_generation)); }
  // The same as JSON text, without copying the table into a request (NatReplaceWriter).
  static std::string Encode(const NatTable& table, std::optional<int64_t> if_generation);
  static Result<NatReplaceRequest> FromJson(const nlohmann::json& j);
};

struct NatBuckets;

// A PUT /nat body (NatReplaceRequest's JSON) written entry by entry as text, for a caller that
// reads its table a page at a time: a whole table is 100,000 entries at rack scale, about 13
// MiB of text, which as entries would be 11 MiB more and as a JSON tree some 50 MiB.
class NatReplaceWriter {
 public:
  // `expected_entries`: room is made for about that many at once (a text grown by doubling
  // holds its old and new copies for a moment).
  explicit NatReplaceWriter(int64_t expected_entries = 0);
  void Add(const NatEntry& e);
  int64_t entries() const { return entries_; }
  // The body, with the table's generation and the condition (nullopt: unconditional).
  std::string Finish(int64_t generation, std::optional<int64_t> if_generation) &&;
  // A POST /nat/buckets body (NatBucketsRepair) instead: the entries added are those of
  // `buckets` (of `count`), judged against the switch's `compared` (its run, generation and
  // whole digest are the condition).
  std::string FinishBuckets(uint32_t count, const std::vector<uint32_t>& buckets,
                            int64_t generation, const NatBuckets& compared) &&;

 private:
  std::string text_;
  int64_t entries_ = 0;
};

// What PUT /nat answered.
struct NatReplaced {
  int64_t generation = 0;  // the switch's generation after the call
  bool replaced = true;    // false: the switch was not at if_generation; nothing changed
  std::string boot_id;

  bool operator==(const NatReplaced&) const = default;
  // {"generation": N, "replaced": bool, "boot_id": ...}
  nlohmann::json ToJson() const;
  static Result<NatReplaced> FromJson(const nlohmann::json& j);
};

// A drift repair that moves only what differs (GET and POST /nat/buckets): the switch and the
// control plane both split a table into `count` buckets by a hash of each entry's key
// (external_ip, first_port), compare a digest per bucket (NatEntryHash summed, as the table's
// digest), and only the buckets that differ are sent. At rack scale (100,000 entries in some
// 4,000 buckets: loops::NatBucketCount) one lost entry is repaired by sending its bucket's two
// dozen entries, not the whole table.
inline constexpr uint32_t kMaxNatBuckets = 65536;
// A hash of `e`'s key (external_ip, first_port) that every build computes alike; its bucket of
// `count` (>= 1) is NatKeyHash(e) % count.
uint64_t NatKeyHash(const NatEntry& e);
inline uint32_t NatEntryBucket(uint64_t key_hash, uint32_t count) {
  return static_cast<uint32_t>(key_hash % (count == 0 ? 1 : count));
}
inline uint32_t NatEntryBucket(const NatEntry& e, uint32_t count) {
  return NatEntryBucket(NatKeyHash(e), count);
}

// GET /nat/buckets?count=N: where the switch is, and per bucket its digest and entry count.
struct NatBuckets {
  std::string boot_id;
  int64_t generation = 0;
  std::vector<uint64_t> digests;  // one per bucket
  std::vector<int64_t> entries;   // one per bucket

  // The buckets of `entries` (count of them).
  static NatBuckets Of(const std::vector<NatEntry>& entries, uint32_t count);
  // The whole table's digest (NatStatus's): the sum of the buckets'.
  uint64_t digest() const;
  bool operator==(const NatBuckets&) const = default;
  // {"boot_id", "generation", "digests": ["16 hex digits", ...], "entries": [N, ...]}
  nlohmann::json ToJson() const;
  static Result<NatBuckets> FromJson(const nlohmann::json& j);
};

// POST /nat/buckets: the entries of `buckets` (of `count`) become `entries`, each of which falls
// in one of them, only if the switch's table is the one compared still: the same run
// (if_boot_id), generation (if_generation) and whole digest (if_digest). The generation alone
// would not do: a repair by another server at the same generation changes buckets without
// changing it, and this repair's unchanged buckets were judged on what it replaced. Its
// generation becomes `generation` (below the current one: a new run, as PUT /nat).
struct NatBucketsRepair {
  uint32_t count = 1;
  std::vector<uint32_t> buckets;
  std::vector<NatEntry> entries;
  int64_t generation = 0;
  int64_t if_generation = 0;
  uint64_t if_digest = 0;
  std::string if_boot_id;

  bool operator==(const NatBucketsRepair&) const = default;
  // {"count", "buckets": [...], "entries": [...], "generation", "if_generation", "if_digest":
  // "16 hex digits", "if_boot_id"}; written by NatReplaceWriter::FinishBuckets.
  static Result<NatBucketsRepair> FromJson(const nlohmann::json& j);
};

// What POST /nat/buckets answered: as NatReplaced, and what the repair changed.
struct NatBucketsRepaired {
  int64_t generation = 0;
  bool replaced = true;  // false: the table was not the one compared; nothing changed
  std::string boot_id;
  int64_t added = 0;    // keys it lacked
  int64_t removed = 0;  // keys it held that the repair does not want
  int64_t changed = 0;  // keys it held with another entry

  bool operator==(const NatBucketsRepaired&) const = default;
  nlohmann::json ToJson() const;
  static Result<NatBucketsRepaired> FromJson(const nlohmann::json& j);
};

// What an agent answers with any status that is not 2xx.
struct AgentError {
  std::string request_id;
  std::string error_code;  // Error::ErrorCode()
  std::string message;

  bool operator==(const AgentError&) const = default;
  // {"request_id": ..., "error_code": ..., "message": ...}
  nlohmann::json ToJson() const;
  static Result<AgentError> FromJson(const nlohmann::json& j);
};

class SwitchAgentClient {
 public:
  virtual ~SwitchAgentClient() = default;
  // The switch's installed table (GET /nat).
  virtual Result<NatTable> GetNat() = 0;
  // Applies `changes` in order (POST /nat/changes). The switch applies each change whose gen
  // is above its generation, stops at the first it cannot install, and returns the generation
  // it reached (never past a change it failed to install). Idempotent.
  virtual Result<int64_t> ApplyChanges(const std::vector<NatChange>& changes) = 0;
  // ApplyChanges on the run `boot_id` of the agent only: an agent that restarted since (another
  // run, its table lost) applies nothing and says so, so that changes never land on a table
  // that lacks the ones before them. Errors as ApplyChanges's.
  virtual Result<NatApplied> ApplyChangesOn(const std::string& boot_id,
                                            const std::vector<NatChange>& changes,
                                            const CallContext& context) = 0;
  Result<NatApplied> ApplyChangesOn(const std::string& boot_id,
                                    const std::vector<NatChange>& changes) {
    return ApplyChangesOn(boot_id, changes, CallContext{});
  }
  // GET /nat/status: cheap, for a heartbeat.
  virtual Result<NatStatus> GetStatus() = 0;
  // Replaces the whole table with `table` (PUT /nat): a full resync. Idempotent.
  virtual Result<int64_t> ReplaceAll(const NatTable& table) = 0;
  // ReplaceAll only if the switch is at generation `if_generation` still (PUT /nat with
  // "if_generation"): a repair judged on a table read at that generation never overwrites a
  // change another server sent meanwhile. Returns the new generation, or nullopt (nothing
  // replaced) if the switch is at another generation.
  virtual Result<std::optional<int64_t>> ReplaceAllIf(const NatTable& table,
                                                      int64_t if_generation) = 0;
  // ReplaceAllIf with its request already written (NatReplaceWriter, condition included): a
  // whole table sent without ever being held as entries. The HTTP client sends it as it is;
  // by default (test doubles) it is decoded and given to ReplaceAllIf.
  virtual Result<std::optional<int64_t>> ReplaceAllIfWritten(std::string body);
  // GET /nat/buckets?count=N. By default (test doubles) computed from GetStatus and GetNat.
  virtual Result<NatBuckets> GetNatBuckets(uint32_t count);
  // POST /nat/buckets with its request already written (NatReplaceWriter::FinishBuckets). By
  // default decoded, applied to GetNat's table and given to ReplaceAllIf.
  virtual Result<NatBucketsRepaired> RepairBucketsWritten(std::string body);
  virtual const std::string& address() const = 0;
};

enum class VmState { kStarting, kRunning, kStopping, kStopped, kMigrating, kFailed };
std::string_view ToString(VmState s);
std::optional<VmState> ParseVmState(std::string_view text);

// What a sled needs to run an instance.
struct InstanceSpec {
  Uuid id;
  std::string hostname;  // "" when not given
  int64_t ncpus = 1;
  int64_t memory = 0;
  int64_t vni = 0;
  std::string mac;
  std::optional<IpAddr> private_ipv4;
  std::optional<IpAddr> private_ipv6;
  std::vector<IpAddr> external_ips;  // floating and ephemeral (the port's 1:1 NAT)
  std::optional<IpAddr> snat_ip;     // with its port range
  int snat_first_port = 0;
  int snat_last_port = 0;
  // The IPv6 SNAT block (an addition: absent for agents and servers from before it).
  std::optional<IpAddr> snat6_ip;
  int snat6_first_port = 0;
  int snat6_last_port = 0;

  bool operator==(const InstanceSpec&) const = default;
  nlohmann::json ToJson() const;
  static Result<InstanceSpec> FromJson(const nlohmann::json& j);
};

// An instance as its sled sees it. `external_ips` are the addresses on the VM's port: the
// floating and ephemeral addresses in the order they were added, then the SNAT addresses last
// (IPv4, then IPv6) if the instance has them; `snat_ip` and `snat6_ip` say which ones those are
// (additions to the wire format: tools that only read `external_ips` see every address the port
// answers on).
struct SledInstance {
  Uuid id;
  VmState state = VmState::kStopped;
  std::vector<IpAddr> external_ips;
  std::optional<IpAddr> snat_ip;
  std::optional<IpAddr> snat6_ip;
  // Times the VM has come up (starting -> running) since the sled registered it: a reboot
  // adds one, a migration starts over at the destination. 0 when the sled does not say.
  int64_t boots = 0;

  bool operator==(const SledInstance&) const = default;
  nlohmann::json ToJson() const;
  static Result<SledInstance> FromJson(const nlohmann::json& j);
};

// What changed on a sled since a generation of one run of its agent (GET /changes): the
// sled's report, which the control plane waits for instead of asking after each instance.
// `boot_id` names the agent's run (a restarted or reset agent has a new one); `generation`
// is the last change of that run included. With `full`, `instances` is every VM the sled holds
// and `removed` is empty (the caller named another run, or fell further behind than the agent
// remembers removals); else `instances` are the VMs changed after the caller's generation
// (their state as of now) and `removed` the VMs removed since.
struct SledReport {
  std::string boot_id;
  int64_t generation = 0;
  bool full = false;
  std::vector<SledInstance> instances;
  std::vector<Uuid> removed;

  bool operator==(const SledReport&) const = default;
  nlohmann::json ToJson() const;
  static Result<SledReport> FromJson(const nlohmann::json& j);
};

// A sled's VMs as GET /instances answers them: {"instances": [SledInstance...]}.
nlohmann::json SledInstancesToJson(const std::vector<SledInstance>& instances);
Result<std::vector<SledInstance>> SledInstancesFromJson(const nlohmann::json& j);

// What a sled agent says of its sled (GET /sled).
struct SledIdentity {
  // The sled's serial number, when its agent was given one: the control plane keeps one sled
  // per serial, so an agent that comes back on another address is the same sled. nullopt: the
  // control plane names the sled by its agent's URL.
  std::optional<std::string> serial;
  // The sled's underlay address when its dataplane has one of its own (the Linux agent's; NAT
  // entries must name it); nullopt when the control plane may assign one (the simulated agent).
  std::optional<IpAddr> underlay;

  // {"underlay_address": ... or null, "serial": ... or null}
  nlohmann::json ToJson() const;
  static Result<SledIdentity> FromJson(const nlohmann::json& j);
};

class SledAgentClient {
 public:
  virtual ~SledAgentClient() = default;
  // PUT /instances/{id}: registers (or updates) the instance and starts it; the sled answers
  // at once with state starting (or running if already running), and moves to running after
  // its start delay. Idempotent.
  // The calls that change something take the CallContext they are made for; their forms
  // without one are for background work.
  virtual Result<SledInstance> EnsureRunning(const InstanceSpec& spec,
                                             const CallContext& context) = 0;
  Result<SledInstance> EnsureRunning(const InstanceSpec& spec) {
    return EnsureRunning(spec, CallContext{});
  }
  // POST /instances/{id}/stop: stopping, then stopped after the stop delay. A missing
  // instance is already stopped. Idempotent.
  virtual Result<SledInstance> Stop(const Uuid& id, const CallContext& context) = 0;
  Result<SledInstance> Stop(const Uuid& id) { return Stop(id, CallContext{}); }
  // DELETE /instances/{id}: forgets a stopped instance (stops it first if needed).
  // Idempotent: a missing instance is fine.
  virtual Status Unregister(const Uuid& id, const CallContext& context) = 0;
  Status Unregister(const Uuid& id) { return Unregister(id, CallContext{}); }
  // GET /instances/{id}; NotFound if the sled does not know it.
  virtual Result<SledInstance> Get(const Uuid& id) = 0;
  // GET /instances.
  virtual Result<std::vector<SledInstance>> List() = 0;
  // GET /changes: the changes after `since` of the run `boot_id` (empty: the whole list), the
  // sled waiting up to `wait` (at most 30 s) for one when there is none yet. The call's
  // deadline is 30 s plus the client's timeout, whatever `wait`.
  virtual Result<SledReport> Changes(const std::string& boot_id, int64_t since,
                                     std::chrono::milliseconds wait) = 0;
  // Ends a Changes call in progress at once (it fails), and fails every later one: for a
  // watcher that is stopping. The other calls are unaffected.
  virtual void AbandonReports() = 0;
  // PUT / DELETE /instances/{id}/external-ips/{ip}: the VM's port gains or loses an external
  // address. Idempotent. NotFound if the sled does not know the instance.
  virtual Status AddExternalIp(const Uuid& id, const IpAddr& ip, const CallContext& context) = 0;
  Status AddExternalIp(const Uuid& id, const IpAddr& ip) {
    return AddExternalIp(id, ip, CallContext{});
  }
  virtual Status RemoveExternalIp(const Uuid& id, const IpAddr& ip, const CallContext& context) = 0;
  // AddExternalIp (`add`) or RemoveExternalIp in two steps: sent here, answered at Finish (with
  // those calls' errors), so that the caller tells the switches while the sled works.
  class PendingPortChange {
   public:
    virtual ~PendingPortChange() = default;
    virtual Status Finish() = 0;
  };
  virtual std::unique_ptr<PendingPortChange> StartExternalIpChange(bool add, const Uuid& id,
                                                                   const IpAddr& ip,
                                                                   const CallContext& context) = 0;
  Status RemoveExternalIp(const Uuid& id, const IpAddr& ip) {
    return RemoveExternalIp(id, ip, CallContext{});
  }
  // GET /sled: who the sled is (see SledIdentity).
  virtual Result<SledIdentity> Identity() = 0;
  virtual const std::string& address() const = 0;
};

// HTTP clients. `base_url` is "http://HOST:PORT"; every call times out after `timeout_ms` and
// presents `secret` if given (agents given one refuse calls without it).
std::unique_ptr<SwitchAgentClient> MakeSwitchAgentClient(
    std::string base_url, int timeout_ms, const std::optional<AgentSecret>& secret = std::nullopt);
std::unique_ptr<SledAgentClient> MakeSledAgentClient(
    std::string base_url, int timeout_ms, const std::optional<AgentSecret>& secret = std::nullopt);

// The same clients over any Caller (the simulation's network, src/sim/): the same requests and
// answers. A sled's client makes a second caller, with a longer timeout, for its change feed.
using CallerFactory =
    std::function<std::unique_ptr<http::Caller>(std::chrono::milliseconds timeout)>;
std::unique_ptr<SwitchAgentClient> MakeSwitchAgentClient(std::unique_ptr<http::Caller> caller);
std::unique_ptr<SledAgentClient> MakeSledAgentClient(CallerFactory connect,
                                                     std::chrono::milliseconds timeout);

}  // namespace fp::agents
