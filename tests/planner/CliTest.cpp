// Runs the built pipestudio-cli: schedules, plan, simulate and their bad-input exits.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/common/Json.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/RunCommand.hpp"

using pipestudio::test::HasValue;

namespace {

namespace fs = std::filesystem;

using CliRun = pipestudio::test::CommandResult;

const std::string kCli = std::string(PIPESTUDIO_BINARY_DIR) + "/app/pipestudio-cli";
const std::string kResources = PIPESTUDIO_RESOURCES;

CliRun run(const std::string& args) { return pipestudio::test::runCommand(kCli + " " + args + " 2>&1"); }

// Runs a command that must exit with `status`, its output saying each of `says`.
CliRun expectExit(const std::string& args, int status, std::initializer_list<std::string_view> says = {}) {
  CliRun r = run(args);
  EXPECT_EQ(r.status, status) << args << ": " << r.out;
  for (const std::string_view said : says) EXPECT_NE(r.out.find(said), std::string::npos) << args << ": " << r.out;
  return r;
}

// A fresh folder for one test's files, named after it and this process (the caller removes it).
fs::path scratchDir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("ps-cli-" + name + "-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

// The --json document of a command that must succeed; nullopt (the failure recorded) otherwise.
std::optional<pipestudio::Json> jsonOutput(const CliRun& r) {
  EXPECT_EQ(r.status, 0) << r.out;
  if (r.status != 0) return std::nullopt;
  auto doc = pipestudio::parseJson(r.out, "<stdout>");
  EXPECT_TRUE(doc.hasValue()) << r.out;
  if (!doc) return std::nullopt;
  return std::move(doc->root);
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kCli)) GTEST_SKIP() << kCli << " not built";
    if (!fs::exists(kResources + "/models/gpt3-1.3b.json") ||
        !fs::exists(kResources + "/clusters/a100-1x8-nvlink.json")) {
      GTEST_SKIP() << "example resources missing";
    }
  }
  std::string model = kResources + "/models/gpt3-1.3b.json";
  std::string cluster = kResources + "/clusters/a100-1x8-nvlink.json";
};

// Issue 45: `configure` shows every setting that tells two ranked rows apart (cp_comm_type, etp,
// …) or folds rows that are the same plan: no two printed rows read alike in their settings
// (everything but the rank and the six figures after them: iteration, sync, tokens/s, bubble,
// MFU and the peak, printed as a number and a unit).
TEST_F(Cli, ConfigureRowsNeverLookAlike) {
  const CliRun r = run("configure --model " + kResources + "/models/llama3-8b.json --cluster " + kResources +
                       "/clusters/h100-4x8-ib.json --top 20");
  ASSERT_EQ(r.status, 0) << r.out;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::string> settings;
  bool table = false;
  while (std::getline(lines, line)) {
    if (line.rfind("rank ", 0) == 0) {
      table = true;
      continue;
    }
    if (!table || line.empty()) {
      if (table) break;
      continue;
    }
    std::istringstream cells(line);
    std::vector<std::string> words;
    for (std::string w; cells >> w;) words.push_back(w);
    ASSERT_GT(words.size(), 8U) << line;
    std::string row;
    for (std::size_t i = 1; i + 7 < words.size(); ++i) row += words[i] + ' ';
    for (const std::string& earlier : settings) EXPECT_NE(row, earlier) << "two rows read alike:\n" << r.out;
    settings.push_back(row);
  }
  EXPECT_GE(settings.size(), 10U) << r.out;
}

