#pragma once

// The simulated rack: simulated switch and sled agents (agents/daemon, no sockets, no threads of
// their own) reached through the simulation's network, and one or more control-plane servers
// (each a saga executor with every saga, a NAT reconciler, a sled watcher and the services) on
// the real datastore (a SQLite file, or PostgreSQL), all on one ManualClock and one
// SeededRandom. A server can crash (a saga's node ends it by throwing ServerCrash) and be
// started again on the same database, as a restarted process would be; the agents, other
// processes, live on.
//
// With several servers (RackShape::servers) they share the database as servers on PostgreSQL
// do: each is a saga coordinator of its own id with a lease (db/leases.h), renewed as the run
// steps (RenewLeases); a crashed server's unfinished sagas wait for it to start again, which
// takes them back, or for another server to adopt them once its lease expired (Adopt). The
// datastore object is shared (one process holds the database), so a crash of one server
// never reopens it: what the crashed server's transaction had not committed is rolled back.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "agents/daemon/sled_agent.h"
#include "agents/daemon/switch_agent.h"
#include "app/actor.h"
#include "app/floating_ips.h"
#include "app/instances.h"
#include "app/ip_pools.h"
#include "app/projects.h"
#include "app/sagas/sagas.h"
#include "common/random.h"
#include "common/testing/manual_clock.h"
#include "common/time.h"
#include "db/datastore.h"
#include "db/sagas.h"
#include "loops/nat_reconciler.h"
#include "loops/sled_watcher.h"
#include "saga/saga.h"
#include "sim/network.h"

namespace fp::sim {

// Thrown where the simulated server stops (SagaExecutor's FaultPlan::exit): not an
// std::exception, so that no handler on the way takes it for an error of the code it runs.
struct ServerCrash {};

struct RackShape {
  int switches = 2;
  int sleds = 3;
  int servers = 1;
};

// The leases of RackShape::servers > 1, as the server's defaults (app/saga_coordinator.h).
inline constexpr std::chrono::milliseconds kSimLeaseTtl{5000};
inline constexpr std::chrono::milliseconds kSimRenewInterval{1000};
inline constexpr std::chrono::milliseconds kSimAdoptGrace{2000};

class Rack {
 public:
  // Builds the agents and starts the server on a new SQLite database in `dir`, or on the empty
  // PostgreSQL database `postgres_url` names, with a silo, a project "p1" and a pool of eight
  // IPv4 addresses linked as its default.
  Rack(uint64_t seed, const std::string& dir, RackShape shape, std::string postgres_url = {});
  ~Rack();
  Rack(const Rack&) = delete;
  Rack& operator=(const Rack&) = delete;

  // The servers: how many, which are running, and the one the calls below act on (`Use`).
  size_t servers() const { return servers_.size(); }
  bool running(size_t k) const { return servers_.at(k) != nullptr; }
  size_t running_count() const {
    return static_cast<size_t>(std::count_if(servers_.begin(), servers_.end(),
                                             [](const auto& s) { return s != nullptr; }));
  }
  void Use(size_t k) { current_ = k; }
  size_t current() const { return current_; }

  // The current server's parts.
  db::Datastore& ds() { return *ds_; }
  app::Instances& instances();
  app::FloatingIps& floating_ips();
  app::IpPools& ip_pools();
  loops::SledWatcher& watcher();
  // The server's client of sled `i` (in sled_ids() order).
  agents::SledAgentClient& sled_client(size_t i);
  loops::NatReconciler& nat();
  saga::SagaExecutor& executor();
  const app::Actor& actor() const { return actor_; }
  bool has_server() const { return servers_.at(current_) != nullptr; }

