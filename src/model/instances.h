#pragma once

// Sleds, instances and their network interfaces.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/ip.h"
#include "common/time.h"
#include "common/uuid.h"

namespace fp::model {

struct Sled {
  Uuid id;
  std::string serial;
  std::string agent_url;
  IpAddr underlay_address;
  Timestamp time_created = 0;
  Timestamp time_modified = 0;
  // The operator's policy: an expunged sled is out of service for good (nothing is placed on
  // it; its instances failed when it was expunged).
  bool expunged = false;
  // Whether its agent answered the watcher's last call, and since when it does (or does not);
  // nullopt until the watcher first called it.
  std::optional<bool> agent_answers;
  std::optional<Timestamp> agent_since;
  // When the server that answers last read a report of the sled (only the server watching the
  // sleds has one; not stored).
  std::optional<Timestamp> last_report;
};

enum class InstanceState { kCreating, kNoVmm, kVmm, kFailed, kDestroyed };
std::string_view ToString(InstanceState s);
std::optional<InstanceState> ParseInstanceState(std::string_view text);
// The label Oxide's messages use: creating, no_VMM, VMM, failed, destroyed.
std::string_view Label(InstanceState s);

// What the VM is doing: the API's InstanceState (its `run_state`), as Oxide names them. Within
// InstanceState::kVmm it follows the sled's reports; kStopped, kFailed and kDestroyed go with
// the record's own state.
enum class RunState {
  kCreating,
  kStarting,
  kRunning,
  kStopping,
  kStopped,
  kRebooting,
  kMigrating,
  kRepairing,
  kFailed,
  kDestroyed,
};
// The API's text: "creating", "starting", ... "destroyed".
std::string_view ToString(RunState s);
std::optional<RunState> ParseRunState(std::string_view text);

struct Instance {
  Uuid id;
  Uuid project_id;
  std::string name;
  std::string description;
  std::string hostname;
  int64_t ncpus = 1;
  int64_t memory = 0;
  InstanceState state = InstanceState::kCreating;
  RunState run_state = RunState::kCreating;
  std::optional<Uuid> sled_id;
  std::optional<Uuid> start_saga_id;  // the saga that placed the current VMM
  std::optional<Uuid> migration_id;
  Timestamp time_run_state_updated = 0;
  Timestamp time_created = 0;
  Timestamp time_modified = 0;
};

struct NetworkInterface {
  Uuid id;
  Uuid instance_id;
  Uuid vpc_id;
  std::string name;
  std::string mac;
  std::optional<IpAddr> ipv4;
  std::optional<IpAddr> ipv6;
  int64_t vni = 0;
};

enum class NicKind { kNone, kIpv4, kIpv6, kDualStack };

struct InstanceCreate {
  Uuid id;
  Uuid nic_id;
  Uuid project_id;
  std::string name;
  std::string description;
  std::string hostname;
  int64_t ncpus = 1;
  int64_t memory = 0;
  NicKind nic = NicKind::kIpv4;
};

struct InstanceUpdate {
  std::optional<std::string> name;
  std::optional<std::string> description;
  std::optional<std::string> hostname;
  std::optional<int64_t> ncpus;
  std::optional<int64_t> memory;
};

}  // namespace fp::model