TEST_F(Cli, SchedulesListsEveryName) {
  const CliRun r = run("schedules");
  EXPECT_EQ(r.status, 0);
  for (const char* s : {"gpipe\n", "1f1b\n", "interleaved-1f1b\n", "zb-h1\n", "zb-v\n", "v-min\n", "dualpipe-v\n"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  }
}

TEST_F(Cli, PlanWritesAPlanThatSimulateReproduces) {
  const fs::path dir = scratchDir("plan");
  const std::string out = (dir / "plan.json").string();
  const CliRun human = run("plan --model " + model + " --cluster " + cluster +
                           " --schedule 1f1b --devices 4 --microbatches 8 -o " + out);
  ASSERT_EQ(human.status, 0) << human.out;
  EXPECT_NE(human.out.find("makespan"), std::string::npos);
  EXPECT_NE(human.out.find("bubble ratio"), std::string::npos);
  const CliRun json =
      run("plan --model " + model + " --cluster " + cluster + " --schedule zb-v --devices 4 --microbatches 8 --json");
  ASSERT_EQ(json.status, 0) << json.out;
  auto doc = pipestudio::parseJson(json.out, "<stdout>");
  ASSERT_THAT(doc, HasValue());
  EXPECT_EQ(doc->root["config"]["schedule"], "zb-v");
  EXPECT_GT(doc->root["metrics"]["makespan_ms"].get<double>(), 0.0);
  const CliRun sim = run("simulate " + out + " --json");
  ASSERT_EQ(sim.status, 0) << sim.out;
  auto simDoc = pipestudio::parseJson(sim.out, "<stdout>");
  ASSERT_THAT(simDoc, HasValue());
  auto saved = pipestudio::loadJsonFile(out);
  ASSERT_TRUE(saved.hasValue());
  EXPECT_NEAR(simDoc->root["metrics"]["makespan_ms"].get<double>(), saved->root["metrics"]["makespan_ms"].get<double>(),
              1e-6);
  fs::remove_all(dir);
}

TEST_F(Cli, FrozenComponentsReportTheFillAndVocabParallelSplitsTheHead) {
  const std::string sd = kResources + "/models/stable-diffusion-2.1.json";
  const CliRun filled = run("plan --model " + sd + " --cluster " + cluster +
                            " --schedule 1f1b --devices 8 --microbatches 16 --partition dp --fill greedy --json");
  ASSERT_EQ(filled.status, 0) << filled.out;
  auto doc = pipestudio::parseJson(filled.out, "<stdout>");
  ASSERT_THAT(doc, HasValue());
  const auto& fill = doc->root["fill"];
  ASSERT_TRUE(fill.is_object()) << filled.out;
  EXPECT_EQ(fill["mode"], "greedy");
  EXPECT_EQ(fill["devices"].size(), 8u);
  // Filling never loses to running the frozen work before the pipeline.
  EXPECT_GE(fill["speedup_over_no_fill"].get<double>(), 1.0);
  EXPECT_LE(fill["iteration_ms"].get<double>(), fill["no_fill_ms"].get<double>() + 1e-9);

  const fs::path dir = scratchDir("vocab");
  const std::string out = (dir / "vocab.plan.json").string();
  const CliRun vocab = run("plan --model " + model + " --cluster " + cluster +
                           " --schedule 1f1b --devices 4 --microbatches 8 --vocab-parallel -o " + out);
  ASSERT_EQ(vocab.status, 0) << vocab.out;
  auto saved = pipestudio::loadJsonFile(out);
  ASSERT_THAT(saved, HasValue());
  int s = 0;
  int t = 0;
  for (const auto& op : saved->root["ops"]) {
    s += op["kind"] == "S";
    t += op["kind"] == "T";
  }
  EXPECT_EQ(s, 4 * 8);  // one S and one T per device and microbatch
  EXPECT_EQ(t, 4 * 8);
  fs::remove_all(dir);
}

TEST_F(Cli, ImpossibleRequestsExitOneWithTheReason) {
  CliRun r =
      run("plan --model " + model + " --cluster " + cluster + " --schedule dualpipe --devices 3 --microbatches 6");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("even number of devices"), std::string::npos) << r.out;
  r = run("plan --model " + model + " --cluster " + cluster +
          " --schedule 1f1b --devices 4 --microbatches 8 --memory-limit 1MiB");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("below what one microbatch needs"), std::string::npos) << r.out;
  r = run("plan --model /nonexistent/model.json --cluster " + cluster +
          " --schedule 1f1b --devices 4 --microbatches 8");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("/nonexistent/model.json"), std::string::npos) << r.out;
  r = run("simulate /nonexistent/plan.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("/nonexistent/plan.json"), std::string::npos) << r.out;
  r = run("plan --model " + model);
  EXPECT_EQ(r.status, 2) << r.out;  // usage
}

