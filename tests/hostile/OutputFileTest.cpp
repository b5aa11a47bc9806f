// Issue 14, output files: `-o` renames atomically only over regular files; writes through
// symlinks to their target; writes directly to character devices and FIFOs (never replacing
// them: one run replaced a machine's /dev/full); refuses directories and ''. Issue 27: a write
// that fails (stdout full or closed, a full disk) is a failure with its reason; torchtitan's
// second output never lands on a file nobody named, nor on the first.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "Spawn.hpp"

using namespace hostile;
namespace fs = std::filesystem;

namespace {

const std::string kPlan = kGood + "tiny-plan.json";

std::vector<std::string> planTo(const std::string& out) {
  return {"plan",
          "--model",
          kGood + "tiny-model.json",
          "--cluster",
          kGood + "tiny-cluster.json",
          "--schedule",
          "1f1b",
          "--devices",
          "2",
          "--microbatches",
          "2",
          "-o",
          out};
}

bool isCharDevice(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

}  // namespace

TEST(OutputFile, RegularFilesAreReplacedWhole) {
  const std::string out = (tempDir() / "plan.json").string();
  spit(out, "old");
  const auto r = cli(planTo(out));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(slurp(out).find("\"schema\": \"pipestudio.plan/1\""), std::string::npos);
  EXPECT_EQ(cli({"validate", out}).exitCode, 0);
  for (const auto& e : fs::directory_iterator(tempDir())) {
    EXPECT_EQ(e.path().filename().string().find("plan.json.tmp"), std::string::npos) << "temp file left behind";
  }
}

TEST(OutputFile, ASymlinkStaysALinkAndItsTargetIsWritten) {
  const fs::path dir = tempDir() / "links";
  fs::create_directories(dir);
  fs::create_symlink("target.json", dir / "link.json");
  const auto r = cli(planTo((dir / "link.json").string()));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  EXPECT_NE(slurp((dir / "target.json").string()).find("pipestudio.plan/1"), std::string::npos);
  // Again, now that the target exists (rename over the target, not the link).
  ASSERT_EQ(cli({"export", kPlan, "--format", "csv", "-o", (dir / "link.json").string()}).exitCode, 0);
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  EXPECT_EQ(slurp((dir / "target.json").string()).substr(0, 3), "0F0");
}

TEST(OutputFile, AFifoIsWrittenToNotReplaced) {
  const std::string fifo = (tempDir() / "out.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = slurp(fifo); });
  const auto r = cli({"export", kPlan, "--format", "chrome", "-o", fifo},
                     {.stdinPath = "/dev/null", .stdoutPath = "", .deadlineS = 30});
  reader.join();
  EXPECT_EQ(r.exitCode, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  EXPECT_NE(received.find("\"traceEvents\""), std::string::npos) << received.substr(0, 200);
  fs::remove(fifo);
}

TEST(OutputFile, CharacterDevicesStayDevices) {
  ASSERT_TRUE(isCharDevice("/dev/null"));
  EXPECT_EQ(cli(planTo("/dev/null")).exitCode, 0);
  EXPECT_TRUE(isCharDevice("/dev/null"));
  // /dev/full refuses the bytes: the write fails with its reason, and the node stays a device.
  ASSERT_TRUE(isCharDevice("/dev/full"));
  const auto full = cli({"export", kPlan, "--format", "chrome", "-o", "/dev/full"});
  EXPECT_EQ(full.exitCode, 1);
  EXPECT_NE(full.err.find("No space left on device"), std::string::npos) << full.err;
  EXPECT_TRUE(isCharDevice("/dev/full"));
}

TEST(OutputFile, DevStdoutIsWrittenThroughTheOpenDescriptor) {
  const std::string captured = (tempDir() / "stdout.txt").string();
  const auto r = cli({"export", kPlan, "--format", "csv", "-o", "/dev/stdout"},
                     {.stdinPath = "/dev/null", .stdoutPath = captured, .deadlineS = 120});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(captured));
}

TEST(OutputFile, DirectoriesAndEmptyNamesAreRefused) {
  const auto dir = cli(planTo(tempDir().string()));
  EXPECT_EQ(dir.exitCode, 1);
  EXPECT_NE(dir.err.find("is a directory"), std::string::npos) << dir.err;
  EXPECT_TRUE(fs::is_directory(tempDir()));
  const auto empty = cli(planTo(""));
  EXPECT_EQ(empty.exitCode, 2);
  EXPECT_NE(empty.err.find("--output: empty file name"), std::string::npos) << empty.err;
  const auto exportEmpty = cli({"export", kPlan, "--format", "csv", "-o", ""});
  EXPECT_EQ(exportEmpty.exitCode, 2);
  const auto missingDir = cli(planTo((tempDir() / "no-such-dir" / "p.json").string()));
  EXPECT_EQ(missingDir.exitCode, 1);
  EXPECT_NE(missingDir.err.find("does not exist"), std::string::npos) << missingDir.err;
}

TEST(OutputFile, LargePlansAreWrittenAndExportedInBoundedMemory) {
  // 8 devices × 62500 microbatches of 1f1b: 10⁶ ops. Under a 1.5 GiB address-space limit the
  // plan is written and exported to Chrome trace (a DOM of it took 3.2 GB).
  const std::string plan = (tempDir() / "million.json").string();
  const std::string trace = (tempDir() / "million.trace.json").string();
  const std::string model = (tempDir() / "eight.json").string();
  spit(model,
       R"({"schema": "pipestudio.model/1", "name": "m", "layers": [{"name": "l", "forward_ms": 1, "repeat": 8}]})");
  const std::string cluster = (tempDir() / "eight-gpus.json").string();
  spit(cluster, R"({"schema": "pipestudio.cluster/1", "name": "c", "gpu": {"name": "g", "peak_tflops": 100,
    "memory_gib": 1000, "efficiency": 0.5}, "nodes": [{"host": "h", "gpus": 8}],
    "links": {"intra_node": {"bandwidth_gbps": 100, "latency_us": 5}}})");
  const std::string limit = "ulimit -v 1572864; ";
  const auto p = run({"/bin/sh", "-c",
                      limit + kCli + " plan --model " + model + " --cluster " + cluster +
                          " --schedule 1f1b --devices 8 --microbatches 62500 --partition uniform -o " + plan},
                     {.stdinPath = "/dev/null", .stdoutPath = "", .deadlineS = 240});
  ASSERT_EQ(p.exitCode, 0) << p.err;
  EXPECT_NE(p.out.find("1000000 ops"), std::string::npos) << p.out;
  // Export loads the plan document (a JSON tree of the 10⁶ ops) and streams the trace: 3 GiB.
  const auto e =
      run({"/bin/sh", "-c", "ulimit -v 3145728; " + kCli + " export " + plan + " --format chrome -o " + trace},
          {.stdinPath = "/dev/null", .stdoutPath = "", .deadlineS = 240});
  ASSERT_EQ(e.exitCode, 0) << e.err;
  EXPECT_GT(fs::file_size(trace), 100'000'000U);
  fs::remove(plan);
  fs::remove(trace);
}

