#include "cli/command_kit.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/name.h"

namespace fp::cli {

namespace {}

void AddSelector(CLI::App* app, Selector& s, const std::string& flag, const std::string& what,
                 bool scoped) {
  app->add_option("--" + flag, s.value, "The " + what + ": its name or id")->required();
  if (scoped) {
    app->add_option("--project", s.project, "Its project (name or id); needed with a name");
  }
}

CliStatus CheckName(const std::string& flag, const std::string& value) {
  auto parsed = Name::Parse(value);
  if (!parsed)
    return Fail(UsageError(fmt::format("{} \"{}\": {}", flag, value, parsed.error().message())));
  return {};
}

CliStatus CheckNameOrId(const std::string& flag, const std::string& value) {
  auto parsed = NameOrId::Parse(value);
  if (!parsed)
    return Fail(UsageError(fmt::format("{} \"{}\": {}", flag, value, parsed.error().message())));
  return {};
}

CliResult<std::string> ReadSecret(const std::string& file, bool from_stdin,
                                  const std::string& file_flag, const std::string& stdin_flag,
                                  const std::string& what) {
  std::ostringstream all;
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return Fail(UsageError(fmt::format("{}: cannot read {}", file_flag, file)));
    all << in.rdbuf();
  } else if (from_stdin || isatty(STDIN_FILENO) == 0) {
    all << std::cin.rdbuf();
  } else {
    return Fail(UsageError(fmt::format(
        "give the {} with {} FILE or on stdin ({}); never on the command line, where other "
        "users and shell history see it",
        what, file_flag, stdin_flag)));
  }
  return TrimSpace(all.str());
}

CliResult<std::pair<std::string, Query>> Resolve(const Selector& s, const std::string& flag,
                                                 bool scoped) {
  auto parsed = NameOrId::Parse(s.value);
  if (!parsed) {
    return Fail(
        UsageError(fmt::format("--{} \"{}\": {}", flag, s.value, parsed.error().message())));
  }
  Query query;
  if (scoped) {
    if (!s.project.empty()) {
      FP_CHECK_OK(CheckNameOrId("--project", s.project));
      query.emplace_back("project", s.project);
    } else if (!parsed->is_id()) {
      return Fail(UsageError(fmt::format(
          "--project is required when --{} is a name (\"{}\"); or give its id", flag, s.value)));
    }
  }
  return std::make_pair(Segment(s.value), query);
}

void AddJsonBody(CLI::App* app, JsonBody& b) {
  app->add_option("--json-body", b.file,
                  "A file (- for stdin) with the whole request body, as JSON; it replaces the "
                  "body the flags would make");
  app->add_flag("--json-body-template", b.show_template,
                "Print an example request body for --json-body, and make no request");
}

CliResult<nlohmann::json> Body(const JsonBody& b,
                               const std::function<CliResult<nlohmann::json>()>& from_flags) {
  if (b.file.empty()) return from_flags();
  std::string text;
  if (b.file == "-") {
    std::ostringstream all;
    all << std::cin.rdbuf();
    text = all.str();
  } else {
    std::ifstream in(b.file, std::ios::binary);
    if (!in) return Fail(UsageError(fmt::format("--json-body: cannot read {}", b.file)));
    std::ostringstream all;
    all << in.rdbuf();
    text = all.str();
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Fail(UsageError(fmt::format("--json-body: {} is not a JSON object", b.file)));
  }
  return j;
}

CliStatus Require(const JsonBody& b, const std::string& flag, bool given) {
  if (given || !b.file.empty()) return {};
  return Fail(
      UsageError(fmt::format("{} is required (or give the whole body with --json-body)", flag)));
}