// Issue 31: seq1f1b's --seq-splits and the --offload-ratio are checked where they are read
// (usage, exit 2) or against the request (exit 1), each with the reason; the plans they make
// export where the format can say them and are refused, with what is missing, where not.
TEST_F(Cli, SequenceSplitsAndOffloadingExitWithTheReason) {
  const std::string base = "plan --model " + model + " --cluster " + cluster + " --devices 4 --microbatches 8 ";
  for (const std::string& bad :
       {std::string("--schedule seq1f1b --seq-splits 0"), std::string("--schedule seq1f1b --seq-splits x"),
        std::string("--schedule seq1f1b --seq-splits 2000"),
        std::string("--schedule seq1f1b --seq-splits 2 --seq-split random"),
        std::string("--schedule pipeoffload --offload-ratio 1.5"),
        std::string("--schedule pipeoffload --offload-ratio -0.5"),
        std::string("--schedule pipeoffload --offload-ratio nan")}) {
    const CliRun r = run(base + bad);
    EXPECT_EQ(r.status, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find(bad.find("seq-split ") != std::string::npos ? "--seq-split" : bad.substr(bad.rfind("--"), 12)),
              std::string::npos)
        << bad << ": " << r.out;
  }
  CliRun r = expectExit(base + "--schedule 1f1b --seq-splits 2", 1, {"1f1b schedules whole microbatches"});
  expectExit(base + "--schedule dualpipe --offload-ratio 0.5", 1, {"--offload-ratio"});
  expectExit(base + "--schedule seq1f1b --seq-splits 8000", 2);
  // pipeoffload always offloads: an explicit 0 is refused, not read as its default.
  expectExit(base + "--schedule pipeoffload --offload-ratio 0", 2, {"pipeoffload always offloads"});
  // A GPU without a host link: pipeoffload plans its order alone and says so (not a ratio that
  // nothing honours).
  r = run("plan --model " + model + " --cluster " + kResources +
          "/clusters/workstation-2gpu.json --devices 2 --microbatches 4 --schedule pipeoffload");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("offload: none (the cluster's GPU names no host link"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("offload: ratio"), std::string::npos) << r.out;

  const fs::path dir = scratchDir("seq");
  const std::string seq = (dir / "seq.json").string();
  const std::string offload = (dir / "offload.json").string();
  r = run(base + "--schedule seq1f1b --seq-splits 2 -o " + seq);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("sequence: 8 microbatches × 2 chunks"), std::string::npos) << r.out;
  r = run(base + "--schedule pipeoffload -o " + offload);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("activations offloaded and reloaded"), std::string::npos) << r.out;
  for (const std::string& plan : {seq, offload}) {
    EXPECT_EQ(run("simulate " + plan).status, 0) << plan;
    expectExit("export " + plan + " --format csv -o " + (dir / "out.csv").string(), 1,
               {plan == seq ? "sequence chunks" : "activation copy"});
    expectExit("export " + plan + " --format megatron -o " + (dir / "out.sh").string(), 1, {"Megatron-LM cannot"});
    EXPECT_EQ(run("export " + plan + " --format chrome -o " + (dir / "out.json").string()).status, 0) << plan;
  }
  fs::remove_all(dir);
}

// Issue 42: Megatron-Core's activation offloading from the command line. Bad input exits 1
// naming the flag and the numbers (a GPU without a host link, more layers than the rank holds,
// a pipeline), unknown modules and fractions outside [0, 1] are usage errors (exit 2); a plan
// that offloads records it and exports Megatron's flags.
TEST_F(Cli, ActivationOffloadIsRecordedAndRefusedWithTheNumbers) {
  const std::string base = "plan --model " + model + " --schedule 1f1b --microbatches 4 ";
  CliRun r = run(base + "--cluster " + kResources +
                 "/clusters/workstation-2gpu.json --devices 1 --cpu-offloading-num-layers 2");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("--cpu-offloading-num-layers 2: GPU 'GeForce RTX 4090' of pipeline rank 0 names no host link"),
            std::string::npos)
      << r.out;
  r = expectExit(base + "--cluster " + cluster + " --devices 1 --cpu-offload-layers 24", 1);
  EXPECT_NE(r.out.find("--cpu-offloading-num-layers 24 offloads more layers than pipeline rank 0 may: it holds 24"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("at most 23"), std::string::npos) << r.out;
  expectExit(base + "--cluster " + cluster + " --devices 2 --cpu-offloading-num-layers 4", 1,
             {"needs one pipeline rank, got --devices 2"});
  expectExit(base + "--cluster " + cluster + " --devices 2 --offload-modules core_attn,kv_cache", 2,
             {"'kv_cache' is not a module"});
  expectExit(
      base + "--cluster " + cluster + " --devices 2 --offload-modules core_attn --activation-offload-fraction 1.5", 2);

  const fs::path dir = scratchDir("offload");
  const std::string out = (dir / "offload.json").string();
  r = run(base + "--cluster " + cluster +
          " --devices 2 --offload-modules core_attn,attn_proj --activation-offload-fraction 0.5 -o " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("activation offload: core_attn,attn_proj (fine-grained, fraction 0.5)"), std::string::npos)
      << r.out;
  const CliRun sim = run("simulate " + out + " --json");
  auto doc = jsonOutput(sim);
  ASSERT_TRUE(doc.has_value());
  EXPECT_EQ((*doc)["config"]["offload_modules"], "core_attn,attn_proj");
  EXPECT_EQ((*doc)["config"]["activation_offload_fraction"], 0.5);
  expectExit("export " + out + " --format megatron -o " + (dir / "run.sh").string(), 0);
  std::ifstream sh(dir / "run.sh");
  const std::string text((std::istreambuf_iterator<char>(sh)), std::istreambuf_iterator<char>());
  for (const char* flag : {"--fine-grained-activation-offloading \\\n", "--offload-modules core_attn attn_proj \\\n",
                           "--activation-offload-fraction 0.5"}) {
    EXPECT_NE(text.find(flag), std::string::npos) << flag << " in\n" << text;
  }
  fs::remove_all(dir);
}

