// A response written straight into its bytes is the one Beast's message and serializer write.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "http/event_server.h"

namespace fp::http::detail {
namespace {

using Fields = std::vector<WireField>;

struct Shape {
  unsigned version;
  int status;
  Fields fields;
  std::string body;
  bool keep_alive;
  bool head;
};

std::string Describe(const Shape& s) {
  std::string d = "HTTP/" + std::to_string(s.version) + " " + std::to_string(s.status) +
                  (s.keep_alive ? " keep-alive" : " close") + (s.head ? " HEAD" : "") + " body " +
                  std::to_string(s.body.size()) + " fields";
  for (const WireField& f : s.fields) {
    d += " [" + std::string(f.name) + ": " + std::string(f.value) + "]";
  }
  return d;
}

TEST(ResponseWireTest, WritesWhatBeastWritesForEveryShapeAServerAnswers) {
  const std::vector<Fields> field_sets = {
      {},
      {{"Content-Type", "application/json"}, {"x-request-id", "3b0e-rid"}},
      // A handler's own type replaces the default one, wherever it was set.
      {{"Content-Type", "application/json"},
       {"content-type", "text/html; charset=utf-8"},
       {"x-request-id", "r"}},
      // The last of a name stands, in the place its setting put it.
      {{"Set-Cookie", "a=1"},
       {"Location", "/v1/things/1"},
       {"set-cookie", "b=2"},
       {"Retry-After", "1"}},
      // Values lose the spaces and tabs around them, not those inside; empty ones stay.
      {{"X-Padded", " \t two words \t"}, {"X-Empty", ""}, {"X-Blank", " \t "}},
      {{"Cache-Control", "no-store"}, {"ETag", "\"v1\""}, {"x-request-id", "r"}},
  };
  const std::vector<std::string> bodies = {"", "{}", std::string(70000, 'x')};
  int compared = 0;
  for (unsigned version : {10u, 11u}) {
    for (int status : {200, 201, 202, 204, 301, 304, 400, 404, 409, 429, 500, 503, 299, 599}) {
      for (const Fields& fields : field_sets) {
        for (const std::string& body : bodies) {
          for (bool keep_alive : {true, false}) {
            for (bool head : {false, true}) {
              Shape s{version, status, fields, body, keep_alive, head};
              auto direct = DirectResponseWire(version, status, fields, body, keep_alive, head);
              ASSERT_TRUE(direct.has_value()) << Describe(s);
              EXPECT_EQ(*direct, BeastResponseWire(version, status, fields, body, keep_alive, head))
                  << Describe(s);
              ++compared;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 2 * 14 * 6 * 3 * 2 * 2);
}

TEST(ResponseWireTest, LeavesToBeastWhatItWouldMergeAndAnswersTheSame) {
  const std::vector<Shape> shapes = {
      {11, 200, {{"Connection", "upgrade"}}, "{}", true, false},
      {11, 200, {{"connection", "keep-alive"}}, "{}", false, false},
      {10, 200, {{"Connection", "close"}}, "", true, false},
      {11, 200, {{"Content-Length", "99"}}, "{}", true, false},
      {11, 200, {{"transfer-encoding", "gzip"}}, "{}", true, false},
      {20, 200, {}, "{}", true, false},
      {11, 101, {}, "", true, false},
  };
  for (const Shape& s : shapes) {
    EXPECT_FALSE(
        DirectResponseWire(s.version, s.status, s.fields, s.body, s.keep_alive, s.head).has_value())
        << Describe(s);
    EXPECT_EQ(ResponseWire(s.version, s.status, s.fields, s.body, s.keep_alive, s.head),
              BeastResponseWire(s.version, s.status, s.fields, s.body, s.keep_alive, s.head))
        << Describe(s);
  }
}

TEST(ResponseWireTest, ABodilessStatusSendsNoBodyAndNoLength) {
  const Fields fields{{"x-request-id", "r"}};
  for (int status : {204, 304}) {
    // A body given anyway is not sent: it would be read as the start of the next answer.
    std::string wire = ResponseWire(11, status, fields, "{\"stray\":1}", true, false);
    EXPECT_EQ(wire.find("Content-Length"), std::string::npos) << wire;
    EXPECT_TRUE(wire.ends_with("x-request-id: r\r\n\r\n")) << wire;
  }
  EXPECT_EQ(ResponseWire(11, 204, fields, "", false, false),
            "HTTP/1.1 204 No Content\r\nx-request-id: r\r\nConnection: close\r\n\r\n");
}

}  // namespace
}  // namespace fp::http::detail