// --- Issue 27: write errors are failures with their reason --------------------------------

namespace {

const std::string kModel = kGood + "tiny-model.json";
const std::string kCluster = kGood + "tiny-cluster.json";

// `pipestudio-cli ARGS` with stdout on /dev/full (full) or closed (`>&-`).
Result withBrokenStdout(const std::vector<std::string>& args, bool closed) {
  if (!closed) return cli(args, {.stdinPath = "/dev/null", .stdoutPath = "/dev/full", .deadlineS = 120});
  std::string line = "exec " + kCli;
  for (const auto& a : args) line += " '" + a + "'";
  return run({"/bin/sh", "-c", line + " >&-"}, {.stdinPath = "/dev/null", .stdoutPath = "", .deadlineS = 120});
}

}  // namespace

TEST(OutputFile, EveryCommandFailsWithTheReasonWhenStdoutCannotBeWritten) {
  const std::string db = (tempDir() / "stdout-errors.sqlite").string();
  for (int i = 0; i < 2; ++i) ASSERT_EQ(cli({"run", kPlan, "--history", db}).exitCode, 0);
  const std::vector<std::string> plan{"plan", "--model",   kModel, "--cluster",      kCluster, "--schedule",
                                      "1f1b", "--devices", "2",    "--microbatches", "2"};
  auto with = [](std::vector<std::string> args, const std::string& more) {
    args.push_back(more);
    return args;
  };
  const std::vector<std::vector<std::string>> commands{
      plan,
      with(plan, "--json"),
      {"simulate", kPlan},
      {"simulate", kPlan, "--json"},
      {"configure", "--model", kModel, "--cluster", kCluster},
      {"configure", "--model", kModel, "--cluster", kCluster, "--json"},
      {"history", "--db", db, "list"},
      {"history", "--db", db, "list", "--json"},
      {"history", "--db", db, "compare", "1", "2"},
      {"history", "--db", db, "compare", "1", "2", "--json"},
      {"export", kPlan, "--format", "csv"},
      {"export", kPlan, "--format", "chrome"},
      {"validate", kPlan},
      {"schedules"}};
  for (const bool closed : {false, true}) {
    for (const auto& args : commands) {
      const auto r = withBrokenStdout(args, closed);
      std::string shown = args[0] + (args.back() == "--json" ? " --json" : "") + (closed ? " (closed)" : " (full)");
      EXPECT_EQ(r.exitCode, 1) << shown << ": " << r.err;
      EXPECT_NE(r.err.find("pipestudio-cli: cannot write to standard output: "), std::string::npos)
          << shown << ": " << r.err;
      EXPECT_NE(r.err.find(closed ? "the descriptor is closed" : "No space left on device"), std::string::npos)
          << shown << ": " << r.err;
    }
  }
  // `run --json`: the run is recorded; the message says as which run, since its id is lost.
  const auto r = withBrokenStdout({"run", kPlan, "--history", db, "--json"}, false);
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find("No space left on device; the run is recorded as run 3"), std::string::npos) << r.err;
}

