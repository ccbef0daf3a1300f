#pragma once

// libnftables in-process (Debian's libnftables-dev): one long-lived context, every change one
// transaction. The Linux agents build the command text from typed values only (addresses,
// ports, marks), never from request text.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"

struct nft_ctx;

namespace fp::agents::dataplane {

// libnftables is loaded on first use, not linked (netfilter_loader.cc): "" once it is, else why
// it cannot be. Nftables::Open asks first.
std::string LoadNftables();

// A libnftables context. Its netlink socket belongs to the network namespace of the thread that
// opens it (NetnsThread): open and use it there. Not thread-safe.
class Nftables {
 public:
  // Errors: Internal when libnftables cannot make a context.
  static Result<std::unique_ptr<Nftables>> Open();
  ~Nftables();
  Nftables(const Nftables&) = delete;
  Nftables& operator=(const Nftables&) = delete;

  // Runs `commands` (nft syntax, one command per line) as one transaction: every command takes
  // effect, or none does. Errors: Internal with nft's own message.
  Status Run(const std::string& commands);
  // Runs a `list ...` command and returns nft's JSON answer. Errors: as Run's, and Internal
  // when the answer is not JSON.
  Result<nlohmann::json> ListJson(const std::string& command);

 private:
  explicit Nftables(nft_ctx* ctx) : ctx_(ctx) {}
  Result<std::string> Execute(const std::string& commands);

  nft_ctx* ctx_;
};

}  // namespace fp::agents::dataplane
