#include "cli/transport.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace fp::cli {

namespace {

size_t WriteBody(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

size_t WriteHeader(char* data, size_t size, size_t count, void* out) {
  std::string_view line(data, size * count);
  auto* headers = static_cast<std::map<std::string, std::string>*>(out);
  if (line.rfind("HTTP/", 0) == 0) {
    headers->clear();  // a new answer (after a 100 Continue, say)
  } else if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
      value.remove_prefix(1);
    }
    while (!value.empty() &&
           (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
      value.remove_suffix(1);
    }
    (*headers)[name] = std::string(value);
  }
  return size * count;
}

bool SameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Hides, in place, the passwords of a JSON body: Oxide's UserPassword
// ({"mode": "password", "value": ...}) and a login's {"password": ...}. True if any.
bool HidePasswords(nlohmann::json& j) {
  bool hid = false;
  if (j.is_object()) {
    auto mode = j.find("mode");
    if (mode != j.end() && *mode == "password" && j.contains("value")) {
      j["value"] = "<hidden>";
      hid = true;
    }
    for (auto& [key, value] : j.items()) {
      if (key == "password" && value.is_string()) {
        value = "<hidden>";
        hid = true;
      } else {
        hid = HidePasswords(value) || hid;
      }
    }
  } else if (j.is_array()) {
    for (auto& item : j) hid = HidePasswords(item) || hid;
  }
  return hid;
}

// `text` with secrets hidden: floatplane token secrets ("fpt_" and 64 hex digits) and the
// passwords of a JSON body. --debug output ends up in CI logs, a token create's answer carries
// a token and a user create's body a password.
std::string HideSecrets(std::string text) {
  if (auto body = nlohmann::json::parse(text, nullptr, false); !body.is_discarded()) {
    if (HidePasswords(body)) text = body.dump();
  }
  for (size_t at = text.find("fpt_"); at != std::string::npos; at = text.find("fpt_", at + 4)) {
    size_t end = at + 4;
    while (end < text.size() && std::isxdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end - at > 4) text.replace(at + 4, end - at - 4, "<hidden>");
  }
  return text;
}

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
  ~CurlGlobal() { curl_global_cleanup(); }
};

}  // namespace

Transport::Transport(TransportOptions options) : options_(std::move(options)) {
  if (!LoadLibcurl().empty()) return;  // Send says why
  static CurlGlobal global;
  curl_ = curl_easy_init();
}

Transport::~Transport() {
  if (curl_ != nullptr) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

CliResult<HttpReply> Transport::Send(
    std::string_view method, const std::string& target, const std::string& body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  CURL* curl = static_cast<CURL*>(curl_);
  const std::string url = options_.base_url + target;
  if (curl == nullptr) {
    std::string why = LoadLibcurl();
    return Fail(
        Failure{Exit::kUnreachable, why.empty() ? "cannot start an HTTP client" : std::move(why)});
  }
  curl_easy_reset(curl);
  HttpReply reply;
  const std::string verb(method);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, verb.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  // At least 1 ms: curl reads 0 as no timeout at all.
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(1, options_.timeout.count())));
  if (verb == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, WriteHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &reply.headers);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  char detail[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, detail);
  if (!body.empty()) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  } else if (verb == "POST" || verb == "PUT") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, 0L);
  }
  if (!options_.cacert.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, options_.cacert.c_str());
  if (options_.insecure) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  curl_slist* resolve = nullptr;
  for (const std::string& r : options_.resolve) resolve = curl_slist_append(resolve, r.c_str());
  if (resolve != nullptr) curl_easy_setopt(curl, CURLOPT_RESOLVE, resolve);
  curl_slist* list = nullptr;
  if (!body.empty()) list = curl_slist_append(list, "Content-Type: application/json");
  list = curl_slist_append(list, "Accept: application/json");
  list = curl_slist_append(list, "Expect:");
  for (const auto& [name, value] : headers) {
    list = curl_slist_append(list, fmt::format("{}: {}", name, value).c_str());
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  if (options_.debug) {
    std::fprintf(stderr, "> %s %s\n", verb.c_str(), url.c_str());
    for (const auto& [name, value] : headers) {
      std::fprintf(
          stderr, "> %s: %s\n", name.c_str(),
          SameName(name, "Authorization") ? "Bearer <hidden>" : HideSecrets(value).c_str());
    }
    if (!body.empty()) std::fprintf(stderr, "> %s\n", HideSecrets(body).c_str());
  }
  CURLcode rc = curl_easy_perform(curl);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);  // `detail` ends with this call
  curl_slist_free_all(list);
  curl_slist_free_all(resolve);
  if (rc != CURLE_OK) {
    if (rc == CURLE_OPERATION_TIMEDOUT) {
      return Fail(Failure{Exit::kUnreachable,
                          fmt::format("{} {}: no answer within {} s (--timeout)", verb, url,
                                      static_cast<double>(options_.timeout.count()) / 1000)});
    }
    // TLS failures are worth curl's detail ("SSL certificate problem: unable to get local
    // issuer certificate"); others say enough without it (and its timings vary).
    const bool tls_failure = rc == CURLE_PEER_FAILED_VERIFICATION ||
                             rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_SSL_CACERT_BADFILE ||
                             rc == CURLE_SSL_CERTPROBLEM;
    std::string why = tls_failure && detail[0] != '\0' ? detail : curl_easy_strerror(rc);
    if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE) {
      why += options_.cacert.empty()
                 ? "; if the server's certificate comes from your own CA, give that CA's "
                   "certificate with --cacert FILE"
                 : fmt::format("; --cacert {} is the CA trusted", options_.cacert);
    }
    return Fail(Failure{Exit::kUnreachable,
                        fmt::format("cannot reach the server at {}: {}", options_.base_url, why)});
  }
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  reply.status = static_cast<int>(status);
  if (options_.debug) {
    std::fprintf(stderr, "< %d\n", reply.status);
    for (const auto& [name, value] : reply.headers) {
      std::fprintf(stderr, "< %s: %s\n", name.c_str(), value.c_str());
    }
    if (!reply.body.empty()) std::fprintf(stderr, "< %s\n", HideSecrets(reply.body).c_str());
  }
  return reply;
}

}  // namespace fp::cli
