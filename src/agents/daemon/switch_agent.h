#pragma once

// The switch agent daemon: the rack switch's NAT table, held in memory and, with a dataplane
// (agents/linux: nftables), installed in it; served over HTTP.
//
//   GET  /nat          {"generation": N, "entries": [NatEntry...]}, sorted by external_ip
//                      then first_port
//   GET  /nat/status   NatStatus: {"boot_id", "generation", "entries": N, "digest"} (the
//                      control plane's heartbeat; the digest is kept as the table changes)
//   POST /nat/changes  {"changes": [NatChange...], "boot_id": B (optional)}
//                      → {"generation": N, "boot_id": ...}. With a boot_id that is not this
//                      run's, applies nothing and adds "boot_mismatch": true. Otherwise
//                      Applies, in order, each change whose gen is above the generation:
//                      an addition replaces every entry of the same external_ip whose port
//                      range overlaps it; a deletion removes the entry with exactly that
//                      (external_ip, first_port, last_port), if any. After each applied change
//                      the generation becomes its gen. At the first change it cannot install
//                      (the table is full) it stops without advancing past it, and the answer
//                      adds {"failed_gen": G, "message": "..."}. Idempotent. (An
//                      `apply_first` fault makes it stop the same way after K changes.)
//   GET  /nat/buckets?count=N  NatBuckets: {"boot_id", "generation", "digests": [...],
//                      "entries": [...]}, the table split into N buckets (agents.h:
//                      NatEntryBucket), each bucket's digest and entry count
//   POST /nat/buckets  {"count": N, "buckets": [B...], "entries": [...], "generation": G,
//                      "if_generation": I, "if_digest", "if_boot_id"}
//                      → {"generation", "replaced", "boot_id", "added",
//                      "removed", "changed"}: the entries of the listed buckets become the
//                      given ones (each of which falls in one of them) and the generation G,
//                      only if the generation is I, the digest "if_digest" and the run
//                      "if_boot_id" ("replaced": false otherwise). A drift
//                      repair that sends only the buckets that differ. 507 if they do not fit;
//                      a G below the generation starts a new run, as PUT does.
//   PUT  /nat          {"generation": G, "entries": [...], "if_generation": I (optional)}
//                      → {"generation": G, "replaced": true, "boot_id": ...}; with an
//                      if_generation that is not the generation, replaces nothing and
//                      answers "replaced": false. (Each body and answer is a type of
//                      agents.h with its one JSON codec in wire_json.cc.)
//                      Replaces the whole table (a full resync); 507 and no change if the
//                      entries do not fit. Idempotent. A G below the generation starts a new
//                      run (boot_id), as a restart would, without losing the table.
//
// plus the fault and reset endpoints of every simulated agent (agent_server.h). A reset
// empties the table, sets the generation to 0 and starts a new run (boot_id), as a restart of
// the real agent does.
//
// With a dataplane (NatDataplane: the Linux agent's nftables maps) every change also takes
// effect there, each request's changes in one step, before the agent answers: an entry the
// dataplane cannot hold is refused as the first change it cannot install (failed_gen, or 400
// for PUT), and a dataplane that fails leaves the table, and the generation, as they were.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agents/agents.h"
#include "agents/daemon/agent_server.h"
#include "agents/nat_dataplane.h"
#include "common/mutex.h"

namespace fp::agents::daemon {

class SwitchAgentDaemon {
 public:
  // Starts serving on options.host:options.port (uses options.nat_capacity).
  // Errors: those of http::HttpServer::Start.
  static Result<std::unique_ptr<SwitchAgentDaemon>> Start(
      const DaemonOptions& options, std::unique_ptr<NatDataplane> dataplane = nullptr);
  ~SwitchAgentDaemon();
  SwitchAgentDaemon(const SwitchAgentDaemon&) = delete;
  SwitchAgentDaemon& operator=(const SwitchAgentDaemon&) = delete;

  uint16_t port() const { return server_->port(); }
  std::string base_url() const { return server_->base_url(); }
  std::vector<std::pair<std::string, std::string>> Endpoints() const {
    return server_->Endpoints();
  }
  // Stops serving; calls held by faults are refused. Idempotent.
  void Stop();

