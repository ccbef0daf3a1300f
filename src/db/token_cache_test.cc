// Token authentication answers from a cache of recent answers: a revocation through the
// datastore takes effect at once, one made behind its back (another process) within the TTL.

#include <gtest/gtest.h>

#include <thread>

#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::TempDatastore;

class TokenCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SiloCreate s;
    s.id = Uuid::Random();
    s.name = "s1";
    s.description = "";
    silo_ = *ds->SiloCreate(s);
    token_ = *ds->TokenCreate(Uuid::Random(), silo_.id, Role::kSiloAdmin, "t", "secret-1");
  }

  bool Authenticates(const std::string& secret) {
    auto t = ds->TokenAuthenticate(secret);
    EXPECT_TRUE(t) << t.error().message();
    return t && t->has_value();
  }

  // Revokes the token with a connection of its own, as another process would.
  void RevokeBehindTheDatastoresBack() {
    auto conn = *SqliteConnection::Open(ds.dir() + "/floatplane.db");
    ASSERT_TRUE(conn->Query("UPDATE token SET time_revoked = 1 WHERE id = ?",
                            {SqlValue(token_.id.ToString())}));
  }

  TempDatastore ds;
  Silo silo_;
  Token token_;
};

TEST_F(TokenCacheTest, RevocationThroughTheDatastoreTakesEffectAtOnce) {
  ASSERT_TRUE(Authenticates("secret-1"));  // cached now
  ASSERT_TRUE(ds->TokenRevoke(token_.id));
  EXPECT_FALSE(Authenticates("secret-1"));
}

TEST_F(TokenCacheTest, SiloDeleteRevokesCachedTokensAtOnce) {
  ASSERT_TRUE(Authenticates("secret-1"));
  ASSERT_TRUE(ds->SiloDelete(silo_.id));
  EXPECT_FALSE(Authenticates("secret-1"));
}

TEST_F(TokenCacheTest, ARevocationElsewhereIsSeenWithinTheTtl) {
  ASSERT_TRUE(Authenticates("secret-1"));
  RevokeBehindTheDatastoresBack();
  // The cached answer stands until it expires (this is the cache at work: the row says revoked).
  EXPECT_TRUE(Authenticates("secret-1"));
  std::this_thread::sleep_for(Datastore::kTokenCacheTtl + std::chrono::milliseconds(100));
  EXPECT_FALSE(Authenticates("secret-1"));
}

TEST_F(TokenCacheTest, UnknownSecretsAreNotCached) {
  EXPECT_FALSE(Authenticates("secret-2"));
  ASSERT_TRUE(ds->TokenCreate(Uuid::Random(), silo_.id, Role::kSiloViewer, "t2", "secret-2"));
  EXPECT_TRUE(Authenticates("secret-2"));
}

}  // namespace
}  // namespace fp::db
