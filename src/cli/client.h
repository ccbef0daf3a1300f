#pragma once

// The command-line client: `floatplane <resource> <verb> ...` in the Oxide CLI's command tree
// (../shared/spec/cli-and-console.md §4). The commands are subcommands of the same binary as
// `floatplane server` and the agents: one program to install, and the operator's tools next
// to the server they drive.

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/api.h"
#include "cli/failure.h"
#include "cli/output.h"

namespace fp::cli {

// Checks of a flag's value whose errors are in the user's terms (CLI11's own range checks print
// floating-point limits with hundreds of digits): a whole number from 1 to `max`, and a
// positive number of seconds.
CLI::Validator WholeNumber(int64_t max);
CLI::Validator PositiveSeconds();

// The options every client command takes.
struct Globals {
  std::string profile;
  std::string config_dir;
  std::string cacert;
  bool insecure = false;
  std::vector<std::string> resolve;
  double timeout_s = 15;
  bool debug = false;
  std::string format;  // empty: FLOATPLANE_FORMAT, then config.toml's `format`, then json
  bool no_header = false;
  bool quiet = false;
  std::string idempotency_key;  // empty: a random one per invocation
};

// Where the client sends requests: the profile's (or the environment's) host and token.
struct Target {
  std::string host;  // "http[s]://host[:port]", no trailing slash
  std::string token;
  std::string profile;  // empty when from OXIDE_HOST/OXIDE_TOKEN
};

// What a running command has: its options, output format and (on first use) the API.
class Session {
 public:
  // `clock` and `random` must outlive the session.
  Session(Globals& globals, const Clock& clock, Random& random)
      : globals_(globals), clock_(clock), random_(random) {}
  const Clock& clock() const { return clock_; }
  Random& random() const { return random_; }
  const Globals& globals() const { return globals_; }
  // The output format from --format, FLOATPLANE_FORMAT or config.toml (in that order).
  CliResult<OutputFormat> format();
  // The API at the resolved target (credentials errors: exit 3). `retry_until`: retry 503s
  // with Retry-After until then (--wait).
  CliResult<Api*> api(std::optional<MonoTime> retry_until = {});
  // The target alone (auth status, env).
  CliResult<Target> target();
  // A line for humans on stderr (unless --quiet): confirmations, progress.
  void Note(const std::string& line) const;
  const std::string& idempotency_key();

 private:
  Globals& globals_;
  const Clock& clock_;
  Random& random_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Api> api_;
  std::string key_;
};

using Action = std::function<CliStatus(Session&)>;

// The command tree's leaves and what each runs.
class Commands {
 public:
  // Adds the client's commands and global options to `app`. Commands read time and draw
  // random values (idempotency keys, retry jitter) from `clock` and `random`, which must
  // outlive this.
  Commands(CLI::App& app, const Clock& clock, Random& random);
  // Whether a client command was given (after parsing).
  bool Parsed() const;
  // Runs it; returns the process's exit status (errors printed on stderr).
  int Run();

  // Registers a leaf: `about` (one line), the API operation it calls (empty: none) and an
  // example for its help.
  CLI::App* Leaf(CLI::App* parent, const std::string& name, const std::string& about,
                 const std::string& operation, const std::string& example, Action action);
  CLI::App* Group(CLI::App* parent, const std::string& name, const std::string& about);
  Globals& globals() { return globals_; }
  CLI::App& root() { return app_; }
  // Each leaf's API operation (for docs).
  const std::map<const CLI::App*, std::string>& operations() const { return operations_; }
  // Storage for a command's flags, alive as long as the commands.
  template <typename T>
  T* Keep() {
    auto kept = std::make_shared<T>();
    storage_.push_back(kept);
    return kept.get();
  }

 private:
  const Clock& clock_;
  Random& random_;
  std::vector<std::shared_ptr<void>> storage_;
  CLI::App& app_;
  Globals globals_;
  std::vector<std::pair<CLI::App*, Action>> leaves_;
  std::map<const CLI::App*, std::string> operations_;
};

// What to print for a usage error CLI11 found while parsing argv: its message, and for a
// group given no (or an unknown) subcommand, the closest name ("did you mean") and the
// group's subcommands.
std::string DescribeUsageError(const CLI::App& root, int argc, char** argv,
                               const CLI::ParseError& e);

// The parts of the tree (commands_*.cc).
void AddResourceCommands(Commands& c);
void AddSystemCommands(Commands& c);
void AddToolCommands(Commands& c);        // auth, env, api, version, ping, completion, docs
void AddCompletionCommands(Commands& c);  // completion, __complete (completion.cc)

}  // namespace fp::cli
