#include "sim/simulation.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "sim/invariants.h"
#include "sim/lookups.h"

namespace fp::sim {

namespace {

using namespace std::chrono_literals;

NameOrId ByName(const std::string& name) { return NameOrId(*Name::Parse(name)); }

std::string Outcome(const Status& s) {
  if (s) return "ok";
  return fmt::format("{} {}", s.error().HttpStatus(), s.error().message().substr(0, 120));
}
template <typename T>
Status StatusOf(const Result<T>& r) {
  return r ? Ok() : Status(Fail(r.error()));
}
template <typename T>
std::string Outcome(const Result<T>& r) {
  return Outcome(StatusOf(r));
}

// 64-bit FNV-1a, over the trace: what "the same run" means.
uint64_t Hash(uint64_t h, std::string_view text) {
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return (h ^ '\n') * 1099511628211ull;
}

class Simulation {
 public:
  Simulation(const RunOptions& options, const std::string& dir)
      : options_(options),
        rack_(options.seed, dir, options.shape, options.postgres_url),
        pick_(options.seed) {}

  RunReport Run() {
    report_.seed = options_.seed;
    if (options_.faults)
      rack_.network().SetFaults(
          {.lose_request = 15, .lose_answer = 15, .duplicate = 30, .hold_back = 20});
    for (int k = 0; k < options_.operations && !down_; ++k) Step(k);
    if (down_) {
      report_.violations.push_back("the server could not restart; the run ended early");
      return std::move(report_);
    }
    Quiesce();
    if (down_) {
      report_.violations.push_back("the server could not restart; the run ended early");
      return std::move(report_);
    }
    Observed end = CheckInvariants(rack_, ledger_);
    report_.violations.insert(report_.violations.end(), end.violations.begin(),
                              end.violations.end());
    for (const std::string& line : end.state) Record("state " + line);
    report_.network_faults = rack_.network().faults_injected();
    report_.slow_syncs = rack_.slowed_syncs();
    return std::move(report_);
  }

 private:
  void Record(const std::string& line) {
    report_.trace.push_back(line);
    report_.trace_hash = Hash(report_.trace_hash, line);
  }

  std::string Some(const std::vector<std::string>& names, const char* prefix) {
    // Mostly a known name; sometimes one never made (a NotFound path).
    if (names.empty() || pick_.Below(10) == 0) return fmt::format("{}{}", prefix, pick_.Below(99));
    return names[pick_.Below(names.size())];
  }

  // One step: time passes, the sleds move, the sled watcher may look (as its loop would), then
  // one operation or fault.
  void Step(int k) {
    rack_.clock().Advance(std::chrono::milliseconds(pick_.Below(400)));
    for (auto& sled : rack_.sleds()) sled->StepTransitions();
    std::string what;
    std::string outcome;
    in_flight_.reset();
    const bool several = rack_.servers() > 1;
    try {
      if (several && !PickServer(k)) return;  // none could start: the run ends (down_)
      rack_.network().DeliverHeldBack(&pick_);
      if (pick_.Below(2) == 0) rack_.watcher().WatchOnce();
      if (several && pick_.Below(4) == 0) Adopt(fmt::format("{} [s{}]", k, rack_.current()));
      Act(what, outcome);
    } catch (const ServerCrash&) {
      ++report_.server_crashes;
      if (what.empty()) what = "adoption";  // the crash came before the operation
      // The operation got no answer: what it acted on may or may not have changed.
      if (in_flight_) {
        ledger_.uncertain.insert(*in_flight_);
        auto& list = in_flight_->front() == 'i' ? instances_ : fips_;
        if (std::find(list.begin(), list.end(), *in_flight_) == list.end()) {
          list.push_back(*in_flight_);
        }
      }
      outcome = "server crashed; " + AfterCrash();
    }
    // No answer is a 500: an internal error is a bug whatever the faults (they give 503s).
    if (outcome.rfind("500 ", 0) == 0) {
      report_.violations.push_back(fmt::format("step {}: {} answered {}", k, what, outcome));
    }
    ++report_.operations;
    if (outcome == "ok") ++report_.succeeded;
    if (several) what = fmt::format("[s{}] {}", rack_.current(), what);
    Record(fmt::format("{} {} -> {}", k, what, outcome));
  }

