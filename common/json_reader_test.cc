#include "common/json_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tide {
namespace {

using nlohmann::json;

json Parse(const std::string& text) {
  auto j = ParseJson(text);
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? *j : json();
}

TEST(ParseJson, ParsesValidDocuments) {
  EXPECT_EQ(Parse(R"({"a": 1, "b": [true, null, "x"]})"),
            json({{"a", 1}, {"b", {true, nullptr, "x"}}}));
  EXPECT_EQ(Parse("  42 "), json(42));
}

TEST(ParseJson, ErrorCarriesByteOffset) {
  auto j = ParseJson(R"({"a": 1,, "b": 2})");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), Code::kInvalidArgument);
  EXPECT_NE(j.status().message().find("malformed JSON at byte 9"), std::string::npos)
      << j.status().message();

  auto trailing = ParseJson("{} x");
  ASSERT_FALSE(trailing.ok());
  EXPECT_NE(trailing.status().message().find("at byte 4"), std::string::npos)
      << trailing.status().message();

  for (const char* bad : {"", "{", "{\"a\" 1}", "[1, 2", "nul", "{'a': 1}", "\"\xff\""}) {
    auto r = ParseJson(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().message().rfind("malformed JSON", 0), 0u) << r.status().message();
    }
  }
}

TEST(JsonReader, TypedGetters) {
  json j = Parse(R"({"s": "str", "i": 7, "f": 2.0, "n": 2.5, "b": true,
                     "l": ["x", "y"], "one": "z", "m": {"K": "v"}, "o": {"x": 1}, "nul": null})");
  JsonReader r(j, "");
  ASSERT_TRUE(r.status().ok());
  EXPECT_EQ(r.String("s"), "str");
  EXPECT_EQ(r.Int("i"), 7);
  EXPECT_EQ(r.Int("f"), 2);  // an integral float is an integer
  EXPECT_EQ(r.Number("n"), 2.5);
  EXPECT_EQ(r.Bool("b"), true);
  EXPECT_EQ(r.StringList("l"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r.StringList("one", /*allow_scalar=*/true), (std::vector<std::string>{"z"}));
  EXPECT_EQ(r.StringMap("m"), (std::map<std::string, std::string>{{"K", "v"}}));
  const json* o = r.Object("o");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ((*o)["x"], 1);
  EXPECT_EQ(r.String("nul"), std::nullopt);  // null reads as absent
  EXPECT_EQ(r.String("absent"), std::nullopt);
  EXPECT_EQ(r.Object("absent"), nullptr);
  EXPECT_TRUE(r.Has("s"));
  EXPECT_FALSE(r.Has("nul"));
  EXPECT_FALSE(r.Has("absent"));
  EXPECT_TRUE(r.Finish().ok()) << r.Finish().ToString();
}

// Reading `key` from {"key": value} under prefix "resources" fails naming the path.
template <typename Getter>
Status FailureOf(const json& value, Getter get) {
  json j = {{"key", value}};
  JsonReader r(j, "resources");
  get(r);
  return r.Finish();
}

TEST(JsonReader, TypeErrorsNameTheFieldPath) {
  struct Case {
    json value;
    std::function<void(JsonReader&)> get;
    std::string message;
  };
  const Case cases[] = {
      {"two", [](JsonReader& r) { (void)r.Int("key"); }, "must be an integer"},
      {2.5, [](JsonReader& r) { (void)r.Int("key"); }, "must be an integer"},
      {1e300, [](JsonReader& r) { (void)r.Int("key"); }, "must be an integer"},
      {-1e19, [](JsonReader& r) { (void)r.Int("key"); }, "must be an integer"},
      {true, [](JsonReader& r) { (void)r.Int("key"); }, "must be an integer"},
      {1, [](JsonReader& r) { (void)r.String("key"); }, "must be a string"},
      {"1", [](JsonReader& r) { (void)r.Number("key"); }, "must be a number"},
      {"true", [](JsonReader& r) { (void)r.Bool("key"); }, "must be true or false"},
      {"x", [](JsonReader& r) { (void)r.StringList("key"); }, "must be a list of strings"},
      {1, [](JsonReader& r) { (void)r.StringList("key", true); },
       "must be a string or a list of strings"},
      {json::array(), [](JsonReader& r) { (void)r.StringMap("key"); },
       "must be an object of strings"},
      {"x", [](JsonReader& r) { (void)r.Object("key"); }, "must be an object"},
  };
  for (const auto& c : cases) {
    Status s = FailureOf(c.value, c.get);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << c.value.dump();
    EXPECT_EQ(s.field(), "resources.key") << c.value.dump();
    EXPECT_EQ(s.message(), c.message) << c.value.dump();
  }
}

