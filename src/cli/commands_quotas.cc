// Quotas and utilization: `silo quotas list|view|update` (a fleet admin's: Oxide's
// system_quotas_list and silo_quotas_*, with floatplane's IP quotas as additive fields),
// `project quotas view|update` (floatplane's; a silo admin sets them), `utilization view` (the
// silo's own: what it holds of each pool linked to it, by kind) and `silo utilization
// list|view` (a fleet admin's, the same for every silo).

#include <fmt/format.h>

#include <cstdlib>

#include "cli/command_kit.h"

namespace fp::cli {

namespace {

const std::vector<std::string> kIpQuotaFields = {"ipv4_addresses", "ipv4_addresses_used",
                                                 "ipv6_addresses", "ipv6_addresses_used"};

// The columns of a quota object: the IP limits show "none" for no limit.
std::vector<Column> QuotaColumns(const std::vector<std::string>& fields) {
  std::vector<Column> out;
  for (const std::string& f : fields) {
    Column c = FieldColumn(f);
    if (f == "ipv4_addresses" || f == "ipv6_addresses") {
      c.cell = [f, plain = c.cell](const nlohmann::json& item) -> std::string {
        if (item.is_object() && item.contains(f) && item[f].is_null()) return "none";
        return plain(item);
      };
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<std::string> SiloQuotaFields() {
  std::vector<std::string> f = {"silo_id", "cpus", "memory", "storage"};
  f.insert(f.end(), kIpQuotaFields.begin(), kIpQuotaFields.end());
  return f;
}

std::vector<std::string> ProjectQuotaFields() {
  std::vector<std::string> f = {"project_id", "silo_id"};
  f.insert(f.end(), kIpQuotaFields.begin(), kIpQuotaFields.end());
  return f;
}

// --ipv4-addresses and the like: a count of addresses, or "none" (no limit: JSON null).
CliStatus AddLimit(nlohmann::json& body, const std::string& field, const std::string& flag,
                   const std::string& value) {
  if (value.empty()) return {};
  if (value == "none") {
    body[field] = nullptr;
    return {};
  }
  char* end = nullptr;
  unsigned long long n = std::strtoull(value.c_str(), &end, 10);
  if (value[0] == '-' || end == value.c_str() || *end != '\0' || n > (1ull << 53)) {
    return Fail(UsageError(fmt::format(
        "{} takes a number of addresses (0 or more) or \"none\" for no limit, not \"{}\"", flag,
        value)));
  }
  body[field] = n;
  return {};
}

struct IpLimitFlags {
  std::string ipv4, ipv6;
};

void AddIpLimitFlags(CLI::App* leaf, IpLimitFlags& f) {
  leaf->add_option("--ipv4-addresses", f.ipv4,
                   "The most IPv4 addresses it may hold (an SNAT block counts a quarter), or "
                   "\"none\" for no limit");
  leaf->add_option("--ipv6-addresses", f.ipv6,
                   "The most IPv6 addresses it may hold, or \"none\" for no limit");
}

CliResult<nlohmann::json> IpLimitBody(const IpLimitFlags& f) {
  nlohmann::json body = nlohmann::json::object();
  FP_CHECK_OK(AddLimit(body, "ipv4_addresses", "--ipv4-addresses", f.ipv4));
  FP_CHECK_OK(AddLimit(body, "ipv6_addresses", "--ipv6-addresses", f.ipv6));
  return body;
}

// Whose quotas: a silo's or a project's.
struct QuotaScope {
  std::string flag;  // and noun: "silo", "project"
  std::string path;  // "/v1/system/silos/"
  std::vector<std::string> fields;
  std::vector<std::string> defaults;
};

const QuotaScope& SiloScope() {
  static const QuotaScope scope{"silo", "/v1/system/silos/", SiloQuotaFields(), SiloQuotaFields()};
  return scope;
}

const QuotaScope& ProjectScope() {
  static const QuotaScope scope{"project", "/v1/system/projects/", ProjectQuotaFields(),
                                kIpQuotaFields};
  return scope;
}

// Prints the quotas `sel` names, after changing them by `change` if given (an empty change is
// a usage error naming `flags`).
CliStatus Quotas(Session& s, const QuotaScope& scope, const Selector& sel,
                 const std::optional<nlohmann::json>& change, std::string_view flags = {}) {
  auto [segment, query] = FP_TRY(Resolve(sel, scope.flag, false));
  if (change && change->empty()) {
    return Fail(UsageError(fmt::format("nothing to change: give {}", flags)));
  }
  Api* api = FP_TRY(s.api());
  std::string path = scope.path + segment + "/quotas";
  nlohmann::json answer;
  if (change) {
    answer = FP_TRY(api->Mutate("PUT", path, *change));
  } else {
    answer = FP_TRY(api->Get(path));
  }
  return PrintOne(s, answer, QuotaColumns(scope.fields), scope.defaults);
}

void AddSiloQuotas(Commands& c, CLI::App* silo_group) {
  CLI::App* group = c.Group(silo_group, "quotas", "What a silo may hold");
  auto* list = c.Keep<ListFlags>();
  CLI::App* leaf =
      c.Leaf(group, "list", "List the quotas of every silo", "system_quotas_list",
             "floatplane silo quotas list --format table", [list](Session& s) -> CliStatus {
               return RunList(s, "/v1/system/silo-quotas", {}, *list,
                              QuotaColumns(SiloQuotaFields()), SiloQuotaFields());
             });
  AddListFlags(leaf, *list, kIdSorts);

  auto* view = c.Keep<Selector>();
  leaf = c.Leaf(group, "view", "Fetch a silo's quotas and what it holds", "silo_quotas_view",
                "floatplane silo quotas view --silo default", [view](Session& s) -> CliStatus {
                  return Quotas(s, SiloScope(), *view, std::nullopt);
                });
  AddSelector(leaf, *view, "silo", "silo", false);

  struct Update {
    Selector sel;
    std::optional<int64_t> cpus, memory, storage;
    IpLimitFlags ip;
  };
  auto* update = c.Keep<Update>();
  leaf = c.Leaf(group, "update",
                "Change a silo's quotas (those not given stay as they are; a limit lowered "
                "below what the silo holds frees nothing and refuses new addresses)",
                "silo_quotas_update",
                "floatplane silo quotas update --silo default --ipv4-addresses 16",
                [update](Session& s) -> CliStatus {
                  nlohmann::json body = FP_TRY(IpLimitBody(update->ip));
                  if (update->cpus) body["cpus"] = *update->cpus;
                  if (update->memory) body["memory"] = *update->memory;
                  if (update->storage) body["storage"] = *update->storage;
                  return Quotas(s, SiloScope(), update->sel, body,
                                "--ipv4-addresses, --ipv6-addresses, --cpus, --memory or "
                                "--storage");
                });
  AddSelector(leaf, update->sel, "silo", "silo", false);
  AddIpLimitFlags(leaf, update->ip);
  leaf->add_option("--cpus", update->cpus, "Virtual CPUs (recorded, not enforced)")
      ->check(CLI::NonNegativeNumber);
  leaf->add_option("--memory", update->memory, "Memory in bytes (recorded, not enforced)")
      ->check(CLI::NonNegativeNumber);
  leaf->add_option("--storage", update->storage, "Storage in bytes (recorded, not enforced)")
      ->check(CLI::NonNegativeNumber);
}

void AddProjectQuotas(Commands& c, CLI::App* project_group) {
  CLI::App* group = c.Group(project_group, "quotas", "The IP addresses a project may hold");
  auto* view = c.Keep<Selector>();
  CLI::App* leaf = c.Leaf(
      group, "view", "Fetch a project's IP quotas and what it holds", "project_quotas_view",
      "floatplane project quotas view --project web",
      [view](Session& s) -> CliStatus { return Quotas(s, ProjectScope(), *view, std::nullopt); });
  AddSelector(leaf, *view, "project", "project", false);

  struct Update {
    Selector sel;
    IpLimitFlags ip;
  };
  auto* update = c.Keep<Update>();
  leaf = c.Leaf(group, "update",
                "Change a project's IP quotas (a silo admin's; a limit lowered below what the "
                "project holds frees nothing and refuses new addresses)",
                "project_quotas_update",
                "floatplane project quotas update --project web --ipv4-addresses 4",
                [update](Session& s) -> CliStatus {
                  return Quotas(s, ProjectScope(), update->sel, FP_TRY(IpLimitBody(update->ip)),
                                "--ipv4-addresses or --ipv6-addresses");
                });
  AddSelector(leaf, update->sel, "project", "project", false);
  AddIpLimitFlags(leaf, update->ip);
}

// One row per pool linked to the silo, from a Utilization or SiloUtilization.
// (`remaining` only in a fleet admin's view: see the API's quotas.cc.)
const std::vector<std::string> kPoolUseFields = {
    "name", "ip_version", "floating", "ephemeral", "snat_blocks", "capacity", "remaining", "id"};

// A utilization: its pools as a table, or the whole object as JSON.
CliStatus PrintUtilization(Session& s, const nlohmann::json& u) {
  OutputFormat format = FP_TRY(s.format());
  if (!format.table) return PrintObject(format, u);
  std::vector<std::string> shown = {"name",      "ip_version",  "floating",
                                    "ephemeral", "snat_blocks", "capacity"};
  if (u.contains("silo_id")) shown.push_back("remaining");  // a fleet admin's view
  ListPrinter out = FP_TRY(ListPrinter::Make(format, FieldColumns(kPoolUseFields), shown));
  for (const auto& pool : u.value("ip_pools", nlohmann::json::array())) out.Add(pool);
  out.Finish();
  return {};
}

void AddUtilization(Commands& c, CLI::App* silo_group) {
  CLI::App* group = c.Group(&c.root(), "utilization", "What your silo holds and may hold");
  c.Leaf(group, "view",
         "Fetch your silo's utilization: its pools, what it holds of each by kind, its quotas",
         "utilization_view", "floatplane utilization view --format table",
         [](Session& s) -> CliStatus {
           Api* api = FP_TRY(s.api());
           return PrintUtilization(s, FP_TRY(api->Get("/v1/utilization")));
         });

  group = c.Group(silo_group, "utilization", "What silos hold (fleet admins)");
  auto* list = c.Keep<ListFlags>();
  CLI::App* leaf = c.Leaf(
      group, "list", "List every silo's utilization", "silo_utilization_list",
      "floatplane silo utilization list --format table", [list](Session& s) -> CliStatus {
        return RunList(
            s, "/v1/system/utilization/silos", {}, *list,
            QuotaColumns({"silo_name", "silo_id", "ipv4_addresses", "ipv4_addresses_used",
                          "ipv6_addresses", "ipv6_addresses_used", "allocated", "provisioned"}),
            {"silo_name", "ipv4_addresses", "ipv4_addresses_used", "ipv6_addresses",
             "ipv6_addresses_used"});
      });
  AddListFlags(leaf, *list, kNameOrIdSorts);
  auto* view = c.Keep<Selector>();
  leaf = c.Leaf(group, "view", "Fetch a silo's utilization: its pools, what it holds by kind",
                "silo_utilization_view", "floatplane silo utilization view --silo default",
                [view](Session& s) -> CliStatus {
                  auto [segment, query] = FP_TRY(Resolve(*view, "silo", false));
                  Api* api = FP_TRY(s.api());
                  return PrintUtilization(
                      s, FP_TRY(api->Get("/v1/system/utilization/silos/" + segment)));
                });
  AddSelector(leaf, *view, "silo", "silo", false);
}

}  // namespace

void AddQuotaCommands(Commands& c, CLI::App* group, bool silo) {
  if (silo) {
    AddSiloQuotas(c, group);
    AddUtilization(c, group);
  } else {
    AddProjectQuotas(c, group);
  }
}

}  // namespace fp::cli
