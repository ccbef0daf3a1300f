#include "cmd/server_agents.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "common/log.h"
#include "db/sleds.h"
#include "loops/nat_reconciler.h"

namespace fp::cmd {

Status StartAgents(const ServerFlags& flags, fp::db::Datastore& ds, ServerAgents& out) {
  if (!flags.agent_secret_file.empty()) {
    out.secret = FP_TRY(fp::agents::AgentSecret::ReadFile(flags.agent_secret_file));
  } else if (flags.switch_agents.empty() || flags.sled_agents.empty()) {
    out.secret = fp::agents::AgentSecret::Generate(ds.random());
  }
  std::vector<std::string> switch_urls = flags.switch_agents;
  if (switch_urls.empty()) {
    for (int i = 0; i < 2; ++i) {
      fp::agents::daemon::DaemonOptions options;
      options.clock = &ds.clock();
      options.random = &ds.random();
      options.test_faults = flags.enable_test_faults;
      options.secret = out.secret;
      out.switch_sims.push_back(FP_TRY(fp::agents::daemon::SwitchAgentDaemon::Start(options)));
      switch_urls.push_back(out.switch_sims.back()->base_url());
    }
  }
  for (const std::string& url : switch_urls) {
    out.switch_clients.push_back(
        fp::agents::MakeSwitchAgentClient(url, flags.agent_timeout_ms, out.secret));
  }
  std::vector<std::string> sled_urls = flags.sled_agents;
  if (sled_urls.empty()) {
    for (int i = 0; i < 2; ++i) {
      fp::agents::daemon::DaemonOptions options;
      options.clock = &ds.clock();
      options.random = &ds.random();
      options.start_delay = std::chrono::milliseconds(100);
      options.stop_delay = std::chrono::milliseconds(100);
      options.serial = fmt::format("dev-sled-{}", i);
      options.test_faults = flags.enable_test_faults;
      options.secret = out.secret;
      out.sled_sims.push_back(FP_TRY(fp::agents::daemon::SledAgentDaemon::Start(options)));
      sled_urls.push_back(out.sled_sims.back()->base_url());
    }
  }
  std::map<std::string, std::string> url_of_serial;  // the sleds seen so far
  for (size_t i = 0; i < sled_urls.size(); ++i) {
    const std::string& url = sled_urls[i];
    auto client = fp::agents::MakeSledAgentClient(url, flags.agent_timeout_ms, out.secret);
    // The sled's own underlay address when its dataplane has one (the Linux sled agent: NAT
    // entries must name it); else fd00:1122:3344:101::1, :102::1, ... in sled order.
    fp::IpAddr underlay(fp::IpVersion::kV6, (fp::uint128{0xfd0011223344u} << 80) |
                                                (fp::uint128{0x101u + i} << 64) | 1u);
    auto identity = client->Identity();
    if (identity && identity->underlay) {
      underlay = *identity->underlay;
    } else if (!identity) {
      // Named as it was the last time it answered at this URL (db::SledUpsert).
      fp::LogEvent("warn", "sled agent did not say who it is; assigning an underlay address",
                   {{"sled_agent", url},
                    {"underlay_address", underlay.ToString()},
                    {"error", identity.error().message()}});
    }
    std::optional<std::string> serial = identity ? identity->serial : std::nullopt;
    if (serial) {
      auto [seen, added] = url_of_serial.emplace(*serial, url);
      if (!added) {
        return fp::Fail(fp::Error::InvalidRequest(
            fmt::format("sled agents {} and {} both say they are the sled with serial \"{}\"; "
                        "give each its own --serial",
                        seen->second, url, *serial)));
      }
    }
    fp::model::Sled sled = FP_TRY(fp::db::SledUpsert(ds, serial, url, underlay));
    out.sled_clients.push_back(std::move(client));
    out.sled_agents.sleds[sled.id] = out.sled_clients.back().get();
  }
  fp::LogEvent("info", "agents",
               {{"switch_agents", switch_urls},
                {"sled_agents", sled_urls.size()},
                {"in_process", flags.sled_agents.empty()}});
  return fp::Ok();
}

void ReloadSwitchAgents(const ServerFlags& flags, const ServerAgents& agents,
                        fp::loops::NatReconciler& nat) {
  if (flags.config_file.empty()) {
    fp::LogEvent("warn", "SIGHUP: no --config file to read the switch agents from");
    return;
  }
  auto wanted = ReadSwitchAgents(flags.config_file);
  if (!wanted) {
    fp::LogEvent("warn", "SIGHUP: cannot read the switch agents; nothing changed",
                 {{"config", flags.config_file}, {"error", wanted.error().message()}});
    return;
  }
  if (!*wanted) {
    fp::LogEvent("info", "SIGHUP: the config file names no switch-agent; nothing changed",
                 {{"config", flags.config_file}});
    return;
  }
  std::vector<std::string> now = nat.SwitchAddresses();
  std::vector<std::string> added, removed;
  for (const std::string& url : **wanted) {
    if (std::find(now.begin(), now.end(), url) == now.end()) {
      nat.AddSwitch(fp::agents::MakeSwitchAgentClient(url, flags.agent_timeout_ms, agents.secret));
      added.push_back(url);
    }
  }
  for (const std::string& url : now) {
    if (std::find((*wanted)->begin(), (*wanted)->end(), url) == (*wanted)->end()) {
      nat.RemoveSwitch(url);
      removed.push_back(url);
    }
  }
  fp::LogEvent("info", "SIGHUP: switch agents read again",
               {{"switch_agents", nat.SwitchAddresses()}, {"added", added}, {"removed", removed}});
}

}  // namespace fp::cmd
