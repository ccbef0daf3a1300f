// The HTTP clients of the switch and sled agents (their JSON: wire_json.cc).

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>

#include "agents/agents.h"
#include "common/mutex.h"
#include "http/client.h"

namespace fp::agents {

using Json = nlohmann::json;
using http::Caller;
using http::HttpAnswer;
using http::HttpClient;

// ---- HTTP clients ----

std::vector<std::pair<std::string, std::string>> CallContext::Headers() const {
  std::vector<std::pair<std::string, std::string>> out;
  if (!request_id.empty()) out.emplace_back(kRequestIdHeader, request_id);
  if (!saga_id.empty()) out.emplace_back(kSagaIdHeader, saga_id);
  return out;
}

namespace {

// The error an agent's non-2xx answer is, as agents.h promises: 5xx → ServiceUnavailable,
// 404 → NotFound, any other → Internal; each message names the agent.
Error AgentFailure(const Caller& http, std::string_view method, std::string_view target,
                   const HttpAnswer& answer) {
  Json parsed = Json::parse(answer.body, nullptr, /*allow_exceptions=*/false);
  // An agent's refusal is an AgentError; anything else (a proxy's page) is quoted as it came.
  auto refusal = AgentError::FromJson(parsed);
  std::string message = refusal ? refusal->message : answer.body.substr(0, 200);
  std::string failure = fmt::format("{}: {} {} answered {}: {}", http.description(), method, target,
                                    answer.status, message);
  if (answer.status >= 500) return Error::Unavailable(std::move(failure));
  if (answer.status == 404) return Error(ErrorKind::kNotFound, std::move(failure));
  return Error::Internal(std::move(failure));
}

// An agent's answer to `method target` as JSON (null for an empty 2xx body), or AgentFailure.
Result<Json> JsonAnswer(Caller& http, std::string_view method, std::string_view target,
                        HttpAnswer answer) {
  if (answer.status < 200 || answer.status >= 300) {
    return Fail(AgentFailure(http, method, target, answer));
  }
  if (answer.body.empty()) return Json(nullptr);
  Json parsed = Json::parse(answer.body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return Fail(Error::Internal(
        fmt::format("{}: {} {} answered with malformed JSON", http.description(), method, target)));
  }
  return parsed;
}

// An agent's answer to a call whose 2xx body says nothing the caller uses (a port change: the
// sled answers with the VM's view): Ok for any 2xx, without reading its body; else
// AgentFailure.
Status StatusAnswer(Caller& http, std::string_view method, std::string_view target,
                    const HttpAnswer& answer) {
  if (answer.status < 200 || answer.status >= 300) {
    return Fail(AgentFailure(http, method, target, answer));
  }
  return Ok();
}

// Sends one request to an agent (`text` as the body: JSON already written) and returns
// JsonAnswer's.
Result<Json> CallAgentWithText(Caller& http, std::string_view method, std::string_view target,
                               std::string_view text, const CallContext& context = {}) {
  return JsonAnswer(http, method, target,
                    FP_TRY(http.Call(method, target, text, context.Headers())));
}

// A call to an agent sent and not yet answered (Caller::Start), whose answer is a status only.
class PendingAgentCall final : public SledAgentClient::PendingPortChange {
 public:
  PendingAgentCall(Caller& http, std::string method, std::string target, const CallContext& context)
      : http_(http),
        method_(std::move(method)),
        target_(std::move(target)),
        call_(http.Start(method_, target_, "", context.Headers())) {}
  Status Finish() override {
    return StatusAnswer(http_, method_, target_, FP_TRY(call_->Finish()));
  }

 private:
  Caller& http_;
  const std::string method_;
  const std::string target_;
  std::unique_ptr<http::PendingCall> call_;
};

// The same, answering a 2xx body's text as it came, for the caller to decode.
Result<std::string> CallAgentForText(Caller& http, std::string_view method,
                                     std::string_view target) {
  HttpAnswer answer = FP_TRY(http.Call(method, target, "", {}));
  if (answer.status < 200 || answer.status >= 300) {
    return Fail(AgentFailure(http, method, target, answer));
  }
  return std::move(answer.body);
}

Result<Json> CallAgent(Caller& http, std::string_view method, std::string_view target,
                       const Json& body = nullptr, const CallContext& context = {}) {
  return CallAgentWithText(
      http, method, target,
      body.is_null() ? "" : body.dump(-1, ' ', false, Json::error_handler_t::replace), context);
}

// Decodes an agent's answer; an answer that does not decode is the agent's bug: Internal.
template <typename T>
Result<T> Decode(const Caller& http, Result<T> decoded) {
  if (!decoded) {
    return Fail(Error::Internal(
        fmt::format("{}: unexpected answer: {}", http.description(), decoded.error().message())));
  }
  return decoded;
}

class HttpSwitchAgentClient final : public SwitchAgentClient {
 public:
  explicit HttpSwitchAgentClient(std::unique_ptr<Caller> caller) : caller_(std::move(caller)) {}

