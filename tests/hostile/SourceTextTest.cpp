// Issue 44: text written into source code (SourceText.hpp) reads back as exactly itself, by the
// languages' own parsers: python3 (ast and import), python3's tomllib, and bash. A property test
// over hostile strings: quotes, triple quotes, backslashes, line breaks, NUL, control and
// bidirectional characters, bytes that are not UTF-8, and the injection strings of the campaign.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "Spawn.hpp"
#include "pipestudio/common/SourceText.hpp"
#include "pipestudio/common/Text.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

using namespace hostile;
using pipestudio::SourceContext;
using pipestudio::sourceText;

namespace {

namespace fs = std::filesystem;

std::vector<std::string> hostileStrings() {
  std::vector<std::string> out = {
      "",
      "plain",
      "\"",
      "\"\"\"",
      "\"\"\"\"",
      "'",
      "'''",
      "\\",
      "\\\\\"",
      "ends with a quote\"",
      "ends with a backslash\\",
      "line\nbreak",
      "carriage\rreturn",
      "crlf\r\n",
      std::string("nul\0byte", 8),
      "tab\tform\fbell\avertical\v",
      "escape \x1b[31mred\x1b[0m",
      "del\x7f",
      "c1 \xc2\x85 nel \xc2\x9b csi",
      "unicode: \xc3\xa9\xe2\x80\x94\xf0\x9f\x98\x80",
      "line separator \xe2\x80\xa8 paragraph \xe2\x80\xa9",
      "bidi \xe2\x80\xae override \xe2\x81\xa6 isolate",
      "bom \xef\xbb\xbf",
      "not utf-8 \xff\xfe \xc3 \xed\xa0\x80",
      "$(touch PWNED) `touch PWNED` ${HOME}; touch PWNED #",
      "\" + \"\"\" if __import__(\"os\").system(\"touch PWNED\") else \"\"\" + \"",
      "\"\"\" + str(__import__(\"os\").system(\"touch PWNED2\")) + \"\"\".csv",
      "\"]\n[parallelism]\ninjected = true\n#",
      "\\N{BULLET} \\u0041 \\x41 \\101",
  };
  // Random strings over the characters that break literals, deterministically.
  // NUL included: a shell word refuses it, every other form holds it.
  const std::string alphabet = std::string("\"'\\\n\r\t$`;#{}()[]|&<>* aZ9\0", 26) + "\xc3\xa9\xe2\x80\xae\xff";
  std::mt19937 rng(44);
  for (int i = 0; i < 200; ++i) {
    std::string s;
    const int length = static_cast<int>(rng() % 24);
    for (int k = 0; k < length; ++k) s += alphabet[rng() % alphabet.size()];
    out.push_back(s);
  }
  return out;
}

bool validUtf8(const std::string& s) { return pipestudio::isValidUtf8(s); }

fs::path freshDir(const std::string& name) {
  const fs::path dir = tempDir() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

bool onlyFiles(const fs::path& dir, const std::vector<std::string>& names) {
  std::size_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    ++count;
    if (std::find(names.begin(), names.end(), entry.path().filename().string()) == names.end()) return false;
  }
  return count == names.size();
}

}  // namespace

TEST(SourceText, PythonStringsReadBackExactlyAndRunNothing) {
  const fs::path dir = freshDir("py-strings");
  std::string program = "import sys\nVALUES = [\n";
  std::string expected;
  for (const std::string& s : hostileStrings()) {
    auto literal = sourceText(SourceContext::PythonString, s);
    ASSERT_THAT(literal, HasValue());
    program += "    " + *literal + ",\n";
    expected += hexOf(s) + "\n";
  }
  program += "]\nfor v in VALUES:\n    print(v.encode('utf-8', 'surrogateescape').hex())\n";
  spit((dir / "strings.py").string(), program);
  const auto r = run({"/bin/sh", "-c",
                      "cd \"$0\" && python3 -c 'import ast,sys; ast.parse(open(sys.argv[1], \"rb\").read())' "
                      "strings.py && python3 strings.py",
                      dir.string()});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, expected);
  EXPECT_TRUE(onlyFiles(dir, {"strings.py"})) << "a string ran as code";
}

