// Issue 44, export injection: a model's name, the schedule CSV's file name and --torchtitan-base
// are written into the torchtitan configuration (Python for torchtitan main, TOML for v0.2.2)
// and the Megatron-LM arguments (a shell command line). Whatever they hold, the Python compiles
// and imports (under stubs of the two torchtitan modules it imports) without running anything and
// reads each value back exactly; the TOML parses with tomllib and names the CSV exactly (or the
// export refuses a path TOML cannot hold, writing nothing); the arguments pass `bash -n` and
// give each word back.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "Spawn.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/Text.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

using namespace hostile;
namespace fs = std::filesystem;

namespace {

const std::string kResources = PIPESTUDIO_RESOURCES;

// A GPT-3 1.3B plan torchtitan can run (1F1B, two stages), made once.
const std::string& basePlan() {
  static const std::string path = [] {
    std::string out = (tempDir() / "injection-base.json").string();
    const auto r = cli({"plan", "--model", kResources + "/models/gpt3-1.3b.json", "--cluster",
                        kResources + "/clusters/a100-1x8-nvlink.json", "--schedule", "1f1b", "--devices", "2",
                        "--microbatches", "4", "-o", out});
    EXPECT_EQ(r.exitCode, 0) << r.err;
    return out;
  }();
  return path;
}

// The plan with its embedded model renamed.
// An empty directory `name` under the test's temp dir.
fs::path freshDir(const std::string& name) {
  fs::path dir = tempDir() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string planNamed(const fs::path& dir, const std::string& name) {
  auto doc = pipestudio::loadJsonFile(basePlan());
  EXPECT_THAT(doc, HasValue());
  pipestudio::Json plan = doc->root;
  plan["model"]["name"] = name;
  std::string path = (dir / "plan.json").string();
  spit(path, plan.dump(-1, ' ', false, pipestudio::Json::error_handler_t::strict));
  return path;
}

// torchtitan.distributed.activation_checkpoint and torchtitan.trainer, as far as the
// configuration uses them.
fs::path stubs() {
  static const fs::path dir = [] {
    fs::path d = tempDir() / "torchtitan-stubs";
    fs::create_directories(d / "torchtitan" / "distributed");
    spit((d / "torchtitan" / "__init__.py").string(), "");
    spit((d / "torchtitan" / "distributed" / "__init__.py").string(), "");
    spit((d / "torchtitan" / "distributed" / "activation_checkpoint.py").string(),
         "class FullAC:\n    class Config:\n        pass\n\n\nclass SelectiveAC:\n    class Config:\n        pass\n");
    spit((d / "torchtitan" / "trainer.py").string(), "class Trainer:\n    class Config:\n        pass\n");
    return d;
  }();
  return dir;
}

// Compiles and imports <dir>/titan_plan.py with the working directory in `dir`, and checks what
// it reads back against expect.json (hex of each value).
const char* const kCheckPython = R"(
import ast, importlib, json, os, sys
d, stubs = sys.argv[1], sys.argv[2]
ast.parse(open(os.path.join(d, "titan_plan.py"), "rb").read())
e = json.load(open(os.path.join(d, "expect.json")))
value = lambda k: bytes.fromhex(e[k]).decode("utf-8", "surrogateescape")
os.environ.pop("PIPESTUDIO_TORCHTITAN_BASE", None)
sys.path[:0] = [d, stubs]
m = importlib.import_module("titan_plan")
assert value("name") in m.__doc__, "the docstring lost the model's name"
assert os.path.basename(m.SCHEDULE_CSV) == value("csv"), m.SCHEDULE_CSV
assert os.path.isfile(m.SCHEDULE_CSV), m.SCHEDULE_CSV
assert m.BASE == value("base"), m.BASE
m.BASE = ""
try:
    m.pipestudio_plan()
    raise SystemExit("pipestudio_plan() accepted an empty BASE")
except ValueError as err:
    assert value("name") in str(err), str(err)
print("ok")
)";

const char* const kCheckToml = R"(
import json, os, sys, tomllib
d = sys.argv[1]
e = json.load(open(os.path.join(d, "expect.json")))
doc = tomllib.load(open(os.path.join(d, "titan.toml"), "rb"))
assert set(doc) == {"parallelism", "training", "activation_checkpoint"}, doc.keys()
csv = doc["parallelism"]["pipeline_parallel_schedule_csv"]
assert csv.encode("utf-8", "surrogateescape") == bytes.fromhex(e["csv_path"]), csv
assert os.path.isfile(csv), csv
print("ok")
)";