  Result<NatTable> GetNat() override {
    // The whole table (a drift repair): decoded from the text, never held as a JSON tree.
    std::string text = FP_TRY(CallAgentForText(http_, "GET", "/nat"));
    return Decode(http_, NatTable::Parse(text));
  }

  Result<int64_t> ApplyChanges(const std::vector<NatChange>& changes) override {
    Json answer = FP_TRY(
        CallAgentWithText(http_, "POST", "/nat/changes", NatChangesRequest::Encode(changes, {})));
    return FP_TRY(Decode(http_, NatApplied::FromJson(answer))).generation;
  }

  using SwitchAgentClient::ApplyChangesOn;
  Result<NatApplied> ApplyChangesOn(const std::string& boot_id,
                                    const std::vector<NatChange>& changes,
                                    const CallContext& context) override {
    Json answer = FP_TRY(CallAgentWithText(http_, "POST", "/nat/changes",
                                           NatChangesRequest::Encode(changes, boot_id), context));
    return Decode(http_, NatApplied::FromJson(answer));
  }

  Result<NatStatus> GetStatus() override {
    Json answer = FP_TRY(CallAgent(http_, "GET", "/nat/status"));
    return Decode(http_, NatStatus::FromJson(answer));
  }

  Result<int64_t> ReplaceAll(const NatTable& table) override {
    Json answer =
        FP_TRY(CallAgentWithText(http_, "PUT", "/nat", NatReplaceRequest::Encode(table, {})));
    return FP_TRY(Decode(http_, NatReplaced::FromJson(answer))).generation;
  }

  Result<std::optional<int64_t>> ReplaceAllIf(const NatTable& table,
                                              int64_t if_generation) override {
    return ReplaceAllIfWritten(NatReplaceRequest::Encode(table, if_generation));
  }

  Result<std::optional<int64_t>> ReplaceAllIfWritten(std::string body) override {
    Json answer = FP_TRY(CallAgentWithText(http_, "PUT", "/nat", body));
    NatReplaced replaced = FP_TRY(Decode(http_, NatReplaced::FromJson(answer)));
    if (!replaced.replaced) return std::optional<int64_t>();
    return std::optional<int64_t>(replaced.generation);
  }

  Result<NatBuckets> GetNatBuckets(uint32_t count) override {
    Json answer = FP_TRY(CallAgent(http_, "GET", fmt::format("/nat/buckets?count={}", count)));
    return Decode(http_, NatBuckets::FromJson(answer));
  }

  Result<NatBucketsRepaired> RepairBucketsWritten(std::string body) override {
    Json answer = FP_TRY(CallAgentWithText(http_, "POST", "/nat/buckets", body));
    return Decode(http_, NatBucketsRepaired::FromJson(answer));
  }

  const std::string& address() const override { return http_.base_url(); }

 private:
  std::unique_ptr<Caller> caller_;
  Caller& http_ = *caller_;
};

class HttpSledAgentClient final : public SledAgentClient {
 public:
  HttpSledAgentClient(CallerFactory connect, std::chrono::milliseconds timeout)
      : caller_(connect(timeout)), connect_(std::move(connect)), timeout_(timeout) {}

  using SledAgentClient::AddExternalIp;
  using SledAgentClient::EnsureRunning;
  using SledAgentClient::RemoveExternalIp;
  using SledAgentClient::Stop;
  using SledAgentClient::Unregister;

  Result<SledInstance> EnsureRunning(const InstanceSpec& spec,
                                     const CallContext& context) override {
    Json answer = FP_TRY(CallAgent(http_, "PUT", InstancePath(spec.id), spec.ToJson(), context));
    return Decode(http_, SledInstance::FromJson(answer));
  }

  Result<SledInstance> Stop(const Uuid& id, const CallContext& context) override {
    Json answer = FP_TRY(CallAgent(http_, "POST", InstancePath(id) + "/stop", nullptr, context));
    return Decode(http_, SledInstance::FromJson(answer));
  }

  Status Unregister(const Uuid& id, const CallContext& context) override {
    auto answer = CallAgent(http_, "DELETE", InstancePath(id), nullptr, context);
    if (!answer && answer.error().kind() != ErrorKind::kNotFound) return Fail(answer.error());
    return Ok();
  }

  Result<SledInstance> Get(const Uuid& id) override {
    Json answer = FP_TRY(CallAgent(http_, "GET", InstancePath(id)));
    return Decode(http_, SledInstance::FromJson(answer));
  }

  Result<SledIdentity> Identity() override {
    Json answer = FP_TRY(CallAgent(http_, "GET", "/sled"));
    return Decode(http_, SledIdentity::FromJson(answer));
  }

  Result<std::vector<SledInstance>> List() override {
    Json answer = FP_TRY(CallAgent(http_, "GET", "/instances"));
    return Decode(http_, SledInstancesFromJson(answer));
  }

