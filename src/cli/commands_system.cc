// The operator's commands: `system hardware sled ...`, `silo ...`, and floatplane's own
// `system instance migrate`, `system token`, `system saga`; the pools (`system networking
// ip-pool ...`) in commands_pools.cc.

#include <fmt/format.h>

#include "cli/command_kit.h"

namespace fp::cli {

namespace {

void AddHardware(Commands& c, CLI::App* system) {
  CLI::App* hardware = c.Group(system, "hardware", "The rack's hardware");
  CLI::App* sled = c.Group(hardware, "sled", "Sleds: the servers instances run on");
  auto* list = c.Keep<ListFlags>();
  CLI::App* leaf =
      c.Leaf(sled, "list", "List sleds", "sled_list", "floatplane system hardware sled list",
             [list](Session& s) -> CliStatus {
               return RunList(s, "/v1/system/hardware/sleds", {}, *list,
                              FieldColumns({"id", "policy", "rack_id", "state", "time_created",
                                            "usable_hardware_threads", "usable_physical_ram"}),
                              {"id", "state", "usable_hardware_threads", "usable_physical_ram"});
             });
  AddListFlags(leaf, *list, kIdSorts);

  auto* view = c.Keep<std::string>();
  leaf =
      c.Leaf(sled, "view", "Fetch sled", "sled_view",
             "floatplane system hardware sled view --sled-id ID", [view](Session& s) -> CliStatus {
               Api* api = FP_TRY(s.api());
               return PrintOne(s, FP_TRY(api->Get("/v1/system/hardware/sleds/" + Segment(*view))));
             });
  leaf->add_option("--sled-id", *view, "The sled's id")->required();

  struct Instances {
    std::string sled;
    ListFlags flags;
  };
  auto* instances = c.Keep<Instances>();
  leaf = c.Leaf(sled, "instance-list", "List instances running on given sled", "sled_instance_list",
                "floatplane system hardware sled instance-list --sled-id ID",
                [instances](Session& s) -> CliStatus {
                  return RunList(
                      s, "/v1/system/hardware/sleds/" + Segment(instances->sled) + "/instances", {},
                      instances->flags,
                      FieldColumns({"active_sled_id", "id", "memory", "migration_id", "name",
                                    "ncpus", "project_name", "silo_name", "state"}),
                      {"name", "state", "project_name", "silo_name", "id"});
                });
  leaf->add_option("--sled-id", instances->sled, "The sled's id")->required();
  AddListFlags(leaf, instances->flags, kIdSorts);
}

void AddOperator(Commands& c, CLI::App* system) {
  CLI::App* instance = c.Group(system, "instance", "★ Operators' instance actions");
  struct Migrate {
    std::string instance, sled;
    WaitFlags wait;
  };
  auto* migrate = c.Keep<Migrate>();
  CLI::App* leaf = c.Leaf(
      instance, "migrate", "★ Move a running instance to another sled", "instance_migrate",
      "floatplane system instance migrate --instance ID --target-sled SLED-ID --wait",
      [migrate](Session& s) -> CliStatus {
        auto deadline = FP_TRY(Deadline(migrate->wait));
        FP_CHECK_OK(CheckColumns(s, kInstanceFields));
        Api* api = FP_TRY(s.api(deadline));
        nlohmann::json answer = FP_TRY(
            api->Mutate("POST", "/v1/system/instances/" + Segment(migrate->instance) + "/migrate",
                        {{"dst_sled_id", migrate->sled}}));
        if (deadline) {
          FP_CHECK_OK(WaitFor(s, "instance " + migrate->instance, "running",
                              "/v1/instances/" + Segment(migrate->instance), {}, *deadline,
                              [](const nlohmann::json& i) { return i.value("run_state", "?"); }));
        }
        return PrintOne(s, answer);
      });
  leaf->add_option("--instance", migrate->instance, "The instance's id")->required();
  leaf->add_option("--target-sled", migrate->sled, "The sled to move it to (id)")->required();
  AddWaitFlags(leaf, migrate->wait);

  CLI::App* token = c.Group(system, "token", "★ API tokens");
  struct TokenCreate {
    std::string silo, role, name;
  };
  auto* create = c.Keep<TokenCreate>();
  leaf = c.Leaf(
      token, "create", "★ Create an API token (its secret is shown once)", "token_create",
      "floatplane system token create --silo default --role silo_collaborator --name ci",
      [create](Session& s) -> CliStatus {
        FP_CHECK_OK(CheckNameOrId("--silo", create->silo));
        if (!s.globals().idempotency_key.empty()) {
          return Fail(UsageError(
              "--idempotency-key: not accepted when creating a token (a replay would have to "
              "keep its secret)"));
        }
        // Validated before the request: the secret is shown once, and only this time.
        OutputFormat format = FP_TRY(s.format());
        std::vector<Column> columns = FieldColumns({"id", "token"});
        (void)FP_TRY(ListPrinter::Make(format, columns, {"id", "token"}));
        Api* api = FP_TRY(s.api());
        nlohmann::json issued = FP_TRY(api->Mutate(
            "POST", "/v1/system/tokens",
            {{"silo", create->silo}, {"role", create->role}, {"name", create->name}}, {},
            /*with_key=*/false));
        return PrintObject(format, issued, columns, {"id", "token"});
      });
  leaf->add_option("--silo", create->silo, "The silo it acts in")->required();
  leaf->add_option("--role", create->role, "Its role")
      ->required()
      ->check(CLI::IsMember({"fleet_admin", "silo_admin", "silo_collaborator", "silo_viewer"}));
  leaf->add_option("--name", create->name, "What it is for")->required();

  auto* list = c.Keep<ListFlags>();
  leaf = c.Leaf(token, "list", "★ List API tokens", "token_list",
                "floatplane system token list --format table", [list](Session& s) -> CliStatus {
                  return RunList(s, "/v1/system/tokens", {}, *list,
                                 FieldColumns({"id", "name", "role", "silo_id", "time_created"}),
                                 {"name", "role", "silo_id", "id", "time_created"});
                });
  AddListFlags(leaf, *list, {});

  auto* del = c.Keep<std::string>();
  leaf = c.Leaf(token, "delete", "★ Revoke an API token", "token_delete",
                "floatplane system token delete --token-id ID", [del](Session& s) -> CliStatus {
                  Api* api = FP_TRY(s.api());
                  FP_TRY(api->Mutate("DELETE", "/v1/system/tokens/" + Segment(*del)));
                  s.Note(fmt::format("Token {} revoked", *del));
                  return {};
                });
  leaf->add_option("--token-id", *del, "The token's id")->required();

  CLI::App* saga =
      c.Group(system, "saga", "★ Sagas: attach, detach and instance operations as they ran");
  struct SagaList {
    std::string state;
    ListFlags flags;
  };
  auto* sagas = c.Keep<SagaList>();
  leaf = c.Leaf(saga, "list", "★ List recent sagas", "saga_list",
                "floatplane system saga list --state stuck --format table",
                [sagas](Session& s) -> CliStatus {
                  OutputFormat format = FP_TRY(s.format());
                  ListPrinter printer = FP_TRY(ListPrinter::Make(
                      format, FieldColumns({"id", "name", "state"}), {"id", "name", "state"}));
                  Api* api = FP_TRY(s.api());
                  Query q;
                  if (sagas->flags.limit > 0)
                    q.emplace_back("limit", std::to_string(sagas->flags.limit));
                  nlohmann::json page = FP_TRY(api->Get("/v1/system/sagas", q));
                  for (const auto& item : page.value("items", nlohmann::json::array())) {
                    if (sagas->state.empty() || item.value("state", "") == sagas->state)
                      printer.Add(item);
                  }
                  printer.Finish();
                  return {};
                });
  leaf->add_option("--state", sagas->state, "Only sagas in this state")
      ->check(CLI::IsMember({"running", "unwinding", "done", "stuck"}));
  AddListFlags(leaf, sagas->flags, {});
}

void AddSilos(Commands& c) {
  CLI::App* group =
      c.Group(&c.root(), "silo", "Silos: tenants, each with its users, projects and pools");
  auto* list = c.Keep<ListFlags>();
  CLI::App* leaf =
      c.Leaf(group, "list", "List silos", "silo_list", "floatplane silo list --format table",
             [list](Session& s) -> CliStatus {
               return RunList(s, "/v1/system/silos", {}, *list,
                              FieldColumns({"description", "discoverable", "id", "identity_mode",
                                            "name", "time_created", "time_modified"}),
                              {"name", "id", "discoverable", "description"});
             });
  AddListFlags(leaf, *list, kNameOrIdSorts);

  const Resource silo{"silo",
                      "silo",
                      "/v1/system/silos/",
                      false,
                      "silo",
                      "--silo default",
                      {"admin_group_name", "description", "discoverable", "id", "identity_mode",
                       "mapped_fleet_roles", "name", "time_created", "time_modified"}};
  AddView(c, group, silo, "Fetch silo");

  auto* create = c.Keep<JsonBody>();
  leaf = c.Leaf(group, "create", "Create a silo", "silo_create",
                "floatplane silo create --json-body silo.json", [create](Session& s) -> CliStatus {
                  if (create->show_template) {
                    Out(PrettyJson({{"name", "tenant-a"},
                                    {"description", ""},
                                    {"discoverable", true},
                                    {"identity_mode", "local_only"},
                                    {"quotas", {{"cpus", 0}, {"memory", 0}, {"storage", 0}}},
                                    {"tls_certificates", nlohmann::json::array()}}));
                    return {};
                  }
                  FP_CHECK_OK(Require(*create, "--json-body", false));
                  nlohmann::json body = FP_TRY(Body(
                      *create, []() -> CliResult<nlohmann::json> { return nlohmann::json(); }));
                  FP_CHECK_OK(CheckColumns(
                      s, {"admin_group_name", "description", "discoverable", "id", "identity_mode",
                          "mapped_fleet_roles", "name", "time_created", "time_modified"}));
                  Api* api = FP_TRY(s.api());
                  return PrintOne(s, FP_TRY(api->Mutate("POST", "/v1/system/silos", body)));
                });
  AddJsonBody(leaf, *create);

  AddDelete(c, group, silo, "Delete a silo");

  CLI::App* pools = c.Group(group, "ip-pool", "The pools linked to a silo");
  struct PoolList {
    Selector sel;
    ListFlags flags;
  };
  auto* pool_list = c.Keep<PoolList>();
  leaf =
      c.Leaf(pools, "list", "List IP pools linked to silo", "silo_ip_pool_list",
             "floatplane silo ip-pool list --silo default", [pool_list](Session& s) -> CliStatus {
               auto [segment, query] = FP_TRY(Resolve(pool_list->sel, "silo", false));
               return RunList(s, "/v1/system/silos/" + segment + "/ip-pools", {}, pool_list->flags,
                              FieldColumns({"description", "id", "ip_version", "is_default", "name",
                                            "pool_type", "time_created", "time_modified"}),
                              {"name", "ip_version", "is_default", "description", "id"});
             });
  AddSelector(leaf, pool_list->sel, "silo", "silo", false);
  AddListFlags(leaf, pool_list->flags, kNameOrIdSorts);
}

}  // namespace

void AddSystemCommands(Commands& c) {
  CLI::App* system =
      c.Group(&c.root(), "system", "Operators' commands: pools, hardware, tokens, sagas");
  CLI::App* networking = c.Group(system, "networking", "The rack's networking");
  AddPoolCommands(c, networking);
  AddHardware(c, system);
  AddOperator(c, system);
  AddSilos(c);
}

}  // namespace fp::cli