// GPT-3 1.3B has 26 layers: a V schedule on 4 devices has 8 chunks that uniform cannot make
// equal. Asked for explicitly, uniform exits 1 saying what zb-v needs; the default partition
// (balanced) plans it.
TEST_F(Cli, UniformChunksThatDoNotDivideTheLayersExitOne) {
  const std::string base =
      "plan --model " + model + " --cluster " + cluster + " --schedule zb-v --devices 4 --microbatches 8";
  CliRun r = expectExit(base + " --partition uniform", 1,
                        {"zb-v needs chunks of equal size", "26 layers", "8 virtual stages", "--partition balanced"});
  r = run(base + " --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto doc = pipestudio::parseJson(r.out, "<stdout>");
  ASSERT_THAT(doc, HasValue());
  EXPECT_EQ(doc->root["config"]["partition"], "balanced");
  r = run("plan --model " + model + " --cluster " + cluster +
          " --schedule 1f1b --devices 4 --microbatches 8 --partition uniform");
  EXPECT_EQ(r.status, 0) << r.out;  // one chunk per device: near-even split
}

std::string readText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Issue 28 item 12: torchtitan main takes a Python configuration (--module/--config); the TOML
// job config of v0.2.2 and earlier stays behind --torchtitan-config toml (or a .toml output).
TEST_F(Cli, ExportTorchtitanWritesPythonForMainAndTomlOnRequest) {
  const fs::path dir = scratchDir("titan");
  const std::string plan = (dir / "plan.json").string();
  ASSERT_EQ(run("plan --model " + model + " --cluster " + cluster +
                " --schedule zb-h1 --devices 4 --microbatches 8 -o " + plan)
                .status,
            0);
  const CliRun py = run("export " + plan + " --format torchtitan -o " + (dir / "pp_plan.py").string());
  ASSERT_EQ(py.status, 0) << py.out;
  EXPECT_NE(py.out.find("--module pp_plan --config pipestudio_plan"), std::string::npos) << py.out;
  EXPECT_NE(py.out.find("export: note: torchtitan ships no configuration for GPT-3 1.3B"), std::string::npos) << py.out;
  const std::string module = readText(dir / "pp_plan.py");
  EXPECT_NE(module.find("def pipestudio_plan() -> Trainer.Config:"), std::string::npos) << module;
  EXPECT_NE(module.find("\"pp_plan.csv\""), std::string::npos);
  EXPECT_NE(readText(dir / "pp_plan.csv").find("0F0"), std::string::npos);

  const CliRun base = run("export " + plan + " --format torchtitan --torchtitan-base my.configs:gpt3 -o " +
                          (dir / "based.py").string());
  ASSERT_EQ(base.status, 0) << base.out;
  EXPECT_EQ(base.out.find("note"), std::string::npos) << base.out;
  EXPECT_NE(readText(dir / "based.py").find("\"my.configs:gpt3\""), std::string::npos);

  const std::string exportTitan = "export " + plan + " --format torchtitan ";
  for (const std::string& args : {std::string("-o ") + (dir / "old.toml").string(),
                                  "--torchtitan-config toml -o " + (dir / "older.cfg").string()}) {
    const CliRun toml = run(exportTitan + args);
    ASSERT_EQ(toml.status, 0) << toml.out;
    EXPECT_NE(toml.out.find("torchtitan v0.2.2 TOML job config"), std::string::npos) << toml.out;
  }
  EXPECT_NE(readText(dir / "old.toml").find("[parallelism]"), std::string::npos);
  EXPECT_NE(readText(dir / "older.cfg").find("pipeline_parallel_schedule_csv"), std::string::npos);

  expectExit("export " + plan + " --format torchtitan -o " + (dir / "pp-plan.py").string(), 2,
             {"not a Python identifier"});
  const CliRun badBase =
      run("export " + plan + " --format torchtitan --torchtitan-base llama3 -o " + (dir / "x.py").string());
  EXPECT_EQ(badBase.status, 2) << badBase.out;
  EXPECT_NE(badBase.out.find("expected MODULE:FUNCTION"), std::string::npos) << badBase.out;
  fs::remove_all(dir);
}

// Issue 28 item 10: a model of measured times has no hidden size, heads or sequence length, which
// Megatron's argument check requires: the export says so.
TEST_F(Cli, ExportMegatronNamesTheArgumentsAMeasuredModelLacks) {
  const fs::path dir = scratchDir("megatron");
  const std::string measured = (dir / "measured.json").string();
  {
    std::string layers;
    int index = 0;
    for (const char* kind : {"embedding", "transformer", "transformer", "transformer", "transformer", "lm_head"}) {
      layers += std::string(layers.empty() ? "" : ",") + R"({"name": "l)" + std::to_string(index++) +
                R"(", "kind": ")" + kind +
                R"(", "forward_ms": 1, "backward_input_ms": 1, "backward_weight_ms": 1, "activation_bytes": 1000,)" +
                R"( "parameter_bytes": 1000, "output_bytes": 100})";
    }
    std::FILE* f = std::fopen(measured.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string doc =
        R"({"schema": "pipestudio.model/1", "name": "measured", "samples_per_microbatch": 1, "layers": [)" + layers +
        "]}";
    std::fwrite(doc.data(), 1, doc.size(), f);
    std::fclose(f);
  }
  const std::string plan = (dir / "plan.json").string();
  const CliRun planned = run("plan --model " + measured + " --cluster " + cluster +
                             " --schedule 1f1b --devices 2 --microbatches 4 -o " + plan);
  ASSERT_EQ(planned.status, 0) << planned.out;
  const CliRun r = run("export " + plan + " --format megatron");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("export: note: Megatron-LM also requires --hidden-size --num-attention-heads "
                       "--max-position-embeddings --seq-length"),
            std::string::npos)
      << r.out;
  fs::remove_all(dir);
}

}  // namespace

