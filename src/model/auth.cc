#include "model/auth.h"

namespace fp::model {

std::string_view ToString(Role r) {
  switch (r) {
    case Role::kFleetAdmin:
      return "fleet_admin";
    case Role::kSiloAdmin:
      return "silo_admin";
    case Role::kSiloCollaborator:
      return "silo_collaborator";
    case Role::kSiloViewer:
      return "silo_viewer";
  }
  return "silo_viewer";
}

std::optional<Role> ParseRole(std::string_view text) {
  for (Role r : {Role::kFleetAdmin, Role::kSiloAdmin, Role::kSiloCollaborator, Role::kSiloViewer}) {
    if (ToString(r) == text) return r;
  }
  return std::nullopt;
}

}  // namespace fp::model
