#pragma once

// Sleds as the fleet admin sees them (/v1/system/hardware/sleds), and their retirement.

#include <string>
#include <vector>

#include "app/actor.h"
#include "app/request.h"
#include "model/instances.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::loops {
class NatReconciler;
class SledWatcher;
}  // namespace fp::loops

namespace fp::app {

// Each method is Forbidden for an actor that is not a fleet admin, before any lookup.
// Thread-safe.
class Sleds {
 public:
  // The references must outlive the service.
  Sleds(db::Datastore& ds, loops::NatReconciler& nat, loops::SledWatcher& watcher)
      : ds_(ds), nat_(nat), watcher_(watcher) {}

  // With whether each sled's agent answers (and since when), and its last report if this
  // server watches the sleds.
  Result<std::vector<model::Sled>> List(const Actor& actor);
  // NotFound for an unknown sled.
  Result<model::Sled> View(const Actor& actor, const Uuid& sled_id);
  // The instances on a sled with their project and silo names. NotFound for an unknown sled.
  struct SledInstance {
    model::Instance instance;
    std::string project_name;
    std::string silo_name;
  };
  Result<std::vector<SledInstance>> InstancesOn(const Actor& actor, const Uuid& sled_id);
  // Takes the sled out of service for good (db::SledExpunge: its instances fail, their NAT is
  // removed, nothing is placed there again), then tells the switches and has the VMs it still
  // runs removed if it answers. Idempotent.
  Result<model::Sled> Expunge(const Request<model::Sled>& rq, const Uuid& sled_id);

 private:
  // Adds what the watcher knows (the last report).
  model::Sled WithReport(model::Sled sled) const;

  db::Datastore& ds_;
  loops::NatReconciler& nat_;
  loops::SledWatcher& watcher_;
};

}  // namespace fp::app
