// The tenant's resources: projects, floating IPs, instances and their external IPs, the IP
// pools a silo sees. Paths and flags are the oxide CLI's; the ★ extensions of
// ../shared/spec/cli-and-console.md §4 (--ip/--pool, --instance, --wait, tables) are marked.

#include <fmt/format.h>

#include <limits>

#include "cli/command_kit.h"
#include "common/ip.h"

namespace fp::cli {

namespace {

const std::vector<std::string> kNameOrIdSorts = {"name_ascending", "name_descending",
                                                 "id_ascending"};
const std::vector<std::string> kSiloPoolFields = {"description",  "id",           "ip_version",
                                                  "is_default",   "name",         "pool_type",
                                                  "time_created", "time_modified"};

std::string Quoted(const nlohmann::json& object, const char* field, const std::string& fallback) {
  return "\"" + object.value(field, fallback) + "\"";
}

struct ProjectCreate {
  std::string name, description;
  JsonBody body;
};

void AddProjects(Commands& c) {
  CLI::App* group =
      c.Group(&c.root(), "project", "Projects: where instances and floating IPs live");

  auto* create = c.Keep<ProjectCreate>();
  CLI::App* leaf = c.Leaf(
      group, "create", "Create project", "project_create",
      "floatplane project create --name web --description 'web tier'",
      [create](Session& s) -> CliStatus {
        if (create->body.show_template) {
          Out(PrettyJson({{"name", "web"}, {"description", "web tier"}}));
          return {};
        }
        FP_CHECK_OK(Require(create->body, "--name", !create->name.empty()));
        FP_CHECK_OK(Require(create->body, "--description", true));
        nlohmann::json body = FP_TRY(Body(create->body, [&]() -> CliResult<nlohmann::json> {
          FP_CHECK_OK(CheckName("--name", create->name));
          return nlohmann::json{{"name", create->name}, {"description", create->description}};
        }));
        FP_CHECK_OK(CheckColumns(s, kProjectFields));
        Api* api = FP_TRY(s.api());
        return PrintOne(s, FP_TRY(api->Mutate("POST", "/v1/projects", body)));
      });
  leaf->add_option("--name", create->name, "The project's name");
  leaf->add_option("--description", create->description, "What it is for");
  AddJsonBody(leaf, create->body);

  auto* list = c.Keep<ListFlags>();
  leaf = c.Leaf(group, "list", "List projects", "project_list",
                "floatplane project list --format table", [list](Session& s) -> CliStatus {
                  return RunList(s, "/v1/projects", {}, *list, FieldColumns(kProjectFields),
                                 {"name", "id", "description", "time_created"});
                });
  AddListFlags(leaf, *list, kNameOrIdSorts);

  const Resource project{"project", "project",       "/v1/projects/", false,
                         "project", "--project web", kProjectFields};
  AddView(c, group, project, "Fetch project");
  AddUpdate(c, group, project, "Update project");
  AddDelete(c, group, project, "Delete project");
}

// The columns of a floating IP, the pool and instance by name in tables.
std::vector<Column> FloatingIpColumns(Session& s, std::shared_ptr<NameCache> names) {
  return FieldColumns(kFloatingIpFields,
                      {Column{"pool",
                              [names](const nlohmann::json& f) {
                                return names->Name("/v1/ip-pools/", f.value("ip_pool_id", ""));
                              }},
                       Column{"instance", [names](const nlohmann::json& f) {
                                return f.contains("instance_id") && f["instance_id"].is_string()
                                           ? names->Name("/v1/instances/",
                                                         f["instance_id"].get<std::string>())
                                           : std::string();
                              }}});
  (void)s;
}

void AddFloatingIps(Commands& c) {
  CLI::App* group =
      c.Group(&c.root(), "floating-ip", "Floating IPs: addresses that move between instances");
  const std::vector<std::string> kDefaults = {"name", "ip", "pool", "instance", "description"};

  struct Create {
    std::string project, name, description, ip, pool, ip_version;
    JsonBody body;
  };
  auto* create = c.Keep<Create>();
  CLI::App* leaf = c.Leaf(
      group, "create", "Create floating IP", "floating_ip_create",
      "floatplane floating-ip create --project web --name www --description 'public entry' --pool "
      "public",
      [create](Session& s) -> CliStatus {
        if (create->body.show_template) {
          Out(PrettyJson({{"name", "www"},
                          {"description", "public entry"},
                          {"address_allocator",
                           {{"type", "auto"},
                            {"pool_selector", {{"type", "explicit"}, {"pool", "public"}}}}}}));
          return {};
        }
        FP_CHECK_OK(CheckNameOrId("--project", create->project));
        FP_CHECK_OK(Require(create->body, "--name", !create->name.empty()));
        nlohmann::json body = FP_TRY(Body(create->body, [&]() -> CliResult<nlohmann::json> {
          FP_CHECK_OK(CheckName("--name", create->name));
          nlohmann::json b = {{"name", create->name}, {"description", create->description}};
          if (!create->ip.empty()) {
            auto ip = IpAddr::Parse(create->ip);
            if (!ip)
              return Fail(UsageError(fmt::format("--ip \"{}\": not an IP address", create->ip)));
            b["address_allocator"] = {{"type", "explicit"}, {"ip", ip->ToString()}};
          } else if (!create->pool.empty()) {
            FP_CHECK_OK(CheckNameOrId("--pool", create->pool));
            b["address_allocator"] = {
                {"type", "auto"},
                {"pool_selector", {{"type", "explicit"}, {"pool", create->pool}}}};
          } else if (!create->ip_version.empty()) {
            b["address_allocator"] = {
                {"type", "auto"},
                {"pool_selector", {{"type", "auto"}, {"ip_version", create->ip_version}}}};
          }
          return b;
        }));
        FP_CHECK_OK(CheckColumns(s, kFloatingIpFields));
        Api* api = FP_TRY(s.api());
        return PrintOne(s, FP_TRY(api->Mutate("POST", "/v1/floating-ips", body,
                                              {{"project", create->project}})));
      });
  leaf->add_option("--project", create->project, "The project (name or id)")->required();
  leaf->add_option("--name", create->name, "The floating IP's name");
  leaf->add_option("--description", create->description, "What it is for");
  CLI::Option* ip =
      leaf->add_option("--ip", create->ip, "★ This address (from the pool that holds it)");
  CLI::Option* pool =
      leaf->add_option("--pool", create->pool, "★ From this pool (name or id)")->excludes(ip);
  leaf->add_option("--ip-version", create->ip_version,
                   "★ From the silo's default pool of this version")
      ->check(CLI::IsMember({"v4", "v6"}))
      ->excludes(pool)
      ->excludes(ip);
  AddJsonBody(leaf, create->body);

  struct ListCmd {
    std::string project;
    ListFlags flags;
  };
  auto* list = c.Keep<ListCmd>();
  leaf = c.Leaf(group, "list", "List floating IPs", "floating_ip_list",
                "floatplane floating-ip list --project web --format table",
                [list](Session& s) -> CliStatus {
                  FP_CHECK_OK(CheckNameOrId("--project", list->project));
                  auto names = std::make_shared<NameCache>(s);
                  return RunList(s, "/v1/floating-ips", {{"project", list->project}}, list->flags,
                                 FloatingIpColumns(s, names),
                                 {"name", "ip", "pool", "instance", "description"});
                });
  leaf->add_option("--project", list->project, "The project (name or id)")->required();
  AddListFlags(leaf, list->flags, kNameOrIdSorts);

  auto* view = c.Keep<Selector>();
  leaf = c.Leaf(group, "view", "Fetch floating IP", "floating_ip_view",
                "floatplane floating-ip view --project web --floating-ip www",
                [view, kDefaults](Session& s) -> CliStatus {
                  auto [segment, query] = FP_TRY(Resolve(*view, "floating-ip", true));
                  Api* api = FP_TRY(s.api());
                  auto names = std::make_shared<NameCache>(s);
                  return PrintOne(s, FP_TRY(api->Get("/v1/floating-ips/" + segment, query)),
                                  FloatingIpColumns(s, names), kDefaults);
                });
  AddSelector(leaf, *view, "floating-ip", "floating IP", true);

  const Resource floating{"floating-ip",       "floating IP",
                          "/v1/floating-ips/", true,
                          "floating_ip",       "--project web --floating-ip www",
                          kFloatingIpFields};
  AddUpdate(c, group, floating, "Update floating IP");
  AddDelete(c, group, floating, "Delete floating IP");

  struct Attach {
    Selector sel;
    std::string kind, parent, instance;
    JsonBody body;
    WaitFlags wait;
  };
  auto* attach = c.Keep<Attach>();
  leaf = c.Leaf(
      group, "attach", "Attach floating IP", "floating_ip_attach",
      "floatplane floating-ip attach --project web --floating-ip www --instance www-1 --wait",
      [attach](Session& s) -> CliStatus {
        if (attach->body.show_template) {
          Out(PrettyJson({{"kind", "instance"}, {"parent", "www-1"}}));
          return {};
        }
        auto [segment, query] = FP_TRY(Resolve(attach->sel, "floating-ip", true));
        const std::string parent = attach->instance.empty() ? attach->parent : attach->instance;
        FP_CHECK_OK(
            Require(attach->body, "--instance (or --kind instance --parent)", !parent.empty()));
        nlohmann::json body = FP_TRY(Body(attach->body, [&]() -> CliResult<nlohmann::json> {
          FP_CHECK_OK(CheckNameOrId(attach->instance.empty() ? "--parent" : "--instance", parent));
          return nlohmann::json{{"kind", "instance"}, {"parent", parent}};
        }));
        auto deadline = FP_TRY(Deadline(attach->wait));
        FP_CHECK_OK(CheckColumns(s, kFloatingIpFields));
        Api* api = FP_TRY(s.api(deadline));
        nlohmann::json fip =
            FP_TRY(api->Mutate("POST", "/v1/floating-ips/" + segment + "/attach", body, query));
        FP_CHECK_OK(PrintOne(s, fip));
        s.Note(fmt::format("Floating IP {} ({}) attached to instance \"{}\"",
                           Quoted(fip, "name", attach->sel.value), fip.value("ip", ""), parent));
        return {};
      });
  AddSelector(leaf, attach->sel, "floating-ip", "floating IP", true);
  CLI::Option* instance = leaf->add_option(
      "--instance", attach->instance, "★ The instance (name or id): --kind instance --parent I");
  leaf->add_option("--kind", attach->kind, "What to attach it to")
      ->check(CLI::IsMember({"instance"}))
      ->excludes(instance);
  leaf->add_option("--parent", attach->parent, "The instance (name or id)")->excludes(instance);
  AddJsonBody(leaf, attach->body);
  AddWaitFlags(leaf, attach->wait);

  struct Detach {
    Selector sel;
    WaitFlags wait;
  };
  auto* detach = c.Keep<Detach>();
  leaf = c.Leaf(group, "detach", "Detach floating IP", "floating_ip_detach",
                "floatplane floating-ip detach --project web --floating-ip www",
                [detach](Session& s) -> CliStatus {
                  auto [segment, query] = FP_TRY(Resolve(detach->sel, "floating-ip", true));
                  auto deadline = FP_TRY(Deadline(detach->wait));
                  FP_CHECK_OK(CheckColumns(s, kFloatingIpFields));
                  Api* api = FP_TRY(s.api(deadline));
                  nlohmann::json fip = FP_TRY(api->Mutate(
                      "POST", "/v1/floating-ips/" + segment + "/detach", nullptr, query));
                  FP_CHECK_OK(PrintOne(s, fip));
                  s.Note(fmt::format("Floating IP {} ({}) detached",
                                     Quoted(fip, "name", detach->sel.value), fip.value("ip", "")));
                  return {};
                });
  AddSelector(leaf, detach->sel, "floating-ip", "floating IP", true);
  AddWaitFlags(leaf, detach->wait);
}

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

void AddInstances(Commands& c) {
  CLI::App* group = c.Group(&c.root(), "instance", "Instances (VMs) and their external IPs");

  struct Create {
    std::string project, name, description, hostname, memory, start;
    int ncpus = 0;
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
          nlohmann::json b = {{"name", create->name},
                              {"description", create->description},
                              {"hostname", create->hostname},
                              {"memory", FP_TRY(ByteCount(create->memory))},
                              {"ncpus", create->ncpus}};
          if (!create->start.empty()) b["start"] = create->start == "true";
          return b;
        }));
        auto deadline = FP_TRY(Deadline(create->wait));
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
  leaf->add_option("--ncpus", create->ncpus, "Virtual CPUs")->check(CLI::PositiveNumber);
  leaf->add_option("--start", create->start, "Start it once created (default true)")
      ->check(CLI::IsMember({"true", "false"}));
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
  struct Action {
    Selector sel;
    WaitFlags wait;
  };
  for (const auto& [verb, about, target] :
       {std::tuple<std::string, std::string, std::string>{"start", "Boot instance", "running"},
        {"stop", "Stop instance", "stopped"},
        {"reboot", "Reboot instance", "running"}}) {
    auto* action = c.Keep<Action>();
    std::string v = verb, t = target;
    leaf = c.Leaf(group, verb, about, "instance_" + verb,
                  fmt::format("floatplane instance {} --project web --instance www-1 --wait", verb),
                  [action, v, t](Session& s) -> CliStatus {
                    auto [segment, query] = FP_TRY(Resolve(action->sel, "instance", true));
                    auto deadline = FP_TRY(Deadline(action->wait));
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
        auto deadline = FP_TRY(Deadline(del->wait));
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
        auto [segment, query] = FP_TRY(Resolve(update->sel, "instance", true));
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
  leaf->add_option("--ncpus", update->ncpus, "Virtual CPUs")->check(CLI::PositiveNumber);
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
      "floatplane instance wait --project web --instance www-1 --state running --timeout 2m",
      [wait](Session& s) -> CliStatus {
        auto [segment, query] = FP_TRY(Resolve(wait->sel, "instance", true));
        auto timeout = FP_TRY(ParseDuration("--timeout", wait->timeout));
        return WaitFor(s, "instance " + wait->sel.value, wait->state, "/v1/instances/" + segment,
                       query, std::chrono::steady_clock::now() + timeout, RunState,
                       /*gone_ok=*/wait->state == "gone");
      });
  AddSelector(leaf, wait->sel, "instance", "instance", true);
  leaf->add_option("--state", wait->state, "running, stopped or gone (deleted)")
      ->required()
      ->check(CLI::IsMember({"running", "stopped", "gone"}));
  leaf->add_option("--timeout", wait->timeout, "How long to wait (default 5m)");

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
               auto deadline = FP_TRY(Deadline(attach->wait));
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
               auto deadline = FP_TRY(Deadline(detach->wait));
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

void AddSiloPools(Commands& c) {
  CLI::App* group = c.Group(&c.root(), "ip-pool", "The IP pools this silo may allocate from");
  struct ListCmd {
    std::string ip_version, pool_type;
    ListFlags flags;
  };
  auto* list = c.Keep<ListCmd>();
  CLI::App* leaf =
      c.Leaf(group, "list", "List IP pools", "ip_pool_list",
             "floatplane ip-pool list --format table", [list](Session& s) -> CliStatus {
               Query q;
               if (!list->ip_version.empty()) q.emplace_back("ip_version", list->ip_version);
               if (!list->pool_type.empty()) q.emplace_back("pool_type", list->pool_type);
               return RunList(s, "/v1/ip-pools", q, list->flags, FieldColumns(kSiloPoolFields),
                              {"name", "ip_version", "is_default", "description", "id"});
             });
  leaf->add_option("--ip-version", list->ip_version, "Only pools of this version")
      ->check(CLI::IsMember({"v4", "v6"}));
  leaf->add_option("--pool-type", list->pool_type, "Only pools of this type")
      ->check(CLI::IsMember({"unicast", "multicast"}));
  AddListFlags(leaf, list->flags, kNameOrIdSorts);

  AddView(c, group, Resource{"pool", "IP pool", "/v1/ip-pools/", false, "ip_pool", "--pool public"},
          "Fetch IP pool");
}

}  // namespace

void AddResourceCommands(Commands& c) {
  AddProjects(c);
  AddFloatingIps(c);
  AddInstances(c);
  AddSiloPools(c);
}

}  // namespace fp::cli
