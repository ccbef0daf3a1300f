// Token authentication answers from a cache of recent answers: a revocation made through this
// process takes effect at once, one made behind its back (another process) within the TTL.

#include "app/token_cache.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "app/silos.h"
#include "app/tokens.h"
#include "common/testing/manual_clock.h"
#include "db/postgres/connection.h"
#include "db/silos.h"
#include "db/sqlite/connection.h"
#include "db/testing/temp_datastore.h"
#include "db/tokens.h"

namespace fp::app {
namespace {

using db::testing::TempDatastore;

class TokenCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model::SiloCreate s;
    s.id = Uuid::Random();
    s.name = "s1";
    s.description = "";
    silo_ = *db::SiloCreate(*ds, s);
    token_ =
        *db::TokenCreate(*ds, Uuid::Random(), silo_.id, model::Role::kSiloAdmin, "t", "secret-1");
  }

  bool Authenticates(const std::string& secret) {
    auto t = cache.Authenticate(secret);
    EXPECT_TRUE(t) << t.error().message();
    return t && t->has_value();
  }

  // A revocation through this process, as the control plane makes it: the cache is emptied
  // once the revocation has committed.
  Status Revoke() {
    Status revoked = db::TokenRevoke(*ds, token_.id);
    cache.Invalidate();
    return revoked;
  }

  // Revokes the token with a connection of its own, as another process would.
  void RevokeBehindTheCachesBack() {
    std::unique_ptr<db::Connection> conn;
    if (ds.postgres()) {
      conn = std::move(*db::postgres::PgConnection::Open(ds.postgres_url()));
    } else {
      conn = std::move(*db::sqlite::SqliteConnection::Open(ds.dir() + "/floatplane.db"));
    }
    ASSERT_TRUE(conn->Query("UPDATE token SET time_revoked = 1 WHERE id = ?",
                            {db::SqlValue(token_.id.ToString())}));
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
  fp::testing::ManualClock clock;
  TokenCache cache{*ds, clock};
  model::Silo silo_;
  model::Token token_;
  bool fired_ = false;  // OnceAt's action ran
};

TEST_F(TokenCacheTest, RevocationThroughThisProcessTakesEffectAtOnce) {
  ASSERT_TRUE(Authenticates("secret-1"));  // cached now
  ASSERT_TRUE(Revoke());
  EXPECT_FALSE(Authenticates("secret-1"));
}

TEST_F(TokenCacheTest, ARevocationRacingAnAuthenticationInFlightIsNeverUndoneByTheCache) {
  // Forced interleaving: the authentication has read the token as live and is about to cache
  // that answer when the revocation commits and returns. The answer in flight may still be
  // "live" (the request began before the revoke returned); every later one must not be.
  OnceAt("token_authenticate:read", [&] { ASSERT_TRUE(Revoke()); });
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
  ASSERT_TRUE(Revoke());
  ds->TEST_SetSyncPoint(nullptr);
  ASSERT_TRUE(fired_) << "the revocation never reached its sync point";
  EXPECT_FALSE(Authenticates("secret-1"));
}

TEST_F(TokenCacheTest, SiloDeleteRevokesCachedTokensAtOnce) {
  ASSERT_TRUE(Authenticates("secret-1"));
  ASSERT_TRUE(db::SiloDelete(*ds, silo_.id));
  cache.Invalidate();
  EXPECT_FALSE(Authenticates("secret-1"));
}

TEST_F(TokenCacheTest, ARevocationElsewhereIsSeenWithinTheTtl) {
  ASSERT_TRUE(Authenticates("secret-1"));
  RevokeBehindTheCachesBack();
  // The cached answer stands until it expires (this is the cache at work: the row says revoked).
  EXPECT_TRUE(Authenticates("secret-1"));
  clock.Advance(std::chrono::microseconds(TokenCache::kTtl).count() - 1);
  EXPECT_TRUE(Authenticates("secret-1"));
  clock.Advance(1);
  EXPECT_FALSE(Authenticates("secret-1"));
}

TEST_F(TokenCacheTest, UnknownSecretsAreNotCached) {
  EXPECT_FALSE(Authenticates("secret-2"));
  ASSERT_TRUE(
      db::TokenCreate(*ds, Uuid::Random(), silo_.id, model::Role::kSiloViewer, "t2", "secret-2"));
  EXPECT_TRUE(Authenticates("secret-2"));
}

// The services empty the cache after the revocations they make.
TEST_F(TokenCacheTest, TheTokenServicesRevocationsTakeEffectAtOnce) {
  Tokens tokens(*ds, cache);
  const Actor admin{Uuid::Random(), silo_.id, model::Role::kFleetAdmin};
  ASSERT_TRUE(tokens.Authenticate("secret-1"));  // cached now
  ASSERT_TRUE(tokens.Revoke(Unrecorded{admin}, token_.id));
  EXPECT_FALSE(tokens.Authenticate("secret-1"));
}

TEST_F(TokenCacheTest, TheSiloServicesDeleteTakesEffectAtOnce) {
  Tokens tokens(*ds, cache);
  Silos silos(*ds, cache);
  // A fleet admin of another silo (no token deletes its own silo).
  const Actor admin{Uuid::Random(), Uuid::Random(), model::Role::kFleetAdmin};
  ASSERT_TRUE(tokens.Authenticate("secret-1"));  // cached now
  ASSERT_TRUE(silos.Delete(Unrecorded{admin}, NameOrId(silo_.id)));
  EXPECT_FALSE(tokens.Authenticate("secret-1"));
}

}  // namespace
}  // namespace fp::app
