#include "agents/linux/nftables.h"

#include <fmt/format.h>
#include <nftables/libnftables.h>

namespace fp::agents::dataplane {

Result<std::unique_ptr<Nftables>> Nftables::Open() {
  if (std::string why = LoadNftables(); !why.empty()) return Fail(Error::Unavailable(why));
  nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (ctx == nullptr) return Fail(Error::Internal("libnftables could not make a context"));
  // Answers and errors into buffers (read after each command), never onto our stdout/stderr.
  if (nft_ctx_buffer_output(ctx) != 0 || nft_ctx_buffer_error(ctx) != 0) {
    nft_ctx_free(ctx);
    return Fail(Error::Internal("libnftables could not buffer its output"));
  }
  return std::unique_ptr<Nftables>(new Nftables(ctx));
}

Nftables::~Nftables() { nft_ctx_free(ctx_); }

Result<std::string> Nftables::Execute(const std::string& commands) {
  int rc = nft_run_cmd_from_buffer(ctx_, commands.c_str());
  std::string output = nft_ctx_get_output_buffer(ctx_);
  std::string errors = nft_ctx_get_error_buffer(ctx_);
  if (rc != 0) {
    while (!errors.empty() && (errors.back() == '\n' || errors.back() == ' ')) errors.pop_back();
    return Fail(Error::Internal(fmt::format("nftables refused the transaction: {}", errors)));
  }
  return output;
}

Status Nftables::Run(const std::string& commands) {
  FP_TRY(Execute(commands));
  return Ok();
}

Result<nlohmann::json> Nftables::ListJson(const std::string& command) {
  unsigned int flags = nft_ctx_output_get_flags(ctx_);
  nft_ctx_output_set_flags(ctx_, flags | NFT_CTX_OUTPUT_JSON);
  auto output = Execute(command);
  nft_ctx_output_set_flags(ctx_, flags);
  std::string text = FP_TRY(std::move(output));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    return Fail(Error::Internal(fmt::format("nftables answered `{}` with no JSON", command)));
  }
  return j;
}

}  // namespace fp::agents::dataplane
