#pragma once

// HTTP for the command-line client (libcurl: TLS with --cacert/--insecure, --resolve, one
// deadline per request). One connection, reused between requests. Not thread-safe.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/failure.h"

namespace fp::cli {

struct TransportOptions {
  std::string base_url;  // "http[s]://host[:port]", no trailing slash
  std::chrono::milliseconds timeout{15000};
  std::string cacert;                // a PEM file of CA certificates to trust instead
  bool insecure = false;             // do not verify the server's certificate
  std::vector<std::string> resolve;  // HOST:PORT:ADDRESS, as curl's --resolve
  bool debug = false;                // each request and answer on stderr (the token hidden)
};

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// libcurl is loaded on first use, not linked (libcurl_loader.cc): "" once it is, else why it
// cannot be.
std::string LoadLibcurl();

class Transport {
 public:
  explicit Transport(TransportOptions options);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Sends `method target` (the path and query) with `body` (JSON, when not empty) and
  // `headers`; any status is an answer. Failures (exit 4): the server could not be reached,
  // or did not answer within the timeout; the message says which and names the URL.
  CliResult<HttpReply> Send(std::string_view method, const std::string& target,
                            const std::string& body,
                            const std::vector<std::pair<std::string, std::string>>& headers);

  const TransportOptions& options() const { return options_; }

 private:
  TransportOptions options_;
  void* curl_ = nullptr;  // CURL*
};

}  // namespace fp::cli