  // Several servers: the running ones renew their leases (as their coordinators' threads
  // would), and the step's work goes to one of them, as a load balancer would send it; with
  // none running, one starts again. False if it could not (down_ is set: the run ends).
  bool PickServer(int k) {
    if (Status renewed = rack_.RenewLeases(); !renewed) {
      report_.violations.push_back(fmt::format("step {}: {}", k, Outcome(renewed)));
    }
    std::vector<size_t> up;
    for (size_t i = 0; i < rack_.servers(); ++i) {
      if (rack_.running(i)) up.push_back(i);
    }
    if (up.empty()) {
      const size_t i = pick_.Below(rack_.servers());
      Record(
          fmt::format("{} [s{}] starts again (none running): {}", k, i, Outcome(rack_.Start(i))));
      if (!rack_.running(i)) {
        down_ = true;
        return false;
      }
      up.push_back(i);
    }
    rack_.Use(up[pick_.Below(up.size())]);
    return true;
  }

  // The current server adopts what servers whose leases expired left; the trace says so
  // (after `where`) when it adopted something or failed. ServerCrash propagates.
  void Adopt(const std::string& where) {
    auto adopted = rack_.Adopt();
    if (adopted) report_.adopted += static_cast<int64_t>(*adopted);
    if (!adopted || *adopted > 0) {
      Record(fmt::format("{} adopts: {}", where,
                         adopted ? fmt::format("{} sagas", *adopted) : Outcome(adopted)));
    }
  }

  // The current server crashed. Alone, it restarts; one of several restarts or stays stopped
  // (its sagas then wait for its return or for another server's adoption).
  std::string AfterCrash() {
    if (rack_.servers() == 1) return "restarted: " + Restart();
    rack_.Stop();
    if (pick_.Below(2) == 0) return "stays stopped";
    return "restarted: " + Outcome(rack_.Start(rack_.current()));
  }