TEST(SourceText, PythonDocstringsReadBackExactly) {
  const fs::path dir = freshDir("py-docstrings");
  std::string program = "DOCS = [\n";
  std::string expected;
  for (const std::string& s : hostileStrings()) {
    auto body = sourceText(SourceContext::PythonDocstring, s);
    ASSERT_THAT(body, HasValue());
    program += "    \"\"\"" + *body + "\"\"\",\n";
    expected += hexOf(s) + "\n";
  }
  program += "]\nfor d in DOCS:\n    print(d.encode('utf-8', 'surrogateescape').hex())\n";
  // As a module docstring too: the first statement of a file is what `import` reads.
  auto first = sourceText(SourceContext::PythonDocstring, "\"\"\" + __import__('os').system('touch PWNED') + \"\"\"");
  ASSERT_TRUE(first);
  spit((dir / "docs.py").string(), "\"\"\"" + *first + "\"\"\"\n" + program);
  const auto r = run({"/bin/sh", "-c", "cd \"$0\" && python3 docs.py", dir.string()});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, expected);
  EXPECT_TRUE(onlyFiles(dir, {"docs.py"})) << "a docstring ran as code";
}

TEST(SourceText, TomlStringsParseBackExactlyOrAreRefused) {
  const fs::path dir = freshDir("toml-strings");
  std::string document = "[values]\n";
  std::string expected;
  int n = 0;
  for (const std::string& s : hostileStrings()) {
    auto literal = sourceText(SourceContext::TomlString, s);
    if (!validUtf8(s)) {
      EXPECT_FALSE(literal) << "TOML cannot hold bytes that are not UTF-8: " << hexOf(s);
      if (!literal) {
        EXPECT_THAT(literal, HasError("not UTF-8"));
      }
      continue;
    }
    ASSERT_THAT(literal, HasValue());
    document += "v" + std::to_string(n++) + " = " + *literal + "\n";
    expected += hexOf(s) + "\n";
  }
  document += "[after]\nlast = 1\n";
  spit((dir / "values.toml").string(), document);
  const auto r = run({"/bin/sh", "-c",
                      "cd \"$0\" && python3 -c 'import tomllib; d = tomllib.load(open(\"values.toml\", \"rb\")); "
                      "assert set(d) == {\"values\", \"after\"} and d[\"after\"] == {\"last\": 1}, d.keys(); "
                      "[print(d[\"values\"][f\"v{i}\"].encode().hex()) for i in range(len(d[\"values\"]))]'",
                      dir.string()});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, expected);
}

TEST(SourceText, ShellWordsReadBackExactlyAndRunNothing) {
  const fs::path dir = freshDir("shell-words");
  std::string script = "set -eu\n";
  std::string expected;
  for (const std::string& s : hostileStrings()) {
    auto word = sourceText(SourceContext::ShellWord, s);
    if (s.find('\0') != std::string::npos) {
      EXPECT_FALSE(word) << "no shell word carries NUL";
      continue;
    }
    ASSERT_THAT(word, HasValue());
    script += "printf '%s' " + *word + " | od -An -v -tx1 | tr -d ' \\n'; echo\n";
    expected += hexOf(s) + "\n";
  }
  spit((dir / "words.sh").string(), script);
  const auto syntax = run({"/bin/bash", "-n", (dir / "words.sh").string()});
  ASSERT_EQ(syntax.exitCode, 0) << syntax.err;
  const auto r = run({"/bin/sh", "-c", "cd \"$0\" && bash words.sh", dir.string()});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, expected);
  EXPECT_TRUE(onlyFiles(dir, {"words.sh"})) << "a word ran as a command";
}

TEST(SourceText, CommentsStayOneCommentInEveryLanguage) {
  const fs::path dir = freshDir("comments");
  std::string py;
  std::string toml;
  std::string sh;
  for (const std::string& s : hostileStrings()) {
    auto c = sourceText(SourceContext::Comment, s);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->find_first_of(std::string("\n\r\0", 3)), std::string::npos) << hexOf(s);
    EXPECT_TRUE(validUtf8(*c)) << hexOf(s);
    py += "# " + *c + "\n";
    toml += "# " + *c + "\n";
    sh += "# " + *c + "\n";
  }
  spit((dir / "c.py").string(), py + "X = 1\n");
  spit((dir / "c.toml").string(), toml + "x = 1\n");
  spit((dir / "c.sh").string(), sh + "echo only\n");
  const auto r = run({"/bin/sh", "-c",
                      "cd \"$0\" && python3 -c 'import ast; t = ast.parse(open(\"c.py\", \"rb\").read()); "
                      "assert len(t.body) == 1, ast.dump(t)' && python3 -c 'import tomllib; "
                      "assert tomllib.load(open(\"c.toml\", \"rb\")) == {\"x\": 1}' && bash c.sh",
                      dir.string()});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "only\n");
  EXPECT_TRUE(onlyFiles(dir, {"c.py", "c.toml", "c.sh"}));
}
