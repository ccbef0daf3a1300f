#pragma once

// The secret that proves a call to an agent comes from its control plane. The server presents
// it on every call (Authorization: Bearer), and an agent given one answers any call without it
// 401, changing nothing. It is read from a file (never a flag's value, which process listings
// show) and has no text form but the header it makes: it cannot reach a log by accident.

#include <string>
#include <string_view>

#include "common/error.h"
#include "common/random.h"

namespace fp::agents {

class AgentSecret {
 public:
  // The file's first line, without surrounding blanks: at least 16 characters. InvalidRequest
  // naming the file when it cannot be read or the secret is too short.
  static Result<AgentSecret> ReadFile(const std::string& path);
  // A fresh random secret (the dev server's, for the agents it runs in its own process).
  static AgentSecret Generate(Random& random);

  // "Bearer <secret>": the header value the control plane sends.
  std::string AuthorizationHeader() const;
  // Whether a request's Authorization header presents this secret. Takes the same time
  // whatever the header holds, so that answers do not reveal how much of a guess was right.
  bool Accepts(std::string_view authorization) const;

 private:
  explicit AgentSecret(std::string secret);

  std::string secret_;
  std::string expected_digest_;  // SHA-256 of AuthorizationHeader()
};

// The error an agent answers a caller without the secret: 401, naming what to do.
inline constexpr std::string_view kAgentSecretRefusal =
    "this agent obeys only its control plane: the call must present the agent secret "
    "(Authorization: Bearer, from the file given to the server as --agent-secret-file)";

}  // namespace fp::agents
