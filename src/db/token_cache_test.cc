// Token authentication answers from a cache of recent answers: a revocation through the
// datastore takes effect at once, one made behind its back (another process) within the TTL.

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>

#include "db/sqlite/connection.h"
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
    auto conn = *sqlite::SqliteConnection::Open(ds.dir() + "/floatplane.db");
    ASSERT_TRUE(conn->Query("UPDATE token SET time_revoked = 1 WHERE id = ?",
                            {SqlValue(token_.id.ToString())}));
  }

  // Runs `action` the first time the datastore passes sync point `point`, on that thread.
  void OnceAt(std::string point, std::function<void()> action) {
    fired_ = false;
    ds->TEST_SetSyncPoint(
        [this, point = std::move(point), action = std::move(action)](std::string_view name) {
          if (name != point || fired_) return;
          fired_ = true;
          action();
        });
  }

  TempDatastore ds;
  Silo silo_;
  Token token_;
  bool fired_ = false;  // OnceAt's action ran
};

TEST_F(TokenCacheTest, RevocationThroughTheDatastoreTakesEffectAtOnce) {
  ASSERT_TRUE(Authenticates("secret-1"));  // cached now
  ASSERT_TRUE(ds->TokenRevoke(token_.id));
  EXPECT_FALSE(Authenticates("secret-1"));
}

TEST_F(TokenCacheTest, ARevocationRacingAnAuthenticationInFlightIsNeverUndoneByTheCache) {
  // Forced interleaving: the authentication has read the token as live and is about to cache
  // that answer when the revocation commits and returns. The answer in flight may still be
  // "live" (the request began before the revoke returned); every later one must not be.
  OnceAt("token_authenticate:read", [&] { ASSERT_TRUE(ds->TokenRevoke(token_.id)); });
  EXPECT_TRUE(Authenticates("secret-1"));
  ds->TEST_SetSyncPoint(nullptr);
  ASSERT_TRUE(fired_) << "the authentication never reached its sync point";
  EXPECT_FALSE(Authenticates("secret-1"));
  EXPECT_FALSE(Authenticates("secret-1"));
}

TEST_F(TokenCacheTest, AnAuthenticationDuringTheRevokesTransactionIsNotCachedPastIt) {
  // Forced interleaving: an authentication runs while the revocation's transaction is open
  // (it still reads the token as live, and caches that); once the revoke returns, that cached
  // answer must be gone.
  OnceAt("token_revoke:updated",
         [&] { EXPECT_TRUE(Authenticates("secret-1")) << "the revocation has not committed yet"; });
  ASSERT_TRUE(ds->TokenRevoke(token_.id));
  ds->TEST_SetSyncPoint(nullptr);
  ASSERT_TRUE(fired_) << "the revocation never reached its sync point";
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
