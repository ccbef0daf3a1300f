#pragma once

// The /metrics families of what the API layer does not see: the build, sagas, NAT on each
// switch, reports of each sled, and IP pools' capacity and allocations.

#include <string>
#include <vector>

namespace fp::saga {
class SagaExecutor;
}  // namespace fp::saga
namespace fp::nat {
class NatReconciler;
}  // namespace fp::nat
namespace fp::app {
class SledWatcher;
}  // namespace fp::app
namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::cmd {

struct ServerMetricsSources {
  const saga::SagaExecutor& executor;
  const nat::NatReconciler& nat;
  const app::SledWatcher& watcher;
  db::Datastore& ds;
  // Every saga name, so that each is exported at zero from the start.
  std::vector<std::string> saga_names;
};

// Appends the families to `out` (Prometheus text format). Thread-safe.
void RenderServerMetrics(std::string& out, const ServerMetricsSources& sources);

}  // namespace fp::cmd
