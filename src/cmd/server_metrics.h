#pragma once

// The /metrics families of what the API layer does not see: the build, sagas, NAT on each
// switch, reports of each sled, and IP pools' capacity and allocations.

#include <string>
#include <vector>

namespace fp::saga {
class SagaExecutor;
}  // namespace fp::saga
namespace fp::loops {
class NatReconciler;
class SledWatcher;
}  // namespace fp::loops
namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::cmd {

struct ServerMetricsSources {
  const saga::SagaExecutor& executor;
  const loops::NatReconciler& nat;
  const loops::SledWatcher& watcher;
  db::Datastore& ds;
  // Every saga name, so that each is exported at zero from the start.
  std::vector<std::string> saga_names;
};

// Appends the families to `out` (Prometheus text format). Thread-safe.
void RenderServerMetrics(std::string& out, const ServerMetricsSources& sources);

}  // namespace fp::cmd
