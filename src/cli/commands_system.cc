// The operator's commands: `system hardware sled ...`, `silo ...`, and floatplane's own
// `system instance migrate`, `system token`, `system saga`; the pools (`system networking
// ip-pool ...`) in commands_pools.cc.

#include <fmt/format.h>

#include <chrono>

#include "cli/command_kit.h"
#include "common/time.h"

namespace fp::cli {

namespace {

// A sled's columns: Oxide's fields, its policy by kind, and what the server knows of its agent
// (the view's additive `agent` object).
std::vector<Column> SledColumns() {
  std::vector<Column> columns = FieldColumns(
      {"id", "rack_id", "state", "time_created", "usable_hardware_threads", "usable_physical_ram"});
  auto agent = [](const std::string& field) {
    return [field](const nlohmann::json& sled) -> std::string {
      const nlohmann::json* a = sled.contains("agent") ? &sled["agent"] : nullptr;
      if (!a || !a->contains(field) || (*a)[field].is_null()) return "";
      if ((*a)[field].is_boolean()) return (*a)[field].get<bool>() ? "yes" : "no";
      return (*a)[field].is_string() ? (*a)[field].get<std::string>() : (*a)[field].dump();
    };
  };
  // Who the sled is: its agent's --serial, or its agent's URL (db::SledUpsert).
  columns.push_back(Column{"serial", [](const nlohmann::json& sled) -> std::string {
                             if (!sled.contains("baseboard")) return "";
                             return sled["baseboard"].value("serial", "");
                           }});
  columns.push_back(Column{"policy", [](const nlohmann::json& sled) -> std::string {
                             return sled.contains("policy") ? sled["policy"].value("kind", "") : "";
                           }});
  columns.push_back(Column{"answers", agent("answers")});
  columns.push_back(Column{"since", agent("since")});
  columns.push_back(Column{"last_report", agent("last_report")});
  return columns;
}

void AddHardware(Commands& c, CLI::App* system) {
  CLI::App* hardware = c.Group(system, "hardware", "The rack's hardware");
  CLI::App* sled = c.Group(hardware, "sled", "Sleds: the servers instances run on");
  auto* list = c.Keep<ListFlags>();
  CLI::App* leaf = c.Leaf(
      sled, "list", "List sleds", "sled_list", "floatplane system hardware sled list",
      [list](Session& s) -> CliStatus {
        return RunList(s, "/v1/system/hardware/sleds", {}, *list, SledColumns(),
                       {"id", "serial", "policy", "state", "answers", "since", "last_report"});
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

  auto* expunge = c.Keep<std::string>();
  leaf = c.Leaf(sled, "expunge",
                "★ Take a sled out of service for good: its instances fail (start them again "
                "elsewhere), nothing is placed on it again",
                "sled_expunge", "floatplane system hardware sled expunge --sled-id ID",
                [expunge](Session& s) -> CliStatus {
                  Api* api = FP_TRY(s.api());
                  return PrintOne(s,
                                  FP_TRY(api->Mutate("POST", "/v1/system/hardware/sleds/" +
                                                                 Segment(*expunge) + "/expunge")),
                                  SledColumns());
                });
  leaf->add_option("--sled-id", *expunge, "The sled's id")->required();

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
        auto deadline = FP_TRY(Deadline(s.clock(), migrate->wait));
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
    std::string state, request_id;
    ListFlags flags;
  };
  auto* sagas = c.Keep<SagaList>();
  leaf = c.Leaf(saga, "list", "★ List sagas, newest first", "saga_list",
                "floatplane system saga list --state unwound --format table",
                [sagas](Session& s) -> CliStatus {
                  Query q;
                  if (!sagas->state.empty()) q.emplace_back("state", sagas->state);
                  if (!sagas->request_id.empty()) q.emplace_back("request_id", sagas->request_id);
                  return RunList(s, "/v1/system/sagas", q, sagas->flags,
                                 FieldColumns({"id", "name", "request_id", "state", "time_created",
                                               "time_ended"}),
                                 {"id", "name", "state", "time_created", "request_id"});
                });
  leaf->add_option("--state", sagas->state, "Only sagas in this state")
      ->check(CLI::IsMember({"running", "unwinding", "done", "unwound", "stuck"}));
  leaf->add_option("--request-id", sagas->request_id,
                   "Only the sagas the request with this id started (the id an error names)");
  AddListFlags(leaf, sagas->flags, {});

  auto* view = c.Keep<std::string>();
  leaf = c.Leaf(
      saga, "view", "★ Why a saga ran, what it did, and how it ended", "saga_view",
      "floatplane system saga view --saga-id ID --format table", [view](Session& s) -> CliStatus {
        OutputFormat format = FP_TRY(s.format());
        std::vector<Column> columns =
            FieldColumns({"action", "index", "name", "outcome", "time_ended", "time_started"},
                         {Column{"error", [](const nlohmann::json& n) {
                                   return n.contains("error") && n["error"].is_object()
                                              ? n["error"].value("message", "")
                                              : std::string();
                                 }}});
        std::vector<std::string> defaults = {"index", "name", "outcome", "time_ended", "error"};
        ListPrinter printer = FP_TRY(ListPrinter::Make(format, columns, defaults));
        Api* api = FP_TRY(s.api());
        nlohmann::json story = FP_TRY(api->Get("/v1/system/sagas/" + Segment(*view)));
        if (!format.table) {
          Out(PrettyJson(story));
          return {};
        }
        // A table: the saga in a few lines, then its nodes.
        auto text = [&](const char* key) {
          return story.contains(key) && story[key].is_string() ? story[key].get<std::string>()
                                                               : std::string("-");
        };
        std::string targets;
        const nlohmann::json acted_on = story.value("targets", nlohmann::json::object());
        for (const auto& [kind, target] : acted_on.items()) {
          std::string named;
          if (target.is_object()) {
            std::string name = target.value("name", ""), ip = target.value("ip", "");
            named = !name.empty() && !ip.empty() ? name + " (" + ip + ")"
                    : !name.empty()              ? name
                    : !ip.empty()                ? ip
                                                 : target.value("id", "?");
          } else {
            named = target.is_string() ? target.get<std::string>() : target.dump();
          }
          std::string what = kind == "external_ip" && target.is_object() && target.contains("kind")
                                 ? target.value("kind", "") + " IP"
                                 : kind;
          targets += (targets.empty() ? "" : ", ") + what + " " + named;
        }
        Out(fmt::format("saga {} ({}): {}\n", text("id"), text("name"), text("explanation")));
        Out(fmt::format("started {} by request {}; ended {}\n", text("time_created"),
                        text("request_id"), text("time_ended")));
        if (!targets.empty()) Out("acts on " + targets + "\n");
        for (const auto& node : story.value("nodes", nlohmann::json::array())) printer.Add(node);
        printer.Finish();
        return {};
      });
  leaf->add_option("--saga-id", *view, "The saga's id")->required();
}

// An audit entry's result as one cell: "success 201", "error 400 ObjectAlreadyExists".
std::string AuditResult(const nlohmann::json& e) {
  const nlohmann::json& r = e.value("result", nlohmann::json::object());
  std::string out = r.value("kind", "?");
  if (r.contains("http_status_code")) out += " " + r["http_status_code"].dump();
  if (r.contains("error_code") && r["error_code"].is_string()) {
    out += " " + r["error_code"].get<std::string>();
  }
  return out;
}

// Who made an audited request: the silo user (our tokens), or "unauthenticated".
std::string AuditActor(const nlohmann::json& e) {
  const nlohmann::json& a = e.value("actor", nlohmann::json::object());
  if (a.value("kind", "") == "silo_user") return a.value("silo_user_id", "?");
  return a.value("kind", "?");
}

void AddAuditLog(Commands& c) {
  CLI::App* group =
      c.Group(&c.root(), "audit-log", "The audit log: who did what, and how it ended");
  struct AuditList {
    std::string start, end;
    ListFlags flags;
  };
  auto* list = c.Keep<AuditList>();
  CLI::App* leaf = c.Leaf(
      group, "list", "List audit log entries (fleet admins)", "audit_log_list",
      "floatplane audit-log list --start-time 2026-12-01T00:00:00Z --format table",
      [list](Session& s) -> CliStatus {
        std::string start = list->start;
        if (start.empty()) {
          // The last day, by this machine's clock.
          start = FormatRfc3339(s.clock().Now() - int64_t{86400} * 1000000);
        }
        for (auto [flag, value] :
             {std::pair{"--start-time", &start}, std::pair{"--end-time", &list->end}}) {
          if (!value->empty() && !ParseRfc3339(*value)) {
            return Fail(UsageError(fmt::format(
                "{} \"{}\": expected an RFC 3339 date-time such as 2026-12-01T09:30:00Z", flag,
                *value)));
          }
        }
        Query q{{"start_time", start}};
        if (!list->end.empty()) q.emplace_back("end_time", list->end);
        return RunList(s, "/v1/system/audit-log", q, list->flags,
                       FieldColumns({"auth_method", "credential_id", "id", "operation_id",
                                     "request_id", "request_uri", "source_ip", "time_completed",
                                     "time_started", "user_agent"},
                                    {Column{"result", AuditResult}, Column{"actor", AuditActor},
                                     Column{"error_message",
                                            [](const nlohmann::json& e) {
                                              return e.value("result", nlohmann::json::object())
                                                  .value("error_message", "");
                                            }}}),
                       {"time_completed", "operation_id", "result", "actor", "source_ip",
                        "request_id", "error_message"});
      });
  leaf->add_option("--start-time", list->start,
                   "The first completion time listed, RFC 3339 (default: a day ago)");
  leaf->add_option("--end-time", list->end, "Entries completed before this time, RFC 3339");
  AddListFlags(leaf, list->flags, {"time_and_id_ascending", "time_and_id_descending"});
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

  AddUserCommands(c, group);
  AddQuotaCommands(c, group, /*silo=*/true);

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
  AddAuditLog(c);
}

}  // namespace fp::cli
