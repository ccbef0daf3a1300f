#pragma once

// Who may do what: the roles a token carries and the token itself.

#include <optional>
#include <string>
#include <string_view>

#include "common/uuid.h"

namespace fp::model {

enum class Role { kFleetAdmin, kSiloAdmin, kSiloCollaborator, kSiloViewer };
std::string_view ToString(Role r);
std::optional<Role> ParseRole(std::string_view text);

// An API token as the server knows it after authentication (never its secret).
struct Token {
  Uuid id;
  Uuid silo_id;
  Role role = Role::kSiloViewer;
  std::string name;
};

}  // namespace fp::model