  Result<SledReport> Changes(const std::string& boot_id, int64_t since,
                             std::chrono::milliseconds wait) override {
    wait = std::min(wait, kMaxWait);
    std::string target = fmt::format("/changes?since={}&wait_ms={}", since, wait.count());
    // Boot ids are UUIDs; anything else asks for the whole list.
    bool plain = std::all_of(boot_id.begin(), boot_id.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-';
    });
    if (plain && !boot_id.empty()) target += "&boot=" + boot_id;
    std::shared_ptr<Caller> http;
    {
      MutexLock lock(report_mu_);
      if (reports_abandoned_) {
        return Fail(
            Error::Unavailable(fmt::format("{}: the call was abandoned", http_.description())));
      }
      if (!report_http_) {
        // One client whose deadline covers the longest wait a sled grants, whatever this
        // call's wait (a client per wait would cost a connection per call): a sled that
        // accepts and never answers holds a report call that long.
        report_http_ = connect_(timeout_ + kMaxWait);
      }
      http = report_http_;
    }
    Json answer = FP_TRY(CallAgent(*http, "GET", target));
    return Decode(*http, SledReport::FromJson(answer));
  }

  void AbandonReports() override {
    MutexLock lock(report_mu_);
    reports_abandoned_ = true;
    if (report_http_) report_http_->Abandon();
  }

  Status AddExternalIp(const Uuid& id, const IpAddr& ip, const CallContext& context) override {
    return StartExternalIpChange(true, id, ip, context)->Finish();
  }

  Status RemoveExternalIp(const Uuid& id, const IpAddr& ip, const CallContext& context) override {
    return StartExternalIpChange(false, id, ip, context)->Finish();
  }

  std::unique_ptr<PendingPortChange> StartExternalIpChange(bool add, const Uuid& id,
                                                           const IpAddr& ip,
                                                           const CallContext& context) override {
    return std::make_unique<PendingAgentCall>(http_, add ? "PUT" : "DELETE", ExternalIpPath(id, ip),
                                              context);
  }

  const std::string& address() const override { return http_.base_url(); }

 private:
  static std::string InstancePath(const Uuid& id) { return "/instances/" + id.ToString(); }
  // IPv6 text needs no escaping in a path segment (':' is a valid path character).
  static std::string ExternalIpPath(const Uuid& id, const IpAddr& ip) {
    return InstancePath(id) + "/external-ips/" + ip.ToString();
  }

  std::unique_ptr<Caller> caller_;
  Caller& http_ = *caller_;
  const CallerFactory connect_;
  const std::chrono::milliseconds timeout_;
  // Report calls have a client of their own, whose deadline covers the wait.
  Mutex report_mu_;
  static constexpr std::chrono::milliseconds kMaxWait{30'000};  // the sled's own cap
  std::shared_ptr<Caller> report_http_ FP_GUARDED_BY(report_mu_);
  bool reports_abandoned_ FP_GUARDED_BY(report_mu_) = false;
};

}  // namespace

namespace {

std::string AuthorizationOf(const std::optional<AgentSecret>& secret) {
  return secret ? secret->AuthorizationHeader() : std::string();
}

}  // namespace

// The default for a client that is not HTTP (test doubles): the request decoded again.
Result<std::optional<int64_t>> SwitchAgentClient::ReplaceAllIfWritten(std::string body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  NatReplaceRequest request = FP_TRY(NatReplaceRequest::FromJson(j));
  if (!request.if_generation) {
    return Fail(Error::Internal("ReplaceAllIfWritten: the request has no if_generation"));
  }
  return ReplaceAllIf(request.table, *request.if_generation);
}

std::unique_ptr<SwitchAgentClient> MakeSwitchAgentClient(std::string base_url, int timeout_ms,
                                                         const std::optional<AgentSecret>& secret) {
  return MakeSwitchAgentClient(std::make_unique<HttpClient>("switch agent", std::move(base_url),
                                                            std::chrono::milliseconds(timeout_ms),
                                                            AuthorizationOf(secret)));
}

std::unique_ptr<SledAgentClient> MakeSledAgentClient(std::string base_url, int timeout_ms,
                                                     const std::optional<AgentSecret>& secret) {
  CallerFactory connect = [base_url, authorization = AuthorizationOf(secret)](
                              std::chrono::milliseconds timeout) -> std::unique_ptr<Caller> {
    return std::make_unique<HttpClient>("sled agent", base_url, timeout, authorization);
  };
  return MakeSledAgentClient(std::move(connect), std::chrono::milliseconds(timeout_ms));
}

std::unique_ptr<SwitchAgentClient> MakeSwitchAgentClient(std::unique_ptr<http::Caller> caller) {
  return std::make_unique<HttpSwitchAgentClient>(std::move(caller));
}

std::unique_ptr<SledAgentClient> MakeSledAgentClient(CallerFactory connect,
                                                     std::chrono::milliseconds timeout) {
  return std::make_unique<HttpSledAgentClient>(std::move(connect), timeout);
}

}  // namespace fp::agents
