// `instance ...`: instances, their state changes (with --wait, and `instance wait`) and their
// external IPs (`instance external-ip ...`).

#include <fmt/format.h>

#include <limits>

#include "cli/command_kit.h"

namespace fp::cli {

namespace {

// --ncpus up to what the API's field carries (uint16); the server's own limit (64 per
// instance) is answered with Oxide's message.
constexpr int64_t kMaxCpus = 65535;

// Instance byte counts: N, or N with k/m/g/t (optionally "ib"), powers of 1024, as the oxide
// CLI reads --memory.
CliResult<int64_t> ByteCount(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (digits == 0 || digits > 15) {
    return Fail(UsageError(
        fmt::format("--memory \"{}\": expected bytes, e.g. 1073741824, 1g or 512m", text)));
  }
  int64_t n = std::stoll(text.substr(0, digits));
  int shift = 0;
  if (unit.empty()) {
    shift = 0;
  } else if (unit == "k" || unit == "kib") {
    shift = 10;
  } else if (unit == "m" || unit == "mib") {
    shift = 20;
  } else if (unit == "g" || unit == "gib") {
    shift = 30;
  } else if (unit == "t" || unit == "tib") {
    shift = 40;
  } else {
    return Fail(UsageError(
        fmt::format("--memory \"{}\": expected bytes, e.g. 1073741824, 1g or 512m", text)));
  }
  if (n > (std::numeric_limits<int64_t>::max() >> shift)) {
    return Fail(
        UsageError(fmt::format("--memory \"{}\": more bytes than the API can carry", text)));
  }
  return n << shift;
}

std::string RunState(const nlohmann::json& instance) { return instance.value("run_state", "?"); }

}  // namespace

void AddInstanceCommands(Commands& c) {
  CLI::App* group = c.Group(&c.root(), "instance", "Instances (VMs) and their external IPs");

  struct Create {
    std::string project, name, description, hostname, memory, start;
    int ncpus = 0;
    bool no_snat = false;
    JsonBody body;
    WaitFlags wait;
  };
  auto* create = c.Keep<Create>();
  CLI::App* leaf = c.Leaf(
      group, "create", "Create instance", "instance_create",
      "floatplane instance create --project web --name www-1 --description '' --hostname www-1 "
      "--memory 1g --ncpus 1 --wait",
      [create](Session& s) -> CliStatus {
        if (create->body.show_template) {
          Out(PrettyJson({{"name", "www-1"},
                          {"description", ""},
                          {"hostname", "www-1"},
                          {"memory", int64_t{1} << 30},
                          {"ncpus", 1},
                          {"start", true}}));
          return {};
        }
        FP_CHECK_OK(CheckNameOrId("--project", create->project));
        FP_CHECK_OK(Require(create->body, "--name", !create->name.empty()));
        FP_CHECK_OK(Require(create->body, "--hostname", !create->hostname.empty()));
        FP_CHECK_OK(Require(create->body, "--memory", !create->memory.empty()));
        FP_CHECK_OK(Require(create->body, "--ncpus", create->ncpus > 0));
        nlohmann::json body = FP_TRY(Body(create->body, [&]() -> CliResult<nlohmann::json> {
          FP_CHECK_OK(CheckName("--name", create->name));
          // (Not FP_TRY inside the braces: a return out of a half-built initializer list leaks
          // what it built.)
          auto memory = FP_TRY(ByteCount(create->memory));
          nlohmann::json b = {{"name", create->name},
                              {"description", create->description},
                              {"hostname", create->hostname},
                              {"memory", memory},
                              {"ncpus", create->ncpus}};
          if (!create->start.empty()) b["start"] = create->start == "true";
          if (create->no_snat) b["snat"] = false;
          return b;
        }));
        auto deadline = FP_TRY(Deadline(s.clock(), create->wait));
        FP_CHECK_OK(CheckColumns(s, kInstanceFields));
        Api* api = FP_TRY(s.api(deadline));
        nlohmann::json instance =
            FP_TRY(api->Mutate("POST", "/v1/instances", body, {{"project", create->project}}));
        if (deadline) {
          const bool starts = !body.contains("start") || body["start"] == true;
          FP_CHECK_OK(
              WaitFor(s, "instance " + instance.value("name", ""), starts ? "running" : "stopped",
                      "/v1/instances/" + instance.value("id", ""), {}, *deadline, RunState));
          instance = FP_TRY(api->Get("/v1/instances/" + instance.value("id", "")));
        }
        return PrintOne(s, instance);
      });
  leaf->add_option("--project", create->project, "The project (name or id)")->required();
  leaf->add_option("--name", create->name, "The instance's name");
  leaf->add_option("--description", create->description, "What it is for");
  leaf->add_option("--hostname", create->hostname, "Its hostname");
  leaf->add_option("--memory", create->memory, "Memory: bytes, or with k, m, g, t (1024s)");
  leaf->add_option("--ncpus", create->ncpus, "Virtual CPUs")->check(WholeNumber(kMaxCpus));
  leaf->add_option("--start", create->start, "Start it once created (default true)")
      ->check(CLI::IsMember({"true", "false"}));
  leaf->add_flag("--no-snat", create->no_snat,
                 "No outbound SNAT block (floatplane's): no way out until an ephemeral or "
                 "floating IP is attached, and no quarter of an IPv4 address taken");
  AddJsonBody(leaf, create->body);
  AddWaitFlags(leaf, create->wait);

  struct ListCmd {
    std::string project;
    ListFlags flags;
  };
  auto* list = c.Keep<ListCmd>();
  leaf = c.Leaf(group, "list", "List instances", "instance_list",
                "floatplane instance list --project web --format table",
                [list](Session& s) -> CliStatus {
                  FP_CHECK_OK(CheckNameOrId("--project", list->project));
                  return RunList(s, "/v1/instances", {{"project", list->project}}, list->flags,
                                 FieldColumns(kInstanceFields),
                                 {"name", "run_state", "ncpus", "memory", "hostname", "id"});
                });
  leaf->add_option("--project", list->project, "The project (name or id)")->required();
  AddListFlags(leaf, list->flags, kNameOrIdSorts);

  auto* view = c.Keep<Selector>();
  leaf = c.Leaf(group, "view", "Fetch instance", "instance_view",
                "floatplane instance view --project web --instance www-1",
                [view](Session& s) -> CliStatus {
                  auto [segment, query] = FP_TRY(Resolve(*view, "instance", true));
                  Api* api = FP_TRY(s.api());
                  return PrintOne(s, FP_TRY(api->Get("/v1/instances/" + segment, query)));
                });
  AddSelector(leaf, *view, "instance", "instance", true);

  // start, stop, reboot: an action, then (with --wait) the state it leads to.
  struct StateChange {
    Selector sel;
    WaitFlags wait;
  };
  for (const auto& [verb, about, target] :
       {std::tuple<std::string, std::string, std::string>{"start", "Boot instance", "running"},
        {"stop", "Stop instance", "stopped"},
        {"reboot", "Reboot instance", "running"}}) {
    auto* action = c.Keep<StateChange>();
    std::string v = verb, t = target;
    leaf = c.Leaf(group, verb, about, "instance_" + verb,
                  fmt::format("floatplane instance {} --project web --instance www-1 --wait", verb),
                  [action, v, t](Session& s) -> CliStatus {
                    auto [segment, query] = FP_TRY(Resolve(action->sel, "instance", true));
                    auto deadline = FP_TRY(Deadline(s.clock(), action->wait));
                    FP_CHECK_OK(CheckColumns(s, kInstanceFields));
                    Api* api = FP_TRY(s.api(deadline));
                    nlohmann::json instance = FP_TRY(
                        api->Mutate("POST", "/v1/instances/" + segment + "/" + v, nullptr, query));
                    if (deadline) {
                      FP_CHECK_OK(WaitFor(
                          s, "instance " + instance.value("name", action->sel.value), t,
                          "/v1/instances/" + instance.value("id", ""), {}, *deadline, RunState));
                      instance = FP_TRY(api->Get("/v1/instances/" + instance.value("id", "")));
                    }
                    return PrintOne(s, instance);
                  });
    AddSelector(leaf, action->sel, "instance", "instance", true);
    AddWaitFlags(leaf, action->wait);
  }

  struct Delete {
    Selector sel;
    WaitFlags wait;
  };
  auto* del = c.Keep<Delete>();
  leaf = c.Leaf(
      group, "delete", "Delete instance", "instance_delete",
      "floatplane instance delete --project web --instance www-1", [del](Session& s) -> CliStatus {
        auto [segment, query] = FP_TRY(Resolve(del->sel, "instance", true));
        auto deadline = FP_TRY(Deadline(s.clock(), del->wait));
        Api* api = FP_TRY(s.api(deadline));
        FP_TRY(api->Mutate("DELETE", "/v1/instances/" + segment, nullptr, query));
        if (deadline) {
          FP_CHECK_OK(WaitFor(s, "instance " + del->sel.value, "gone", "/v1/instances/" + segment,
                              query, *deadline, RunState, /*gone_ok=*/true));
        }
        s.Note(fmt::format("Instance \"{}\" deleted", del->sel.value));
        return {};
      });
  AddSelector(leaf, del->sel, "instance", "instance", true);
  AddWaitFlags(leaf, del->wait);

  struct Update {
    Selector sel;
    std::string memory, auto_restart_policy, cpu_platform, boot_disk;
    int ncpus = 0;
    JsonBody body;
  };
  auto* update = c.Keep<Update>();
  leaf = c.Leaf(
      group, "update", "Update instance (what is not given stays as it is)", "instance_update",
      "floatplane instance update --project web --instance www-1 --memory 2g",
      [update](Session& s) -> CliStatus {
        if (update->body.show_template) {
          Out(PrettyJson({{"memory", int64_t{2} << 30},
                          {"ncpus", 2},
                          {"auto_restart_policy", nullptr},
                          {"boot_disk", nullptr},
                          {"cpu_platform", nullptr}}));
          return {};
        }
        // Named, not a structured binding: the lambda below uses them (Clang 14 cannot capture
        // a binding).
        std::pair<std::string, Query> target = FP_TRY(Resolve(update->sel, "instance", true));
        const std::string& segment = target.first;
        const Query& query = target.second;
        FP_CHECK_OK(CheckColumns(s, kInstanceFields));
        Api* api = FP_TRY(s.api());
        nlohmann::json body = FP_TRY(Body(update->body, [&]() -> CliResult<nlohmann::json> {
          // The API replaces every field: start from the instance as it is.
          nlohmann::json now = FP_TRY(api->Get("/v1/instances/" + segment, query));
          nlohmann::json b = {
              {"memory", now.value("memory", int64_t{0})},
              {"ncpus", now.value("ncpus", int64_t{0})},
              {"auto_restart_policy", now.value("auto_restart_policy", nlohmann::json())},
              {"boot_disk", now.value("boot_disk_id", nlohmann::json())},
              {"cpu_platform", now.value("cpu_platform", nlohmann::json())}};
          if (!update->memory.empty()) b["memory"] = FP_TRY(ByteCount(update->memory));
          if (update->ncpus > 0) b["ncpus"] = update->ncpus;
          if (!update->auto_restart_policy.empty())
            b["auto_restart_policy"] = update->auto_restart_policy;
          if (!update->cpu_platform.empty()) b["cpu_platform"] = update->cpu_platform;
          if (!update->boot_disk.empty()) b["boot_disk"] = update->boot_disk;
          return b;
        }));
        return PrintOne(s, FP_TRY(api->Mutate("PUT", "/v1/instances/" + segment, body, query)));
      });
  AddSelector(leaf, update->sel, "instance", "instance", true);
  leaf->add_option("--memory", update->memory, "Memory: bytes, or with k, m, g, t (1024s)");
  leaf->add_option("--ncpus", update->ncpus, "Virtual CPUs")->check(WholeNumber(kMaxCpus));
  leaf->add_option("--auto-restart-policy", update->auto_restart_policy, "never or best_effort")
      ->check(CLI::IsMember({"never", "best_effort"}));
  leaf->add_option("--cpu-platform", update->cpu_platform, "amd_milan, amd_turin or amd_turin_v2")
      ->check(CLI::IsMember({"amd_milan", "amd_turin", "amd_turin_v2"}));
  leaf->add_option("--boot-disk", update->boot_disk, "The disk to boot from (name or id)");
  AddJsonBody(leaf, update->body);

  struct WaitCmd {
    Selector sel;
    std::string state;
    std::string timeout = "5m";
  };
  auto* wait = c.Keep<WaitCmd>();
  leaf = c.Leaf(
      group, "wait", "★ Wait until an instance is in a state", "instance_view",
      "floatplane instance wait --project web --instance www-1 --state running --wait-timeout 2m",
      [wait](Session& s) -> CliStatus {
        auto [segment, query] = FP_TRY(Resolve(wait->sel, "instance", true));
        auto timeout = FP_TRY(ParseDuration("--wait-timeout", wait->timeout));
        return WaitFor(s, "instance " + wait->sel.value, wait->state, "/v1/instances/" + segment,
                       query, s.clock().Deadline(timeout), RunState,
                       /*gone_ok=*/wait->state == "gone");
      });
  AddSelector(leaf, wait->sel, "instance", "instance", true);
  leaf->add_option("--state", wait->state, "running, stopped or gone (deleted)")
      ->required()
      ->check(CLI::IsMember({"running", "stopped", "gone"}));
  // --wait-timeout as on every --wait; --timeout keeps its one meaning (one request's).
  leaf->add_option("--wait-timeout", wait->timeout, "How long to wait (default 5m; 90s, 2m, 1h)");

  // instance external-ip
  CLI::App* eip = c.Group(group, "external-ip", "An instance's external IPs");
  auto* eip_list = c.Keep<Selector>();
  leaf = c.Leaf(
      eip, "list", "List external IP addresses", "instance_external_ip_list",
      "floatplane instance external-ip list --project web --instance www-1 --format table",
      [eip_list](Session& s) -> CliStatus {
        auto [segment, query] = FP_TRY(Resolve(*eip_list, "instance", true));
        Api* api = FP_TRY(s.api());
        nlohmann::json page = FP_TRY(api->Get("/v1/instances/" + segment + "/external-ips", query));
        OutputFormat format = FP_TRY(s.format());
        if (!format.table) {
          Out(PrettyJson(page));
          return {};
        }
        auto names = std::make_shared<NameCache>(s);
        std::vector<Column> columns = FieldColumns(
            {"first_port", "id", "instance_id", "ip", "ip_pool_id", "kind", "last_port", "name",
             "project_id"},
            {Column{"version",
                    [](const nlohmann::json& e) {
                      return e.value("ip", "").find(':') == std::string::npos ? std::string("v4")
                                                                              : std::string("v6");
                    }},
             Column{"pool",
                    [names](const nlohmann::json& e) {
                      return names->Name("/v1/ip-pools/", e.value("ip_pool_id", ""));
                    }},
             Column{"ports", [](const nlohmann::json& e) {
                      if (!e.contains("first_port")) return std::string();
                      return fmt::format("{}-{}", e["first_port"].dump(), e["last_port"].dump());
                    }}});
        ListPrinter printer = FP_TRY(
            ListPrinter::Make(format, columns, {"kind", "ip", "version", "pool", "name", "ports"}));
        for (const auto& item : page.value("items", nlohmann::json::array())) printer.Add(item);
        printer.Finish();
        return {};
      });
  AddSelector(leaf, *eip_list, "instance", "instance", true);

  struct AttachEphemeral {
    Selector sel;
    std::string pool, ip_version;
    JsonBody body;
    WaitFlags wait;
  };
  auto* attach = c.Keep<AttachEphemeral>();
  leaf =
      c.Leaf(eip, "attach-ephemeral", "Allocate and attach ephemeral IP to instance",
             "instance_ephemeral_ip_attach",
             "floatplane instance external-ip attach-ephemeral --project web --instance www-1 "
             "--pool public",
             [attach](Session& s) -> CliStatus {
               if (attach->body.show_template) {
                 Out(PrettyJson({{"pool_selector", {{"type", "explicit"}, {"pool", "public"}}}}));
                 return {};
               }
               auto [segment, query] = FP_TRY(Resolve(attach->sel, "instance", true));
               nlohmann::json body = FP_TRY(Body(attach->body, [&]() -> CliResult<nlohmann::json> {
                 nlohmann::json b = nlohmann::json::object();
                 if (!attach->pool.empty()) {
                   FP_CHECK_OK(CheckNameOrId("--pool", attach->pool));
                   b["pool_selector"] = {{"type", "explicit"}, {"pool", attach->pool}};
                 } else if (!attach->ip_version.empty()) {
                   b["pool_selector"] = {{"type", "auto"}, {"ip_version", attach->ip_version}};
                 }
                 return b;
               }));
               auto deadline = FP_TRY(Deadline(s.clock(), attach->wait));
               FP_CHECK_OK(CheckColumns(s, kExternalIpFields));
               Api* api = FP_TRY(s.api(deadline));
               nlohmann::json ip = FP_TRY(api->Mutate(
                   "POST", "/v1/instances/" + segment + "/external-ips/ephemeral", body, query));
               FP_CHECK_OK(PrintOne(s, ip));
               s.Note(fmt::format("Ephemeral IP {} attached to instance \"{}\"", ip.value("ip", ""),
                                  attach->sel.value));
               return {};
             });
  AddSelector(leaf, attach->sel, "instance", "instance", true);
  CLI::Option* pool = leaf->add_option("--pool", attach->pool, "★ From this pool (name or id)");
  leaf->add_option("--ip-version", attach->ip_version,
                   "★ From the silo's default pool of this version")
      ->check(CLI::IsMember({"v4", "v6"}))
      ->excludes(pool);
  AddJsonBody(leaf, attach->body);
  AddWaitFlags(leaf, attach->wait);

  struct DetachEphemeral {
    Selector sel;
    std::string ip_version;
    WaitFlags wait;
  };
  auto* detach = c.Keep<DetachEphemeral>();
  leaf =
      c.Leaf(eip, "detach-ephemeral", "Detach and deallocate ephemeral IP from instance",
             "instance_ephemeral_ip_detach",
             "floatplane instance external-ip detach-ephemeral --project web --instance www-1 "
             "--ip-version v4",
             [detach](Session& s) -> CliStatus {
               auto [segment, query] = FP_TRY(Resolve(detach->sel, "instance", true));
               if (!detach->ip_version.empty())
                 query.emplace_back("ip_version", detach->ip_version);
               auto deadline = FP_TRY(Deadline(s.clock(), detach->wait));
               Api* api = FP_TRY(s.api(deadline));
               FP_TRY(api->Mutate("DELETE", "/v1/instances/" + segment + "/external-ips/ephemeral",
                                  nullptr, query));
               s.Note(fmt::format("Ephemeral IP detached from instance \"{}\"", detach->sel.value));
               return {};
             });
  AddSelector(leaf, detach->sel, "instance", "instance", true);
  leaf->add_option("--ip-version", detach->ip_version, "Which one, when it has both")
      ->check(CLI::IsMember({"v4", "v6"}));
  AddWaitFlags(leaf, detach->wait);
}

}  // namespace fp::cli