void AddListFlags(CLI::App* app, ListFlags& f, const std::vector<std::string>& sorts) {
  app->add_option("--limit", f.limit, "At most this many items (default: all, page by page)")
      ->check(WholeNumber(1'000'000'000));
  if (!sorts.empty()) {
    app->add_option("--sort-by", f.sort_by, "The order")->check(CLI::IsMember(sorts));
  }
}

std::vector<Column> FieldColumns(const std::vector<std::string>& fields,
                                 std::vector<Column> extra) {
  std::vector<Column> out;
  for (const std::string& f : fields) out.push_back(FieldColumn(f));
  for (Column& c : extra) out.push_back(std::move(c));
  return out;
}

CliStatus RunList(Session& s, const std::string& path, Query query, const ListFlags& f,
                  std::vector<Column> columns, const std::vector<std::string>& defaults) {
  OutputFormat format = FP_TRY(s.format());
  ListPrinter printer = FP_TRY(ListPrinter::Make(format, std::move(columns), defaults));
  Api* api = FP_TRY(s.api());
  if (!f.sort_by.empty()) query.emplace_back("sort_by", f.sort_by);
  CliStatus listed =
      api->List(path, query, f.limit, [&](const nlohmann::json& item) { printer.Add(item); });
  // A list whose first request failed prints nothing (an empty array would read as "there are
  // none"); one whose later page failed still closes its array (and prints its table).
  if (!listed && printer.empty()) return listed;
  printer.Finish();
  return listed;
}

std::string NameCache::Name(const std::string& path, const std::string& id) {
  if (id.empty()) return "";
  auto it = names_.find(path + id);
  if (it != names_.end()) return it->second;
  std::string name = id;
  if (auto api = session_.api()) {
    if (auto view = (*api)->Get(path + Segment(id))) name = view->value("name", id);
  }
  names_[path + id] = name;
  return name;
}

const std::vector<std::string> kNameOrIdSorts = {"name_ascending", "name_descending",
                                                 "id_ascending"};
const std::vector<std::string> kIdSorts = {"id_ascending"};

std::string TrimSpace(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  size_t start = s.find_first_not_of(" \t");
  return start == std::string::npos ? "" : s.substr(start);
}

const std::vector<std::string> kProjectFields = {"description", "id", "name", "time_created",
                                                 "time_modified"};
const std::vector<std::string> kFloatingIpFields = {"description", "id",           "instance_id",
                                                    "ip",          "ip_pool_id",   "name",
                                                    "project_id",  "time_created", "time_modified"};
const std::vector<std::string> kInstanceFields = {"auto_restart_cooldown_expiration",
                                                  "auto_restart_enabled",
                                                  "auto_restart_policy",
                                                  "boot_disk_id",
                                                  "cpu_platform",
                                                  "description",
                                                  "enable_jumbo_frames",
                                                  "hostname",
                                                  "id",
                                                  "memory",
                                                  "name",
                                                  "ncpus",
                                                  "project_id",
                                                  "run_state",
                                                  "time_created",
                                                  "time_last_auto_restarted",
                                                  "time_modified",
                                                  "time_run_state_updated"};
const std::vector<std::string> kPoolFields = {"assignment",   "description",  "id",
                                              "ip_version",   "name",         "pool_type",
                                              "time_created", "time_modified"};
const std::vector<std::string> kExternalIpFields = {
    "description", "first_port", "id",   "instance_id", "ip",           "ip_pool_id",
    "kind",        "last_port",  "name", "project_id",  "time_created", "time_modified"};

CliStatus CheckColumns(Session& s, const std::vector<std::string>& fields) {
  return CheckColumns(s, FieldColumns(fields));
}

CliStatus CheckColumns(Session& s, std::vector<Column> columns) {
  OutputFormat format = FP_TRY(s.format());
  if (!format.table || format.columns.empty()) return {};
  (void)FP_TRY(ListPrinter::Make(format, std::move(columns), {}));
  return {};
}

CliStatus PrintOne(Session& s, const nlohmann::json& value, std::vector<Column> columns,
                   const std::vector<std::string>& defaults) {
  OutputFormat format = FP_TRY(s.format());
  return PrintObject(format, value, std::move(columns), defaults);
}

void AddView(Commands& c, CLI::App* group, const Resource& r, const std::string& about) {
  auto* sel = c.Keep<Selector>();
  CLI::App* leaf = c.Leaf(group, "view", about, r.operation + "_view",
                          fmt::format("floatplane {} view {}", group->get_name(), r.example),
                          [sel, r](Session& s) -> CliStatus {
                            auto [segment, query] = FP_TRY(Resolve(*sel, r.flag, r.scoped));
                            Api* api = FP_TRY(s.api());
                            return PrintOne(s, FP_TRY(api->Get(r.path + segment, query)));
                          });
  AddSelector(leaf, *sel, r.flag, r.noun, r.scoped);
}

void AddUpdate(Commands& c, CLI::App* group, const Resource& r, const std::string& about) {
  struct Update {
    Selector sel;
    std::string name, description;
    JsonBody body;
  };
  auto* update = c.Keep<Update>();
  CLI::App* leaf =
      c.Leaf(group, "update", about, r.operation + "_update",
             fmt::format("floatplane {} update {} --description 'what it is for'",
                         group->get_name(), r.example),
             [update, r](Session& s) -> CliStatus {
               if (update->body.show_template) {
                 Out(PrettyJson({{"name", "new-name"}, {"description", "what it is for"}}));
                 return {};
               }
               auto [segment, query] = FP_TRY(Resolve(update->sel, r.flag, r.scoped));
               FP_CHECK_OK(CheckColumns(s, r.fields));
               nlohmann::json body = FP_TRY(Body(update->body, [&]() -> CliResult<nlohmann::json> {
                 nlohmann::json b = nlohmann::json::object();
                 if (!update->name.empty()) {
                   FP_CHECK_OK(CheckName("--name", update->name));
                   b["name"] = update->name;
                 }
                 if (!update->description.empty()) b["description"] = update->description;
                 return b;
               }));
               Api* api = FP_TRY(s.api());
               return PrintOne(s, FP_TRY(api->Mutate("PUT", r.path + segment, body, query)));
             });
  AddSelector(leaf, update->sel, r.flag, r.noun, r.scoped);
  leaf->add_option("--name", update->name, "A new name");
  leaf->add_option("--description", update->description, "A new description");
  AddJsonBody(leaf, update->body);
}

void AddDelete(Commands& c, CLI::App* group, const Resource& r, const std::string& about) {
  auto* sel = c.Keep<Selector>();
  CLI::App* leaf =
      c.Leaf(group, "delete", about, r.operation + "_delete",
             fmt::format("floatplane {} delete {}", group->get_name(), r.example),
             [sel, r](Session& s) -> CliStatus {
               auto [segment, query] = FP_TRY(Resolve(*sel, r.flag, r.scoped));
               Api* api = FP_TRY(s.api());
               FP_TRY(api->Mutate("DELETE", r.path + segment, nullptr, query));
               std::string noun = r.noun;
               noun[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(noun[0])));
               s.Note(fmt::format("{} \"{}\" deleted", noun, sel->value));
               return {};
             });
  AddSelector(leaf, *sel, r.flag, r.noun, r.scoped);
}

void AddWaitFlags(CLI::App* app, WaitFlags& w) {
  app->add_flag("--wait", w.wait,
                "Wait until it is done; a 503 with Retry-After is retried until the deadline "
                "with the same Idempotency-Key");
  app->add_option("--wait-timeout", w.timeout, "How long --wait waits (default 5m; 90s, 2m, 1h)");
}

CliResult<std::chrono::milliseconds> ParseDuration(const std::string& flag,
                                                   const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  if (digits == 0 || digits > 9) {
    return Fail(UsageError(
        fmt::format("{} \"{}\": expected a duration such as 90s, 5m or 1h", flag, text)));
  }
  int64_t n = std::stoll(text.substr(0, digits));
  if (unit == "ms") return std::chrono::milliseconds(n);
  if (unit == "s" || unit.empty()) return std::chrono::milliseconds(n * 1000);
  if (unit == "m") return std::chrono::milliseconds(n * 60 * 1000);
  if (unit == "h") return std::chrono::milliseconds(n * 3600 * 1000);
  return Fail(
      UsageError(fmt::format("{} \"{}\": expected a duration such as 90s, 5m or 1h", flag, text)));
}

CliResult<std::optional<MonoTime>> Deadline(const Clock& clock, const WaitFlags& w) {
  auto d = FP_TRY(ParseDuration("--wait-timeout", w.timeout));
  if (!w.wait) return std::optional<MonoTime>();
  return std::optional<MonoTime>(clock.Deadline(d));
}

CliStatus WaitFor(Session& s, const std::string& what, const std::string& target_state,
                  const std::string& path, const Query& query, MonoTime deadline,
                  const std::function<std::string(const nlohmann::json&)>& state_of, bool gone_ok) {
  Api* api = FP_TRY(s.api());
  const bool tty = isatty(STDERR_FILENO) == 1;
  const bool quiet = s.globals().quiet;
  const Clock& clock = s.clock();
  const MonoTime start = clock.Monotonic();
  std::string last;
  auto show = [&](const std::string& state, bool final_line) {
    if (quiet) return;
    const auto secs =
        std::chrono::duration_cast<std::chrono::seconds>(clock.Monotonic() - start).count();
    std::string line =
        fmt::format("Waiting for {} to be {} ... {} ({}s)", what, target_state, state, secs);
    if (tty) {
      std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final_line ? "\n" : "");
    } else if (state != last || final_line) {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  };
  for (;;) {
    auto view = api->Get(path, query);
    std::string state;
    if (!view) {
      if (gone_ok && view.error().http_status == 404) {
        show("done", true);
        return {};
      }
      if (tty && !quiet) std::fprintf(stderr, "\n");
      return Fail(view.error());
    }
    state = state_of(*view);
    if (state == target_state) {
      show("done", true);
      return {};
    }
    if (state == "failed") {
      show("failed", true);
      return Fail(
          Failure{Exit::kApiError, fmt::format("{} is failed, not {}", what, target_state)});
    }
    show(state, false);
    last = state;
    if (clock.Monotonic() >= deadline) {
      if (tty && !quiet) std::fprintf(stderr, "\n");
      return Fail(
          Failure{Exit::kWaitTimeout, fmt::format("{} is still {} after the --wait-timeout; not {}",
                                                  what, state, target_state)});
    }
    clock.SleepFor(std::chrono::milliseconds(250));
  }
}

}  // namespace fp::cli