// Issue 43's MoE recipe settings: the permutation's fusion, HybridEP's own, its combine chunk and
// CUDA graphs are recorded in `--json`, written by the Megatron export as Megatron takes them, and
// refused where Megatron refuses them; a measured expert GEMM curve is read from its file (a
// missing one is bad input naming it).
TEST_F(Cli, MoeRecipeSettingsAreRecordedExportedAndChecked) {
  const std::string qwen = kResources + "/models/qwen3-30b-a3b.json";
  const std::string h100 = kResources + "/clusters/h100-4x8-ib.json";
  const std::string base = "plan --model " + qwen + " --cluster " + h100 +
                           " --schedule 1f1b --devices 1 --dp 16 --ep 16 --global-batch 64 --micro-batch-size 1 ";
  const fs::path dir = scratchDir("moe");
  const std::string plan = (dir / "plan.json").string();
  const CliRun ok = run(base +
                        "--moe-token-dispatcher flex --moe-flex-backend hybridep --moe-permute-fusion-into-hybridep"
                        " --moe-combine-chunk-tokens 64 --cuda-graph-impl transformer_engine"
                        " --cuda-graph-modules moe_router,moe_preprocess --expert-gemm-curve " +
                        std::string(PIPESTUDIO_TEST_DATA) + "/good/expert-gemm-curve.json --json -o " + plan);
  const auto doc = jsonOutput(ok);
  ASSERT_TRUE(doc);
  const pipestudio::Json& config = (*doc)["config"];
  EXPECT_FALSE(config.contains("moe_permute_fusion"));  // the default (fused), as plan files leave it out
  EXPECT_EQ(config["moe_permute_fusion_into_hybridep"], true);
  EXPECT_EQ(config["moe_combine_chunk_tokens"], 64);
  EXPECT_EQ(config["cuda_graph_impl"], "transformer_engine");
  EXPECT_EQ(config["cuda_graph_modules"], "moe_router,moe_preprocess");
  EXPECT_EQ(run("simulate " + plan).status, 0);
  const CliRun megatron = run("export " + plan + " --format megatron");
  ASSERT_EQ(megatron.status, 0) << megatron.out;
  for (const char* flag :
       {"--moe-permute-fusion-into-hybridep", "--moe-permute-fusion ", "--cuda-graph-impl transformer_engine",
        "--cuda-graph-modules moe_router moe_preprocess", "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API=64"}) {
    EXPECT_NE(megatron.out.find(flag), std::string::npos) << flag << "\n" << megatron.out;
  }

  expectExit(base + "--cuda-graph-impl transformer_engine --cuda-graph-modules moe_preprocess", 1,
             {"moe_preprocess needs moe_router"});
  expectExit(base + "--cuda-graph-modules attn", 2, {"--cuda-graph-modules needs --cuda-graph-impl"});
  expectExit(base + "--cuda-graph-impl transformer_engine --cuda-graph-modules attn,everything", 2,
             {"'everything' is not a module"});
  expectExit(base + "--moe-permute-fusion-into-hybridep", 1, {"needs the flex dispatcher with HybridEP"});
  expectExit(base + "--moe-permute-fusion --no-moe-permute-fusion", 2);
  expectExit(base + "--expert-gemm-curve " + (dir / "missing.json").string(), 1,
             {"--expert-gemm-curve: ", "missing.json"});
  fs::remove_all(dir);
}

