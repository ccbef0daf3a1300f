#pragma once

// Sleds as the fleet admin sees them (/v1/system/hardware/sleds).

#include <string>
#include <vector>

#include "app/actor.h"
#include "model/instances.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

// Reads only. Each method is Forbidden for an actor that is not a fleet admin, before any
// lookup. Thread-safe.
class Sleds {
 public:
  explicit Sleds(db::Datastore& ds) : ds_(ds) {}

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

 private:
  db::Datastore& ds_;
};

}  // namespace fp::app
