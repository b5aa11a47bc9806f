// The documentation as a reader uses it: every shell block of README.md and docs/*.md runs
// against the built binaries, what a page shows as output is what they print, and every
// relative link points at a file and heading that exist. The rules a page follows are in
// docs/style.md ("Documentation"):
//   ```sh                      run; the blocks of a page run in order in one bash
//   ```sh not-run: REASON      shown, not run (REASON required)
//   ```output                  right after a run block: its stdout, line by line; `...` = any lines
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "pipestudio/common/Text.hpp"
#include "support/SpawnToFiles.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kSource(PIPESTUDIO_SOURCE_DIR);
const fs::path kBuild(PIPESTUDIO_BINARY_DIR);
const std::string kGui(PIPESTUDIO_GUI);  // empty when the build has no GUI
constexpr int kPageTimeoutS = 240;
const std::string kMarker =
    "\x1e"
    "docs-block ";

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Output lines as compared: trailing blank lines do not count.
std::vector<std::string> outputLines(const std::string& text) {
  auto lines = splitLines(text);
  while (!lines.empty() && lines.back().find_first_not_of(" \t\r") == std::string::npos) lines.pop_back();
  return lines;
}

std::string rtrim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

std::string ltrim(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// --- markdown ----------------------------------------------------------------------------

struct Block {
  std::string language;  ///< first word of the info string
  std::string rest;      ///< the info string after it
  std::string text;
  int line = 0;  ///< of the opening fence, 1-based
};

struct Page {
  fs::path path;
  std::vector<Block> blocks;
  std::vector<std::string> headings;               ///< GitHub heading ids, duplicates numbered
  std::vector<std::pair<int, std::string>> links;  ///< line, target (relative links only)
};

// A fence opens with 3+ backticks or tildes (indented as a list item may be); a backtick
// fence's info string holds no backtick (CommonMark), so ```` ```sh ```` in text is code.
bool openingFence(const std::string& line, std::string& fence, std::string& info, std::size_t& indent) {
  const std::string t = ltrim(line);
  if (t.size() < 3 || (t[0] != '`' && t[0] != '~')) return false;
  std::size_t n = 0;
  while (n < t.size() && t[n] == t[0]) ++n;
  if (n < 3) return false;
  info = rtrim(ltrim(t.substr(n)));
  if (t[0] == '`' && info.find('`') != std::string::npos) return false;
  fence = t.substr(0, n);
  indent = line.size() - t.size();
  return true;
}

bool closingFence(const std::string& line, const std::string& fence) {
  const std::string t = rtrim(ltrim(line));
  return t.size() >= fence.size() && t.find_first_not_of(fence[0]) == std::string::npos;
}

// Decodes one UTF-8 code point at s[i] (advancing i); malformed bytes come back as themselves.
char32_t nextCodePoint(const std::string& s, std::size_t& i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  if (i + static_cast<std::size_t>(extra) >= s.size() + (extra == 0 ? 1 : 0)) extra = 0;
  char32_t cp = extra == 0 ? c : c & (0x3F >> extra);
  ++i;
  for (int k = 0; k < extra && i < s.size(); ++k, ++i) cp = (cp << 6) | (byte(i) & 0x3F);
  return cp;
}

// GitHub's heading id: the heading's text, lower-cased, without punctuation or symbols (it
// keeps letters, digits, '_', '-' and turns spaces into '-'). Non-ASCII letters are kept for
// Latin-1, Latin Extended and Greek; other non-ASCII characters (arrows, ×, —) are dropped.
std::string headingId(std::string text) {
  text = std::regex_replace(text, std::regex(R"(!?\[([^\]]*)\]\([^)]*\))"), "$1");  // links: their text
  std::string id;
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = nextCodePoint(text, i);
    if (cp < 0x80) {
      const char c = static_cast<char>(cp);
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') {
        id += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      } else if (c == ' ') {
        id += '-';
      }
      continue;
    }
    const bool latin = cp >= 0xC0 && cp <= 0x24F && cp != 0xD7 && cp != 0xF7;
    const bool letter = latin || (cp >= 0x370 && cp <= 0x3FF) || cp == 0xB5 || cp == 0xAA || cp == 0xBA;
    if (!letter) continue;
    if (cp >= 0xC0 && cp <= 0xDE) cp += 0x20;  // Latin-1 capitals
    pipestudio::appendUtf8(id, cp);
  }
  return id;
}

