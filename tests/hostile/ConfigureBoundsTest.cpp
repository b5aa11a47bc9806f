// Issue 44: the configurator answers every request with a ranking or a clear message, within
// bounded work and memory: a model of 10,000 identical blocks, `--top` past the bound, and recipes
// no configuration can take (a precision the GPUs have no peak for, an expert tensor degree no
// expert or pipeline rank can hold) are said to be what they are. Deadlines below guard against
// hangs; the memory limit is the bound the search must live in.
#include <gtest/gtest.h>

#include <string>

#include "Spawn.hpp"
#include "pipestudio/common/Json.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

using namespace hostile;

namespace {

const std::string kResources = PIPESTUDIO_RESOURCES;
const std::string kH100x32 = kResources + "/clusters/h100-4x8-ib.json";

}  // namespace

TEST(ConfigureBounds, TenThousandIdenticalBlocksAnswerWithinBoundedMemory) {
  const std::string model = (tempDir() / "blocks-10000.json").string();
  spit(model, R"({"schema": "pipestudio.model/1", "name": "blocks", "layers": [{"name": "block", "kind": "transformer",
    "transformer": {"hidden": 1024, "seq": 2048, "heads": 16, "ffn": 4096}, "repeat": 10000}]})");
  // 3 GiB of address space: the search keeps its candidates and tables bounded (it once held
  // several GB and died with std::bad_alloc).
  const auto r = run({"/bin/sh", "-c", "ulimit -v 3145728 && exec \"$0\" \"$@\"", kCli, "configure", "--model", model,
                      "--cluster", kH100x32, "--json"},
                     {.stdinPath = "/dev/null", .stdoutPath = "", .deadlineS = 240});
  ASSERT_NE(r.exitCode, -2) << "configure did not answer";
  EXPECT_TRUE(r.exitCode == 0 || r.exitCode == 1) << r.exitCode << ": " << r.err;
  EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  if (r.exitCode == 0) {
    auto doc = pipestudio::parseJson(r.out, "<stdout>");
    ASSERT_THAT(doc, HasValue());
    EXPECT_FALSE(doc->root["feasible"].empty());
  } else {
    EXPECT_NE(r.err.find("configure: "), std::string::npos) << r.err;
  }
}

TEST(ConfigureBounds, TopPastTheBoundIsRefusedNamingIt) {
  const auto r =
      cli({"configure", "--model", kResources + "/models/gpt3-1.3b.json", "--cluster", kH100x32, "--top", "100000"});
  EXPECT_EQ(r.exitCode, 2) << r.out;
  EXPECT_NE(r.err.find("--top"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1000"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(ConfigureBounds, ARecipeNoConfigurationCanTakeIsNamed) {
  // H100 has no NVFP4 tensor cores: the catalogue gives it no nvfp4 peak.
  const auto precision = cli(
      {"configure", "--model", kResources + "/models/gpt3-1.3b.json", "--cluster", kH100x32, "--precision", "nvfp4"});
  EXPECT_EQ(precision.exitCode, 1) << precision.out;
  EXPECT_NE(precision.err.find("--precision nvfp4: GPU 'H100"), std::string::npos) << precision.err;
  EXPECT_NE(precision.err.find("has no nvfp4 peak"), std::string::npos) << precision.err;
  EXPECT_EQ(precision.err.find("could be planned"), std::string::npos) << precision.err;
  // An expert tensor degree that divides no expert MLP.
  const std::string moe = (tempDir() / "moe-etp.json").string();
  spit(moe, R"({"schema": "pipestudio.model/1", "name": "moe", "layers": [{"name": "t", "kind": "transformer",
    "transformer": {"hidden": 1024, "seq": 1024, "heads": 8, "ffn": 4096, "experts": 8, "top_k": 2,
    "expert_ffn": 1024}, "repeat": 8}]})");
  const auto etp = cli({"configure", "--model", moe, "--cluster", kH100x32, "--etp", "3"});
  EXPECT_EQ(etp.exitCode, 1) << etp.out;
  EXPECT_NE(etp.err.find("--etp 3 does not divide the expert MLP size 1024"), std::string::npos) << etp.err;
  EXPECT_EQ(etp.err.find("global batch"), std::string::npos) << etp.err;
  // Settings of experts on a dense model.
  const auto flex = cli({"configure", "--model", kResources + "/models/gpt3-1.3b.json", "--cluster", kH100x32,
                         "--moe-token-dispatcher", "flex"});
  EXPECT_EQ(flex.exitCode, 1) << flex.out;
  EXPECT_NE(flex.err.find("--moe-token-dispatcher flex needs a mixture-of-experts model"), std::string::npos)
      << flex.err;
}
