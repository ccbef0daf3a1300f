#include "cli/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <set>
#include <thread>

namespace fp::cli {

namespace {

bool Unreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

std::string PercentEncode(const std::string& value) {
  std::string out;
  for (unsigned char c : value) {
    if (Unreserved(c)) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string ReasonPhrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 409:
      return "Conflict";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 507:
      return "Insufficient Storage";
    default:
      return "";
  }
}

// Retry-After in seconds (the server sends whole seconds); 1 when absent or unreadable.
int RetryAfterSeconds(const HttpReply& reply) {
  auto it = reply.headers.find("retry-after");
  if (it == reply.headers.end()) return 1;
  int seconds = std::atoi(it->second.c_str());
  return seconds > 0 ? seconds : 1;
}

}  // namespace

std::string WithQuery(const std::string& path, const Query& query) {
  std::string out = path;
  char sep = '?';
  for (const auto& [key, value] : query) {
    out += fmt::format("{}{}={}", sep, PercentEncode(key), PercentEncode(value));
    sep = '&';
  }
  return out;
}

std::string Segment(const std::string& value) { return PercentEncode(value); }

std::string PercentDecode(const std::string& value) {
  std::string out;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '%' && i + 2 < value.size() &&
        std::isxdigit(static_cast<unsigned char>(value[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(value[i + 2]))) {
      out += static_cast<char>(std::stoi(value.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else if (value[i] == '+') {
      out += ' ';
    } else {
      out += value[i];
    }
  }
  return out;
}

std::string Dump(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string DescribeErrorAnswer(const HttpReply& reply) {
  nlohmann::json j = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  std::string status = std::to_string(reply.status);
  auto field_text = [&](const char* field) {
    return j.contains(field) && j[field].is_string() ? j[field].get<std::string>() : std::string();
  };
  if (j.is_object() && j.contains("message") && j["message"].is_string()) {
    std::string code = field_text("error_code");
    std::string request = field_text("request_id");
    std::string detail = code.empty() ? status : status + " " + code;
    if (!request.empty()) detail += ", request id " + request;
    return fmt::format("{} ({})", j["message"].get<std::string>(), detail);
  }
  std::string reason = ReasonPhrase(reply.status);
  std::string text = reply.body.substr(0, 200);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return fmt::format("the server answered {}{}{}", status, reason.empty() ? "" : " " + reason,
                     text.empty() ? "" : ": " + text);
}

CliResult<HttpReply> Api::Send(const std::string& method, const std::string& target,
                               const std::string& body, bool mutating, bool with_key) {
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Authorization", "Bearer " + options_.token}, {"api-version", kApiVersion}};
  if (mutating && with_key) headers.emplace_back("Idempotency-Key", options_.idempotency_key);
  for (int attempt = 0;; ++attempt) {
    HttpReply reply = FP_TRY(transport_.Send(method, target, body, headers));
    if (reply.status < 400) return reply;
    const bool transient = reply.status == 429 || (reply.status >= 500 && reply.status != 501);
    if (!mutating && transient && attempt < 3) {
      clock_.SleepFor(std::chrono::milliseconds(200 << attempt));
      continue;
    }
    if (mutating && reply.status == 503 && options_.retry_until) {
      // The same key: if the first attempt did take effect, the retry gets its outcome. The
      // last try is at the deadline; after it, the wait has timed out (exit 5).
      const MonoTime now = clock_.Monotonic();
      if (now >= *options_.retry_until) {
        return Fail(Failure{Exit::kWaitTimeout,
                            "still refused at the --wait-timeout: " + DescribeErrorAnswer(reply),
                            reply.status});
      }
      auto wait = std::min<MonoDuration>(
          std::chrono::milliseconds(std::min(RetryAfterSeconds(reply), 10) * 1000 +
                                    static_cast<int64_t>(random_.Below(251))),
          *options_.retry_until - now);
      if (options_.on_retry) options_.on_retry(DescribeErrorAnswer(reply));
      clock_.SleepFor(wait);
      continue;
    }
    return Fail(Failure{Exit::kApiError, DescribeErrorAnswer(reply), reply.status});
  }
}

CliResult<nlohmann::json> Api::Get(const std::string& path, const Query& query) {
  HttpReply reply = FP_TRY(Send("GET", WithQuery(path, query), "", /*mutating=*/false));
  nlohmann::json j = nlohmann::json::parse(reply.body, nullptr, false);
  if (j.is_discarded()) {
    return Fail(Failure{Exit::kApiError, fmt::format("GET {}: the answer is not JSON: {}", path,
                                                     reply.body.substr(0, 200))});
  }
  return j;
}

CliResult<nlohmann::json> Api::Mutate(const std::string& method, const std::string& path,
                                      const nlohmann::json& body, const Query& query,
                                      bool with_key) {
  HttpReply reply =
      FP_TRY(Send(method, WithQuery(path, query), body.is_null() ? std::string() : Dump(body),
                  /*mutating=*/true, with_key));
  if (reply.body.empty()) return nlohmann::json();
  nlohmann::json j = nlohmann::json::parse(reply.body, nullptr, false);
  if (j.is_discarded()) {
    return Fail(Failure{Exit::kApiError, fmt::format("{} {}: the answer is not JSON: {}", method,
                                                     path, reply.body.substr(0, 200))});
  }
  return j;
}

CliStatus Api::List(const std::string& path, Query query, int64_t limit,
                    const std::function<void(const nlohmann::json&)>& on_item) {
  int64_t seen = 0;
  std::string token;
  std::set<std::string> tokens;
  const bool own_limit =
      std::any_of(query.begin(), query.end(), [](const auto& kv) { return kv.first == "limit"; });
  for (bool first = true;; first = false) {
    Query page;
    for (const auto& [key, value] : query) {
      // The page token carries the scan's parameters (the sort order); selectors (the
      // project) go with every page.
      if (first || key != "sort_by") page.emplace_back(key, value);
    }
    if (!first) page.emplace_back("page_token", token);
    const int64_t left = limit > 0 ? limit - seen : 0;
    if (!own_limit) page.emplace_back("limit", std::to_string(left > 0 && left < 100 ? left : 100));
    nlohmann::json answer = FP_TRY(Get(path, page));
    if (!answer.is_object() || (answer.contains("items") && !answer["items"].is_array())) {
      return Fail(
          Failure{Exit::kApiError, fmt::format("GET {}: the answer is not a page of items", path)});
    }
    for (const auto& item : answer.value("items", nlohmann::json::array())) {
      on_item(item);
      if (limit > 0 && ++seen >= limit) return {};
    }
    if (!answer.contains("next_page") || !answer["next_page"].is_string()) return {};
    token = answer["next_page"].get<std::string>();
    // A server that hands out an empty or repeated token would have us print pages forever.
    if (token.empty() || !tokens.insert(token).second) {
      return Fail(
          Failure{Exit::kApiError,
                  fmt::format("GET {}: the server's next_page token repeats; stopped", path)});
    }
  }
}

CliResult<HttpReply> Api::Raw(const std::string& method, const std::string& target,
                              const std::string& body,
                              std::vector<std::pair<std::string, std::string>> headers) {
  headers.insert(headers.begin(),
                 {{"Authorization", "Bearer " + options_.token}, {"api-version", kApiVersion}});
  return transport_.Send(method, target, body, headers);
}

}  // namespace fp::cli
