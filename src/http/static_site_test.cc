#include "http/static_site.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fp::http {
namespace {

namespace fs = std::filesystem;

// A console directory in a fresh temporary folder, with a secret beside it that no request
// may reach.
class StaticSiteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/static-site-XXXXXX";
    root_ = mkdtemp(pattern);
    dir_ = root_ / "dist";
    fs::create_directories(dir_ / "assets");
    Write(dir_ / "index.html", "<!doctype html><title>console</title>");
    Write(dir_ / "assets" / "index-abc123.js", "console.log(1)");
    Write(dir_ / "assets" / "index-abc123.css", "body{}");
    Write(dir_ / "favicon.svg", "<svg/>");
    Write(dir_ / ".env", "SECRET=1");
    Write(root_ / "secret.txt", "not served");
  }
  void TearDown() override { fs::remove_all(root_); }

  static void Write(const fs::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }

  fs::path root_;
  fs::path dir_;
};

TEST_F(StaticSiteTest, ServesEachFileWithItsTypeAndAStableValidator) {
  auto site = StaticSite::Load(dir_);
  ASSERT_TRUE(site) << site.error().message();
  const StaticSite::File* js = (*site)->Find("/assets/index-abc123.js");
  ASSERT_NE(js, nullptr);
  EXPECT_EQ(js->body, "console.log(1)");
  EXPECT_EQ(js->content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ((*site)->Find("/assets/index-abc123.css")->content_type, "text/css; charset=utf-8");
  EXPECT_EQ((*site)->Find("/favicon.svg")->content_type, "image/svg+xml");
  EXPECT_EQ((*site)->Index().content_type, "text/html; charset=utf-8");
  // Percent-encoding is decoded like any path.
  EXPECT_EQ((*site)->Find("/assets/index%2Dabc123.js"), js);
  // The validator is the content's: the same bytes, the same ETag, across loads.
  auto again = StaticSite::Load(dir_);
  EXPECT_EQ((*again)->Find("/assets/index-abc123.js")->etag, js->etag);
  EXPECT_NE((*site)->Find("/favicon.svg")->etag, js->etag);
}

TEST_F(StaticSiteTest, NoPathReachesOutsideTheDirectoryOrItsHiddenFiles) {
  // A symbolic link to a file outside, and one to a directory outside: neither is served.
  fs::create_symlink(root_ / "secret.txt", dir_ / "linked.txt");
  fs::create_directory_symlink(root_, dir_ / "up");
  auto site = StaticSite::Load(dir_);
  ASSERT_TRUE(site) << site.error().message();
  for (const char* path : {"/../secret.txt",
                           "/assets/../../secret.txt",
                           "/%2e%2e/secret.txt",
                           "/%2E%2E%2Fsecret.txt",
                           "/assets/..%2f..%2fsecret.txt",
                           "/assets/%2e%2e/index.html",
                           "/./index.html",
                           "/assets/..\\..\\secret.txt",
                           "/index.html%00.js",
                           "//index.html",
                           "/linked.txt",
                           "/up/secret.txt",
                           "/up/dist/index.html",
                           "/.env",
                           "/%2eenv",
                           "",
                           "/",
                           "/assets/",
                           "index.html",
                           "/assets%2findex-abc123.js%",
                           "/nothing.js"}) {
    EXPECT_EQ((*site)->Find(path), nullptr) << path;
  }
  EXPECT_EQ((*site)->file_count(), 4u);
}

TEST_F(StaticSiteTest, ADirectoryThatIsNotABuiltConsoleIsRefusedNamingIt) {
  fs::remove(dir_ / "index.html");
  auto site = StaticSite::Load(dir_);
  ASSERT_FALSE(site);
  EXPECT_NE(site.error().message().find(dir_.string()), std::string::npos);
  EXPECT_NE(site.error().message().find("no index.html"), std::string::npos);
  auto missing = StaticSite::Load(root_ / "nothing");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("not a directory"), std::string::npos);
  Write(dir_ / "index.html", "x");
  auto too_big = StaticSite::Load(dir_, /*max_bytes=*/8);
  ASSERT_FALSE(too_big);
  EXPECT_NE(too_big.error().message().find("more than"), std::string::npos);
}

}  // namespace
}  // namespace fp::http
