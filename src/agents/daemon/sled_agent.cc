#include "agents/daemon/sled_agent.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "common/thread_name.h"
#include "http/url.h"

namespace fp::agents::daemon {

using Json = nlohmann::json;

namespace {

Result<Uuid> InstanceId(const PathParams& params) {
  const std::string& text = params.at("id");
  auto id = Uuid::Parse(text);
  if (!id) return Fail(Error::InvalidRequest(fmt::format("invalid instance id \"{}\"", text)));
  return *id;
}

Error UnknownInstance(const Uuid& id) { return Error::NotFoundById("instance", id.ToString()); }

}  // namespace

SledAgentDaemon::SledAgentDaemon(const DaemonOptions& options,
                                 std::unique_ptr<PortDataplane> dataplane)
    : dataplane_(std::move(dataplane)),
      underlay_(options.underlay),
      serial_(options.serial),
      clock_(options.clock_or_machine()),
      random_(options.random_or_machine()),
      start_delay_(options.start_delay),
      stop_delay_(options.stop_delay),
      boot_id_(random_.NewUuid().ToString()),
      faults_(clock_) {}

Result<std::unique_ptr<SledAgentDaemon>> SledAgentDaemon::Start(
    const DaemonOptions& options, std::unique_ptr<PortDataplane> dataplane) {
  std::unique_ptr<SledAgentDaemon> sim(new SledAgentDaemon(options, std::move(dataplane)));
  SledAgentDaemon* self = sim.get();
  if (options.transition_thread) {
    sim->timer_ = std::thread([self] {
      NameThisThread("sled-vms");
      self->RunTransitions();
    });
  }
  sim->server_ = FP_TRY(AgentServer::Start(
      options, "sled agent", sim->Routes(), [self] { self->Reset(); }, sim->faults_));
  return sim;
}

SledAgentDaemon::~SledAgentDaemon() { Stop(); }

void SledAgentDaemon::Stop() {
  {
    // First: the server waits for its calls in progress, long polls of /changes among them.
    MutexLock lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  transitions_changed_.notify_all();
  if (server_) server_->Stop();
  if (timer_.joinable()) timer_.join();
}

void SledAgentDaemon::Touch(Vm& vm) {
  vm.gen = ++generation_;
  changed_.notify_all();
}

void SledAgentDaemon::Forget(const Uuid& id) {
  if (vms_.erase(id) == 0) return;
  removals_.emplace_back(++generation_, id);
  if (removals_.size() > kRemovalsKept) {
    removals_floor_ = removals_.front().first;
    removals_.pop_front();
  }
  changed_.notify_all();
}

int SledAgentDaemon::waiting_reports() const {
  MutexLock lock(mu_);
  return waiting_reports_;
}

SledReport SledAgentDaemon::Changes(const std::string& boot_id, int64_t since,
                                    std::chrono::milliseconds wait) {
  MutexLock lock(mu_);
  auto full = [&]() FP_REQUIRES(mu_) {
    return boot_id != boot_id_ || since < removals_floor_ || since > generation_;
  };
  ++waiting_reports_;  // seen only while it waits: mu_ is held until then
  clock_.WaitFor(lock, changed_, std::min(wait, std::chrono::milliseconds(kMaxReportWaitMs)),
                 [&]() FP_REQUIRES(mu_) { return stopping_ || full() || generation_ > since; });
  --waiting_reports_;
  SledReport report;
  report.boot_id = boot_id_;
  report.generation = generation_;
  report.full = full();
  for (const auto& [id, vm] : vms_) {
    if (report.full || vm.gen > since) report.instances.push_back(View(id, vm));
  }
  if (!report.full) {
    for (const auto& [gen, id] : removals_) {
      if (gen > since) report.removed.push_back(id);
    }
  }
  return report;
}

SledInstance SledAgentDaemon::View(const Uuid& id, const Vm& vm) {
  SledInstance out;
  out.id = id;
  out.state = vm.state;
  out.external_ips = vm.spec.external_ips;
  out.snat_ip = vm.spec.snat_ip;
  out.snat6_ip = vm.spec.snat6_ip;
  out.boots = vm.boots;
  for (const auto& snat : {vm.spec.snat_ip, vm.spec.snat6_ip}) {
    if (snat && std::find(out.external_ips.begin(), out.external_ips.end(), *snat) ==
                    out.external_ips.end()) {
      out.external_ips.push_back(*snat);
    }
  }
  return out;
}

std::vector<SledInstance> SledAgentDaemon::Instances() const {
  MutexLock lock(mu_);
  std::vector<SledInstance> out;
  out.reserve(vms_.size());
  for (const auto& [id, vm] : vms_) out.push_back(View(id, vm));
  return out;
}

std::optional<SledInstance> SledAgentDaemon::Instance(const Uuid& id) const {
  MutexLock lock(mu_);
  auto it = vms_.find(id);
  if (it == vms_.end()) return std::nullopt;
  return View(id, it->second);
}

std::optional<InstanceSpec> SledAgentDaemon::Spec(const Uuid& id) const {
  MutexLock lock(mu_);
  auto it = vms_.find(id);
  if (it == vms_.end()) return std::nullopt;
  return it->second.spec;
}

bool SledAgentDaemon::ForceState(const Uuid& id, VmState state) {
  MutexLock lock(mu_);
  auto it = vms_.find(id);
  if (it == vms_.end()) return false;
  it->second.state = state;
  it->second.transition_at.reset();
  Touch(it->second);
  return true;
}

void SledAgentDaemon::Reset() {
  MutexLock lock(mu_);
  if (dataplane_) {
    for (const auto& [id, vm] : vms_) (void)dataplane_->Remove(id);
  }
  vms_.clear();
  // A new run, as after a restart: /changes answers its callers with the whole (empty) list.
  boot_id_ = random_.NewUuid().ToString();
  removals_.clear();
  removals_floor_ = generation_;
  changed_.notify_all();
}

Result<SledInstance> SledAgentDaemon::EnsureRunning(const Uuid& id, InstanceSpec spec) {
  if (spec.id != id) {
    return Fail(Error::InvalidRequest(fmt::format("the spec's id \"{}\" is not the instance \"{}\"",
                                                  spec.id.ToString(), id.ToString())));
  }
  // The port holds each address once.
  std::vector<IpAddr> unique;
  for (const IpAddr& ip : spec.external_ips) {
    if (std::find(unique.begin(), unique.end(), ip) == unique.end()) unique.push_back(ip);
  }
  spec.external_ips = std::move(unique);

  MutexLock lock(mu_);
  if (dataplane_) FP_CHECK_OK(dataplane_->Configure(spec));
  auto [it, created] = vms_.try_emplace(id);
  Vm& vm = it->second;
  vm.spec = std::move(spec);
  bool starts = created || vm.state == VmState::kStopping || vm.state == VmState::kStopped ||
                vm.state == VmState::kFailed;
  if (starts) {
    vm.state = VmState::kStarting;
    vm.transition_at = clock_.Deadline(start_delay_);
    transitions_changed_.notify_all();
  }
  Touch(vm);
  return View(id, vm);
}

SledInstance SledAgentDaemon::StopInstance(const Uuid& id) {
  MutexLock lock(mu_);
  auto it = vms_.find(id);
  if (it == vms_.end()) {
    SledInstance missing;
    missing.id = id;
    missing.state = VmState::kStopped;
    return missing;
  }
  Vm& vm = it->second;
  switch (vm.state) {
    case VmState::kStarting:
    case VmState::kRunning:
    case VmState::kMigrating:
      vm.state = VmState::kStopping;
      vm.transition_at = clock_.Deadline(stop_delay_);
      transitions_changed_.notify_all();
      Touch(vm);
      break;
    case VmState::kFailed:
      vm.state = VmState::kStopped;
      vm.transition_at.reset();
      Touch(vm);
      break;
    case VmState::kStopping:
    case VmState::kStopped:
      break;
  }
  return View(id, vm);
}

Result<SledInstance> SledAgentDaemon::ChangeExternalIp(const Uuid& id, const IpAddr& ip, bool add) {
  MutexLock lock(mu_);
  auto it = vms_.find(id);
  if (it == vms_.end()) return Fail(UnknownInstance(id));
  InstanceSpec spec = it->second.spec;  // changed here, kept only once the dataplane has it
  std::vector<IpAddr>& ips = spec.external_ips;
  auto present = std::find(ips.begin(), ips.end(), ip);
  if (add) {
    if (present == ips.end()) ips.push_back(ip);
  } else {
    if (present != ips.end()) {
      ips.erase(present);
    } else if (spec.snat_ip == ip || spec.snat6_ip == ip) {
      return Fail(Error::InvalidRequest(
          fmt::format("{} is the instance's SNAT address; it changes only with the instance spec",
                      ip.ToString())));
    }
  }
  if (dataplane_ && spec.external_ips != it->second.spec.external_ips) {
    FP_CHECK_OK(dataplane_->Configure(spec));
  }
  // Reported, though the caller has the answer: a call applied after its caller gave up (an
  // agent that hung) was already undone by the caller, and the watcher repairs it on this.
  if (spec.external_ips != it->second.spec.external_ips) {
    it->second.spec = std::move(spec);
    Touch(it->second);
  }
  return View(id, it->second);
}

std::optional<SledAgentDaemon::TimePoint> SledAgentDaemon::ApplyDueTransitions() {
  TimePoint now = clock_.Monotonic();
  std::optional<TimePoint> next;
  for (auto& [id, vm] : vms_) {
    if (!vm.transition_at) continue;
    if (*vm.transition_at <= now) {
      if (vm.state == VmState::kStarting) {
        vm.state = VmState::kRunning;
        ++vm.boots;
      } else {
        vm.state = VmState::kStopped;
      }
      vm.transition_at.reset();
      Touch(vm);
    } else if (!next || *vm.transition_at < *next) {
      next = vm.transition_at;
    }
  }
  return next;
}

void SledAgentDaemon::StepTransitions() {
  MutexLock lock(mu_);
  (void)ApplyDueTransitions();
}

void SledAgentDaemon::RunTransitions() {
  MutexLock lock(mu_);
  while (!stopping_) {
    std::optional<TimePoint> next = ApplyDueTransitions();
    if (next) {
      clock_.BlockUntil(lock, transitions_changed_, *next);
    } else {
      lock.Wait(transitions_changed_);
    }
  }
}

EndpointRoutes SledAgentDaemon::Routes() {
  EndpointRoutes routes;
  routes.Add("GET", "/sled", [this](const http::HttpRequest&, const PathParams&) {
    return Result<Json>(SledIdentity{.serial = serial_, .underlay = underlay_}.ToJson());
  });
  routes.Add("GET", "/instances", [this](const http::HttpRequest&, const PathParams&) {
    return Result<Json>(SledInstancesToJson(Instances()));
  });

  routes.Add("GET", "/instances/{id}",
             [this](const http::HttpRequest&, const PathParams& params) -> Result<Json> {
               Uuid id = FP_TRY(InstanceId(params));
               auto instance = Instance(id);
               if (!instance) return Fail(UnknownInstance(id));
               return instance->ToJson();
             });

  routes.Add("PUT", "/instances/{id}",
             [this](const http::HttpRequest& request, const PathParams& params) -> Result<Json> {
               Uuid id = FP_TRY(InstanceId(params));
               Json body = FP_TRY(ParseBody(request));
               InstanceSpec spec = FP_TRY(InstanceSpec::FromJson(body));
               return FP_TRY(EnsureRunning(id, std::move(spec))).ToJson();
             });

  routes.Add("POST", "/instances/{id}/stop",
             [this](const http::HttpRequest&, const PathParams& params) -> Result<Json> {
               Uuid id = FP_TRY(InstanceId(params));
               return StopInstance(id).ToJson();
             });

  routes.Add("DELETE", "/instances/{id}",
             [this](const http::HttpRequest&, const PathParams& params) -> Result<Json> {
               Uuid id = FP_TRY(InstanceId(params));
               MutexLock lock(mu_);
               if (dataplane_) FP_CHECK_OK(dataplane_->Remove(id));
               Forget(id);
               return Json(nullptr);
             });

  routes.Add("GET", "/changes",
             [this](const http::HttpRequest& request, const PathParams&) -> Result<Json> {
               http::QueryParams query = FP_TRY(http::ParseQuery(request.query));
               int64_t since =
                   FP_TRY(QueryInt(query, "since", 0, std::numeric_limits<int64_t>::max(), 0));
               int64_t wait_ms = FP_TRY(QueryInt(query, "wait_ms", 0, kMaxReportWaitMs, 0));
               auto boot = query.find("boot");
               return Changes(boot == query.end() ? "" : boot->second, since,
                              std::chrono::milliseconds(wait_ms))
                   .ToJson();
             });

  for (bool add : {true, false}) {
    routes.Add(add ? "PUT" : "DELETE", "/instances/{id}/external-ips/{ip}",
               [this, add](const http::HttpRequest&, const PathParams& params) -> Result<Json> {
                 Uuid id = FP_TRY(InstanceId(params));
                 auto ip = IpAddr::Parse(params.at("ip"));
                 if (!ip) return Fail(ip.error());
                 return FP_TRY(ChangeExternalIp(id, *ip, add)).ToJson();
               });
  }
  return routes;
}

}  // namespace fp::agents::daemon