  void Act(std::string& what, std::string& outcome) {
    const app::Unrecorded rq{rack_.actor()};
    const std::optional<NameOrId> p1 = ByName("p1");
    uint64_t roll = pick_.Below(options_.faults ? 100 : 88);
    if (instances_.size() < 3 && pick_.Below(2) == 0) roll = 0;  // a rack with something on it
    if (roll < 12) {
      std::string name = fmt::format("i{}", next_instance_++);
      app::InstanceCreateParams params;
      params.name = name;
      params.hostname = name;
      params.memory = 1 << 30;
      params.start = pick_.Below(4) != 0;
      if (pick_.Below(3) == 0) params.external_ips.push_back(app::RequestedExternalIp{});
      what = fmt::format("create instance {}{}", name, params.start ? " started" : "");
      in_flight_ = name;
      auto made = rack_.instances().Create(rq, *p1, params);
      ledger_.Created(instances_, name, StatusOf(made));
      outcome = Outcome(made);
    } else if (roll < 22) {
      std::string name = Some(instances_, "i");
      what = "start " + name;
      outcome = Outcome(rack_.instances().Start(rq, ByName(name), p1));
    } else if (roll < 32) {
      std::string name = Some(instances_, "i");
      what = "stop " + name;
      outcome = Outcome(rack_.instances().Stop(rq, ByName(name), p1));
    } else if (roll < 38) {
      std::string name = Some(instances_, "i");
      what = "delete " + name;
      in_flight_ = name;
      Status s = rack_.instances().Delete(rq, ByName(name), p1);
      ledger_.Deleted(instances_, name, s);
      outcome = Outcome(s);
    } else if (roll < 42) {
      std::string name = Some(instances_, "i");
      const Uuid& sled = rack_.sled_ids()[pick_.Below(rack_.sled_ids().size())];
      what = fmt::format("migrate {} to {}", name, sled.ToString().substr(0, 8));
      outcome = Outcome(rack_.instances().Migrate(rq, ByName(name), p1, sled));
    } else if (roll < 50) {
      std::string name = fmt::format("f{}", next_fip_++);
      what = "create floating ip " + name;
      in_flight_ = name;
      auto made = rack_.floating_ips().Create(rq, *p1, name, "", model::AddressRequest{});
      ledger_.Created(fips_, name, StatusOf(made));
      outcome = Outcome(made);
    } else if (roll < 54) {
      std::string name = Some(fips_, "f");
      what = "delete floating ip " + name;
      in_flight_ = name;
      Status s = rack_.floating_ips().Delete(rq, ByName(name), p1);
      ledger_.Deleted(fips_, name, s);
      outcome = Outcome(s);
    } else if (roll < 66) {
      std::string fip = Some(fips_, "f");
      std::string instance = Some(instances_, "i");
      const bool move = pick_.Below(3) == 0;
      what = fmt::format("{} {} to {}", move ? "move" : "attach", fip, instance);
      // The API's promise, checked against the state before: without a move, an IP attached to
      // another instance is refused and stays where it is.
      const bool elsewhere = !move && AttachedElsewhere(rack_.ds(), fip, instance);
      if (elsewhere) what += " (attached to another)";
      // Every other attach names both by id, as API clients usually do (the server then reads
      // the IP and the instance in one go), the others by name: both paths keep one promise.
      std::optional<std::pair<Uuid, Uuid>> ids;
      if (report_.operations % 2 == 0) ids = FloatingIpAndInstanceIds(rack_.ds(), fip, instance);
      auto attached =
          ids ? rack_.instances().AttachFloating(rq, NameOrId(ids->first), std::nullopt,
                                                 NameOrId(ids->second), move)
              : rack_.instances().AttachFloating(rq, ByName(fip), p1, ByName(instance), move);
      if (elsewhere && attached) {
        report_.violations.push_back(fmt::format(
            "step {}: attach of {} to {} answered {} while it was attached to another instance",
            report_.operations, fip, instance, Outcome(attached)));
      }
      outcome = Outcome(attached);
    } else if (roll < 74) {
      std::string fip = Some(fips_, "f");
      what = "detach " + fip;
      outcome = Outcome(rack_.instances().DetachFloating(rq, ByName(fip), p1));
    } else if (roll < 79) {
      std::string instance = Some(instances_, "i");
      what = "attach ephemeral to " + instance;
      outcome = Outcome(
          rack_.instances().AttachEphemeral(rq, ByName(instance), p1, model::PoolSelector{}));
    } else if (roll < 83) {
      std::string instance = Some(instances_, "i");
      what = "detach ephemeral of " + instance;
      outcome = Outcome(rack_.instances().DetachEphemeral(rq, ByName(instance), p1, std::nullopt));
    } else if (roll < 85) {
      if (pick_.Below(2) == 0) {
        what = "sled watcher pass";
        rack_.watcher().WatchOnce();
        outcome = "ok";
      } else {
        // A sled's report of every VM it holds, judged as the watcher judges the reports it
        // reads (most need no call back to the sled).
        const size_t i = pick_.Below(rack_.sled_ids().size());
        what = fmt::format("report of sled {}", i);
        auto report = rack_.sled_client(i).Changes("", 0, 0ms);
        if (report) {
          (void)rack_.watcher().ApplyReport(rack_.sled_ids()[i], rack_.sled_client(i), *report);
          outcome = "ok";
        } else {
          outcome = Outcome(report);
        }
      }
    } else if (roll < 88) {
      // The pool's second range comes and goes (refused while an address of it is in use).
      const IpRange extra =
          IpRange::Make(*IpAddr::Parse("198.51.100.16"), *IpAddr::Parse("198.51.100.19")).value();
      const NameOrId pool = ByName("v4");
      if (pick_.Below(2) == 0) {
        what = "add range 198.51.100.16-19";
        outcome = Outcome(rack_.ip_pools().RangeAdd(rq, pool, extra));
      } else {
        what = "remove range 198.51.100.16-19";
        outcome = Outcome(rack_.ip_pools().RangeRemove(rq, pool, extra));
      }
    } else {
      Fault(what, outcome);
    }
  }

