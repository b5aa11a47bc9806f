// Launcher lines (FORMAT.md): a rank's binary stream and log survive as short text lines,
// and anything else a launcher prints is told apart from them.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "pipestudio/trace/Stream.hpp"
#include "pipestudio/trace/TaskLines.hpp"

using namespace pipestudio::trace;

namespace {

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Base64, Rfc4648TestVectors) {
  // RFC 4648 §10.
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64Encode(plain), encoded);
    std::string back;
    ASSERT_TRUE(base64Decode(encoded, back)) << encoded;
    EXPECT_EQ(back, plain);
  }
}

TEST(Base64, RejectsWhatIsNotBase64) {
  std::string out;
  for (const char* bad : {"Zg=", "Zg", "Z===", "Zm9v!A==", "Zg==Zg==", "Zm=v", "Zm9v\n"}) {
    EXPECT_FALSE(base64Decode(bad, out)) << bad;
  }
}

TEST(TaskLines, BinaryStreamRoundTripsThroughShortLines) {
  std::mt19937 rng(7);
  std::string bytes(5000, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  bytes[100] = '\n';  // newlines and NULs in the payload must not matter
  std::string text;
  appendTaskLines(3, TaskLineKind::Stream, bytes, text);
  appendTaskLines(3, TaskLineKind::Log, "pipestudio-exec: rank 3: out of memory\n", text);
  appendTaskExit(3, 137, text);
  const auto lines = splitLines(text);
  ASSERT_EQ(lines.size(), 9U + 1U + 1U);  // ceil(5000 / 600) stream lines, one log, one exit
  std::string stream;
  std::string log;
  int status = -1;
  for (const auto& line : lines) {
    EXPECT_LE(line.size() + 1, kMaxTaskLineBytes) << "srun keeps only lines below 1024 bytes whole";
    TaskLine parsed;
    ASSERT_EQ(parseTaskLine(line, parsed), TaskLineParse::Ok) << line;
    EXPECT_EQ(parsed.rank, 3);
    if (parsed.kind == TaskLineKind::Stream) stream += parsed.bytes;
    if (parsed.kind == TaskLineKind::Log) log += parsed.bytes;
    if (parsed.kind == TaskLineKind::Exit) status = parsed.status;
  }
  EXPECT_EQ(stream, bytes);
  EXPECT_EQ(log, "pipestudio-exec: rank 3: out of memory\n");
  EXPECT_EQ(status, 137);
}

TEST(TaskLines, AWholeTraceStreamDecodesAfterTheRoundTrip) {
  Header h;
  h.rank = 1;
  h.world = 2;
  h.host = "node-1";
  NcclId id;
  id.bytes.assign(128, '\x7f');
  Summary s;
  s.iterations = 1;
  const std::string bytes = encodeStream({h, id, s});
  std::string text;
  appendTaskLines(1, TaskLineKind::Stream, bytes, text);
  std::string back;
  for (auto line : splitLines(text)) {
    line += '\r';  // a launcher that gives its tasks a pseudo-terminal writes CR LF
    TaskLine parsed;
    ASSERT_EQ(parseTaskLine(line, parsed), TaskLineParse::Ok);
    back += parsed.bytes;
  }
  const auto decoded = decodeAll(back);
  EXPECT_FALSE(decoded.error);
  EXPECT_EQ(decoded.frames.size(), 3U);
}

TEST(TaskLines, LauncherTextIsNotATaskLine) {
  TaskLine parsed;
  for (const char* text : {"srun: job 12 queued and waiting for resources", "", "@PS2 0 s AAAA", " @PS1 0 s AAAA",
                           "[1,0]<stdout>:hello"}) {
    EXPECT_EQ(parseTaskLine(text, parsed), TaskLineParse::NotATaskLine) << text;
  }
}

TEST(TaskLines, MalformedLinesSayWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"@PS1 x s AAAA", "rank"},         {"@PS1 -1 s AAAA", "rank"},          {"@PS1 0", "rank"},
      {"@PS1 0 q AAAA", "kind"},         {"@PS1 0 s AA!A", "base64"},         {"@PS1 0 x -3", "exit status"},
      {"@PS1 0 x 12abc", "exit status"}, {"@PS1 99999999999 s AAAA", "rank"}, {"@PS1 0 s", "kind"},
  };
  for (const auto& [text, what] : cases) {
    TaskLine parsed;
    std::string why;
    EXPECT_EQ(parseTaskLine(text, parsed, &why), TaskLineParse::Malformed) << text;
    EXPECT_NE(why.find(what), std::string::npos) << text << ": " << why;
  }
  TaskLine parsed;
  std::string why;
  const std::string tooLong = "@PS1 0 s " + std::string(2000, 'A');
  EXPECT_EQ(parseTaskLine(tooLong, parsed, &why), TaskLineParse::Malformed);
  EXPECT_NE(why.find("longer"), std::string::npos) << why;
}

}  // namespace
