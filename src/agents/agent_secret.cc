#include "agents/agent_secret.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/sha256.h"
#include "common/uuid.h"

namespace fp::agents {

namespace {

constexpr size_t kMinLength = 16;

// Equal strings of equal length, comparing every byte whatever differs.
bool SameBytes(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return differ == 0;
}

}  // namespace

AgentSecret::AgentSecret(std::string secret)
    : secret_(std::move(secret)), expected_digest_(Sha256Hex(AuthorizationHeader())) {}

Result<AgentSecret> AgentSecret::ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return Fail(Error::InvalidRequest(
        fmt::format("cannot read the agent secret file {}: {}", path, std::strerror(errno))));
  }
  std::string line;
  std::getline(in, line);
  const char* blanks = " \t\r\n";
  size_t first = line.find_first_not_of(blanks);
  size_t last = line.find_last_not_of(blanks);
  std::string secret = first == std::string::npos ? "" : line.substr(first, last - first + 1);
  if (secret.size() < kMinLength) {
    return Fail(Error::InvalidRequest(fmt::format(
        "the agent secret file {} must hold a secret of at least {} characters on its first "
        "line (make one with: head -c 32 /dev/urandom | base64 > {})",
        path, kMinLength, path)));
  }
  return AgentSecret(std::move(secret));
}

AgentSecret AgentSecret::Generate(Random& random) {
  std::string secret = random.NewUuid().ToString() + random.NewUuid().ToString();
  return AgentSecret(std::move(secret));
}

std::string AgentSecret::AuthorizationHeader() const { return "Bearer " + secret_; }

bool AgentSecret::Accepts(std::string_view authorization) const {
  // Digests of equal length: the comparison's time depends on neither input.
  return SameBytes(Sha256Hex(authorization), expected_digest_);
}

}  // namespace fp::agents
