#include "agents/daemon/faults.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "http/url.h"

namespace fp::agents::daemon {

using Json = nlohmann::json;

namespace {

constexpr int64_t kMaxDelayMs = 10 * 60 * 1000;

Result<int64_t> OptCount(const Json& j, std::string_view field, int64_t max) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > max) {
    return Fail(Error::InvalidRequest(
        fmt::format("field \"{}\": expected an integer from 0 to {}", field, max)));
  }
  return it->get<int64_t>();
}

}  // namespace

bool FaultRule::Matches(std::string_view method, std::string_view path) const {
  if (endpoint == "*") return true;
  std::string_view text = endpoint;
  size_t space = text.find(' ');
  std::string_view rule_method = text.substr(0, space);
  if (rule_method != "*" && rule_method != method) return false;
  std::vector<std::string_view> pattern = http::PathSegments(text.substr(space + 1));
  std::vector<std::string_view> actual = http::PathSegments(path);
  if (pattern.size() != actual.size()) return false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != "*" && pattern[i] != actual[i]) return false;
  }
  return true;
}

bool FaultRule::Spent() const {
  return fail_next == 0 && apply_then_fail == 0 && delay_ms == 0 && !hang && !apply_first;
}

Json FaultRule::ToJson() const {
  Json j = {{"endpoint", endpoint},
            {"fail_next", fail_next},
            {"apply_then_fail", apply_then_fail},
            {"delay_ms", delay_ms},
            {"hang", hang}};
  if (apply_first) j["apply_first"] = *apply_first;
  return j;
}

Result<FaultRule> FaultRule::FromJson(const Json& j) {
  if (!j.is_object()) return Fail(Error::InvalidRequest("expected a JSON object"));
  FaultRule rule;
  auto endpoint = j.find("endpoint");
  if (endpoint == j.end() || !endpoint->is_string()) {
    return Fail(Error::InvalidRequest(
        "field \"endpoint\": expected a string: \"*\" or \"<METHOD> <path>\""));
  }
  rule.endpoint = endpoint->get<std::string>();
  if (rule.endpoint != "*") {
    size_t space = rule.endpoint.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 >= rule.endpoint.size() ||
        rule.endpoint[space + 1] != '/') {
      return Fail(Error::InvalidRequest(
          fmt::format("field \"endpoint\": \"{}\" is not \"*\" or \"<METHOD> <path>\" (e.g. \"POST "
                      "/nat/changes\")",
                      rule.endpoint)));
    }
  }
  constexpr int64_t kMaxCount = std::numeric_limits<int32_t>::max();
  rule.fail_next = FP_TRY(OptCount(j, "fail_next", kMaxCount));
  rule.apply_then_fail = FP_TRY(OptCount(j, "apply_then_fail", kMaxCount));
  rule.delay_ms = FP_TRY(OptCount(j, "delay_ms", kMaxDelayMs));
  if (auto hang = j.find("hang"); hang != j.end() && !hang->is_null()) {
    if (!hang->is_boolean())
      return Fail(Error::InvalidRequest("field \"hang\": expected a boolean"));
    rule.hang = hang->get<bool>();
  }
  if (auto first = j.find("apply_first"); first != j.end() && !first->is_null()) {
    rule.apply_first = FP_TRY(OptCount(j, "apply_first", kMaxCount));
  }
  if (rule.Spent()) {
    return Fail(
        Error::InvalidRequest("the fault does nothing: set at least one of fail_next, "
                              "apply_then_fail, delay_ms, hang, apply_first"));
  }
  return rule;
}

void FaultInjector::Add(FaultRule rule) {
  MutexLock lock(mu_);
  auto same = std::find_if(rules_.begin(), rules_.end(),
                           [&](const FaultRule& r) { return r.endpoint == rule.endpoint; });
  if (same != rules_.end()) {
    *same = std::move(rule);
  } else {
    rules_.push_back(std::move(rule));
  }
  changed_.notify_all();
}

void FaultInjector::Clear() {
  MutexLock lock(mu_);
  rules_.clear();
  changed_.notify_all();
}

Json FaultInjector::ToJson() const {
  MutexLock lock(mu_);
  Json list = Json::array();
  for (const FaultRule& r : rules_) list.push_back(r.ToJson());
  return {{"faults", std::move(list)}, {"held_calls", held_calls_}};
}

int FaultInjector::held_calls() const {
  MutexLock lock(mu_);
  return held_calls_;
}

FaultDecision FaultInjector::Admit(std::string_view method, std::string_view path) {
  MutexLock lock(mu_);
  auto matches = [&](const FaultRule& r) { return r.Matches(method, path); };
  auto stopping = [] { return FaultDecision{FaultVerdict::kRefuse, "the agent is stopping"}; };
  if (shut_down_) return stopping();

  int64_t delay_ms = 0;
  for (const FaultRule& r : rules_) {
    if (matches(r)) delay_ms = std::max(delay_ms, r.delay_ms);
  }
  if (delay_ms > 0) {
    ++held_calls_;
    clock_.WaitFor(lock, changed_, std::chrono::milliseconds(delay_ms),
                   [&]() FP_REQUIRES(mu_) { return shut_down_; });
    --held_calls_;
    if (shut_down_) return stopping();
  }

  auto hanging = [&]() FP_REQUIRES(mu_) {
    return std::any_of(rules_.begin(), rules_.end(),
                       [&](const FaultRule& r) { return r.hang && matches(r); });
  };
  if (hanging()) {
    ++held_calls_;
    lock.Wait(changed_, [&]() FP_REQUIRES(mu_) { return shut_down_ || !hanging(); });
    --held_calls_;
    if (shut_down_) return stopping();
  }

  for (auto it = rules_.begin(); it != rules_.end(); ++it) {
    if (it->fail_next == 0 || !matches(*it)) continue;
    --it->fail_next;
    std::string reason = fmt::format("injected fault: fail_next on \"{}\"", it->endpoint);
    if (it->Spent()) rules_.erase(it);
    return {FaultVerdict::kRefuse, std::move(reason)};
  }
  for (auto it = rules_.begin(); it != rules_.end(); ++it) {
    if (it->apply_then_fail == 0 || !matches(*it)) continue;
    --it->apply_then_fail;
    std::string reason = fmt::format(
        "injected fault: apply_then_fail on \"{}\" (the call was handled)", it->endpoint);
    if (it->Spent()) rules_.erase(it);
    return {FaultVerdict::kHandleThenRefuse, std::move(reason)};
  }
  return {};
}

std::optional<int64_t> FaultInjector::ApplyFirst(std::string_view method,
                                                 std::string_view path) const {
  MutexLock lock(mu_);
  std::optional<int64_t> limit;
  for (const FaultRule& r : rules_) {
    if (r.apply_first && r.Matches(method, path)) {
      limit = std::min(limit.value_or(*r.apply_first), *r.apply_first);
    }
  }
  return limit;
}

void FaultInjector::Shutdown() {
  MutexLock lock(mu_);
  shut_down_ = true;
  changed_.notify_all();
}

}  // namespace fp::agents::daemon