TEST(JsonReader, IntegersOutsideInt64AreRefused) {
  json j = Parse(R"({"big": 18446744073709551615, "max": 9223372036854775807})");
  JsonReader r(j, "");
  EXPECT_EQ(r.Int("max"), INT64_MAX);
  EXPECT_EQ(r.Int("big"), std::nullopt);
  Status s = r.Finish();
  EXPECT_EQ(s.field(), "big");
}

TEST(JsonReader, ElementErrorsNameTheIndexOrKey) {
  json j = Parse(R"({"l": ["a", 2], "m": {"A": "x", "B": 3}})");
  {
    JsonReader r(j, "spec");
    EXPECT_EQ(r.StringList("l"), std::nullopt);
    EXPECT_EQ(r.Finish().field(), "spec.l[1]");
  }
  {
    JsonReader r(j, "");
    (void)r.StringList("l", true);
    (void)r.StringMap("m");
    EXPECT_EQ(r.Finish().field(), "l[1]");  // the first error wins
  }
  {
    JsonReader r(j, "");
    (void)r.Raw("l");
    EXPECT_EQ(r.StringMap("m"), std::nullopt);
    EXPECT_EQ(r.Finish().field(), "m.B");
  }
}

TEST(JsonReader, RequiredFields) {
  json j = Parse(R"({"name": null})");
  JsonReader r(j, "");
  EXPECT_EQ(r.String("name", /*required=*/true), std::nullopt);
  Status s = r.Finish();
  EXPECT_EQ(s.field(), "name");
  EXPECT_EQ(s.message(), "is required");

  JsonReader r2(j, "resources");
  EXPECT_EQ(r2.Int("gpu_count", true), std::nullopt);
  EXPECT_EQ(r2.Finish().field(), "resources.gpu_count");
}

TEST(JsonReader, UnknownFieldsAreRejectedByName) {
  json j = Parse(R"({"gpu_count": 1, "gpu_cont": 2})");
  JsonReader r(j, "resources");
  EXPECT_EQ(r.Int("gpu_count"), 1);
  Status s = r.Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.field(), "resources.gpu_cont");
  EXPECT_EQ(s.message(), "unknown field");

  // A null field nobody asked for is still unknown; a field read as absent is not.
  json k = Parse(R"({"extra": null})");
  JsonReader r2(k, "");
  EXPECT_EQ(r2.Finish().field(), "extra");
  JsonReader r3(k, "");
  (void)r3.String("extra");
  EXPECT_TRUE(r3.Finish().ok());
}

TEST(JsonReader, NonObjectIsAnError) {
  const json array = json::array();
  JsonReader root(array, "");
  EXPECT_FALSE(root.status().ok());
  EXPECT_EQ(root.status().field(), "body");
  EXPECT_EQ(root.String("x"), std::nullopt);
  EXPECT_FALSE(root.Finish().ok());

  const json text = "str";
  JsonReader nested(text, "resources");
  EXPECT_EQ(nested.status().field(), "resources");
  EXPECT_EQ(nested.status().message(), "must be a JSON object");
}

TEST(JsonReader, FailKeepsTheFirstError) {
  json j = Parse(R"({"a": 1, "b": 2})");
  JsonReader r(j, "x");
  (void)r.Int("a");
  (void)r.Int("b");
  r.Fail("a", "first");
  r.Fail("b", "second");
  Status s = r.Finish();
  EXPECT_EQ(s.field(), "x.a");
  EXPECT_EQ(s.message(), "first");
  EXPECT_EQ(s.ToString(), "invalid_argument: x.a: first");
  EXPECT_EQ(r.Path("k"), "x.k");
}

}  // namespace
}  // namespace tide