  // Direct access for tests; thread-safe. The same table GET /nat answers.
  NatTable Nat() const;
  NatStatus CurrentStatus() const;
  FaultInjector& faults() { return faults_; }
  // Handles one request as the HTTP front would (the simulation's network calls it).
  http::HttpResponse Serve(const http::HttpRequest& request) { return server_->Serve(request); }

 private:
  using EntryKey = std::pair<IpAddr, int>;  // external_ip, first_port
  // An entry as the table holds it, with its hashes, so that the digest and the buckets are
  // sums of what was computed once, when it came: never a hash of every entry under the lock
  // (at 100,000 entries a GET /nat/buckets would hold NAT changes up for tens of ms).
  struct Held {
    explicit Held(const NatEntry& e) : entry(e), hash(NatEntryHash(e)), key_hash(NatKeyHash(e)) {}
    NatEntry entry;
    uint64_t hash;      // NatEntryHash: its part of the digest
    uint64_t key_hash;  // NatKeyHash: its bucket
  };
  using Table = std::map<EntryKey, Held>;
  // The keys a request touched, each with its entry before it did (nullopt: none).
  using Before = std::map<EntryKey, std::optional<Held>>;

  SwitchAgentDaemon(const DaemonOptions& options, std::unique_ptr<NatDataplane> dataplane)
      : nat_capacity_(options.nat_capacity),
        random_(options.random_or_machine()),
        dataplane_(std::move(dataplane)),
        boot_id_(random_.NewUuid().ToString()),
        faults_(options.clock_or_machine()) {}
  EndpointRoutes Routes();
  // Applies `changes` in order; with `limit`, only the first `limit` of them (the next one is
  // then reported as failed, with `limit_reason` as the message).
  // With `boot_id`, nothing is applied unless it names this run. The answer names the run it
  // was applied on.
  NatApplied Apply(const std::vector<NatChange>& changes, std::optional<int64_t> limit = {},
                   std::string_view limit_reason = {},
                   const std::optional<std::string>& boot_id = std::nullopt);
  // Installs `entry` into `table`, replacing overlapping entries of the same address; false if
  // the table is full.
  // `touch` is called with every key it is about to change, first.
  bool Install(Table& table, const NatEntry& entry,
               const std::function<void(const EntryKey&)>& touch = {}) const;
  void Reset();
  // Notes `key`'s entry in `before` unless it is there already.
  void Touch(Before& before, const EntryKey& key) const FP_REQUIRES(mu_);
  // Puts the keys of `before` back as they were.
  void PutBack(const Before& before) FP_REQUIRES(mu_);
  // Takes what changed in the table since `before` to the dataplane (in one step) and to the
  // digest. If the dataplane refuses, the table is put back and its error returned.
  Status Settle(const Before& before) FP_REQUIRES(mu_);
  // GET and POST /nat/buckets.
  NatBuckets Buckets(uint32_t count) const;
  Result<NatBucketsRepaired> RepairBuckets(const NatBucketsRepair& repair);

  const size_t nat_capacity_;
  Random& random_;
  // May be null. Apply and ReplaceAll are called under mu_; Check (const, it only looks at the
  // entry) also without it, so the pointer is not annotated FP_PT_GUARDED_BY(mu_).
  const std::unique_ptr<NatDataplane> dataplane_;
  mutable Mutex mu_;
  int64_t generation_ FP_GUARDED_BY(mu_) = 0;
  Table entries_ FP_GUARDED_BY(mu_);
  uint64_t digest_ FP_GUARDED_BY(mu_) = 0;  // of entries_ (NatEntryHash)
  std::string boot_id_ FP_GUARDED_BY(mu_);
  // The handlers' fault injector: here, not in server_, which Start assigns after the server
  // began to listen (a call may arrive before). Declared before it, so destroyed after it.
  FaultInjector faults_;
  std::unique_ptr<AgentServer> server_;
};

}  // namespace fp::agents::daemon