// Inline code spans, which may hold text that looks like a link.
std::string withoutCodeSpans(const std::string& line) {
  std::string out;
  for (std::size_t i = 0; i < line.size();) {
    if (line[i] != '`') {
      out += line[i++];
      continue;
    }
    std::size_t n = 0;
    while (i + n < line.size() && line[i + n] == '`') ++n;
    const std::string run(n, '`');
    const std::size_t close = line.find(run, i + n);
    if (close == std::string::npos) {
      out += run;
      i += n;
      continue;
    }
    i = close + n;
  }
  return out;
}

Page parsePage(const fs::path& path) {
  Page page;
  page.path = path;
  const auto lines = splitLines(slurp(path));
  std::map<std::string, int> seen;
  static const std::regex linkRe(R"(\]\(([^)\s]+)(\s+"[^"]*")?\))");
  static const std::regex headingRe(R"(^#{1,6}\s+(.*?)\s*#*\s*$)");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string fence, info;
    std::size_t indent = 0;
    if (openingFence(lines[i], fence, info, indent)) {
      Block b;
      b.line = static_cast<int>(i) + 1;
      const std::size_t space = info.find_first_of(" \t");
      b.language = info.substr(0, space);
      b.rest = space == std::string::npos ? "" : ltrim(info.substr(space));
      for (++i; i < lines.size() && !closingFence(lines[i], fence); ++i) {
        std::string l = lines[i];
        std::size_t strip = 0;
        while (strip < indent && strip < l.size() && l[strip] == ' ') ++strip;
        b.text += l.substr(strip) + '\n';
      }
      page.blocks.push_back(std::move(b));
      continue;
    }
    std::smatch m;
    if (std::regex_match(lines[i], m, headingRe)) {
      std::string id = headingId(m[1].str());
      const int n = seen[id]++;
      page.headings.push_back(n == 0 ? id : id + "-" + std::to_string(n));
    }
    const std::string text = withoutCodeSpans(lines[i]);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), linkRe); it != std::sregex_iterator(); ++it) {
      const std::string target = (*it)[1].str();
      if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
      page.links.emplace_back(static_cast<int>(i) + 1, target);
    }
  }
  return page;
}

bool isShell(const std::string& language) {
  return language == "sh" || language == "bash" || language == "shell" || language == "console";
}

