#include "cli/credentials.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fp::cli {
namespace {

class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fp-credentials-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream all;
    all << in.rdbuf();
    return all.str();
  }
  void Write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
  }
  Profile CrystalPalace(const std::string& name) {
    return Profile{name,
                   "http://127.0.0.1:4444",
                   "123-456-789",
                   "xyz",
                   "831dedf4-0a66-4b04-a232-b610f9f8924c",
                   "2038-01-19 03:14:08 UTC"};
  }
  std::string root_;
};

// The oxide CLI's fixtures (oxide.rs cli/tests/data/test_auth_login_first_credentials.toml
// and test_auth_double_credentials.toml, its test server's URL filled in): a first profile,
// then a second one appended after a blank line.
TEST_F(CredentialsTest, ProfilesAreWrittenByteForByteAsTheOxideCliWritesThem) {
  ConfigDir dir(root_ + "/oxide");
  ASSERT_TRUE(dir.SaveProfile(CrystalPalace("crystal-palace")));
  const std::string first =
      "[profile.crystal-palace]\n"
      "host = \"http://127.0.0.1:4444\"\n"
      "token = \"123-456-789\"\n"
      "token_id = \"xyz\"\n"
      "user = \"831dedf4-0a66-4b04-a232-b610f9f8924c\"\n"
      "time_expires = \"2038-01-19 03:14:08 UTC\"\n";
  EXPECT_EQ(Read(dir.credentials_path()), first);
  struct stat st {};
  ASSERT_EQ(stat(dir.credentials_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(dir.SaveProfile(CrystalPalace("crystal-palace2")));
  EXPECT_EQ(Read(dir.credentials_path()), first + "\n" +
                                              "[profile.crystal-palace2]\n"
                                              "host = \"http://127.0.0.1:4444\"\n"
                                              "token = \"123-456-789\"\n"
                                              "token_id = \"xyz\"\n"
                                              "user = \"831dedf4-0a66-4b04-a232-b610f9f8924c\"\n"
                                              "time_expires = \"2038-01-19 03:14:08 UTC\"\n");
  ASSERT_TRUE(dir.SetDefaultProfile("crystal-palace"));
  EXPECT_EQ(Read(dir.config_path()), "default-profile = \"crystal-palace\"\n");
}

// What a person (or the oxide CLI) wrote stays: comments, other profiles, unknown keys.
TEST_F(CredentialsTest, SavingAProfileReplacesItsKeysInPlaceAndKeepsEverythingElse) {
  ConfigDir dir(root_ + "/oxide");
  Write(dir.credentials_path(),
        "# my racks\n"
        "[profile.lab]\n"
        "host = \"https://old\"\n"
        "token = \"old\"\n"
        "note = \"keep me\"\n"
        "\n"
        "[profile.prod]\n"
        "host = \"https://prod\"\n"
        "token = \"p\"\n"
        "user = \"u\"\n");
  Profile lab{"lab", "https://new", "new", "", "me", ""};
  ASSERT_TRUE(dir.SaveProfile(lab));
  EXPECT_EQ(Read(dir.credentials_path()),
            "# my racks\n"
            "[profile.lab]\n"
            "host = \"https://new\"\n"
            "token = \"new\"\n"
            "note = \"keep me\"\n"
            "user = \"me\"\n"
            "\n"
            "[profile.prod]\n"
            "host = \"https://prod\"\n"
            "token = \"p\"\n"
            "user = \"u\"\n");
  auto profiles = dir.Profiles();
  ASSERT_TRUE(profiles);
  ASSERT_EQ(profiles->size(), 2u);
  EXPECT_EQ((*profiles)[0].name, "lab");
  EXPECT_EQ((*profiles)[0].token, "new");
  EXPECT_EQ((*profiles)[1].host, "https://prod");

  ASSERT_TRUE(dir.RemoveProfile("lab").value());
  EXPECT_EQ(Read(dir.credentials_path()),
            "# my racks\n"
            "[profile.prod]\n"
            "host = \"https://prod\"\n"
            "token = \"p\"\n"
            "user = \"u\"\n");
  EXPECT_FALSE(dir.RemoveProfile("lab").value());
}

TEST_F(CredentialsTest, TheDefaultProfileIsSetWithoutTouchingTheRestOfConfigToml) {
  ConfigDir dir(root_ + "/oxide");
  Write(dir.config_path(), "format = \"table\"\n");
  ASSERT_TRUE(dir.SetDefaultProfile("lab"));
  EXPECT_EQ(Read(dir.config_path()), "default-profile = \"lab\"\nformat = \"table\"\n");
  ASSERT_TRUE(dir.SetDefaultProfile("prod"));
  EXPECT_EQ(Read(dir.config_path()), "default-profile = \"prod\"\nformat = \"table\"\n");
  EXPECT_EQ(dir.DefaultProfile().value(), "prod");
  EXPECT_EQ(dir.DefaultFormat().value(), "table");
}

TEST_F(CredentialsTest, AFileThatIsNotTomlIsAnErrorNamingIt) {
  ConfigDir dir(root_ + "/oxide");
  Write(dir.credentials_path(), "[profile.lab\nhost = 1\n");
  auto profiles = dir.Profiles();
  ASSERT_FALSE(profiles);
  EXPECT_EQ(profiles.error().exit, Exit::kCredentials);
  EXPECT_EQ(profiles.error().message.rfind("Parse error for " + dir.credentials_path() + ": ", 0),
            0u)
      << profiles.error().message;
}

// TOML's other spellings of the same table and keys are found, not added a second time.
TEST_F(CredentialsTest, HeadersAndKeysAreFoundHoweverTomlSpellsThem) {
  ConfigDir dir(root_ + "/oxide");
  Write(dir.credentials_path(),
        "[ profile . 'lab' ]  # the lab rack\r\n"
        "\"host\" = \"https://old\"\r\n"
        "token = \"old\"\r\n");
  ASSERT_TRUE(dir.SaveProfile(Profile{"lab", "https://new", "new", "", "", ""}));
  // Replaced in place, the file's CRLF line ends kept.
  EXPECT_EQ(Read(dir.credentials_path()),
            "[ profile . 'lab' ]  # the lab rack\r\n"
            "host = \"https://new\"\r\n"
            "token = \"new\"\r\n");
  // A name that is not a bare key is quoted in a new header.
  ASSERT_TRUE(dir.SaveProfile(Profile{"my lab.2", "https://x", "t", "", "", ""}));
  auto profiles = dir.Profiles();
  ASSERT_TRUE(profiles) << profiles.error().message;
  ASSERT_EQ(profiles->size(), 2u);
  EXPECT_EQ((*profiles)[1].name, "my lab.2");
  EXPECT_NE(Read(dir.credentials_path()).find("[profile.\"my lab.2\"]\r\n"), std::string::npos);
}

// A layout the in-place edit does not follow (dotted keys under [profile]) is refused, and
// the file is left as it was: better than a file that no tool can read.
TEST_F(CredentialsTest, AnEditThatWouldNotParseIsRefusedAndTheFileLeftAlone) {
  ConfigDir dir(root_ + "/oxide");
  const std::string dotted =
      "[profile]\n"
      "lab.host = \"https://old\"\n"
      "lab.token = \"old\"\n";
  Write(dir.credentials_path(), dotted);
  auto saved = dir.SaveProfile(Profile{"lab", "https://new", "new", "", "", ""});
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.error().exit, Exit::kCredentials);
  EXPECT_NE(saved.error().message.find("edit or remove that profile by hand"), std::string::npos)
      << saved.error().message;
  EXPECT_EQ(Read(dir.credentials_path()), dotted);
}

TEST_F(CredentialsTest, StringsAreQuotedAsTomlBasicStrings) {
  EXPECT_EQ(TomlString("plain"), "\"plain\"");
  EXPECT_EQ(TomlString("a \"b\" \\c\n"), "\"a \\\"b\\\" \\\\c\\n\"");
}

}  // namespace
}  // namespace fp::cli
