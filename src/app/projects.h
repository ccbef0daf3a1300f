#pragma once

#include <string>
#include <vector>

#include "app/actor.h"
#include "common/error.h"
#include "common/name.h"
#include "model/page.h"
#include "model/silos.h"

namespace fp::db {
class Datastore;
}  // namespace fp::db

namespace fp::app {

// The projects of the actor's silo. Every role reads them; changing them needs RequireWrite
// (Forbidden, 403), checked after the project's lookup. NotFound for a project that is absent
// or in another silo; the datastore's errors otherwise. Thread-safe.
class Projects {
 public:
  explicit Projects(db::Datastore& ds) : ds_(ds) {}

  // ObjectAlreadyExists if the silo has a project of that name.
  Result<model::Project> Create(const Actor& actor, const std::string& name,
                                const std::string& description);
  Result<model::Project> View(const Actor& actor, const NameOrId& project);
  Result<std::vector<model::Project>> List(const Actor& actor, const model::PageRequest& page);
  Result<model::Project> Update(const Actor& actor, const NameOrId& project,
                                const model::IdentityUpdate& update);
  // The datastore refuses a project that still holds resources.
  Status Delete(const Actor& actor, const NameOrId& project);

 private:
  db::Datastore& ds_;
};

}  // namespace fp::app
