#pragma once

// Who is making a request, and the one set of authorization rules every service applies.

#include <optional>

#include "common/error.h"
#include "common/uuid.h"
#include "model/auth.h"

namespace fp::app {

// Who is making a request: the credential (an API token, or a user's console session), its
// silo and role.
struct Actor {
  Uuid token_id;  // the credential: the API token's id, or a user's session's
  Uuid silo_id;
  model::Role role = model::Role::kSiloViewer;
  std::optional<Uuid> user_id;  // the local user signed in (a user's session)
  bool by_session = false;      // authenticated by a console session's cookie

  bool is_fleet_admin() const { return role == model::Role::kFleetAdmin; }
  // Fleet admins, silo admins and silo collaborators may create and change silo resources.
  bool can_write() const { return role != model::Role::kSiloViewer; }
};

// Forbidden (403) unless the actor is a fleet admin: the system's resources (silos, system IP
// pools, tokens, sleds, sagas, migration).
inline Status RequireFleetAdmin(const Actor& actor) {
  if (!actor.is_fleet_admin()) return Fail(Error::Forbidden());
  return Ok();
}

// Forbidden (403) unless the actor administers its silo (a silo admin or a fleet admin): the
// silo's users and its projects' quotas.
inline Status RequireSiloAdmin(const Actor& actor) {
  if (actor.role != model::Role::kFleetAdmin && actor.role != model::Role::kSiloAdmin) {
    return Fail(Error::Forbidden());
  }
  return Ok();
}

// Forbidden (403) unless the actor may create and change its silo's resources (every role but
// silo viewer). Services check it after looking up the resource acted on, so that a viewer
// learns NotFound for what does not exist.
inline Status RequireWrite(const Actor& actor) {
  if (!actor.can_write()) return Fail(Error::Forbidden());
  return Ok();
}

}  // namespace fp::app