TEST(OutputFile, AFullDiskIsNamedOnceWithItsReason) {
  if (!haveMountNamespace()) GTEST_SKIP() << "unshare -rm (a private tmpfs) is not available here";
  // A 64 KiB tmpfs and a plan of a few hundred KB: the write fails part-way.
  const std::string script = "mount -t tmpfs -o size=64k tmpfs /mnt || exit 90; cd /mnt && " + kCli + " plan --model " +
                             kModel + " --cluster " + kCluster +
                             " --schedule 1f1b --devices 2 --microbatches 2000 -o plan.json; echo \"exit=$?\"; ls /mnt";
  const auto r = runUnshared(script, 60);
  ASSERT_NE(r.exitCode, 90) << r.err;
  EXPECT_NE(r.out.find("exit=1"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("plan.json: write error: No space left on device"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("plan.json: plan.json:"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("plan.json.tmp"), std::string::npos) << "temporary file left behind: " << r.out;
}

TEST(OutputFile, TorchtitanNeverWritesOverAFileNobodyNamedNorTwoOutputsToOnePath) {
  const fs::path dir = tempDir() / "titan";
  fs::create_directories(dir);
  const std::string plan = (dir / "gpt.json").string();
  const std::string resources = PIPESTUDIO_RESOURCES;
  ASSERT_EQ(cli({"plan", "--model", resources + "/models/gpt3-1.3b.json", "--cluster",
                 resources + "/clusters/a100-1x8-nvlink.json", "--schedule", "1f1b", "--devices", "2", "--microbatches",
                 "4", "-o", plan})
                .exitCode,
            0);
  auto titan = [&](std::vector<std::string> more) {
    std::vector<std::string> args{"export", plan, "--format", "torchtitan"};
    args.insert(args.end(), more.begin(), more.end());
    return cli(args);
  };
  // -o out.csv: the TOML and the CSV would be one file.
  const std::string outCsv = (dir / "out.csv").string();
  spit(outCsv, "mine");
  auto r = titan({"-o", outCsv});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("would both be written to"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(outCsv), "mine");
  // -o mine.toml beside an existing mine.csv: refused unless --csv-output names it.
  const std::string toml = (dir / "mine.toml").string();
  const std::string csv = (dir / "mine.csv").string();
  spit(csv, "mine");
  r = titan({"-o", toml});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("mine.csv exists and is not named on the command line"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(csv), "mine");
  EXPECT_FALSE(fs::exists(toml));
  r = titan({"-o", toml, "--csv-output", csv});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(slurp(csv).find("0F0"), std::string::npos) << slurp(csv);
  EXPECT_NE(slurp(toml).find("pipeline_parallel_schedule_csv"), std::string::npos);
  // Both named as one path, through a symlink too.
  fs::create_symlink("mine.toml", dir / "alias.csv");
  r = titan({"-o", toml, "--csv-output", (dir / "alias.csv").string()});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  // -o a device: nothing is created beside it.
  r = titan({"-o", "/dev/null"});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("is not a regular file"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists("/dev/null.csv"));
  r = titan({"-o", "/dev/null", "--csv-output", (dir / "beside.csv").string()});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(isCharDevice("/dev/null"));
  // --csv-output belongs to torchtitan.
  EXPECT_EQ(cli({"export", plan, "--format", "csv", "--csv-output", csv}).exitCode, 2);
}

// Issue 44: `plan -o out.json` ended by SIGTERM while the file is written leaves neither the file
// nor `out.json.tmp-PID`: the temporary file is removed before the signal ends the process.
TEST(OutputFile, ASignalDuringTheWriteLeavesNoTemporaryFile) {
  const fs::path dir = tempDir() / "sigterm";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string out = (dir / "out.json").string();
  // Some hundred thousand ops: tens of MB, written for long enough to be interrupted.
  const pid_t pid = start({kCli, "plan", "--model", kGood + "tiny-model.json", "--cluster", kGood + "tiny-cluster.json",
                           "--schedule", "1f1b", "--devices", "2", "--microbatches", "150000", "-o", out},
                          (dir.parent_path() / "sigterm.out").string(), (dir.parent_path() / "sigterm.err").string());
  ASSERT_GT(pid, 0);
  bool writing = false;
  for (int i = 0; i < 60000 && !writing; ++i) {  // the guard against a hang: 60 s
    for (const auto& e : fs::directory_iterator(dir)) {
      writing = writing || e.path().filename().string().find(".tmp-") != std::string::npos;
    }
    if (!writing) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(writing) << "the plan was never written";
  ::kill(pid, SIGTERM);
  const int status = waitFor(pid, 60);
  EXPECT_EQ(status, 128 + SIGTERM) << "ended as the signal ends it";
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  EXPECT_TRUE(left.empty()) << "left behind: " << left.front();
}

// Issue 44: torchtitan's two files are written together or not at all: when the configuration
// cannot be written (a read-only mount here; a disk with room for the CSV only in the campaign)
// the schedule CSV is not left behind either.
TEST(OutputFile, TorchtitanLeavesNeitherFileWhenOneCannotBeWritten) {
  if (!haveMountNamespace()) GTEST_SKIP() << "unshare -rm (a private tmpfs) is not available here";
  const std::string resources = PIPESTUDIO_RESOURCES;
  const std::string plan = (tempDir() / "titan-pair.json").string();
  ASSERT_EQ(cli({"plan", "--model", resources + "/models/gpt3-1.3b.json", "--cluster",
                 resources + "/clusters/a100-1x8-nvlink.json", "--schedule", "1f1b", "--devices", "2", "--microbatches",
                 "4", "-o", plan})
                .exitCode,
            0);
  for (const char* config : {"python", "toml"}) {
    const std::string file = std::string("/mnt/ro/titan.") + (std::string(config) == "python" ? "py" : "toml");
    std::string script =
        "mount -t tmpfs tmpfs /mnt || exit 90; mkdir /mnt/rw /mnt/ro && mount -t tmpfs -o ro tmpfs /mnt/ro || exit "
        "91; ";
    script.append(kCli).append(" export ").append(plan).append(" --format torchtitan --torchtitan-config ");
    script.append(config).append(" -o ").append(file);
    script.append(" --csv-output /mnt/rw/titan.csv; echo \"exit=$?\"; ls -A /mnt/rw /mnt/ro");
    const auto r = runUnshared(script, 60);
    ASSERT_NE(r.exitCode, 90) << r.err;
    ASSERT_NE(r.exitCode, 91) << r.err;
    EXPECT_NE(r.out.find("exit=1"), std::string::npos) << config << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("Read-only file system"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("titan"), std::string::npos) << config << ": left behind: " << r.out;
  }
}