  // Faults (only when RunOptions::faults).
  void Fault(std::string& what, std::string& outcome) {
    outcome = "ok";
    if (rack_.servers() > 1 && pick_.Below(5) == 0) {
      // A server stops (killed between requests) or starts again.
      const size_t i = pick_.Below(rack_.servers());
      if (!rack_.running(i)) {
        what = fmt::format("server {} starts again", i);
        outcome = Outcome(rack_.Start(i));
      } else if (rack_.running_count() > 1) {
        what = fmt::format("server {} stops", i);
        rack_.Use(i);
        rack_.Stop();
      } else {
        what = "time passes (5 s)";
        rack_.clock().Advance(5s);
      }
      return;
    }
    const uint64_t roll = pick_.Below(13);
    // A failed sync stops the process that holds the database: only where one server does.
    const bool sync_faults =
        options_.log_sync_faults && options_.postgres_url.empty() && rack_.servers() == 1;
    if (roll == 12 && sync_faults) {
      what = "the next sync of the log fails, stopping the server";
      rack_.CrashAtNextLogSync();
    } else if (roll < 4) {
      const int node = static_cast<int>(pick_.Below(4));
      static constexpr const char* kWhere[] = {"after node", "inside node",
                                               "after the undo of node", "inside the undo of node"};
      const uint64_t where = pick_.Below(4);
      what = fmt::format("the next saga crashes the server {} {}", kWhere[where], node);
      rack_.CrashAt(static_cast<Rack::CrashPoint>(where), node);
    } else if (roll < 7) {
      const bool sled = pick_.Below(2) == 0;
      const auto& urls = sled ? rack_.sled_urls() : rack_.switch_urls();
      const size_t i = pick_.Below(urls.size());
      what = "restart agent " + urls[i] + " (its state lost)";
      http::HttpRequest reset;
      reset.method = "POST";
      reset.path = "/reset";
      int status =
          sled ? rack_.sleds()[i]->Serve(reset).status : rack_.switches()[i]->Serve(reset).status;
      ++report_.agent_restarts;
      if (status >= 300) outcome = fmt::format("reset answered {}", status);
    } else if (roll < 10) {
      std::vector<std::string> urls = rack_.sled_urls();
      urls.insert(urls.end(), rack_.switch_urls().begin(), rack_.switch_urls().end());
      const std::string& url = urls[pick_.Below(urls.size())];
      const bool hang = !hung_.count(url);
      what = fmt::format("agent {} {}", url, hang ? "hangs" : "answers again");
      rack_.network().SetHung(url, hang);
      if (hang) {
        hung_.insert(url);
      } else {
        hung_.erase(url);
      }
    } else if (roll == 11 && options_.log_sync_faults && options_.postgres_url.empty()) {
      // Slow syncs on several servers too: the clock moves past leases during a commit.
      const int count = 1 + static_cast<int>(pick_.Below(8));
      const auto each = std::chrono::milliseconds(500 * (1 + pick_.Below(30)));  // to 15 s
      what = fmt::format("the next {} syncs of the log take {} ms each", count, each.count());
      rack_.SlowLogSyncs(count, each);
    } else {
      what = "time passes (5 s)";
      rack_.clock().Advance(5s);
    }
  }