// Megatron's sync-free MoE (issue 43): HybridEP's rank budget and the paged stash are recorded,
// exported with the op fuser Megatron needs beside the budget, and refused where Megatron-Core
// refuses them; a full-iteration graph needs a dispatch that does not wait on the host.
TEST_F(Cli, SyncFreeMoeSettingsAreRecordedExportedAndChecked) {
  const std::string base = "plan --model " + kResources + "/models/qwen3-30b-a3b.json --cluster " + kResources +
                           "/clusters/h100-4x8-ib.json --schedule 1f1b --devices 1 --dp 16 --ep 16 --global-batch 64 "
                           "--micro-batch-size 1 ";
  const std::string hybridEp = base + "--moe-token-dispatcher flex --moe-flex-backend hybridep ";
  const fs::path dir = scratchDir("syncfree");
  const std::string plan = (dir / "plan.json").string();
  const CliRun ok = run(hybridEp +
                        "--moe-expert-rank-capacity-factor 1.5 --moe-paged-stash "
                        "--moe-paged-stash-buffer-size-factor-cuda 1.2 --cuda-graph-impl full_iteration --json -o " +
                        plan);
  const auto doc = jsonOutput(ok);
  ASSERT_TRUE(doc) << ok.out;
  const pipestudio::Json& config = (*doc)["config"];
  EXPECT_EQ(config["moe_expert_rank_capacity_factor"], 1.5);
  EXPECT_EQ(config["moe_paged_stash"], true);
  EXPECT_EQ(config["moe_paged_stash_buffer_size_factor_cuda"], 1.2);
  EXPECT_EQ(run("simulate " + plan).status, 0);
  const CliRun megatron = run("export " + plan + " --format megatron");
  ASSERT_EQ(megatron.status, 0) << megatron.out;
  for (const char* flag : {"--moe-expert-rank-capacity-factor 1.5", "--use-transformer-engine-op-fuser",
                           "--moe-paged-stash ", "--moe-paged-stash-buffer-size-factor-cuda 1.2"}) {
    EXPECT_NE(megatron.out.find(flag), std::string::npos) << flag << "\n" << megatron.out;
  }

  const std::vector<std::pair<std::string, const char*>> refused = {
      {base + "--moe-expert-rank-capacity-factor 1.5", "is HybridEP's token budget"},
      {hybridEp + "--moe-paged-stash", "--moe-paged-stash needs --moe-expert-rank-capacity-factor"},
      {hybridEp + "--moe-expert-rank-capacity-factor 1.5 --moe-paged-stash-buffer-size-factor-cuda 1.2",
       "needs --moe-paged-stash"},
      {hybridEp + "--cuda-graph-impl full_iteration", "hybridep dispatcher waits on the host"},
      {base + "--cuda-graph-impl full_iteration", "dropless all-to-all dispatcher waits on the host"},
  };
  for (const auto& [command, message] : refused) {
    const CliRun r = run(command);
    EXPECT_EQ(r.status, 1) << command << "\n" << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
  }
  expectExit(hybridEp + "--moe-expert-rank-capacity-factor 0.5", 2);
  fs::remove_all(dir);
}

