// Issue 44: no command disagrees with another about a plan. A hand-edited plan that `plan` would
// refuse (a precision its GPU has no peak for, an expert layout its GPUs cannot hold, offload
// waits in a cycle, a config that claims more microbatches than its ops run) is refused by
// `validate`, `simulate`, `run` and every export alike, with the one message of the one check.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "Spawn.hpp"
#include "pipestudio/common/Json.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

using namespace hostile;
namespace fs = std::filesystem;
using pipestudio::Json;

namespace {

const std::string kResources = PIPESTUDIO_RESOURCES;

Json readJson(const std::string& path) {
  auto doc = pipestudio::loadJsonFile(path);
  EXPECT_THAT(doc, HasValue());
  return doc ? doc->root : Json();
}

std::string writeJson(const std::string& name, const Json& j) {
  const std::string path = (tempDir() / name).string();
  spit(path, j.dump(1));
  return path;
}

std::string planned(const std::string& name, const std::vector<std::string>& args) {
  const std::string out = (tempDir() / name).string();
  std::vector<std::string> all{"plan"};
  all.insert(all.end(), args.begin(), args.end());
  all.insert(all.end(), {"-o", out});
  const auto r = cli(all);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  return out;
}

// Every command that reads a plan refuses `plan` with a message holding `why`.
void expectEveryCommandRefuses(const std::string& plan, const std::string& why) {
  const std::string db = (tempDir() / ("agree-" + fs::path(plan).stem().string() + ".sqlite")).string();
  const std::vector<std::vector<std::string>> commands = {
      {"validate", plan},
      {"simulate", plan},
      {"simulate", plan, "--json"},
      {"run", plan, "--backend", "cpu", "--history", db},
      {"export", plan, "--format", "chrome"},
      {"export", plan, "--format", "csv"},
      {"export", plan, "--format", "megatron"},
      {"export", plan, "--format", "torchtitan", "-o", (tempDir() / "agree_titan.py").string()},
  };
  for (const auto& args : commands) {
    const auto r = cli(args);
    EXPECT_EQ(r.exitCode, 1) << args[0] << " " << args.back() << ": " << r.out;
    EXPECT_NE(r.err.find(why), std::string::npos) << args[0] << " " << args.back() << ": " << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(tempDir() / "agree_titan.py"));
}

}  // namespace

TEST(PlanAgreement, APrecisionTheGpuHasNoPeakForIsRefusedByEveryCommand) {
  const std::string plan = planned(
      "h100-bf16.json", {"--model", kGood + "tiny-model.json", "--cluster", kResources + "/clusters/h100-4x8-ib.json",
                         "--schedule", "1f1b", "--devices", "2", "--microbatches", "4"});
  Json j = readJson(plan);
  j["config"]["precision"] = "nvfp4";
  const std::string edited = writeJson("h100-nvfp4.json", j);
  // What `plan` says of the same request.
  const auto refused =
      cli({"plan", "--model", kGood + "tiny-model.json", "--cluster", kResources + "/clusters/h100-4x8-ib.json",
           "--schedule", "1f1b", "--devices", "2", "--microbatches", "4", "--precision", "nvfp4"});
  ASSERT_EQ(refused.exitCode, 1);
  const std::string why = "--precision nvfp4: GPU 'H100";
  EXPECT_NE(refused.err.find(why), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("has no nvfp4 peak"), std::string::npos) << refused.err;
  expectEveryCommandRefuses(edited, "/config: " + why);
}

TEST(PlanAgreement, AnExpertLayoutThePlanWouldRefuseIsRefusedByEveryCommand) {
  const std::string model = (tempDir() / "moe-small.json").string();
  spit(model, R"({"schema": "pipestudio.model/1", "name": "moe-small", "layers": [{"name": "t", "kind": "transformer",
    "transformer": {"hidden": 256, "seq": 128, "heads": 4, "ffn": 512, "experts": 4, "top_k": 2, "expert_ffn": 384},
    "repeat": 4}]})");
  const std::string plan = planned(
      "moe-ep2-dp2.json", {"--model", model, "--cluster", kResources + "/clusters/h100-4x8-ib.json", "--schedule",
                           "1f1b", "--devices", "2", "--microbatches", "4", "--ep", "2", "--dp", "2"});
  Json j = readJson(plan);
  j["config"]["etp"] = 3;
  const std::string edited = writeJson("moe-etp3.json", j);
  expectEveryCommandRefuses(edited, "/config: --ep 2 × --etp 3 = 6 does not divide");
}

TEST(PlanAgreement, OffloadWaitsInACycleAreRefusedNamingTheCycle) {
  const std::string plan =
      planned("offload.json",
              {"--model", kResources + "/models/gpt3-1.3b.json", "--cluster", kResources + "/clusters/h100-4x8-ib.json",
               "--schedule", "pipeoffload", "--devices", "4", "--microbatches", "8", "--memory-limit", "30GiB"});
  Json j = readJson(plan);
  ASSERT_TRUE(j.contains("offload_waits") && !j["offload_waits"].empty()) << j.dump().substr(0, 400);
  // Under a 30 GiB limit device 0's forwards wait for offloads (two waits). Edited, the first
  // forward waits for its own offload, which needs that forward first.
  Json& wait = j["offload_waits"][0];
  wait["forward"] = wait["after_offload"];
  const std::string edited = writeJson("offload-cycle.json", j);
  const auto v = cli({"validate", edited});
  EXPECT_EQ(v.exitCode, 1) << v.out;
  EXPECT_NE(v.err.find("the per-device orders deadlock"), std::string::npos) << v.err;
  EXPECT_NE(v.err.find("its offload wait /offload_waits/0"), std::string::npos) << v.err;
  expectEveryCommandRefuses(edited, "its offload wait /offload_waits/0");
}

TEST(PlanAgreement, AConfigThatClaimsMoreMicrobatchesThanItsOpsRunIsRefused) {
  Json j = readJson(kGood + "tiny-plan.json");
  const int m = j["config"]["microbatches"].get<int>();
  j["config"]["microbatches"] = 1000000;
  const std::string edited = writeJson("claims-1e6.json", j);
  expectEveryCommandRefuses(edited, "/config/microbatches: 1000000, but no op runs microbatch " + std::to_string(m));
}