struct Case {
  std::string name;  ///< the model's
  std::string csv;   ///< the schedule CSV's file name
  std::string base;  ///< --torchtitan-base
};

std::vector<Case> cases() {
  const std::string pwnModel = R"(" + """ if __import__("os").system("touch PWNED") else """ + ")";
  const std::string pwnCsv = R"(""" + str(__import__("os").system("touch PWNED2")) + """.csv)";
  const std::string pwnBase = R"(m:f""" + __import__("os").system("touch PWNED3") + """)";
  return {
      {pwnModel, pwnCsv, pwnBase},
      {R"(""")", "q\"uote.csv", "m:f\r"},
      {"line\nbreak", "new\nline.csv", "m:f\n"},
      {"carriage\rreturn", "cr\r.csv", R"(m:f""")"},
      {"quote\"", "back\\slash.csv", "m:f\\"},
      {std::string("nul\0name", 8), "tab\t.csv", "m:f\x1b[31m"},
      {"unicod\xc3\xa9 \xe2\x80\xae bidi \xe2\x80\xa8 sep", "\xc3\xbcn\xc3\xaf.csv", "m\xc3\xa9:f"},
      {"$(touch PWNED4) `touch PWNED5`", "$(touch PWNED6).csv", "m:$(touch PWNED7)"},
  };
}

bool onlyFiles(const fs::path& dir, std::vector<std::string> names) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir)) found.push_back(entry.path().filename().string());
  std::sort(found.begin(), found.end());
  std::sort(names.begin(), names.end());
  return found == names;
}

}  // namespace

TEST(ExportInjection, HostileNamesCompileImportAndReadBackExactlyInPython) {
  int index = 0;
  for (const Case& c : cases()) {
    const fs::path dir = freshDir("titan-py-" + std::to_string(index++));
    const std::string plan = planNamed(dir, c.name);
    const auto r = cli({"export", plan, "--format", "torchtitan", "-o", (dir / "titan_plan.py").string(),
                        "--csv-output", (dir / c.csv).string(), "--torchtitan-base", c.base});
    ASSERT_EQ(r.exitCode, 0) << pipestudio::excerpt(c.name) << ": " << r.err;
    spit((dir / "expect.json").string(),
         pipestudio::Json{{"name", hexOf(c.name)}, {"csv", hexOf(c.csv)}, {"base", hexOf(c.base)}}.dump());
    const auto check =
        run({"/bin/sh", "-c", R"(cd "$0" && python3 -c "$1" "$0" "$2")", dir.string(), kCheckPython, stubs().string()});
    EXPECT_EQ(check.exitCode, 0) << pipestudio::excerpt(c.name) << ": " << check.err;
    fs::remove_all(dir / "__pycache__");
    EXPECT_TRUE(onlyFiles(dir, {"plan.json", "titan_plan.py", c.csv, "expect.json"}))
        << pipestudio::excerpt(c.name) << ": the configuration ran a command";
  }
}