// The pages: README.md, docs/*.md, and the module pages they link to (README.md and *.md one
// and two folders down, outside build trees and third_party).
std::vector<std::string> pageNames() {
  std::vector<std::string> names;
  if (fs::exists(kSource / "README.md")) names.emplace_back("README.md");
  const std::set<std::string> skipped{"third_party", "reference", "docs"};
  const auto addPages = [&](const fs::path& dir) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.is_regular_file() && entry.path().extension() == ".md") {
        names.push_back(fs::relative(entry.path(), kSource).string());
      }
    }
  };
  for (const auto& top : fs::directory_iterator(kSource)) {
    const std::string dir = top.path().filename().string();
    if (!top.is_directory() || dir[0] == '.' || dir.rfind("build", 0) == 0 || skipped.count(dir) != 0) continue;
    addPages(top.path());
    for (const auto& sub : fs::directory_iterator(top.path())) {
      if (sub.is_directory()) addPages(sub.path());
    }
  }
  if (fs::is_directory(kSource / "docs")) {
    for (const auto& entry : fs::directory_iterator(kSource / "docs")) {
      if (entry.path().extension() == ".md") names.push_back("docs/" + entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// --- the sandbox the commands run in -------------------------------------------------------

// `target` mirrors `real` with symlinks, except `replaced` (a path under it), which gets
// `content` as an executable script; the folders on the way to it are real folders.
void mirrorWithScript(const fs::path& real, const fs::path& target, const fs::path& replaced,
                      const std::string& content) {
  fs::create_directories(target);
  const std::string first = replaced.begin()->string();
  for (const auto& entry : fs::directory_iterator(real)) {
    const std::string name = entry.path().filename().string();
    if (name != first) fs::create_directory_symlink(entry.path(), target / name);
  }
  const fs::path rest = replaced.lexically_relative(first);
  if (rest.empty() || rest == ".") {
    std::ofstream(target / first) << content;
    fs::permissions(target / first, fs::perms::owner_all);
  } else {
    mirrorWithScript(real / first, target / first, rest, content);
  }
}

struct Sandbox {
  fs::path dir;
  Sandbox() {
    dir = fs::temp_directory_path() /
          ("pipestudio-docs-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::remove_all(dir);
    fs::create_directories(dir / "home");
    // The source tree as the pages name it (resources/, tests/, …), without build trees.
    for (const auto& entry : fs::directory_iterator(kSource)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("build", 0) == 0 || name[0] == '.') continue;
      fs::create_symlink(entry.path(), dir / name);
    }
    // build/release is the build under test, whichever preset made it; the GUI quits by itself.
    const std::string gui = kGui.empty() ? std::string("#!/bin/sh\necho 'no GUI in this build' >&2; exit 1\n")
                                         : "#!/bin/sh\nexec '" + kGui + "' --quit-after-ms 500 \"$@\"\n";
    mirrorWithScript(kBuild, dir / "build" / "release", fs::path("app") / "gui" / "pipestudio", gui);
  }
  ~Sandbox() {
    std::error_code ec;
    if (!::testing::Test::HasFailure()) fs::remove_all(dir, ec);
  }
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;
  static int& counter() {
    static int n = 0;
    return n;
  }
};

struct ScriptRun {
  int exitCode = -1;
  std::string out;
  std::string err;
  std::string trace;
};

ScriptRun runScript(const Sandbox& box, const std::string& script) {
  // Commands are traced to a file of their own (fd 9), so a block's 2>&1 does not catch them.
  const fs::path scriptPath = box.dir / ".docs-script.sh";
  std::ofstream(scriptPath) << "set -euo pipefail\ncd '" << box.dir.string()
                            << "'\nexec 9>.docs-trace\nBASH_XTRACEFD=9\nPS4='+ '\nset -x\n"
                            << script;
  const std::string outPath = (box.dir / ".docs-stdout").string();
  const std::string errPath = (box.dir / ".docs-stderr").string();
  const std::string home = (box.dir / "home").string();
  const std::string build = (box.dir / "build" / "release").string();
  std::vector<std::string> env{"PATH=" + build + "/app:" + build + "/executor:/usr/local/bin:/usr/bin:/bin",
                               "HOME=" + home,
                               "XDG_DATA_HOME=" + home + "/.local/share",
                               "XDG_CONFIG_HOME=" + home + "/.config",
                               "XDG_CACHE_HOME=" + home + "/.cache",
                               "TMPDIR=" + box.dir.string(),
                               "QT_QPA_PLATFORM=offscreen",
                               "LANG=C.UTF-8",
                               "LC_ALL=C.UTF-8"};
  std::vector<std::string> args{"timeout", "-k", "5", std::to_string(kPageTimeoutS), "bash", scriptPath.string()};
  const pipestudio::test::SpawnResult spawned =
      pipestudio::test::spawnToFiles(std::move(args), std::move(env), outPath, errPath);
  ScriptRun r{spawned.exitCode, spawned.out, spawned.err, {}};
  if (r.exitCode == -1) return r;
  r.trace = slurp(box.dir / ".docs-trace");
  return r;
}

// Whether `actual` is `expected` line by line, where an expected `...` line stands for any
// number of lines (trailing spaces never count, nor trailing blank lines: outputLines).
bool linesMatch(const std::vector<std::string>& expected, std::size_t e, const std::vector<std::string>& actual,
                std::size_t a) {
  if (e == expected.size()) return a == actual.size();
  if (rtrim(expected[e]) == "...") {
    for (std::size_t k = a; k <= actual.size(); ++k) {
      if (linesMatch(expected, e + 1, actual, k)) return true;
    }
    return false;
  }
  return a < actual.size() && rtrim(expected[e]) == rtrim(actual[a]) && linesMatch(expected, e + 1, actual, a + 1);
}

std::string tail(const std::string& text, std::size_t bytes) {
  return text.size() <= bytes ? text : "…" + text.substr(text.size() - bytes);
}

std::string testName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

}  // namespace

class DocsPage : public ::testing::TestWithParam<std::string> {};

// Every shell block of the page runs (in order, one bash, a fresh sandbox) and exits 0; an
// `output` block after one is what it printed.
TEST_P(DocsPage, CommandsRunAsShown) {
  const Page page = parsePage(kSource / GetParam());
  std::string script;
  struct Shown {
    int block;
    std::vector<std::string> lines;
    int line;
  };
  std::vector<const Block*> runs;
  std::vector<Shown> outputs;
  bool previousRuns = false;
  for (const Block& b : page.blocks) {
    if (b.language == "output") {
      EXPECT_TRUE(previousRuns) << GetParam() << ":" << b.line
                                << ": an output block must follow a shell block that runs (docs/style.md)";
      if (previousRuns) outputs.push_back({static_cast<int>(runs.size()) - 1, outputLines(b.text), b.line});
      previousRuns = false;
      continue;
    }
    previousRuns = false;
    if (!isShell(b.language)) continue;
    if (b.rest.rfind("not-run", 0) == 0) {
      const std::string reason = ltrim(b.rest.substr(std::string("not-run").size()));
      EXPECT_TRUE(reason.size() > 1 && reason[0] == ':')
          << GetParam() << ":" << b.line << ": `not-run` needs a reason: ```sh not-run: why";
      continue;
    }
    EXPECT_TRUE(b.rest.empty()) << GetParam() << ":" << b.line << ": unknown info string '" << b.rest
                                << "' (expected nothing, or not-run: REASON)";
    script += "printf '\\n" + kMarker + std::to_string(runs.size()) + "\\n'\n";
    script += b.text;
    runs.push_back(&b);
    previousRuns = true;
  }
  if (runs.empty()) return;
  script += "printf '\\n" + kMarker + "end\\n'\n";

  const Sandbox box;
  const ScriptRun r = runScript(box, script);
  // Split stdout at the markers ("\n" kMarker id "\n"): block i printed what lies between its
  // marker and the next one.
  std::vector<std::string> segments;
  int lastStarted = -1;
  {
    struct Mark {
      std::size_t begin, end;
      std::string id;
    };
    std::vector<Mark> marks;
    const std::string needle = "\n" + kMarker;
    for (std::size_t pos = r.out.find(needle); pos != std::string::npos; pos = r.out.find(needle, pos + 1)) {
      const std::size_t idStart = pos + needle.size();
      const std::size_t eol = std::min(r.out.find('\n', idStart), r.out.size());
      marks.push_back({pos, std::min(eol + 1, r.out.size()), r.out.substr(idStart, eol - idStart)});
    }
    for (std::size_t i = 0; i < marks.size(); ++i) {
      if (marks[i].id == "end") break;
      lastStarted = std::stoi(marks[i].id);
      const std::size_t stop = i + 1 < marks.size() ? marks[i + 1].begin : r.out.size();
      segments.push_back(r.out.substr(marks[i].end, stop - marks[i].end));
    }
  }
  if (r.exitCode != 0) {
    const Block* failed = lastStarted >= 0 ? runs[static_cast<std::size_t>(lastStarted)] : nullptr;
    ADD_FAILURE() << GetParam() << ":" << (failed ? failed->line : 0) << ": the block exited " << r.exitCode
                  << (r.exitCode == 124 ? " (timed out)" : "") << "\n--- block\n"
                  << (failed ? failed->text : "") << "--- last commands\n"
                  << tail(r.trace, 1500) << "\n--- stdout\n"
                  << tail(lastStarted >= 0 && static_cast<std::size_t>(lastStarted) < segments.size()
                              ? segments[static_cast<std::size_t>(lastStarted)]
                              : r.out,
                          3000)
                  << "\n--- stderr\n"
                  << tail(r.err, 3000) << "\nsandbox kept: " << box.dir;
    return;
  }
  for (const Shown& e : outputs) {
    const auto b = static_cast<std::size_t>(e.block);
    ASSERT_LT(b, segments.size()) << GetParam() << ": no output captured for the block at line " << runs[b]->line;
    const auto actual = outputLines(segments[b]);
    EXPECT_TRUE(linesMatch(e.lines, 0, actual, 0)) << GetParam() << ":" << e.line
                                                   << ": the output shown is not what the block at line "
                                                   << runs[b]->line << " printed\n--- shown\n"
                                                   <<
        [&] {
          std::string s;
          for (const auto& l : e.lines) s += l + '\n';
          return s;
        }() << "--- printed\n" << segments[b];
  }
}

// Relative links name files that exist, and an #anchor names a heading of its page.
TEST_P(DocsPage, LinksResolve) {
  const Page page = parsePage(kSource / GetParam());
  std::map<fs::path, std::vector<std::string>> headingsOf;
  for (const auto& [line, target] : page.links) {
    const std::size_t hash = target.find('#');
    const std::string file = target.substr(0, hash);
    const std::string anchor = hash == std::string::npos ? "" : target.substr(hash + 1);
    const fs::path resolved = file.empty() ? page.path : (page.path.parent_path() / file).lexically_normal();
    if (!fs::exists(resolved)) {
      ADD_FAILURE() << GetParam() << ":" << line << ": link to " << target << ": no file " << resolved;
      continue;
    }
    if (anchor.empty()) continue;
    if (resolved.extension() != ".md") {
      ADD_FAILURE() << GetParam() << ":" << line << ": link to " << target << ": an anchor into a non-markdown file";
      continue;
    }
    auto it = headingsOf.find(resolved);
    if (it == headingsOf.end()) it = headingsOf.emplace(resolved, parsePage(resolved).headings).first;
    const auto& ids = it->second;
    if (std::find(ids.begin(), ids.end(), anchor) == ids.end()) {
      std::string known;
      for (const auto& id : ids) known += "\n  #" + id;
      ADD_FAILURE() << GetParam() << ":" << line << ": link to " << target << ": no heading #" << anchor << " in "
                    << resolved.filename() << "; its headings:" << known;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Pages, DocsPage, ::testing::ValuesIn(pageNames()), testName);

// The README's map of docs/ names every page there, so none is orphaned.
TEST(Docs, ReadmeMapsEveryPage) {
  const std::string readme = slurp(kSource / "README.md");
  for (const auto& name : pageNames()) {
    if (name.rfind("docs/", 0) != 0) continue;
    EXPECT_NE(readme.find("(" + name + ")"), std::string::npos) << "README.md does not link " << name;
  }
}

// The parser's own rules, on a page written for it.
TEST(Docs, ParserReadsBlocksHeadingsAndLinks) {
  const fs::path dir = fs::temp_directory_path() / ("pipestudio-docs-parser-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "page.md") << "# Title: the `x` → y (z)\n"
                                    "## Title: the `x` → y (z)\n"
                                    "See [a](other.md#b), `[not](a-link)` and ![img](pic.png).\n"
                                    "Inline ```` ```sh not-run: x ```` is code.\n"
                                    "- item\n"
                                    "  ```sh not-run: needs a cluster\n"
                                    "  deploy\n"
                                    "  ```\n"
                                    "````sh\n"
                                    "echo '```'\n"
                                    "````\n";
  const Page page = parsePage(dir / "page.md");
  ASSERT_EQ(page.headings.size(), 2u);
  EXPECT_EQ(page.headings[0], "title-the-x--y-z");
  EXPECT_EQ(page.headings[1], "title-the-x--y-z-1");
  ASSERT_EQ(page.links.size(), 2u);
  EXPECT_EQ(page.links[0].second, "other.md#b");
  EXPECT_EQ(page.links[1].second, "pic.png");
  ASSERT_EQ(page.blocks.size(), 2u);
  EXPECT_EQ(page.blocks[0].language, "sh");
  EXPECT_EQ(page.blocks[0].rest, "not-run: needs a cluster");
  EXPECT_EQ(page.blocks[0].text, "deploy\n");
  EXPECT_EQ(page.blocks[1].text, "echo '```'\n");
  EXPECT_TRUE(linesMatch({"a", "...", "d"}, 0, {"a", "b", "c", "d"}, 0));
  EXPECT_TRUE(linesMatch({"a", "..."}, 0, {"a"}, 0));
  EXPECT_FALSE(linesMatch({"a", "d"}, 0, {"a", "b", "d"}, 0));
  fs::remove_all(dir);
}
