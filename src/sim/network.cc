#include "sim/network.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace fp::sim {

namespace {

// A seed for the link to `url`, from the run's: the same run, the same link, the same sequence.
uint64_t LinkSeed(uint64_t seed, const std::string& url) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : url) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

class SimLink final : public http::Caller {
 public:
  SimLink(SimNetwork& network, std::string peer, std::string url, std::chrono::milliseconds timeout)
      : network_(network),
        url_(std::move(url)),
        description_(fmt::format("{} at {}", peer, url_)),
        timeout_(timeout) {}

  Result<http::HttpAnswer> Call(
      std::string_view method, std::string_view target, std::string_view body,
      const std::vector<std::pair<std::string, std::string>>& headers) override {
    {
      MutexLock lock(mu_);
      if (abandoned_) {
        return Fail(Error::Unavailable(fmt::format("{}: the call was abandoned", description_)));
      }
    }
    SimNetwork::Decision d = network_.Decide(url_);
    if (!d.endpoint || d.lose_request) return Fail(TimedOut());
    http::HttpRequest request;
    request.method = std::string(method);
    const size_t q = target.find('?');
    request.path = std::string(target.substr(0, q));
    if (q != std::string_view::npos) request.query = std::string(target.substr(q + 1));
    request.body = std::string(body);
    for (const auto& [name, value] : headers) {
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      request.headers.emplace_back(std::move(lower), value);
    }
    if (d.hold_back) {
      network_.HoldBack(url_, std::move(request));
      return Fail(TimedOut());
    }
    http::HttpResponse response = d.endpoint(request);
    if (d.duplicate) response = d.endpoint(request);
    if (d.lose_answer) return Fail(TimedOut());
    return http::HttpAnswer{response.status, std::move(response.body)};
  }

  void Abandon() override {
    MutexLock lock(mu_);
    abandoned_ = true;
  }
  const std::string& base_url() const override { return url_; }
  const std::string& description() const override { return description_; }

 private:
  Error TimedOut() const {
    return Error::Unavailable(
        fmt::format("{}{}{} ms", description_, http::kDidNotAnswerWithin, timeout_.count()));
  }

  SimNetwork& network_;
  const std::string url_;
  const std::string description_;
  const std::chrono::milliseconds timeout_;
  Mutex mu_;
  bool abandoned_ FP_GUARDED_BY(mu_) = false;
};

void SimNetwork::Attach(const std::string& url, Endpoint endpoint) {
  MutexLock lock(mu_);
  Route& route = routes_[url];
  route.endpoint = std::move(endpoint);
  if (!route.random) route.random = std::make_shared<SeededRandom>(LinkSeed(seed_, url));
}

std::unique_ptr<http::Caller> SimNetwork::Connect(const std::string& peer, const std::string& url,
                                                  std::chrono::milliseconds timeout) {
  return std::make_unique<SimLink>(*this, peer, url, timeout);
}

void SimNetwork::SetFaults(LinkFaults faults) {
  MutexLock lock(mu_);
  faults_ = faults;
}

void SimNetwork::SetHung(const std::string& url, bool hung) {
  MutexLock lock(mu_);
  routes_[url].hung = hung;
}

int64_t SimNetwork::delivered() const {
  MutexLock lock(mu_);
  return delivered_;
}

int64_t SimNetwork::faults_injected() const {
  MutexLock lock(mu_);
  return faults_injected_;
}

SimNetwork::Decision SimNetwork::Decide(const std::string& url) {
  MutexLock lock(mu_);
  auto it = routes_.find(url);
  if (it == routes_.end() || !it->second.endpoint) return {};
  Route& route = it->second;
  if (route.hung) {
    ++faults_injected_;
    return {};
  }
  // Four draws per call whatever the faults, so that turning one on does not shift the others.
  Decision d{.endpoint = route.endpoint,
             .lose_request = static_cast<int>(route.random->Below(1000)) < faults_.lose_request,
             .lose_answer = static_cast<int>(route.random->Below(1000)) < faults_.lose_answer,
             .duplicate = static_cast<int>(route.random->Below(1000)) < faults_.duplicate,
             .hold_back = static_cast<int>(route.random->Below(1000)) < faults_.hold_back};
  if (d.lose_request) d.hold_back = false;
  if (d.lose_request || d.lose_answer || d.duplicate || d.hold_back) ++faults_injected_;
  if (!d.lose_request && !d.hold_back) delivered_ += d.duplicate ? 2 : 1;
  return d;
}

void SimNetwork::HoldBack(const std::string& url, http::HttpRequest request) {
  MutexLock lock(mu_);
  routes_[url].held_back.push_back(std::move(request));
}

int SimNetwork::DeliverHeldBack(Random* pick) {
  int delivered = 0;
  for (;;) {
    Endpoint endpoint;
    http::HttpRequest request;
    {
      MutexLock lock(mu_);
      bool found = false;
      for (auto& [url, route] : routes_) {
        if (route.held_back.empty() || route.hung || !route.endpoint) continue;
        if (pick != nullptr && pick->Below(2) != 0) continue;  // it waits another step
        endpoint = route.endpoint;
        request = std::move(route.held_back.front());
        route.held_back.pop_front();
        ++delivered_;
        found = true;
        break;
      }
      if (!found) return delivered;
    }
    (void)endpoint(request);  // outside the lock: the agent may be slow, or call nothing back
    ++delivered;
  }
}

}  // namespace fp::sim
