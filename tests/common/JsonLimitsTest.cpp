// Hostile-input limits of the JSON layer, exercised through files on disk as users hit them.
// Big inputs are generated here (nothing MB-sized is committed).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasErrorThat;
using ::testing::StartsWith;

namespace pipestudio {
namespace {

class TempFile {
 public:
  explicit TempFile(const std::string& name, const std::string& text)
      : m_path(
            (std::filesystem::temp_directory_path() / ("pipestudio-limits-" + std::to_string(::getpid()) + "-" + name))
                .string()) {
    std::ofstream(m_path, std::ios::binary) << text;
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(m_path, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return m_path; }

 private:
  std::string m_path;
};

TEST(JsonLimits, HundredThousandDeepObjectsAreRejectedAtTheirDepth) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "{\"a\":";
  text += "1";
  for (int i = 0; i < 100000; ++i) text += "}";
  TempFile file("deep.json", text);
  auto doc = loadJsonFile(file.path());
  ASSERT_FALSE(doc);
  // The 65th '{' starts at byte 64 * 5: line 1, column 321.
  EXPECT_EQ(doc.message(), file.path() + ":1:321: nesting deeper than 64 levels (expected at most 64)");
}

TEST(JsonLimits, DeepArraysInsideStringsDoNotCount) {
  const std::string text = R"({"name": ")" + std::string(1000, '[') + R"("})";
  EXPECT_TRUE(parseJson(text, "s.json"));
}

TEST(JsonLimits, MultiMegabyteStringIsRejectedWhereItStarts) {
  const std::string text =
      "{\n  \"schema\": \"pipestudio.model/1\",\n  \"name\": \"" + std::string(5 << 20, 'x') + "\"\n}\n";
  TempFile file("bigstring.json", text);
  auto doc = loadJsonFile(file.path());
  EXPECT_THAT(doc, HasErrorThat(StartsWith(file.path() + ":3:11: string longer than 1048576 bytes")));
  EXPECT_THAT(doc, HasError("(expected"));
}

TEST(JsonLimits, EscapedQuotesDoNotEndAString) {
  const std::string text = R"({"a": ")" + std::string(2 << 20, '\\') + R"("})";  // even count: all escapes pair up
  auto doc = parseJson(text, "esc.json");
  EXPECT_THAT(doc, HasError("string longer"));
}

TEST(JsonLimits, OversizedFileIsRefusedBeforeReading) {
  TempFile file("big.json", "[" + std::string(4096, ' ') + "]");
  JsonLimits limits;
  limits.maxFileBytes = 1024;
  auto doc = loadJsonFile(file.path(), limits);
  ASSERT_FALSE(doc);
  EXPECT_EQ(doc.message(), file.path() + ":1:1: file is 4098 bytes (expected at most 1024)");
}

TEST(JsonLimits, TruncationAtEveryByteIsAnErrorNeverACrash) {
  const std::string full =
      R"({"schema": "pipestudio.model/1", "name": "m", "layers": [{"name": "a", "forward_ms": 1.5}]})";
  for (std::size_t n = 0; n < full.size(); ++n) {
    auto doc = parseJson(full.substr(0, n), "t.json");
    EXPECT_FALSE(doc) << n;
    if (!doc) {
      EXPECT_THAT(doc, HasErrorThat(StartsWith("t.json:")));
    }
  }
  EXPECT_TRUE(parseJson(full, "t.json"));
}

TEST(JsonLimits, LocateSurvivesPointersThatDoNotExist) {
  auto doc = parseJson(R"({"a": [1, {"b": 2}]})", "p.json");
  ASSERT_TRUE(doc);
  EXPECT_EQ(doc->where("/a/1/b"), "p.json:1:17: /a/1/b");
  EXPECT_EQ(doc->where("/a/99"), "p.json:1:7: /a/99");
  EXPECT_EQ(doc->where("/a/99999999999999999999999"), "p.json:1:7: /a/99999999999999999999999");
  EXPECT_EQ(doc->where("/a/x"), "p.json:1:7: /a/x");
  EXPECT_EQ(doc->where("/zz~1~0"), "p.json:1:1: /zz~1~0");
}

TEST(JsonLimits, NonFiniteNumberIsLocated) {
  auto doc = parseJson("{\n  \"forward_ms\": 1e999\n}", "inf.json");
  ASSERT_FALSE(doc);
  EXPECT_EQ(doc.message(), "inf.json:2:17: number 1e999 is out of range (expected a finite number)");
}

TEST(JsonReader, NonFiniteAndHugeIntegersAreNamed) {
  auto doc = parseJson(R"({"a": 1e300, "b": 2.5, "c": 18446744073709551615})", "i.json");
  ASSERT_TRUE(doc);
  JsonReader r(*doc);
  EXPECT_FALSE(r.integer(r.root(), "a", Presence::Required, 0, 100));
  EXPECT_FALSE(r.integer(r.root(), "b", Presence::Required, 0, 100));
  EXPECT_FALSE(r.integer(r.root(), "c", Presence::Required, 0, 100));
  ASSERT_EQ(r.errors().size(), 3U);
  EXPECT_NE(r.errors()[0].find("/a: is 1e+300 (expected an integer in [0, 100])"), std::string::npos) << r.errors()[0];
  EXPECT_NE(r.errors()[1].find("/b: is a number 2.5 (expected an integer)"), std::string::npos) << r.errors()[1];
  EXPECT_NE(r.errors()[2].find("/c: is 18446744073709551615 (expected"), std::string::npos) << r.errors()[2];
}

}  // namespace
}  // namespace pipestudio
