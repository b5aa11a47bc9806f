// UTF-8 checks (RFC 3629) and repair: what the history applies to all text it stores and reads,
// and the wide encodings every file reader names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Text.hpp"

using namespace pipestudio;

namespace {
const std::string kReplacement = "\xEF\xBF\xBD";
}

TEST(Utf8, ValidTextIsValidAndKeptAsIs) {
  const std::vector<std::string> texts{
      "", "plain", "größe µs", "日本語", "\xF0\x9F\x98\x80", std::string("nul\0byte", 8)};
  for (const std::string& text : texts) {
    EXPECT_TRUE(isValidUtf8(text)) << text;
    EXPECT_EQ(repairUtf8(text), text);
  }
}

TEST(Utf8, EachBrokenSequenceBecomesOneReplacementCharacter) {
  EXPECT_FALSE(isValidUtf8("caf\xe9"));
  EXPECT_EQ(repairUtf8("caf\xe9"), "caf" + kReplacement);          // Latin-1
  EXPECT_EQ(repairUtf8("\xc3"), kReplacement);                     // cut at the end
  EXPECT_EQ(repairUtf8("a\xe2\x82z"), "a" + kReplacement + "z");   // cut inside
  EXPECT_EQ(repairUtf8("\xc0\xaf"), kReplacement);                 // overlong '/'
  EXPECT_EQ(repairUtf8("\xed\xa0\x80"), kReplacement);             // a surrogate
  EXPECT_EQ(repairUtf8("\xf4\x90\x80\x80"), kReplacement);         // past U+10FFFF
  EXPECT_EQ(repairUtf8("\xff\xfe"), kReplacement + kReplacement);  // two stray bytes
  EXPECT_TRUE(isValidUtf8(repairUtf8("\x80\x80\xbf mixed \xe9t\xe9")));
}

TEST(Utf8, WideEncodingsAreNamed) {
  EXPECT_EQ(wideTextEncoding("\xFF\xFE{\0"), "UTF-16 (little-endian) text");
  EXPECT_EQ(wideTextEncoding(std::string("\0\0\xFE\xFF", 4)), "UTF-32 (big-endian) text");
  EXPECT_EQ(wideTextEncoding(std::string("{\0\"\0", 4)), "UTF-16 (little-endian) text without a byte order mark");
  EXPECT_EQ(wideTextEncoding("{\"a\""), std::nullopt);
  EXPECT_EQ(wideTextEncoding("\xEF\xBB\xBF{"), std::nullopt);
}
