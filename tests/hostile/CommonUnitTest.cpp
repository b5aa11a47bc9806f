// The core/common mechanisms issue 14's fixes rest on: escaping echoed text, command-line
// numbers, UTF-8 checks, duplicate JSON keys; and issue 27's output streams that keep the
// reason of a failed write.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <string>

#include "pipestudio/common/FdStream.hpp"
#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/NumberArg.hpp"
#include "pipestudio/common/Text.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasErrorThat;
using ::testing::StartsWith;

using namespace pipestudio;

TEST(Text, EscapesControlCharactersAndKeepsUtf8) {
  EXPECT_EQ(escapeControl("a\x1b[2Jb\x07\n\tc"), "a\\e[2Jb\\x07\\n\\tc");
  EXPECT_EQ(escapeControl("größe µs"), "größe µs");
  EXPECT_EQ(escapeControl("\xC2\x9B"
                          "31m"),
            "\\u009b31m");  // C1 CSI
  EXPECT_EQ(escapeControl("\x7f"), "\\x7f");
}

TEST(Text, ExcerptCutsLongTextAndSaysHowLong) {
  const std::string cell(std::size_t{10} * 1024 * 1024, 'x');
  const std::string e = excerpt(cell);
  EXPECT_LT(e.size(), 200U);
  EXPECT_NE(e.find("(10485760 bytes)"), std::string::npos) << e;
  EXPECT_EQ(excerpt("short"), "short");
  // A cut never splits a UTF-8 sequence.
  const std::string e2 = excerpt(std::string(79, 'a') + "ü", 80);
  EXPECT_EQ(e2.substr(0, 79), std::string(79, 'a'));
  EXPECT_NE(e2.find("…"), std::string::npos);
}

TEST(NumberArg, RefusesNanInfinityAndOutOfRangeNamingTheFlag) {
  for (const char* bad : {"nan", "NaN", "inf", "-inf", "1e999", "", "3x", "0x"}) {
    auto v = parseNumberArg("--max-op-ms", bad, 0, 1e6);
    ASSERT_FALSE(v) << bad;
    EXPECT_THAT(v, HasErrorThat(StartsWith("--max-op-ms: ")));
  }
  EXPECT_FALSE(parseNumberArg("--timeout-s", "-1", 0.1, 1e5));
  EXPECT_DOUBLE_EQ(*parseNumberArg("--timeout-s", "2.5", 0.1, 1e5), 2.5);
  for (const char* bad : {"0", "-5", "1.5", "1e3", "99999999999999999999", " 3", "nan"}) {
    auto v = parseIntegerArg("--chunks", bad, 1, 1024);
    ASSERT_FALSE(v) << bad;
    EXPECT_THAT(v, HasError("--chunks"));
    EXPECT_THAT(v, HasError("[1, 1024]"));
  }
  EXPECT_EQ(*parseIntegerArg("--chunks", "+4", 1, 1024), 4);
}

TEST(Utf8, SkipsABomAndNamesUtf16) {
  std::string bom = "\xEF\xBB\xBF{}";
  EXPECT_TRUE(requireUtf8(bom, "f"));
  EXPECT_EQ(bom, "{}");
  std::string le("\xFF\xFE{\0}\0", 6);
  auto st = requireUtf8(le, "f");
  EXPECT_THAT(st, HasError("UTF-16 (little-endian)"));
  std::string noBom("{\0\"\0", 4);
  EXPECT_THAT(requireUtf8(noBom, "f"), HasError("UTF-16"));
}

TEST(Json, DuplicateKeysAreRefusedWithBothPlaces) {
  auto doc = parseJson("{\n  \"a\": 1,\n  \"b\": {\"a\": 2},\n  \"a\": 3\n}", "dup.json");
  EXPECT_THAT(doc, HasErrorThat(StartsWith("dup.json:4:3: duplicate key 'a' (first at line 2, column 3")));
  // Escapes decode before comparing; equal keys in different objects are fine.
  EXPECT_FALSE(parseJson(R"({"name": 1, "n\u0061me": 2})", "m"));
  EXPECT_TRUE(parseJson(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})", "m"));
  // Many keys (the hashed path) still find the duplicate.
  std::string many = "{";
  for (int i = 0; i < 100; ++i) many += "\"k" + std::to_string(i) + "\": 0, ";
  EXPECT_TRUE(parseJson(many + "\"z\": 0}", "m"));
  EXPECT_FALSE(parseJson(many + "\"k42\": 1}", "m"));
}

TEST(FdStream, KeepsTheReasonOfTheFirstFailedWrite) {
  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(full, 0);
  {
    FdOStream out(full);
    out << std::string(200'000, 'x');  // past the buffer: written, and refused, at once
    EXPECT_FALSE(out);
    EXPECT_EQ(out.buffer().error(), ENOSPC);
    EXPECT_EQ(out.buffer().errorText(), "No space left on device");
    EXPECT_FALSE(out.buffer().flush());
  }
  ::close(full);
  // A small output fails only when flushed; a closed descriptor is named as such.
  FdStreamBuf closed(1000);
  std::ostream out(&closed);
  out << "small";
  EXPECT_EQ(closed.error(), 0);
  EXPECT_FALSE(closed.flush());
  EXPECT_NE(closed.errorText().find("the descriptor is closed"), std::string::npos) << closed.errorText();
}

// Issue 44: a read that fails (a process's /proc file as it exits reads ESRCH; /proc/self/mem
// at offset 0, EIO) is an error with its reason. Through an istreambuf_iterator the same failure
// is an exception from std::filebuf::underflow, which once ended an import ("internal error:
// basic_filebuf::underflow error reading the file: No such process"); readers use readRegularFile.
TEST(Files, AFailedReadIsAnErrorNotAnException) {
  Expected<std::string> text = Error{"not read"};
  EXPECT_NO_THROW(text = readRegularFile("/proc/self/mem", 1 << 20));
  EXPECT_THAT(text, HasError("/proc/self/mem: read error: "));
}
