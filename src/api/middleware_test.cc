#include "api/middleware.h"

#include <gtest/gtest.h>

#include <string>

namespace fp::api {
namespace {

HttpRequest Request(std::string path, std::vector<std::pair<std::string, std::string>> headers) {
  HttpRequest req;
  req.method = "POST";
  req.path = std::move(path);
  req.headers = std::move(headers);
  req.request_id = "req-1234";
  return req;
}

Json Body(const HttpResponse& r) { return Json::parse(r.body); }

TEST(BearerSecret, MissingHeaderIs401WithTheOxideBodyEchoingTheRequestId) {
  HttpRequest req = Request("/v1/projects", {});
  auto secret = BearerSecret(req);
  ASSERT_FALSE(secret);
  HttpResponse r = ErrorResponse(req, secret.error());
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(Body(r), (Json{{"request_id", "req-1234"},
                           {"error_code", "Unauthenticated"},
                           {"message",
                            "credentials missing: send \"Authorization: Bearer "
                            "<token>\""}}));
}

TEST(BearerSecret, OtherSchemesAndEmptySecretsAre401Invalid) {
  for (const char* value : {"Basic dXNlcjpwYXNz", "Bearer ", "Bearer", "Bearertoken", "token"}) {
    auto secret = BearerSecret(Request("/v1/projects", {{"authorization", value}}));
    ASSERT_FALSE(secret) << value;
    EXPECT_EQ(secret.error().HttpStatus(), 401) << value;
    EXPECT_EQ(secret.error().message(),
              "credentials invalid: expected \"Authorization: Bearer <token>\"")
        << value;
  }
}

TEST(BearerSecret, SchemeIsCaseInsensitiveAndTheSecretIsKeptAsSent) {
  for (const char* value : {"Bearer fpt_ab", "bearer fpt_ab", "BEARER fpt_ab"}) {
    auto secret = BearerSecret(Request("/v1/projects", {{"authorization", value}}));
    ASSERT_TRUE(secret) << value;
    EXPECT_EQ(*secret, "fpt_ab");
  }
}

TEST(ErrorResponse, InternalDetailIsHiddenAndUnavailableCarriesRetryAfter) {
  HttpRequest req = Request("/v1/projects", {});
  HttpResponse internal = ErrorResponse(req, Error::Internal("sqlite said no"));
  EXPECT_EQ(internal.status, 500);
  EXPECT_EQ(Body(internal)["message"], "Internal Server Error");
  EXPECT_EQ(Body(internal)["request_id"], "req-1234");
  HttpResponse busy = ErrorResponse(req, Error::Unavailable("later", 3));
  EXPECT_EQ(busy.status, 503);
  ASSERT_EQ(busy.headers.size(), 1u);
  EXPECT_EQ(busy.headers[0], (std::pair<std::string, std::string>{"retry-after", "3"}));
}

TEST(CheckIdempotencyKey, KeysUpTo255CharactersAreAccepted) {
  EXPECT_TRUE(CheckIdempotencyKey(Request("/v1/projects", {}), std::string(255, 'k')));
  auto s = CheckIdempotencyKey(Request("/v1/projects", {}), std::string(256, 'k'));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().HttpStatus(), 400);
  EXPECT_EQ(s.error().message(), "header Idempotency-Key: may contain at most 255 characters");
}

TEST(CheckIdempotencyKey, RefusedWhenCreatingATokenWhoseSecretIsNeverStored) {
  auto s = CheckIdempotencyKey(Request("/v1/system/tokens", {}), "k1");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().HttpStatus(), 400);
  EXPECT_NE(s.error().message().find("not accepted when creating a token"), std::string::npos);
  // Revoking one takes a key.
  EXPECT_TRUE(CheckIdempotencyKey(Request("/v1/system/tokens/x", {}), "k1"));
}

TEST(KeysInFlight, OneClaimPerKeyUntilReleased) {
  KeysInFlight keys;
  EXPECT_TRUE(keys.Claim("t\nk"));
  EXPECT_FALSE(keys.Claim("t\nk"));
  EXPECT_TRUE(keys.Claim("t\nother"));
  keys.Release("t\nk");
  EXPECT_TRUE(keys.Claim("t\nk"));
}

}  // namespace
}  // namespace fp::api
