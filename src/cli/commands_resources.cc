// The tenant's resources: projects and the IP pools a silo sees here; floating IPs and
// instances in commands_floating_ips.cc and commands_instances.cc. Paths and flags are the
// oxide CLI's; the ★ extensions of ../shared/spec/cli-and-console.md §4 are marked.

#include <fmt/format.h>

#include "cli/command_kit.h"

namespace fp::cli {

namespace {

const std::vector<std::string> kSiloPoolFields = {"description",  "id",           "ip_version",
                                                  "is_default",   "name",         "pool_type",
                                                  "time_created", "time_modified"};

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
  AddQuotaCommands(c, group, /*silo=*/false);
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
  AddFloatingIpCommands(c);
  AddInstanceCommands(c);
  AddSiloPools(c);
}

}  // namespace fp::cli