  // Where in a saga's node the server stops (saga::FaultPlan): once its "succeeded" event is
  // durable; once its action applied its effect, before that event (for an action in a
  // transaction: the transaction does not commit); the same two points of its undo.
  enum class CrashPoint { kAfterNode, kInNode, kAfterUndo, kInUndo };
  // The next saga that reaches `where` of node `node` stops the server.
  void CrashAt(CrashPoint where, int node);
  // The next sync of the database's log fails, which stops the server (as a failed fdatasync
  // does: db/sqlite/engine.cc): what was committed but not yet answered is on the file or not
  // (here it is, the process's writes having reached the file), and nobody was told. SQLite only.
  void CrashAtNextLogSync();
  // The next `count` syncs of the log each take `each` (a slow or overloaded disk): the clock
  // moves on while the server waits for them, so leases, marks and timeouts measured from
  // before a commit may have run out after it. SQLite only.
  void SlowLogSyncs(int count, std::chrono::milliseconds each);
  // How many syncs SlowLogSyncs slowed so far.
  int64_t slowed_syncs() const { return slowed_syncs_->load(); }
  // One server: discards it (what was not committed is lost), opens the database again (the
  // process that held it died) and starts a new server on it, which recovers the sagas left
  // unfinished. Returns the recovery's error. After an error opening the database there is no
  // server: the run must end.
  Status Restart();
  // Several servers: discards the current server (crashed), leaving it stopped; the database
  // stays open (another process's).
  void Stop();
  // Several servers: starts the stopped server `k`, which takes its lease and its own
  // unfinished sagas back, makes it the current one and recovers what it owns. After an error
  // taking the lease it stays stopped and the current server is unchanged.
  Status Start(size_t k);
  // Resumes every saga the current server owns that is unfinished, one after another on this
  // thread (SagaExecutor::RecoverAll would use threads: the run would not repeat, and a crash
  // thrown there would end the process); with several servers, only while its lease is live.
  // A crash may stop it: ServerCrash propagates.
  Status Recover();
  // Several servers: each running server whose last renewal began kSimRenewInterval ago or
  // more renews its lease (a slow sync may make a renewal end after the lease it wrote). While a
  // server's lease is not known to be live (its last renewal began kSimLeaseTtl ago or more), its
  // executor starts no saga (ServiceUnavailable), as the coordinator's start gate does. Returns the
  // first error.
  Status RenewLeases();
  // Several servers: the current server, while its own lease is live, adopts the unfinished
  // sagas of servers whose lease expired more than kSimAdoptGrace ago and resumes them on this
  // thread. Returns how many it adopted. ServerCrash propagates.
  Result<size_t> Adopt();
  // Disarms the faults that CrashAt, CrashAtNextLogSync and SlowLogSyncs armed.
  void Disarm();

  testing::ManualClock& clock() { return *clock_; }
  SimNetwork& network() { return network_; }
  std::vector<std::unique_ptr<agents::daemon::SwitchAgentDaemon>>& switches() { return switches_; }
  std::vector<std::unique_ptr<agents::daemon::SledAgentDaemon>>& sleds() { return sleds_; }
  const std::vector<std::string>& switch_urls() const { return switch_urls_; }
  const std::vector<std::string>& sled_urls() const { return sled_urls_; }
  const std::vector<Uuid>& sled_ids() const { return sled_ids_; }

 private:
  struct Server;
  // Builds server `k` on the database; with several servers it takes its lease first.
  Status StartServer(size_t k);

  Result<std::unique_ptr<db::Datastore>> Open();
  // Installs the hook that carries out sync_faults_ on the datastore's log syncs.
  void ArmLogSyncFaults();

  // What the next syncs of the log do (the group commit's thread reads them while the driving
  // thread waits for its commit).
  struct LogSyncFaults {
    bool crash = false;
    int slow = 0;
    std::chrono::milliseconds slow_by{0};
  };

  const std::string path_;
  const std::string postgres_url_;
  std::shared_ptr<testing::ManualClock> clock_;
  std::shared_ptr<SeededRandom> random_;
  SimNetwork network_;
  std::vector<std::unique_ptr<agents::daemon::SwitchAgentDaemon>> switches_;
  std::vector<std::unique_ptr<agents::daemon::SledAgentDaemon>> sleds_;
  std::vector<std::string> switch_urls_;
  std::vector<std::string> sled_urls_;
  std::vector<Uuid> sled_ids_;
  app::Actor actor_;
  std::unique_ptr<db::Datastore> ds_;
  std::shared_ptr<LogSyncFaults> sync_faults_ = std::make_shared<LogSyncFaults>();
  std::shared_ptr<std::atomic<int64_t>> slowed_syncs_ = std::make_shared<std::atomic<int64_t>>(0);
  std::vector<std::unique_ptr<Server>> servers_;  // null: stopped; destroyed before ds_
  size_t current_ = 0;
};

}  // namespace fp::sim
