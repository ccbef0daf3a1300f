#include "cmd/server_startup.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cmd/process.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/random.h"
#include "db/datastore.h"

namespace fp::cmd {

std::optional<fp::saga::FaultPlan> TestFaultsFromEnvironment() {
  const char* text = std::getenv("FLOATPLANE_TEST_SAGA_FAULTS");
  if (!text) return std::nullopt;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  fp::saga::FaultPlan plan;
  if (j.contains("saga")) plan.saga_name = j["saga"].get<std::string>();
  if (j.contains("fail_node")) plan.fail_node = j["fail_node"].get<int>();
  if (j.contains("fail_node_after_effect")) {
    plan.fail_node_after_effect = j["fail_node_after_effect"].get<int>();
  }
  if (j.contains("repeat_undo_node")) plan.repeat_undo_node = j["repeat_undo_node"].get<int>();
  if (j.contains("fail_undo_node")) plan.fail_undo_node = j["fail_undo_node"].get<int>();
  if (j.contains("exit_after_node")) plan.exit_after_node = j["exit_after_node"].get<int>();
  if (j.contains("exit_in_node")) plan.exit_in_node = j["exit_in_node"].get<int>();
  if (j.contains("exit_after_undo_node")) {
    plan.exit_after_undo_node = j["exit_after_undo_node"].get<int>();
  }
  if (j.contains("exit_in_undo_node")) plan.exit_in_undo_node = j["exit_in_undo_node"].get<int>();
  plan.repeat_every_action = j.value("repeat_every_action", false);
  return plan;
}

fp::Result<std::string> CoordinatorId(const ServerFlags& flags, const std::filesystem::path& dir) {
  if (!flags.coordinator_id.empty()) return flags.coordinator_id;
  std::filesystem::path file = dir / "coordinator-id";
  if (std::ifstream in(file); in) {
    std::string id;
    std::getline(in, id);
    // The server writes `<id>\n`; a file edited by hand may end in "\r\n" or spaces.
    while (!id.empty() && (id.back() == '\r' || id.back() == ' ' || id.back() == '\t')) {
      id.pop_back();
    }
    if (!id.empty()) {
      if (std::optional<std::string> bad = CoordinatorIdProblem(id)) {
        return Fail(fp::Error::InvalidRequest(
            fmt::format("{} holds {:?}, but a coordinator id {}: write another there, or give "
                        "one with --coordinator-id",
                        file.string(), id, *bad)));
      }
      return id;
    }
  }
  std::string id = fp::Uuid::Random().ToString();
  FP_CHECK_OK(WriteSecretFile(file, id + "\n"));
  return id;
}

void LogRecovery(const fp::saga::RecoveryEvent& e) {
  using Kind = fp::saga::RecoveryEvent::Kind;
  nlohmann::json fields{{"saga_id", e.saga_id.ToString()}};
  if (e.error) fields["error"] = e.error->message();
  switch (e.kind) {
    case Kind::kAtRest: {
      auto kind = e.outcome.kind;
      fields["outcome"] = kind == fp::saga::SagaResultKind::kDone      ? "done"
                          : kind == fp::saga::SagaResultKind::kUnwound ? "unwound"
                                                                       : "stuck";
      if (e.outcome.error) fields["error"] = e.outcome.error->message();
      bool stuck = kind == fp::saga::SagaResultKind::kStuck;
      fp::LogEvent(stuck ? "error" : "info", "saga recovered", fields);
      return;
    }
    case Kind::kCannotResume:
      fields["outcome"] = "stuck";
      fp::LogEvent("error", "saga cannot resume; marked stuck for an operator", fields);
      return;
    case Kind::kRetrying:
      fp::LogEvent("warn", "saga recovery failed; trying again later", fields);
      return;
  }
}

Result<std::unique_ptr<fp::db::Datastore>> OpenDatastore(const DatabaseSetting& database,
                                                         const fp::db::PostgresOptions& postgres,
                                                         fp::db::OpenInterrupt* interrupt) {
  auto clock = std::make_shared<fp::SystemClock>();
  auto random = std::make_shared<fp::SystemRandom>();
  auto opened =
      database.engine == DatabaseEngine::kSqlite
          ? fp::db::Datastore::OpenSqlite(database.target, clock, random, interrupt)
          : fp::db::Datastore::OpenPostgres(database.target, clock, random, postgres, interrupt);
  if (!opened) {
    return Fail(Error(opened.error().kind(),
                      fmt::format("cannot open the database {} (--database): {}",
                                  DescribeDatabase(database), opened.error().message())));
  }
  return opened;
}

Status EnsureAdminToken(fp::app::Tokens& tokens, const ServerFlags& flags,
                        const DatabaseSetting& database, const std::filesystem::path& token_file) {
  std::optional<std::string> secret = FP_TRY(tokens.BootstrapDev());
  if (secret) {
    fp::LogEvent("info", "bootstrapped the database: silo default and a fleet admin token",
                 {{"admin_token_file", token_file.string()}});
  } else if (flags.mint_admin_token) {
    secret = FP_TRY(tokens.MintFleetAdminToken("admin-minted-at-start"));
    fp::LogEvent("warn", "minted a new fleet admin token (--mint-admin-token)",
                 {{"admin_token_file", token_file.string()}});
  } else if (!std::filesystem::exists(token_file)) {
    if (database.engine == DatabaseEngine::kSqlite) {
      // The database survived but the token file beside it did not: mint a replacement rather
      // than lock the operator out.
      secret = FP_TRY(tokens.MintFleetAdminToken("dev-admin-replacement"));
      fp::LogEvent("warn", "admin-token file was missing; minted a new fleet admin token",
                   {{"path", token_file.string()}});
    } else {
      fp::LogEvent("info",
                   "the database was bootstrapped by another server; its admin-token file "
                   "holds the fleet admin token (start one server with --mint-admin-token if "
                   "it is lost)",
                   {{"path", token_file.string()}});
    }
  }
  if (secret) FP_CHECK_OK(WriteSecretFile(token_file, *secret + "\n"));
  return fp::Ok();
}

void PrintDevBanner(const std::string& url, const std::filesystem::path& token_file, bool console) {
  std::error_code ec;
  std::filesystem::path token = std::filesystem::absolute(token_file, ec);
  std::filesystem::path binary = std::filesystem::read_symlink("/proc/self/exe", ec);
  // Paths single-quoted for the shell (a ' inside becomes '\'').
  auto quoted = [](const std::string& text) {
    std::string out = "'";
    for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  };
  std::cout << "\nfloatplane dev server (--dev: for development, not production). Its data "
               "stays in "
            << quoted(token.parent_path().string()) << " across restarts.\n";
  if (console) {
    std::cout << "Web console: " << url << "/ (log in with the token in " << quoted(token.string())
              << ")\n";
  }
  std::cout << "To use it from another terminal:\n"
            << "  export PATH=" << quoted(binary.parent_path().string()) << ":\"$PATH\"\n"
            << "  export OXIDE_HOST=" << url << "\n"
            << "  export OXIDE_TOKEN=\"$(cat " << quoted(token.string()) << ")\"\n"
            << "  floatplane project list\n"
            << "(or save a profile: floatplane auth login --host " << url << " --token-file "
            << quoted(token.string()) << ")\n"
            << std::endl;
}

fp::Result<std::shared_ptr<const fp::http::StaticSite>> LoadConsole(const std::string& flag) {
  if (!flag.empty()) return fp::http::StaticSite::Load(flag);
  std::error_code ec;
  std::filesystem::path binary = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return std::shared_ptr<const fp::http::StaticSite>();
  std::filesystem::path installed =
      binary.parent_path().parent_path() / "share" / "floatplane" / "console";
  if (!std::filesystem::exists(installed / "index.html", ec)) {
    return std::shared_ptr<const fp::http::StaticSite>();
  }
  auto site = fp::http::StaticSite::Load(installed);
  if (!site) {
    return tl::unexpected(fp::Error::InvalidRequest(
        fmt::format("the console installed beside the binary: {}", site.error().message())));
  }
  return site;
}

}  // namespace fp::cmd