TEST(ExportInjection, HostileCsvPathsParseBackExactlyInTomlOrAreRefused) {
  int index = 0;
  for (const Case& c : cases()) {
    const fs::path dir = freshDir("titan-toml-" + std::to_string(index++));
    const std::string plan = planNamed(dir, c.name);
    const std::string csv = (dir / c.csv).string();
    const auto r = cli({"export", plan, "--format", "torchtitan", "--torchtitan-config", "toml", "-o",
                        (dir / "titan.toml").string(), "--csv-output", csv});
    ASSERT_EQ(r.exitCode, 0) << pipestudio::excerpt(c.csv) << ": " << r.err;
    spit((dir / "expect.json").string(), pipestudio::Json{{"csv_path", hexOf(csv)}}.dump());
    const auto check = run({"/bin/sh", "-c", R"(cd "$0" && python3 -c "$1" "$0")", dir.string(), kCheckToml});
    EXPECT_EQ(check.exitCode, 0) << pipestudio::excerpt(c.csv) << ": " << check.err;
    EXPECT_TRUE(onlyFiles(dir, {"plan.json", "titan.toml", c.csv, "expect.json"}));
  }
  // A path that is not UTF-8 cannot be a TOML string: refused, and neither file is written.
  const fs::path dir = freshDir("titan-toml-bytes");
  const std::string plan = planNamed(dir, "gpt");
  const auto r = cli({"export", plan, "--format", "torchtitan", "--torchtitan-config", "toml", "-o",
                      (dir / "titan.toml").string(), "--csv-output", (dir / "bad\xff.csv").string()});
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find("is not UTF-8"), std::string::npos) << r.err;
  EXPECT_TRUE(onlyFiles(dir, {"plan.json"}));
  // Python holds such a path (surrogateescape), and reads it back as those bytes.
  const auto py = cli({"export", plan, "--format", "torchtitan", "-o", (dir / "titan_plan.py").string(), "--csv-output",
                       (dir / "bad\xff.csv").string(), "--torchtitan-base", "m:f"});
  EXPECT_EQ(py.exitCode, 0) << py.err;
  spit((dir / "expect.json").string(),
       pipestudio::Json{{"name", hexOf("gpt")}, {"csv", hexOf("bad\xff.csv")}, {"base", hexOf("m:f")}}.dump());
  const auto check =
      run({"/bin/sh", "-c", R"(cd "$0" && python3 -c "$1" "$0" "$2")", dir.string(), kCheckPython, stubs().string()});
  EXPECT_EQ(check.exitCode, 0) << check.err;
}

TEST(ExportInjection, MegatronArgumentsAreOneShellCommandWordForWord) {
  const fs::path dir = tempDir() / "megatron-shell";
  fs::create_directories(dir);
  // A balanced split of GPT-3 1.3B is uneven: the layout string has (, |, * and ).
  const std::string plan = (dir / "uneven.json").string();
  ASSERT_EQ(cli({"plan", "--model", kResources + "/models/gpt3-1.3b.json", "--cluster",
                 kResources + "/clusters/a100-1x8-nvlink.json", "--schedule", "interleaved-1f1b", "--chunks", "2",
                 "--devices", "4", "--microbatches", "8", "-o", plan})
                .exitCode,
            0);
  const std::string args = (dir / "args.sh").string();
  const auto r = cli({"export", plan, "--format", "megatron", "-o", args});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(run({"/bin/bash", "-n", args}).exitCode, 0) << slurp(args);
  // Its lines after the comments, given to a function as its arguments: every word arrives whole.
  const auto words =
      run({"/bin/bash", "-c", "words() { printf '[%s]\\n' \"$@\"; }; eval \"words $(grep -v '^#' \"$0\")\"", args});
  ASSERT_EQ(words.exitCode, 0) << words.err;
  EXPECT_NE(words.out.find("[--pipeline-model-parallel-size]\n[4]\n"), std::string::npos) << words.out;
  const std::string text = slurp(args);
  if (const auto at = text.find("--pipeline-model-parallel-layout "); at != std::string::npos) {
    EXPECT_NE(words.out.find("[--pipeline-model-parallel-layout]\n[E"), std::string::npos) << words.out;
  }
}
