#include <gtest/gtest.h>

#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

using namespace pipestudio;

TEST(Json, LocatesPointerLineAndColumn) {
  auto doc = parseJson("{\n  \"a\": {\n    \"b\": [1, 2,\n 3]\n  }\n}", "x.json");
  ASSERT_THAT(doc, HasValue());
  EXPECT_EQ(doc->where("/a/b/2"), "x.json:4:2: /a/b/2");
  EXPECT_EQ(doc->where("/a"), "x.json:2:8: /a");
  // A missing key resolves to its closest existing parent.
  EXPECT_EQ(doc->where("/a/zzz"), "x.json:2:8: /a/zzz");
}

TEST(Json, SyntaxErrorNamesFileLineColumn) {
  auto doc = parseJson("{\n  \"a\": tru\n}", "bad.json");
  EXPECT_THAT(doc, HasError("bad.json:2:"));
}

TEST(Json, EmptyAndTruncatedFilesAreRejected) {
  EXPECT_THAT(parseJson("   \n", "e.json"), HasError("empty"));
  auto t = parseJson("{\"a\": [1, 2", "t.json");
  EXPECT_THAT(t, HasError("truncated"));
}

TEST(Json, DeepNestingIsRejectedWithoutRecursion) {
  std::string deep(100000, '[');
  auto doc = parseJson(deep, "deep.json");
  EXPECT_THAT(doc, HasError("nesting deeper"));
}

TEST(Json, HugeStringsAreRejected) {
  std::string text = R"({"name": ")" + std::string(3 << 20, 'x') + R"("})";
  auto doc = parseJson(text, "big.json");
  EXPECT_THAT(doc, HasError("string longer"));
}

TEST(Json, BinaryGarbageIsRejected) {
  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage += static_cast<char>((i * 131 + 7) % 256);
  EXPECT_FALSE(parseJson(garbage, "garbage.bin"));
}

TEST(JsonReader, CollectsEveryProblemWithLocation) {
  auto doc = parseJson(R"({"n": "x", "k": -1, "s": 3, "extra": true})", "r.json");
  ASSERT_TRUE(doc);
  JsonReader r(*doc);
  const JsonNode root = r.root();
  r.rejectUnknown(root, {"n", "k", "s"});
  EXPECT_FALSE(r.integer(root, "k", Presence::Required, 0, 10));
  EXPECT_FALSE(r.string(root, "s", Presence::Required));
  EXPECT_FALSE(r.number(root, "missing", Presence::Required, 0, 1));
  ASSERT_EQ(r.errors().size(), 4u);
  EXPECT_NE(r.errors()[0].find("r.json:1:38: /extra: unknown field 'extra'"), std::string::npos) << r.errors()[0];
  EXPECT_NE(r.errors()[1].find("/k: is -1 (expected an integer in [0, 10])"), std::string::npos) << r.errors()[1];
  EXPECT_NE(r.errors()[2].find("/s: is an integer (expected a string)"), std::string::npos) << r.errors()[2];
  EXPECT_NE(r.errors()[3].find("missing required field 'missing'"), std::string::npos) << r.errors()[3];
}

TEST(JsonReader, FutureSchemaIsNamed) {
  auto doc = parseJson(R"({"schema": "pipestudio.model/7"})", "f.json");
  ASSERT_TRUE(doc);
  JsonReader r(*doc);
  EXPECT_FALSE(r.checkSchema(r.root(), "pipestudio.model/1"));
  ASSERT_EQ(r.errors().size(), 1u);
  EXPECT_NE(r.errors()[0].find("version this PipeStudio does not know"), std::string::npos);
}