// Issue 25's recipe flags: recorded in `--json`'s config, exposed communication per device in
// its metrics; a precision the GPU lacks, contradicting flags and unknown modules exit with the
// flag named.
TEST_F(Cli, RecipeFlagsAreRecordedAndRefusedWithTheFlagNamed) {
  const std::string h100 = kResources + "/clusters/h100-8x8-ib.json";
  const std::string llama = kResources + "/models/llama3-8b.json";
  const CliRun ok = run("plan --model " + llama + " --cluster " + h100 +
                        " --schedule 1f1b --devices 2 --tp 4 --microbatches 4 --precision fp8"
                        " --no-overlap-param-gather --grad-reduce-dtype fp32 --recompute full"
                        " --recompute-num-layers 2 --recompute-method block --json");
  const auto doc = jsonOutput(ok);
  ASSERT_TRUE(doc);
  const pipestudio::Json& config = (*doc)["config"];
  EXPECT_EQ(config["precision"], "fp8");
  EXPECT_EQ(config["overlap_param_gather"], false);
  EXPECT_EQ(config["tp_comm_overlap"], true);
  EXPECT_EQ(config["grad_reduce_dtype"], "fp32");
  EXPECT_EQ(config["recompute_num_layers"], 2);
  EXPECT_EQ(config["recompute_method"], "block");
  for (const auto& d : (*doc)["metrics"]["devices"]) {
    EXPECT_GT(d["exposed_comm_ms"].get<double>(), 0);
    EXPECT_GT(d["memory"]["low_precision_weight_bytes"].get<double>(), 0);
  }

  expectExit("plan --model " + llama + " --cluster " + cluster +
                 " --schedule 1f1b --devices 2 --microbatches 4 --precision fp8",
             1, {"--precision fp8"});
  // Block-scaled FP8 under Megatron-Bridge's name: recorded as fp8-block; refused where fp8 is.
  const CliRun block = run("plan --model " + llama + " --cluster " + h100 +
                           " --schedule 1f1b --devices 2 --tp 4 --microbatches 4 --precision fp8_ss --json");
  const auto blockDoc = jsonOutput(block);
  ASSERT_TRUE(blockDoc);
  EXPECT_EQ((*blockDoc)["config"]["precision"], "fp8-block");
  expectExit("plan --model " + llama + " --cluster " + cluster +
                 " --schedule 1f1b --devices 2 --microbatches 4 --precision fp8-block",
             1, {"--precision fp8-block"});
  expectExit("plan --model " + llama + " --cluster " + h100 +
                 " --schedule 1f1b --devices 2 --microbatches 4 --tp-comm-overlap --no-tp-comm-overlap",
             2, {"--tp-comm-overlap and --no-tp-comm-overlap"});
  expectExit("plan --model " + llama + " --cluster " + h100 +
                 " --schedule 1f1b --devices 2 --microbatches 4 --recompute selective"
                 " --recompute-modules core_attn,attn_everything",
             2, {"'attn_everything' is not a module"});
  const CliRun sms = run("plan --model " + llama + " --cluster " + h100 +
                         " --schedule 1f1b --devices 2 --microbatches 4 --moe-comm-sms 0");
  EXPECT_EQ(sms.status, 2) << sms.out;
  EXPECT_NE(sms.out.find("--moe-comm-sms"), std::string::npos) << sms.out;
  // The all-to-all kernels' SMs are an expert setting: a dense model has none to give them (issue 44).
  const CliRun dense = run("plan --model " + llama + " --cluster " + h100 +
                           " --schedule 1f1b --devices 2 --microbatches 4 --moe-comm-sms 24");
  EXPECT_EQ(dense.status, 1) << dense.out;
  EXPECT_NE(dense.out.find("--moe-comm-sms 24 needs a mixture-of-experts model"), std::string::npos) << dense.out;
  // The flex backend, as in Megatron, does not select the flex dispatcher by itself.
  const CliRun backend = run("plan --model " + llama + " --cluster " + h100 +
                             " --schedule 1f1b --devices 2 --microbatches 4 --moe-flex-backend hybridep");
  EXPECT_EQ(backend.status, 2) << backend.out;
  EXPECT_NE(backend.out.find("--moe-flex-backend hybridep needs --moe-token-dispatcher flex"), std::string::npos)
      << backend.out;
  // The flex dispatcher needs experts (issue 44: on a dense model it is refused, not ignored).
  const CliRun hybrid = run("plan --model " + kResources + "/models/qwen3-30b-a3b.json --cluster " + h100 +
                            " --schedule 1f1b --devices 2 --tp 4 --microbatches 4 --moe-token-dispatcher flex"
                            " --moe-flex-backend hybridep --json");
  const auto hybridDoc = jsonOutput(hybrid);
  ASSERT_TRUE(hybridDoc);
  EXPECT_EQ((*hybridDoc)["config"]["moe_flex_backend"], "hybridep");
  expectExit(
      "plan --model " + llama + " --cluster " + h100 + " --schedule 1f1b --devices 2 --microbatches 4 --precision fp6",
      2, {"--precision 'fp6'"});
}

