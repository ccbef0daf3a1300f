// `floating-ip ...`: floating IPs, with the ★ extensions of ../shared/spec/cli-and-console.md §4
// (--ip/--pool/--ip-version on create, attach --instance, --wait).

#include <fmt/format.h>

#include "cli/command_kit.h"
#include "common/ip.h"

namespace fp::cli {

namespace {

std::string Quoted(const nlohmann::json& object, const char* field, const std::string& fallback) {
  return "\"" + object.value(field, fallback) + "\"";
}

// The columns of a floating IP, the pool and instance by name in tables.
std::vector<Column> FloatingIpColumns(std::shared_ptr<NameCache> names) {
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
}

// A floating IP's columns in a table unless --format names others: those of its list.
const std::vector<std::string> kFloatingIpDefaults = {"name", "ip", "pool", "instance",
                                                      "description"};

// Prints a floating IP an action answered with, as its list and view do (the pool and
// instance by name).
CliStatus PrintFloatingIp(Session& s, const nlohmann::json& fip) {
  return PrintOne(s, fip, FloatingIpColumns(std::make_shared<NameCache>(s)), kFloatingIpDefaults);
}

// Refuses --format table:... columns no floating IP view has, before a mutating request.
CliStatus CheckFloatingIpColumns(Session& s) {
  return CheckColumns(s, FloatingIpColumns(std::make_shared<NameCache>(s)));
}

}  // namespace

void AddFloatingIpCommands(Commands& c) {
  CLI::App* group =
      c.Group(&c.root(), "floating-ip", "Floating IPs: addresses that move between instances");

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
        FP_CHECK_OK(CheckFloatingIpColumns(s));
        Api* api = FP_TRY(s.api());
        return PrintFloatingIp(s, FP_TRY(api->Mutate("POST", "/v1/floating-ips", body,
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
                                 FloatingIpColumns(names), kFloatingIpDefaults);
                });
  leaf->add_option("--project", list->project, "The project (name or id)")->required();
  AddListFlags(leaf, list->flags, kNameOrIdSorts);

  auto* view = c.Keep<Selector>();
  leaf = c.Leaf(group, "view", "Fetch floating IP", "floating_ip_view",
                "floatplane floating-ip view --project web --floating-ip www",
                [view](Session& s) -> CliStatus {
                  auto [segment, query] = FP_TRY(Resolve(*view, "floating-ip", true));
                  Api* api = FP_TRY(s.api());
                  return PrintFloatingIp(s, FP_TRY(api->Get("/v1/floating-ips/" + segment, query)));
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
    bool allow_reassociation = false;
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
          nlohmann::json b{{"kind", "instance"}, {"parent", parent}};
          if (attach->allow_reassociation) b["allow_reassociation"] = true;
          return b;
        }));
        auto deadline = FP_TRY(Deadline(s.clock(), attach->wait));
        FP_CHECK_OK(CheckFloatingIpColumns(s));
        Api* api = FP_TRY(s.api(deadline));
        nlohmann::json fip =
            FP_TRY(api->Mutate("POST", "/v1/floating-ips/" + segment + "/attach", body, query));
        FP_CHECK_OK(PrintFloatingIp(s, fip));
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
  leaf->add_flag("--allow-reassociation", attach->allow_reassociation,
                 "Move it from the instance it is attached to, in one step (the switches "
                 "retarget it at once); without, attaching it elsewhere is refused");
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
                  auto deadline = FP_TRY(Deadline(s.clock(), detach->wait));
                  FP_CHECK_OK(CheckFloatingIpColumns(s));
                  Api* api = FP_TRY(s.api(deadline));
                  nlohmann::json fip = FP_TRY(api->Mutate(
                      "POST", "/v1/floating-ips/" + segment + "/detach", nullptr, query));
                  FP_CHECK_OK(PrintFloatingIp(s, fip));
                  s.Note(fmt::format("Floating IP {} ({}) detached",
                                     Quoted(fip, "name", detach->sel.value), fip.value("ip", "")));
                  return {};
                });
  AddSelector(leaf, detach->sel, "floating-ip", "floating IP", true);
  AddWaitFlags(leaf, detach->wait);

  struct Transfer {
    Selector sel;
    std::string to_project;
  };
  auto* transfer = c.Keep<Transfer>();
  leaf = c.Leaf(group, "transfer",
                "★ Move a detached floating IP to another project, keeping its address",
                "floating_ip_transfer",
                "floatplane floating-ip transfer --project web --floating-ip www --to-project shop",
                [transfer](Session& s) -> CliStatus {
                  auto [segment, query] = FP_TRY(Resolve(transfer->sel, "floating-ip", true));
                  FP_CHECK_OK(CheckNameOrId("--to-project", transfer->to_project));
                  FP_CHECK_OK(CheckFloatingIpColumns(s));
                  Api* api = FP_TRY(s.api());
                  nlohmann::json fip =
                      FP_TRY(api->Mutate("POST", "/v1/system/floating-ips/" + segment + "/transfer",
                                         {{"project", transfer->to_project}}, query));
                  FP_CHECK_OK(PrintFloatingIp(s, fip));
                  s.Note(fmt::format("Floating IP {} ({}) moved to project \"{}\"",
                                     Quoted(fip, "name", transfer->sel.value), fip.value("ip", ""),
                                     transfer->to_project));
                  return {};
                });
  AddSelector(leaf, transfer->sel, "floating-ip", "floating IP", true);
  leaf->add_option("--to-project", transfer->to_project, "The project it moves to")->required();
}

}  // namespace fp::cli
