// `system networking ip-pool ...`: IP pools, their ranges and the silos linked to them.

#include <fmt/format.h>

#include "cli/command_kit.h"
#include "common/ip.h"

namespace fp::cli {

namespace {

// The body of a range add or remove, checked before any request by the rule the server
// applies (IpRange::Make): addresses of one version, first not after last.
CliResult<nlohmann::json> RangeBody(const std::string& first, const std::string& last) {
  auto a = IpAddr::Parse(first);
  auto b = IpAddr::Parse(last);
  if (!a) return Fail(UsageError(fmt::format("--first \"{}\": not an IP address", first)));
  if (!b) return Fail(UsageError(fmt::format("--last \"{}\": not an IP address", last)));
  if (a->version() != b->version()) {
    return Fail(UsageError("first and last must either both be ipv4 or ipv6 addresses"));
  }
  if (!IpRange::Make(*a, *b)) {
    return Fail(UsageError(fmt::format(
        "--first {} is after --last {}: a range runs from its lowest address to its highest",
        a->ToString(), b->ToString())));
  }
  return nlohmann::json{{"first", a->ToString()}, {"last", b->ToString()}};
}

}  // namespace

void AddPoolCommands(Commands& c, CLI::App* networking) {
  CLI::App* group =
      c.Group(networking, "ip-pool",
              "IP pools: the address ranges floating, ephemeral and SNAT IPs come from");

  struct Create {
    std::string name, description, ip_version, pool_type, assignment;
    JsonBody body;
  };
  auto* create = c.Keep<Create>();
  CLI::App* leaf =
      c.Leaf(group, "create", "Create IP pool", "system_ip_pool_create",
             "floatplane system networking ip-pool create --name public --description 'rack "
             "uplink' --ip-version v4",
             [create](Session& s) -> CliStatus {
               if (create->body.show_template) {
                 Out(PrettyJson(
                     {{"name", "public"}, {"description", "rack uplink"}, {"ip_version", "v4"}}));
                 return {};
               }
               FP_CHECK_OK(Require(create->body, "--name", !create->name.empty()));
               nlohmann::json body = FP_TRY(Body(create->body, [&]() -> CliResult<nlohmann::json> {
                 FP_CHECK_OK(CheckName("--name", create->name));
                 nlohmann::json b = {{"name", create->name}, {"description", create->description}};
                 if (!create->ip_version.empty()) b["ip_version"] = create->ip_version;
                 if (!create->pool_type.empty()) b["pool_type"] = create->pool_type;
                 if (!create->assignment.empty()) b["assignment"] = create->assignment;
                 return b;
               }));
               FP_CHECK_OK(CheckColumns(s, kPoolFields));
               Api* api = FP_TRY(s.api());
               return PrintOne(s, FP_TRY(api->Mutate("POST", "/v1/system/ip-pools", body)));
             });
  leaf->add_option("--name", create->name, "The pool's name");
  leaf->add_option("--description", create->description, "What it is for");
  leaf->add_option("--ip-version", create->ip_version, "v4 (default) or v6")
      ->check(CLI::IsMember({"v4", "v6"}));
  leaf->add_option("--pool-type", create->pool_type, "unicast (default) or multicast")
      ->check(CLI::IsMember({"unicast", "multicast"}));
  leaf->add_option("--assignment", create->assignment, "silos (default) or system_services")
      ->check(CLI::IsMember({"silos", "system_services"}));
  AddJsonBody(leaf, create->body);

  struct ListCmd {
    std::string ip_version, pool_type, assignment;
    ListFlags flags;
  };
  auto* list = c.Keep<ListCmd>();
  leaf = c.Leaf(
      group, "list", "List IP pools", "system_ip_pool_list",
      "floatplane system networking ip-pool list --format table", [list](Session& s) -> CliStatus {
        Query q;
        if (!list->assignment.empty()) q.emplace_back("assignment", list->assignment);
        if (!list->ip_version.empty()) q.emplace_back("ip_version", list->ip_version);
        if (!list->pool_type.empty()) q.emplace_back("pool_type", list->pool_type);
        return RunList(s, "/v1/system/ip-pools", q, list->flags, FieldColumns(kPoolFields),
                       {"name", "ip_version", "pool_type", "description", "id"});
      });
  leaf->add_option("--ip-version", list->ip_version, "Only pools of this version")
      ->check(CLI::IsMember({"v4", "v6"}));
  leaf->add_option("--pool-type", list->pool_type, "Only pools of this type")
      ->check(CLI::IsMember({"unicast", "multicast"}));
  leaf->add_option("--assignment", list->assignment, "Only pools with this assignment")
      ->check(CLI::IsMember({"silos", "system_services"}));
  AddListFlags(leaf, list->flags, kNameOrIdSorts);

  const Resource pools{"pool",          "IP pool",  "/v1/system/ip-pools/", false, "system_ip_pool",
                       "--pool public", kPoolFields};
  AddView(c, group, pools, "Fetch IP pool");
  AddUpdate(c, group, pools, "Update IP pool");
  AddDelete(c, group, pools, "Delete IP pool");

  auto* util = c.Keep<Selector>();
  leaf = c.Leaf(
      group, "utilization", "Fetch IP pool utilization", "system_ip_pool_utilization_view",
      "floatplane system networking ip-pool utilization --pool public --format table",
      [util](Session& s) -> CliStatus {
        auto [segment, query] = FP_TRY(Resolve(*util, "pool", false));
        Api* api = FP_TRY(s.api());
        nlohmann::json u = FP_TRY(api->Get("/v1/system/ip-pools/" + segment + "/utilization"));
        OutputFormat format = FP_TRY(s.format());
        if (!format.table) return PrintObject(format, u);
        nlohmann::json pool = FP_TRY(api->Get("/v1/system/ip-pools/" + segment));
        nlohmann::json row = u;
        row["pool"] = pool.value("name", util->value);
        row["version"] = pool.value("ip_version", "");
        return PrintObject(format, row, FieldColumns({"pool", "version", "capacity", "remaining"}),
                           {"pool", "version", "capacity", "remaining"});
      });
  AddSelector(leaf, *util, "pool", "IP pool", false);

  CLI::App* range = c.Group(group, "range", "A pool's address ranges");
  for (const auto& [verb, about, op] :
       {std::tuple<std::string, std::string, std::string>{"add", "Add range to IP pool",
                                                          "system_ip_pool_range_add"},
        {"remove", "Remove range from IP pool", "system_ip_pool_range_remove"}}) {
    struct RangeCmd {
      Selector sel;
      std::string first, last;
    };
    auto* cmd = c.Keep<RangeCmd>();
    std::string v = verb;
    leaf = c.Leaf(
        range, verb, about, op,
        fmt::format(
            "floatplane system networking ip-pool range {} --pool public --first 203.0.113.10 "
            "--last 203.0.113.20",
            verb),
        [cmd, v](Session& s) -> CliStatus {
          auto [segment, query] = FP_TRY(Resolve(cmd->sel, "pool", false));
          nlohmann::json body = FP_TRY(RangeBody(cmd->first, cmd->last));
          FP_CHECK_OK(CheckColumns(s, {"id", "ip_pool_id", "range", "time_created"}));
          Api* api = FP_TRY(s.api());
          nlohmann::json answer =
              FP_TRY(api->Mutate("POST", "/v1/system/ip-pools/" + segment + "/ranges/" + v, body));
          if (!answer.is_null()) return PrintOne(s, answer);
          s.Note(fmt::format("Range {}-{} removed from IP pool \"{}\"", cmd->first, cmd->last,
                             cmd->sel.value));
          return {};
        });
    AddSelector(leaf, cmd->sel, "pool", "IP pool", false);
    leaf->add_option("--first", cmd->first, "The range's first address")->required();
    leaf->add_option("--last", cmd->last, "The range's last address")->required();
  }
  struct RangeList {
    Selector sel;
    ListFlags flags;
  };
  auto* range_list = c.Keep<RangeList>();
  leaf = c.Leaf(
      range, "list", "List ranges for IP pool", "system_ip_pool_range_list",
      "floatplane system networking ip-pool range list --pool public",
      [range_list](Session& s) -> CliStatus {
        auto [segment, query] = FP_TRY(Resolve(range_list->sel, "pool", false));
        return RunList(
            s, "/v1/system/ip-pools/" + segment + "/ranges", {}, range_list->flags,
            FieldColumns({"id", "ip_pool_id", "range", "time_created"},
                         {Column{"first",
                                 [](const nlohmann::json& r) {
                                   return r.contains("range") ? r["range"].value("first", "") : "";
                                 }},
                          Column{"last",
                                 [](const nlohmann::json& r) {
                                   return r.contains("range") ? r["range"].value("last", "") : "";
                                 }}}),
            {"first", "last", "id", "time_created"});
      });
  AddSelector(leaf, range_list->sel, "pool", "IP pool", false);
  AddListFlags(leaf, range_list->flags, {});

  // floatplane's extension (issue 25): who holds which address.
  CLI::App* address = c.Group(group, "address", "★ The addresses allocated from a pool");
  struct AddressList {
    Selector sel;
    std::string first, last;
    ListFlags flags;
  };
  auto* address_list = c.Keep<AddressList>();
  leaf = c.Leaf(
      address, "list", "★ List a pool's allocated addresses and who holds each, in address order",
      "system_ip_pool_address_list",
      "floatplane system networking ip-pool address list --pool public --format table",
      [address_list](Session& s) -> CliStatus {
        auto [segment, query] = FP_TRY(Resolve(address_list->sel, "pool", false));
        if (address_list->first.empty() != address_list->last.empty()) {
          return Fail(UsageError("--first and --last name one range: give both or neither"));
        }
        if (!address_list->first.empty()) {
          query.emplace_back("first", address_list->first);
          query.emplace_back("last", address_list->last);
        }
        Column ports{"ports", [](const nlohmann::json& a) {
                       return a.value("kind", "") == "snat"
                                  ? fmt::format("{}-{}", a.value("first_port", 0),
                                                a.value("last_port", 0))
                                  : std::string();
                     }};
        return RunList(
            s, "/v1/system/ip-pools/" + segment + "/addresses", query, address_list->flags,
            FieldColumns({"external_ip_id", "ip", "kind", "first_port", "last_port", "range_id",
                          "name", "instance_id", "instance_name", "project_id", "project_name",
                          "silo_id", "silo_name", "time_created"},
                         {ports}),
            {"ip", "kind", "ports", "name", "instance_name", "project_name", "silo_name",
             "time_created"});
      });
  AddSelector(leaf, address_list->sel, "pool", "IP pool", false);
  leaf->add_option("--first", address_list->first, "Only the range that starts here (with --last)");
  leaf->add_option("--last", address_list->last, "Only the range that ends here (with --first)");
  AddListFlags(leaf, address_list->flags, {});

  CLI::App* silo = c.Group(group, "silo", "Which silos may use a pool");
  struct Link {
    Selector sel;
    std::string silo, is_default;
    JsonBody body;
  };
  auto* link = c.Keep<Link>();
  leaf = c.Leaf(
      silo, "link", "Link IP pool to silo", "system_ip_pool_silo_link",
      "floatplane system networking ip-pool silo link --pool public --silo default --is-default "
      "true",
      [link](Session& s) -> CliStatus {
        if (link->body.show_template) {
          Out(PrettyJson({{"silo", "default"}, {"is_default", true}}));
          return {};
        }
        auto [segment, query] = FP_TRY(Resolve(link->sel, "pool", false));
        FP_CHECK_OK(Require(link->body, "--silo", !link->silo.empty()));
        FP_CHECK_OK(Require(link->body, "--is-default", !link->is_default.empty()));
        nlohmann::json body = FP_TRY(Body(link->body, [&]() -> CliResult<nlohmann::json> {
          FP_CHECK_OK(CheckNameOrId("--silo", link->silo));
          return nlohmann::json{{"silo", link->silo}, {"is_default", link->is_default == "true"}};
        }));
        FP_CHECK_OK(CheckColumns(s, {"ip_pool_id", "is_default", "silo_id"}));
        Api* api = FP_TRY(s.api());
        return PrintOne(
            s, FP_TRY(api->Mutate("POST", "/v1/system/ip-pools/" + segment + "/silos", body)));
      });
  AddSelector(leaf, link->sel, "pool", "IP pool", false);
  leaf->add_option("--silo", link->silo, "The silo (name or id)");
  leaf->add_option("--is-default", link->is_default,
                   "Whether it is the silo's default pool of its version")
      ->check(CLI::IsMember({"true", "false"}));
  AddJsonBody(leaf, link->body);

  struct SiloUpdate {
    Selector sel;
    std::string silo, is_default;
  };
  auto* silo_update = c.Keep<SiloUpdate>();
  leaf = c.Leaf(
      silo, "update", "Make IP pool default for silo", "system_ip_pool_silo_update",
      "floatplane system networking ip-pool silo update --pool public --silo default --is-default "
      "true",
      [silo_update](Session& s) -> CliStatus {
        auto [segment, query] = FP_TRY(Resolve(silo_update->sel, "pool", false));
        FP_CHECK_OK(CheckNameOrId("--silo", silo_update->silo));
        FP_CHECK_OK(CheckColumns(s, {"ip_pool_id", "is_default", "silo_id"}));
        Api* api = FP_TRY(s.api());
        return PrintOne(
            s, FP_TRY(api->Mutate(
                   "PUT", "/v1/system/ip-pools/" + segment + "/silos/" + Segment(silo_update->silo),
                   {{"is_default", silo_update->is_default == "true"}})));
      });
  AddSelector(leaf, silo_update->sel, "pool", "IP pool", false);
  leaf->add_option("--silo", silo_update->silo, "The silo (name or id)")->required();
  leaf->add_option("--is-default", silo_update->is_default, "Whether it is the silo's default pool")
      ->required()
      ->check(CLI::IsMember({"true", "false"}));

  struct Unlink {
    Selector sel;
    std::string silo;
  };
  auto* unlink = c.Keep<Unlink>();
  leaf = c.Leaf(silo, "unlink", "Unlink IP pool from silo", "system_ip_pool_silo_unlink",
                "floatplane system networking ip-pool silo unlink --pool public --silo default",
                [unlink](Session& s) -> CliStatus {
                  auto [segment, query] = FP_TRY(Resolve(unlink->sel, "pool", false));
                  FP_CHECK_OK(CheckNameOrId("--silo", unlink->silo));
                  Api* api = FP_TRY(s.api());
                  FP_TRY(api->Mutate("DELETE", "/v1/system/ip-pools/" + segment + "/silos/" +
                                                   Segment(unlink->silo)));
                  s.Note(fmt::format("IP pool \"{}\" unlinked from silo \"{}\"", unlink->sel.value,
                                     unlink->silo));
                  return {};
                });
  AddSelector(leaf, unlink->sel, "pool", "IP pool", false);
  leaf->add_option("--silo", unlink->silo, "The silo (name or id)")->required();

  struct SiloList {
    Selector sel;
    ListFlags flags;
  };
  auto* silo_list = c.Keep<SiloList>();
  leaf =
      c.Leaf(silo, "list", "List IP pool's linked silos", "system_ip_pool_silo_list",
             "floatplane system networking ip-pool silo list --pool public",
             [silo_list](Session& s) -> CliStatus {
               auto [segment, query] = FP_TRY(Resolve(silo_list->sel, "pool", false));
               return RunList(s, "/v1/system/ip-pools/" + segment + "/silos", {}, silo_list->flags,
                              FieldColumns({"ip_pool_id", "is_default", "silo_id"}),
                              {"silo_id", "is_default", "ip_pool_id"});
             });
  AddSelector(leaf, silo_list->sel, "pool", "IP pool", false);
  AddListFlags(leaf, silo_list->flags, kIdSorts);
}

}  // namespace fp::cli