// Issue 46: a given Megatron-LM layout is planned as given and shown beside the planner's own
// partition (the text summary's last lines; --json: megatron_layout).
TEST_F(Cli, MegatronLayoutIsPlannedBesideThePlannersPartition) {
  const std::string args = "plan --model " + model + " --cluster " + cluster +
                           " --schedule 1f1b --devices 4 --microbatches 8 --megatron-layout 'Et*5|t*6|t*6|t*7L'";
  auto doc = jsonOutput(run(args + " --json"));
  ASSERT_TRUE(doc.has_value());
  const pipestudio::Json& given = (*doc)["megatron_layout"];
  EXPECT_EQ(given["layout"], "Et*5|t*6|t*6|t*7L");
  EXPECT_EQ(given["stage_layers"], "6,6,6,8");  // the embedding and the lm_head are layers of the model
  EXPECT_EQ(given["iteration_ms"], (*doc)["metrics"]["iteration_ms"]);
  EXPECT_EQ(given["planner"]["partition"], "balanced");
  EXPECT_TRUE(given["planner"]["iteration_ms"].is_number());
  expectExit(args, 0, {"megatron layout (this plan): iteration", "planner's balanced partition: iteration"});
  // A layout of another model is refused with the stage and the layer.
  expectExit(args.substr(0, args.find("--megatron-layout")) + "--megatron-layout 'Et*4|t*4|t*4|t*4L'", 1,
             {"stage 3: 'L' where the model has layer 17"});
}

// Issue 43: beside its prediction, plan says what it leaves out for this model and recipe, with
// the published runs' size (Caveats.hpp): the text summary's note lines, --json's "notes".
TEST_F(Cli, PlanNotesWhatItsPredictionLeavesOut) {
  const std::string h100 = kResources + "/clusters/h100-8x8-ib.json";
  const std::string qwen = "plan --model " + kResources + "/models/qwen3-30b-a3b.json --cluster " + h100 +
                           " --schedule 1f1b --devices 2 --microbatches 8 --ep 8 --dp 32";
  expectExit(qwen, 0, {"note: host time is not in this prediction", "docs/fidelity.md"});
  // The sync-free recipe whose published runs the model matches: no note.
  const CliRun syncFree = expectExit(qwen +
                                         " --moe-token-dispatcher flex --moe-flex-backend hybridep"
                                         " --moe-expert-rank-capacity-factor 1.5 --cuda-graph-impl full_iteration",
                                     0);
  EXPECT_EQ(syncFree.out.find("note: host time"), std::string::npos) << syncFree.out;
  const auto oss = jsonOutput(run("plan --model " + kResources + "/models/gpt-oss-120b.json --cluster " + h100 +
                                  " --schedule 1f1b --devices 4 --microbatches 8 --ep 8 --dp 16 --zero 1 --json"));
  ASSERT_TRUE(oss);
  ASSERT_TRUE(oss->contains("notes"));
  ASSERT_EQ((*oss)["notes"].size(), 2U);
  EXPECT_NE((*oss)["notes"][1].get<std::string>().find("attention sinks (GPT-OSS)"), std::string::npos);
  // A dense plan has nothing to say: no key.
  const auto dense = jsonOutput(
      run("plan --model " + model + " --cluster " + cluster + " --schedule 1f1b --devices 4 --microbatches 8 --json"));
  ASSERT_TRUE(dense);
  EXPECT_FALSE(dense->contains("notes"));
  // configure says it once under its ranked rows (the recipe's MoE settings are every row's).
  const std::string configure =
      "configure --model " + kResources + "/models/qwen3-30b-a3b.json --cluster " + h100 + " --global-batch 64 --top 1";
  expectExit(configure, 0, {"note: host time is not in this prediction"});
  const auto ranked = jsonOutput(run(configure + " --json"));
  ASSERT_TRUE(ranked);
  ASSERT_TRUE(ranked->contains("notes"));
  EXPECT_EQ((*ranked)["notes"].size(), 1U);
}