  // Faults off; time passes while recovery, the sled watcher and the NAT reconciler run, as a
  // server's background would.
  void Quiesce() {
    rack_.network().SetFaults({});
    for (const std::string& url : hung_) rack_.network().SetHung(url, false);
    hung_.clear();
    rack_.network().DeliverHeldBack(nullptr);  // the last stale requests land before repair
    rack_.Disarm();
    // Several servers: the stopped ones stay stopped, as servers that never come back, so
    // what they left unfinished ends only if the others adopt it: rounds enough for their
    // leases to expire and the grace to pass (7 s) and for the adopted sagas to finish.
    const bool several = rack_.servers() > 1;
    const int rounds = several ? 6 : 4;
    for (int round = 0; round < rounds && !down_; ++round) {
      try {
        rack_.clock().Advance(2s);
        for (auto& sled : rack_.sleds()) sled->StepTransitions();
        if (several) {
          if (Status renewed = rack_.RenewLeases(); !renewed) {
            report_.violations.push_back("quiesce: " + Outcome(renewed));
          }
          if (rack_.running_count() == 0) {
            Record("quiesce: [s0] starts again (none running): " + Outcome(rack_.Start(0)));
            if (!rack_.running(0)) {
              down_ = true;
              break;
            }
          }
        }
        std::optional<size_t> first;
        for (size_t k = 0; k < rack_.servers(); ++k) {
          if (!rack_.running(k)) continue;
          if (!first) first = k;
          rack_.Use(k);
          if (Status recovered = rack_.Recover(); !recovered) {
            Record("quiesce: recovery failed: " + Outcome(recovered));
          }
          if (several) Adopt(fmt::format("quiesce: [s{}]", k));
        }
        if (!first) continue;
        // The sled watcher runs on one server (its task lease's holder).
        rack_.Use(first.value());
        rack_.watcher().WatchOnce();
        rack_.watcher().ReapOrphans();
        for (auto& sled : rack_.sleds()) sled->StepTransitions();
        rack_.watcher().WatchOnce();
        for (size_t k = 0; k < rack_.servers(); ++k) {
          if (!rack_.running(k)) continue;
          rack_.Use(k);
          if (Status s = rack_.nat().Sync(); !s) Record("quiesce: NAT sync: " + Outcome(s));
          if (auto r = rack_.nat().Repair(); !r) Record("quiesce: NAT repair: " + Outcome(r));
        }
      } catch (const ServerCrash&) {
        ++report_.server_crashes;
        Record("quiesce: server crashed; " + AfterCrash());
      }
    }
  }

  // Restarts the crashed server; after a failure to open the database the run ends (down_).
  std::string Restart() {
    Status s = rack_.Restart();
    if (!s && !rack_.has_server()) down_ = true;
    return Outcome(s);
  }

  const RunOptions options_;
  Rack rack_;
  SeededRandom pick_;  // the workload's choices
  RunReport report_;
  std::vector<std::string> instances_;
  std::vector<std::string> fips_;
  int next_instance_ = 0;
  int next_fip_ = 0;
  std::set<std::string> hung_;
  Ledger ledger_;
  std::optional<std::string> in_flight_;  // the name a create or delete acts on now
  bool down_ = false;                     // no server: the database did not open again
};

}  // namespace

RunReport Run(const RunOptions& options) {
  std::string dir = options.dir;
  const bool temporary = dir.empty();
  if (temporary) {
    // On tmpfs where there is one: a run's file is small and short-lived, and the disk's syncs
    // (about half of a run's time on ext4) are not what the simulation tests.
    std::error_code ec;
    std::string base = std::filesystem::is_directory("/dev/shm", ec) ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/floatplane-sim-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      tmpl = "/tmp/floatplane-sim-XXXXXX";
      if (mkdtemp(tmpl.data()) == nullptr) {
        RunReport failed{.seed = options.seed};
        failed.violations.push_back("cannot make a temporary directory for the database");
        return failed;
      }
    }
    dir = tmpl;
  }
  RunReport report;
  {
    Simulation sim(options, dir);
    report = sim.Run();
  }
  if (temporary) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return report;
}

std::string RunReport::FirstDifference(const RunReport& other) const {
  for (size_t i = 0; i < std::max(trace.size(), other.trace.size()); ++i) {
    std::string a = i < trace.size() ? trace[i] : "(the trace ends)";
    std::string b = i < other.trace.size() ? other.trace[i] : "(the trace ends)";
    if (a != b) return fmt::format("line {}:\n  {}\n  {}", i + 1, a, b);
  }
  return "";
}

std::string ReplayCommand(const RunOptions& options) {
  return fmt::format(
      "build/release/floatplane-sim --seed {} --operations {}{}{}", options.seed,
      options.operations, options.faults ? "" : " --no-faults",
      options.shape.servers > 1 ? fmt::format(" --servers {}", options.shape.servers) : "");
}

}  // namespace fp::sim
