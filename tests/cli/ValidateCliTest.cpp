// `pipestudio-cli validate` and `--help` through the real binary (docs/cli.md): exit 0 when
// every file is valid, 1 with one message per problem naming the file, 2 on wrong usage.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/SpawnToFiles.hpp"

namespace {

const std::string kCli = std::string(PIPESTUDIO_BINARY_DIR) + "/app/pipestudio-cli";
const std::filesystem::path kResources(PIPESTUDIO_RESOURCES);
const std::string kBad = std::string(PIPESTUDIO_TEST_DATA) + "/bad/";

using Result = pipestudio::test::SpawnResult;

std::filesystem::path tempDir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("pipestudio-cli-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// The CLI with `args`, stdout and stderr in files of their own.
Result run(const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string outPath = (tempDir() / ("out" + std::to_string(counter))).string();
  const std::string errPath = (tempDir() / ("err" + std::to_string(counter++))).string();
  std::vector<std::string> argv{kCli};
  argv.insert(argv.end(), args.begin(), args.end());
  return pipestudio::test::spawnToFiles(std::move(argv), {}, outPath, errPath);
}

std::vector<std::string> nonEmptyLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::vector<std::string> resourceFiles() {
  std::vector<std::string> files;
  for (const char* dir : {"models", "clusters", "hosts", "workspaces"}) {
    for (const auto& e : std::filesystem::directory_iterator(kResources / dir)) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(std::filesystem::exists(kCli)) << kCli << " is not built"; }
};

TEST_F(Cli, ValidateAcceptsEveryExample) {
  const auto files = resourceFiles();
  ASSERT_GE(files.size(), 11U);
  const Result r = run([&] {
    std::vector<std::string> a{"validate"};
    a.insert(a.end(), files.begin(), files.end());
    return a;
  }());
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const auto lines = nonEmptyLines(r.out);
  ASSERT_EQ(lines.size(), files.size()) << r.out;
  for (std::size_t i = 0; i < files.size(); ++i) {
    EXPECT_EQ(lines[i].rfind(files[i] + ": ok (", 0), 0U) << lines[i];
  }
}

TEST_F(Cli, ValidateRejectsEveryBadFileWithOneLocatedMessage) {
  std::size_t checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(kBad)) {
    const std::string path = e.path().string();
    const Result r = run({"validate", path});
    EXPECT_EQ(r.exitCode, 1) << path << "\n" << r.out << r.err;
    EXPECT_EQ(r.out, "") << path;
    const auto lines = nonEmptyLines(r.err);
    ASSERT_EQ(lines.size(), 1U) << path << ": one problem, one message:\n" << r.err;
    EXPECT_EQ(lines[0].rfind(path + ":", 0), 0U) << lines[0];
    EXPECT_NE(lines[0].find("(expected"), std::string::npos) << lines[0];
    ++checked;
  }
  EXPECT_GE(checked, 70U);
}

TEST_F(Cli, ValidateReportsEveryProblemOfAFileAndKeepsGoing) {
  const std::string path = (tempDir() / "three-problems.json").string();
  std::ofstream(path) << R"({
  "schema": "pipestudio.model/1",
  "name": "three",
  "components": [
    {"name": "unet", "trainable": true, "layers": [{"name": "a", "forward_ms": -1}]},
    {"name": "unet", "trainable": true, "layers": [{"name": "b", "forward_msec": 1}]},
    {"name": "vae", "trainable": false, "feeds": ["nowhere"], "layers": [{"name": "c", "forward_ms": 1}]}
  ]
})";
  const std::string good = (kResources / "clusters" / "a100-1x8-nvlink.json").string();
  const Result r = run({"validate", path, good});
  EXPECT_EQ(r.exitCode, 1);
  const auto lines = nonEmptyLines(r.err);
  ASSERT_EQ(lines.size(), 3U) << r.err;
  EXPECT_EQ(lines[0].rfind(path + ":5:", 0), 0U) << lines[0];
  EXPECT_NE(lines[0].find("/components/0/layers/0/forward_ms: is -1"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("/components/1/layers/0/forward_msec: unknown field"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("/components/1/name: duplicate component name 'unet'"), std::string::npos) << lines[2];
  // The good file after the bad one is still checked.
  EXPECT_NE(r.out.find(good + ": ok"), std::string::npos) << r.out;
}

TEST_F(Cli, WorkspaceProblemsPointIntoTheEmbeddedDocuments) {
  const Result r = run({"validate", kBad + "workspace-bad-model.json"});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("/model/components/0/layers/0/forward_ms: is -1"), std::string::npos) << r.err;
  const Result s = run({"validate", kBad + "workspace-bad-partition.json"});
  EXPECT_EQ(s.exitCode, 1);
  EXPECT_NE(s.err.find("/solver/partition: 'magic' is not a partitioner"), std::string::npos) << s.err;
  const Result t = run({"validate", kBad + "workspace-too-many-devices.json"});
  EXPECT_NE(t.err.find("/solver/devices: is 16 but the cluster has 2 GPUs"), std::string::npos) << t.err;
}

TEST_F(Cli, MissingFileIsNamed) {
  const std::string path = (tempDir() / "nope.json").string();
  const Result r = run({"validate", path});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_EQ(r.err.rfind(path + ": cannot open", 0), 0U) << r.err;
}

TEST_F(Cli, WrongUsageExitsTwo) {
  EXPECT_EQ(run({"validate"}).exitCode, 2);
  EXPECT_EQ(run({}).exitCode, 2);
  EXPECT_EQ(run({"no-such-command"}).exitCode, 2);
  const Result r = run({"validate", "--no-such-option", (kResources / "hosts" / "localhost.json").string()});
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_FALSE(r.err.empty());
}

TEST_F(Cli, HelpWorksForEverySubCommand) {
  const Result top = run({"--help"});
  EXPECT_EQ(top.exitCode, 0) << top.err;
  for (const char* sub :
       {"validate", "schedules", "plan", "simulate", "export", "configure", "run", "deploy", "history"}) {
    EXPECT_NE(top.out.find(sub), std::string::npos) << "top-level help does not list " << sub;
    const Result r = run({sub, "--help"});
    EXPECT_EQ(r.exitCode, 0) << sub << ": " << r.err;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub << ": " << r.out;
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub << ": " << r.out;
  }
}

// The first line of a command's help names every format it reads or writes (issue 46).
TEST_F(Cli, HelpNamesEveryFormat) {
  const Result exportHelp = run({"export", "--help"});
  ASSERT_EQ(exportHelp.exitCode, 0) << exportHelp.err;
  const std::string exportLine = exportHelp.out.substr(0, exportHelp.out.find('\n'));
  for (const char* format : {"Chrome trace JSON", "schedule CSV", "Megatron-LM", "torchtitan"}) {
    EXPECT_NE(exportLine.find(format), std::string::npos) << format << ": " << exportLine;
  }
  const Result importHelp = run({"history", "import", "--help"});
  ASSERT_EQ(importHelp.exitCode, 0) << importHelp.err;
  const std::string importLine = importHelp.out.substr(0, importHelp.out.find('\n'));
  for (const char* format : {"Kineto", "Nsight Systems", "OpenTelemetry", "OTLP/JSON", "Jaeger", "trace stream"}) {
    EXPECT_NE(importLine.find(format), std::string::npos) << format << ": " << importLine;
  }
}

}  // namespace
