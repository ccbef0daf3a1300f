#pragma once

// A deterministic simulation of the control plane (FoundationDB's approach): the rack of
// sim/rack.h driven on one thread by a random workload from one seed — instances created,
// started, stopped, migrated and deleted, floating IPs created, attached, detached, moved and
// deleted, ephemeral IPs attached and detached, the sled watcher's passes — while the network
// loses and duplicates messages, agents hang and restart with their state lost, and the server
// crashes after a saga's node and recovers. Time is a ManualClock the run moves. Then it
// quiesces (faults off, time passing, recovery, the watcher and NAT repair run) and checks the
// invariants of spec/sagas-and-reliability.md: no saga left unfinished, every switch holding
// exactly the datastore's NAT, every sled running exactly the instances the datastore places
// there with exactly their addresses, no address held twice, nothing left mid-attach.
//
// The same seed gives the same run: the report's trace hash covers every step's outcome and
// the final state.

#include <cstdint>
#include <string>
#include <vector>

#include "sim/rack.h"

namespace fp::sim {

struct RunOptions {
  uint64_t seed = 1;
  int operations = 60;
  // Network faults, agent hangs and restarts, server crashes; off: only the workload.
  bool faults = true;
  // The rack; with several servers (shape.servers), operations go to any running one, servers
  // stop and start again among the faults, and at the end the stopped ones stay stopped: the
  // others must adopt what they left.
  RackShape shape;
  // Where the run's SQLite file goes; empty: a fresh temporary directory (on /dev/shm where
  // there is one), removed after.
  std::string dir;
  // Run on this empty PostgreSQL database instead of SQLite (sim_test compares the two).
  std::string postgres_url;
  // Failed and slow syncs of SQLite's log among the faults (never on PostgreSQL, whose log is
  // its own; off where a run is compared with one on PostgreSQL).
  bool log_sync_faults = true;
};

struct RunReport {
  uint64_t seed = 0;
  uint64_t trace_hash = 0;
  int operations = 0;
  int succeeded = 0;  // operations that returned success
  int server_crashes = 0;
  int64_t adopted = 0;  // sagas a server adopted from another (RackShape::servers > 1)
  int agent_restarts = 0;
  int64_t network_faults = 0;
  int64_t slow_syncs = 0;               // syncs of the log that took simulated seconds
  std::vector<std::string> violations;  // invariants that did not hold after quiescing
  std::vector<std::string> trace;       // one line per step, and the final state
  // Where the trace diverges from `other`'s: the first differing line of each, or empty.
  std::string FirstDifference(const RunReport& other) const;
};

RunReport Run(const RunOptions& options);

// The command that replays a run ("floatplane-sim --seed N --operations M [--no-faults]").
std::string ReplayCommand(const RunOptions& options);

}  // namespace fp::sim
