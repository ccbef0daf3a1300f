#pragma once

// What the command definitions share: selectors (name or id, with --project), request bodies
// from flags or --json-body, lists with their table columns, and waiting with progress.

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/client.h"

namespace fp::cli {

// A resource named by name or id, and the project a name needs.
struct Selector {
  std::string value;
  std::string project;
};

// Adds --<flag> (required) and, when `scoped`, --project.
void AddSelector(CLI::App* app, Selector& s, const std::string& flag, const std::string& what,
                 bool scoped);
// The path segment and query of a selector. UsageError (exit 2) for a value that is neither a
// name nor an id, or a name without --project where the resource lives in a project.
CliResult<std::pair<std::string, Query>> Resolve(const Selector& s, const std::string& flag,
                                                 bool scoped);
// A --name value checked as the API checks names (exit 2 with its message).
CliStatus CheckName(const std::string& flag, const std::string& value);
CliStatus CheckNameOrId(const std::string& flag, const std::string& value);

// A secret (a token, a password) from `file`, or from stdin when `from_stdin` or stdin is not a
// terminal; never from the command line, where other users and shell history see it. Trailing
// and leading whitespace (the file's newline) is dropped. UsageError naming `file_flag` and
// `stdin_flag` when neither gives one, or the file cannot be read.
CliResult<std::string> ReadSecret(const std::string& file, bool from_stdin,
                                  const std::string& file_flag, const std::string& stdin_flag,
                                  const std::string& what);

// --json-body FILE|- and --json-body-template.
struct JsonBody {
  std::string file;
  bool show_template = false;
};
void AddJsonBody(CLI::App* app, JsonBody& b);
// The body: the file's JSON when --json-body is given, else `from_flags()`.
CliResult<nlohmann::json> Body(const JsonBody& b,
                               const std::function<CliResult<nlohmann::json>()>& from_flags);
// A required flag's value, unless --json-body gives the body.
CliStatus Require(const JsonBody& b, const std::string& flag, bool given);

struct ListFlags {
  int64_t limit = 0;
  std::string sort_by;
};
// --limit and --sort-by (`sorts`: its values; none: no --sort-by).
void AddListFlags(CLI::App* app, ListFlags& f, const std::vector<std::string>& sorts);

// Runs a list: every item printed as JSON or in a table of `columns` (`defaults` shown).
CliStatus RunList(Session& s, const std::string& path, Query query, const ListFlags& f,
                  std::vector<Column> columns, const std::vector<std::string>& defaults);

// Columns for every top-level field of the schema's `fields`, plus `extra`.
std::vector<Column> FieldColumns(const std::vector<std::string>& fields,
                                 std::vector<Column> extra = {});

// Names of things by id, asked once each (tables show names, JSON stays raw).
class NameCache {
 public:
  explicit NameCache(Session& s) : session_(s) {}
  // The `name` of GET path; the id itself if that fails.
  std::string Name(const std::string& path, const std::string& id);

 private:
  Session& session_;
  std::map<std::string, std::string> names_;
};

// A resource with the usual view, update (name, description) and delete.
struct Resource {
  std::string flag;                 // its selector flag, e.g. "floating-ip"
  std::string noun;                 // in messages, e.g. "floating IP"
  std::string path;                 // its collection, e.g. "/v1/floating-ips/"
  bool scoped = false;              // lives in a project (a name needs --project)
  std::string operation;            // the API operations' prefix, e.g. "floating_ip"
  std::string example;              // the selector flags of the help's examples
  std::vector<std::string> fields;  // its object's fields (the table columns it can show)
};
void AddView(Commands& c, CLI::App* group, const Resource& r, const std::string& about);
void AddUpdate(Commands& c, CLI::App* group, const Resource& r, const std::string& about);
void AddDelete(Commands& c, CLI::App* group, const Resource& r, const std::string& about);
// UsageError (exit 2) when --format table:... names a column that the object a command is
// about to print does not have (`fields`): checked before a mutating request, which must not
// run only for its answer to be unprintable.
CliStatus CheckColumns(Session& s, const std::vector<std::string>& fields);
// Same for an object printed with `columns` (a list's, with its computed columns).
CliStatus CheckColumns(Session& s, std::vector<Column> columns);

// The --sort-by values of lists by name or id, and of lists by id only.
extern const std::vector<std::string> kNameOrIdSorts;
extern const std::vector<std::string> kIdSorts;

// `s` without the spaces and line ends around it.
std::string TrimSpace(std::string s);

// The parts of the command tree the top-level parts add (commands_*.cc).
void AddFloatingIpCommands(Commands& c);
void AddInstanceCommands(Commands& c);
void AddPoolCommands(Commands& c, CLI::App* networking);
void AddAuthCommands(Commands& c);
// `silo idp local user ...` under `silo_group`, and `user list`.
void AddUserCommands(Commands& c, CLI::App* silo_group);
// `quotas ...` under the `silo` group (`silo`) or the `project` group.
void AddQuotaCommands(Commands& c, CLI::App* group, bool silo);

// The fields of the API's objects (schema order).
extern const std::vector<std::string> kProjectFields;
extern const std::vector<std::string> kFloatingIpFields;
extern const std::vector<std::string> kInstanceFields;
extern const std::vector<std::string> kPoolFields;
extern const std::vector<std::string> kExternalIpFields;

// One object printed in the session's format.
CliStatus PrintOne(Session& s, const nlohmann::json& value, std::vector<Column> columns = {},
                   const std::vector<std::string>& defaults = {});

// --wait and --wait-timeout.
struct WaitFlags {
  bool wait = false;
  std::string timeout = "5m";
};
void AddWaitFlags(CLI::App* app, WaitFlags& w);
// "90s", "5m", "1h", "250ms" → duration. UsageError otherwise.
CliResult<std::chrono::milliseconds> ParseDuration(const std::string& flag,
                                                   const std::string& text);
// The deadline of a --wait, or none without --wait.
CliResult<std::optional<MonoTime>> Deadline(const Clock& clock, const WaitFlags& w);

// Polls GET `path` (with `query`) until `done(view)` says so, printing progress on stderr: on a
// terminal one line updated in place, otherwise one line per state change. `what` names it
// ("instance db1"); `state_of` reads the state shown. Exit 5 naming the last state seen when
// the deadline passes; `gone_ok`: a 404 ends the wait successfully (a delete).
CliStatus WaitFor(Session& s, const std::string& what, const std::string& target_state,
                  const std::string& path, const Query& query, MonoTime deadline,
                  const std::function<std::string(const nlohmann::json&)>& state_of,
                  bool gone_ok = false);

}  // namespace fp::cli
