// `floatplane server`'s flags and its --config file, parsed as main() parses them.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "cmd/server.h"
#include "db/datastore.h"

namespace fp::cmd {
namespace {

class ServerFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("fp-server-flags-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteConfig(const std::string& text) {
    std::filesystem::path path = dir_ / "floatplane.toml";
    std::ofstream(path) << text;
    return path.string();
  }

  // Parses `floatplane ARGS...`; returns CLI11's error message, or "" on success.
  std::string Parse(std::vector<std::string> args) {
    CLI::App app{"floatplane"};
    AddServerCommand(app, flags_);
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    try {
      app.parse(reversed);
    } catch (const CLI::ParseError& e) {
      return std::string(e.what()).empty() ? "error" : e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
  ServerFlags flags_;
};

TEST_F(ServerFlagsTest, DatabaseAndAgentsFromFlags) {
  ASSERT_EQ(
      Parse({"server", "--database",
             "postgres://fp@h1:5432,h2:5432/fp?target_session_attrs=read-write", "--switch-agent",
             "http://sw:1", "--sled-agent", "http://s1:2", "--sled-agent", "http://s2:3"}),
      "");
  EXPECT_EQ(flags_.database, "postgres://fp@h1:5432,h2:5432/fp?target_session_attrs=read-write");
  EXPECT_EQ(flags_.switch_agents, std::vector<std::string>{"http://sw:1"});
  EXPECT_EQ(flags_.sled_agents, (std::vector<std::string>{"http://s1:2", "http://s2:3"}));
  EXPECT_FALSE(flags_.dev);
}

TEST_F(ServerFlagsTest, ConfigFileCarriesTheSameSettings) {
  std::string config = WriteConfig(R"(# floatplane server settings
[server]
database = "postgres://fp@db1:5432,db2:5432/fp?target_session_attrs=read-write"
data-dir = "/var/lib/floatplane"
listen = "0.0.0.0:12220"
switch-agent = "http://switch:12230"
sled-agent = ["http://sled1:12240", "http://sled2:12240"]
agent-timeout-ms = 3000
nat-heartbeat-ms = 250
history-retention = "12h"
mint-admin-token = true
)");
  ASSERT_EQ(Parse({"server", "--config", config}), "");
  EXPECT_EQ(flags_.database, "postgres://fp@db1:5432,db2:5432/fp?target_session_attrs=read-write");
  EXPECT_EQ(flags_.data_dir, "/var/lib/floatplane");
  EXPECT_EQ(flags_.listen, "0.0.0.0:12220");
  EXPECT_EQ(flags_.switch_agents, std::vector<std::string>{"http://switch:12230"});
  EXPECT_EQ(flags_.sled_agents,
            (std::vector<std::string>{"http://sled1:12240", "http://sled2:12240"}));
  EXPECT_EQ(flags_.agent_timeout_ms, 3000);
  EXPECT_EQ(flags_.nat_heartbeat_ms, 250);
  EXPECT_EQ(flags_.history_retention_s, 12 * 3600);
  EXPECT_TRUE(flags_.mint_admin_token);
  EXPECT_FALSE(flags_.dev);
}

// The pool's size: a flag and a config key, 16 (the engine's own default) unless given, and
// refused outside 1-256 naming the flag.
TEST_F(ServerFlagsTest, PostgresPoolSizeFromAFlagOrTheFileWithinItsRange) {
  EXPECT_EQ(ServerFlags{}.postgres_pool_size, db::PostgresOptions{}.pool_size);
  ASSERT_EQ(Parse({"server", "--postgres-pool-size", "4"}), "");
  EXPECT_EQ(flags_.postgres_pool_size, 4);
  ASSERT_EQ(Parse({"server", "--config", WriteConfig("[server]\npostgres-pool-size = 2\n")}), "");
  EXPECT_EQ(flags_.postgres_pool_size, 2);
  std::string refused = Parse({"server", "--postgres-pool-size", "0"});
  EXPECT_NE(refused.find("--postgres-pool-size"), std::string::npos) << refused;
}

TEST_F(ServerFlagsTest, FlagsOverrideTheConfigFile) {
  std::string config = WriteConfig(R"([server]
dev = true
database = "postgres://fp@db/fp"
sled-agent = ["http://sled1:1", "http://sled2:2"]
listen = "127.0.0.1:1"
)");
  ASSERT_EQ(Parse({"server", "--database", "sqlite:/tmp/x.db", "--config", config, "--sled-agent",
                   "http://cli:3"}),
            "");
  EXPECT_EQ(flags_.database, "sqlite:/tmp/x.db");
  EXPECT_EQ(flags_.sled_agents, (std::vector<std::string>{"http://cli:3"}));
  EXPECT_EQ(flags_.listen, "127.0.0.1:1");  // from the file: not on the command line
  EXPECT_TRUE(flags_.dev);
}

TEST_F(ServerFlagsTest, AnUnknownKeyIsAnErrorNamingIt) {
  std::string config = WriteConfig("[server]\ndatabse = \"postgres://db/fp\"\n");
  std::string error = Parse({"server", "--config", config});
  EXPECT_NE(error.find("server.databse"), std::string::npos) << error;
}

TEST_F(ServerFlagsTest, AKeyOutsideTheServerSectionIsAnError) {
  std::string config = WriteConfig("database = \"postgres://db/fp\"\n");
  std::string error = Parse({"server", "--config", config});
  EXPECT_NE(error.find("database"), std::string::npos) << error;
  EXPECT_EQ(flags_.database, "");
}

TEST_F(ServerFlagsTest, AnInvalidValueInTheFileNamesItsSetting) {
  std::string config = WriteConfig("[server]\nagent-timeout-ms = 1\n");
  std::string error = Parse({"server", "--config", config});
  EXPECT_NE(error.find("--agent-timeout-ms"), std::string::npos) << error;
}

TEST_F(ServerFlagsTest, AMissingConfigFileIsAnErrorNamingIt) {
  std::string error = Parse({"server", "--config", (dir_ / "absent.toml").string()});
  EXPECT_NE(error.find("absent.toml"), std::string::npos) << error;
}

// What cannot start a server, refused before anything is opened (exit 2).
TEST(RefusedFlagsTest, AMigrationNeedsOnlyTheDatabaseAndMintsNoToken) {
  ServerFlags production{.database = "sqlite:x.db"};
  EXPECT_EQ(RefusedFlags(production).value_or(""),
            "--switch-agent (or `switch-agent` in the config file's [server] section) is "
            "required without --dev; --dev runs on embedded defaults (see README.md, "
            "Configuration)");
  ServerFlags migration{.database = "sqlite:x.db", .migrate_only = true};
  EXPECT_EQ(RefusedFlags(migration), std::nullopt);
  migration.database.clear();
  EXPECT_EQ(RefusedFlags(migration).value_or("").substr(0, 10), "--database");
  ServerFlags mint{.dev = true, .mint_admin_token = true, .migrate_only = true};
  EXPECT_NE(RefusedFlags(mint).value_or("").find("--mint-admin-token needs a server start"),
            std::string::npos);
  ServerFlags half_tls{.dev = true, .tls_cert = "cert.pem"};
  EXPECT_EQ(RefusedFlags(half_tls).value_or(""),
            "--tls-cert needs --tls-key: HTTPS takes a certificate and its private key");
  EXPECT_EQ(RefusedFlags(ServerFlags{.dev = true}), std::nullopt);
}

// A task lease's holder is `<id>@<process>#<tenure>`: an id with either mark would pass for
// another server's process (a server `a` took the live lease of a server `a@b` before
// IsEarlierProcessOf's fix), so such an id is refused before the server starts.
TEST(RefusedFlagsTest, ACoordinatorIdWithALeaseNamesMarkIsRefusedNamingTheFlag) {
  EXPECT_EQ(RefusedFlags(ServerFlags{.dev = true, .coordinator_id = "a@b"}).value_or(""),
            "--coordinator-id \"a@b\": may not contain '@', which begins the process part of "
            "its task leases' holder names");
  EXPECT_EQ(RefusedFlags(ServerFlags{.dev = true, .coordinator_id = "a#1"}).value_or(""),
            "--coordinator-id \"a#1\": may not contain '#', which begins the tenure part of its "
            "task leases' holder names");
  EXPECT_EQ(RefusedFlags(ServerFlags{.dev = true, .coordinator_id = "nexus 1"}).value_or(""),
            "--coordinator-id \"nexus 1\": may not contain spaces or control characters");
  // Shown escaped: a control character would otherwise garble the message.
  EXPECT_EQ(RefusedFlags(ServerFlags{.dev = true, .coordinator_id = "nexus\r"}).value_or(""),
            "--coordinator-id \"nexus\\r\": may not contain spaces or control characters");
  EXPECT_EQ(CoordinatorIdProblem(std::string(129, 'a')).value_or(""),
            "may be at most 128 characters long");
  for (const char* good :
       {"server-b", "nexus-1.rack2", "0b4f6a1e-7f10-4c3e-9a55-2f4d1c6e8b90", "rack:2/3"}) {
    EXPECT_EQ(RefusedFlags(ServerFlags{.dev = true, .coordinator_id = good}), std::nullopt) << good;
  }
  EXPECT_EQ(CoordinatorIdProblem(std::string(128, 'a')), std::nullopt);
}

}  // namespace
}  // namespace fp::cmd
