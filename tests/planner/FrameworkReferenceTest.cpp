// The frameworks' own code on our exports (issue 46). Megatron-LM: bench/megatron/check_args.py
// runs parse_args, validate_args and the TransformerConfig of a local copy of Megatron-LM's
// `megatron/` package (NVIDIA/Megatron-LM d98e8a64dd, 2026-08-22, at reference/megatron-lm) and
// of the Zero Bubble fork (sail-sg/zero-bubble-pipeline-parallelism 39f2c186a2, at
// reference/zero-bubble-megatron) with torch stubbed out, and reports what Megatron built: the
// layers of every pipeline segment (hybrid_layer_allocation.select_pipeline_segment), the layer
// counts, MTP depths and the parallel sizes it derived. The copies are not part of PipeStudio
// (bench/megatron/megatron_reference.py says how to make them); without them these tests skip.
// torchtitan main: bench/torchtitan/check_main.py runs an exported configuration through
// torchtitan's own Trainer.Config (pytorch/torchtitan b5bcd76c66 at reference/torchtitan-main).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "PlannerFixtures.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/RunCommand.hpp"

using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

const std::string kSourceRoot = std::string(PIPESTUDIO_RESOURCES) + "/..";

// A framework checker's verdict on each file (name → text), one JSON object each; nullopt when the
// framework's copy is absent (the test then skips). `script` is relative to the source root.
std::optional<std::vector<Json>> verdicts(const std::string& script,
                                          const std::vector<std::pair<std::string, std::string>>& files,
                                          const std::string& flags) {
  const auto dir = std::filesystem::temp_directory_path() / ("pipestudio-reference-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string paths;
  for (const auto& [name, text] : files) {
    std::ofstream(dir / name) << text;
    if (name.find(".csv") == std::string::npos) paths += " '" + (dir / name).string() + "'";
  }
  // The frameworks' warnings go to stderr (the test's log); stdout is one JSON line per file.
  const std::string command = "python3 '" + kSourceRoot + "/" + script + "'" + paths + flags;
  const std::string out = test::runCommand(command).out;
  std::filesystem::remove_all(dir);
  std::vector<Json> found;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line.front() != '{') continue;
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      ADD_FAILURE() << script << " printed: " << line;
      continue;
    }
    if (j.contains("skipped")) return std::nullopt;
    found.push_back(j);
  }
  const auto checked = std::count_if(files.begin(), files.end(),
                                     [](const auto& f) { return f.first.find(".csv") == std::string::npos; });
  EXPECT_EQ(found.size(), static_cast<std::size_t>(checked)) << out;
  return found;
}

// Megatron's verdict on each arguments text.
std::optional<std::vector<Json>> megatronVerdicts(const std::vector<std::string>& texts, bool fork) {
  std::vector<std::pair<std::string, std::string>> files;
  for (std::size_t i = 0; i < texts.size(); ++i) files.emplace_back("args" + std::to_string(i) + ".sh", texts[i]);
  return verdicts("bench/megatron/check_args.py", files, fork ? " --fork" : "");
}

TransformerShape llamaShape(std::int64_t hidden, std::int64_t heads, std::int64_t kvHeads) {
  TransformerShape t;
  t.hidden = hidden;
  t.seq = 1024;
  t.heads = heads;
  t.kvHeads = kvHeads;
  t.ffn = 4 * hidden;
  t.mlp = MlpKind::SwiGlu;
  t.dropout = false;
  return t;
}

// A decoder-only model of measured times (so plans are exact) with `shapes` as its decoder layers
// between an embedding and an lm_head.
ModelSpec shapedModel(const std::vector<TransformerShape>& shapes) {
  ModelSpec m = test::equalLayers(static_cast<int>(shapes.size()) + 2, 1.0, 1.0, 0.8);
  m.name = "shaped";
  auto& layers = m.components.front().layers;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    layers[i + 1].kind = "transformer";
    layers[i + 1].transformer = shapes[i];
  }
  for (Layer* end : {&layers.front(), &layers.back()})
    end->forwardMs = end->backwardInputMs = end->backwardWeightMs = 0.01;
  layers.front().kind = "embedding";
  layers.back().kind = "lm_head";
  return m;
}

// Planned with the balanced partition (the model's ends are nearly free, so its decoder layers
// split as evenly as they divide).
Plan planned(PlanRequest r) {
  if (r.config.partition == "uniform") r.config.partition = "balanced";
  auto plan = makePlan(r);
  EXPECT_THAT(plan, HasValue());
  return plan ? *plan : Plan{};
}

// Our segment of each virtual stage, in Megatron's order (index = virtual rank · P + pipeline rank).
std::vector<std::string> ourSegments(const MegatronExport& m) {
  auto pattern = parseHybridPattern(m.hybridPattern);
  EXPECT_THAT(pattern, HasValue());
  return pattern ? pattern->segments : std::vector<std::string>{};
}

void expectSegmentsAsMegatronBuildsThem(const MegatronExport& m, const Json& verdict) {
  const std::vector<std::string> ours = ourSegments(m);
  ASSERT_EQ(verdict.at("segments").size(), ours.size()) << verdict.dump();
  int offset = 0;
  const int p = verdict.at("pipeline_model_parallel_size").get<int>();
  // Megatron lists (virtual rank, pipeline rank) in virtual-rank-major order: index v · P + p.
  for (const Json& s : verdict.at("segments")) {
    const auto index = static_cast<std::size_t>(s.at("virtual_rank").get<int>()) * static_cast<std::size_t>(p) +
                       static_cast<std::size_t>(s.at("pipeline_rank").get<int>());
    ASSERT_LT(index, ours.size());
    EXPECT_EQ(s.at("layers").get<std::string>(), ours[index]) << "segment " << index << " of " << m.hybridPattern;
    EXPECT_EQ(s.at("offset").get<int>(), offset) << "segment " << index;
    offset += static_cast<int>(ours[index].size());
  }
}

}  // namespace

// Llama-style dense model, an uneven 1F1B split and an interleaved one with TP: Megatron accepts
// both HybridModel exports and builds on every (virtual rank, pipeline rank) exactly the plan's
// layers; GPTModel's form with its layout is accepted too.
TEST(MegatronReference, HybridPatternsBuildThePlansSegments) {
  std::vector<TransformerShape> shapes(10, llamaShape(1024, 16, 4));
  PlanRequest uneven = test::request(shapedModel(shapes), test::freeCluster(8, 100, 1), "1f1b", 4, 8, 1);
  uneven.config.partition = "balanced";
  std::vector<TransformerShape> sixteen(16, llamaShape(1024, 16, 4));
  PlanRequest interleaved =
      test::request(shapedModel(sixteen), test::freeCluster(16, 100, 1), "interleaved-1f1b", 4, 8, 2);
  interleaved.config.parallel.tensor = 2;
  interleaved.config.parallel.sequenceParallel = true;
  interleaved.config.parallel.data = 2;
  interleaved.config.parallel.zeroStage = 1;
  std::vector<MegatronExport> exports;
  for (const PlanRequest& r : {uneven, interleaved}) {
    const Plan plan = planned(r);
    auto hybrid = megatronExport(plan);
    ASSERT_THAT(hybrid, HasValue());
    exports.push_back(*hybrid);
    auto gpt = megatronExport(plan, {MegatronModel::Gpt});
    ASSERT_THAT(gpt, HasValue());
    exports.push_back(*gpt);
  }
  std::vector<std::string> texts;
  texts.reserve(exports.size());
  for (const MegatronExport& m : exports) texts.push_back(m.text);
  const auto verdicts = megatronVerdicts(texts, false);
  if (!verdicts) GTEST_SKIP() << "no Megatron-LM copy at reference/megatron-lm (bench/megatron/megatron_reference.py)";
  ASSERT_EQ(verdicts->size(), 4U);
  for (std::size_t i = 0; i < verdicts->size(); ++i) {
    const Json& v = (*verdicts)[i];
    ASSERT_TRUE(v.at("ok").get<bool>()) << v.dump() << "\n" << exports[i].text;
    EXPECT_EQ(v.at("commit").get<std::string>(), "d98e8a64ddf34856e74b24714e3bedb2f5a39553");
    EXPECT_EQ(v.at("normalization"), "RMSNorm");
    EXPECT_EQ(v.at("position_embedding_type"), "rope");
    EXPECT_EQ(v.at("add_bias_linear"), false);
    EXPECT_EQ(v.at("swiglu"), true);
    EXPECT_EQ(v.at("num_query_groups"), 4);
  }
  // HybridModel: two layers per block, the segments as planned; VP derived from the pattern.
  EXPECT_EQ((*verdicts)[0].at("num_layers"), 20);
  EXPECT_TRUE((*verdicts)[0].at("virtual_pipeline_model_parallel_size").is_null());
  expectSegmentsAsMegatronBuildsThem(exports[0], (*verdicts)[0]);
  EXPECT_EQ((*verdicts)[2].at("num_layers"), 32);
  EXPECT_EQ((*verdicts)[2].at("virtual_pipeline_model_parallel_size"), 2);
  EXPECT_EQ((*verdicts)[2].at("data_parallel_size"), 2);
  EXPECT_EQ((*verdicts)[2].at("tensor_model_parallel_size"), 2);
  expectSegmentsAsMegatronBuildsThem(exports[2], (*verdicts)[2]);
  // GPTModel: decoder layers, the uneven split as a layout Megatron validates.
  EXPECT_EQ((*verdicts)[1].at("num_layers"), 10);
  EXPECT_FALSE((*verdicts)[1].at("pipeline_model_parallel_layout").is_null());
  EXPECT_EQ((*verdicts)[3].at("num_layers"), 16);
}

// DeepSeek-V3 in small (MLA, dense layers first, experts with a shared one, one MTP depth, RoPE)
// and GPT-OSS in small (windows on every other layer, attention sinks, biases, experts over
// ETP 1): Megatron reads `+-`/`+E` and `/+E`, infers MLA and the MTP depth from the pattern, and
// its TransformerConfig accepts the experts, windows and sinks.
TEST(MegatronReference, MoeMlaMtpAndWindowsAsMegatronChecksThem) {
  TransformerShape dense = llamaShape(512, 8, 8);
  dense.kvHeads = 0;
  dense.mla = TransformerShape::Mla{128, 64, 64, 32, 64};
  dense.architecture.rotaryBase = 10000;
  const TransformerShape moe = test::withExperts(dense, 8, 2, 256, 1);
  TransformerShape mtp = moe;
  mtp.mtpLayers = 1;
  mtp.vocab = 1000;
  PlanRequest deepseek =
      test::request(shapedModel({dense, moe, moe, moe, moe, moe, mtp}), test::freeCluster(8, 100, 1), "1f1b", 2, 4, 1);
  deepseek.config.parallel.expert = 4;
  deepseek.config.parallel.data = 4;
  deepseek.config.parallel.zeroStage = 1;
  TransformerShape oss = llamaShape(512, 8, 2);
  oss.headDim = 64;
  oss = test::withExperts(oss, 8, 2, 512);
  oss.architecture.bias = true;
  oss.architecture.attentionSinks = true;
  oss.architecture.position = PositionKind::Yarn;
  std::vector<TransformerShape> ossLayers(8, oss);
  for (std::size_t i = 0; i < ossLayers.size(); i += 2) ossLayers[i].window = 128;
  PlanRequest gptOss = test::request(shapedModel(ossLayers), test::freeCluster(8, 100, 1), "1f1b", 2, 4, 1);
  gptOss.config.parallel.tensor = 2;
  gptOss.config.parallel.sequenceParallel = true;
  gptOss.config.parallel.expert = 2;
  gptOss.config.parallel.expertTensor = 1;
  gptOss.config.parallel.data = 2;
  // Megatron's sync-free MoE (issue 43): HybridEP with a rank budget and the paged stash.
  gptOss.config.parallel.moeFlexDispatcher = true;
  gptOss.config.parallel.moeFlexBackend = FlexBackend::HybridEp;
  gptOss.config.parallel.moeRankCapacityFactor = 1.5;
  gptOss.config.parallel.moePagedStash = true;
  gptOss.config.parallel.moePagedStashBufferFactor = 1.2;
  std::vector<MegatronExport> exports;
  for (const PlanRequest& r : {deepseek, gptOss}) {
    auto m = megatronExport(planned(r));
    ASSERT_THAT(m, HasValue());
    exports.push_back(*m);
  }
  EXPECT_EQ(exports[0].hybridPattern.substr(exports[0].hybridPattern.find('/')), "/+E");
  const auto verdicts = megatronVerdicts({exports[0].text, exports[1].text}, false);
  if (!verdicts) GTEST_SKIP() << "no Megatron-LM copy at reference/megatron-lm";
  const Json& ds = (*verdicts)[0];
  ASSERT_TRUE(ds.at("ok").get<bool>()) << ds.dump() << "\n" << exports[0].text;
  EXPECT_EQ(ds.at("num_layers"), 12);  // six blocks
  EXPECT_EQ(ds.at("mtp_num_layers"), 1);
  EXPECT_EQ(ds.at("multi_latent_attention"), true);
  EXPECT_EQ(ds.at("num_experts"), 8);
  expectSegmentsAsMegatronBuildsThem(exports[0], ds);
  const Json& o = (*verdicts)[1];
  ASSERT_TRUE(o.at("ok").get<bool>()) << o.dump() << "\n" << exports[1].text;
  EXPECT_EQ(o.at("softmax_type"), "learnable");
  EXPECT_EQ(o.at("add_bias_linear"), true);
  EXPECT_EQ(o.at("position_embedding_type"), "yarn");
  EXPECT_EQ(o.at("window_size"), (Json::array({127, 0})));
  EXPECT_EQ(o.at("moe_flex_dispatcher_backend"), "hybridep");
  EXPECT_EQ(o.at("moe_expert_rank_capacity_factor"), 1.5);
  EXPECT_EQ(o.at("use_transformer_engine_op_fuser"), true);
  EXPECT_EQ(o.at("moe_paged_stash"), true);
  EXPECT_EQ(o.at("moe_paged_stash_buffer_size_factor_cuda"), 1.2);
  // Windowed attention on hybrid layers 0, 4, 8 and 12 (every other block's attention).
  const Json skip = o.at("window_attn_skip_freq");
  ASSERT_TRUE(skip.is_array()) << o.dump();
  ASSERT_EQ(skip.size(), 16U);
  for (std::size_t i = 0; i < skip.size(); ++i) EXPECT_EQ(skip[i].get<int>(), i % 4 == 0 ? 1 : 0) << "layer " << i;
  expectSegmentsAsMegatronBuildsThem(exports[1], o);
}

// A partition over the blocks' halves (--partition balanced-split) ends a stage between a block's
// attention and its MLP: Megatron builds the odd segments as planned.
TEST(MegatronReference, SegmentsThatEndBetweenAttentionAndMlp) {
  ModelSpec model = shapedModel(std::vector<TransformerShape>(3, llamaShape(1024, 16, 4)));
  for (Layer& l : model.components.front().layers) {
    if (l.kind != "transformer") continue;  // the halves are costed from the shape
    l.forwardMs = l.backwardInputMs = l.backwardWeightMs = std::nullopt;
    l.activationBytes = l.weightGradBytes = l.parameterBytes = l.outputBytes = std::nullopt;
  }
  PlanRequest r = test::request(model, test::freeCluster(8, 100, 1), "1f1b", 2, 4, 1);
  r.config.partition = "balanced-split";
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  auto m = megatronExport(*plan);
  ASSERT_THAT(m, HasValue());
  const auto v = megatronVerdicts({m->text}, false);
  if (!v) GTEST_SKIP() << "no Megatron-LM copy at reference/megatron-lm";
  const Json& verdict = v->front();
  ASSERT_TRUE(verdict.at("ok").get<bool>()) << verdict.dump() << "\n" << m->text;
  EXPECT_EQ(verdict.at("num_layers"), 6);
  expectSegmentsAsMegatronBuildsThem(*m, verdict);
  EXPECT_EQ(verdict.at("segments")[0].at("layers").get<std::string>().size() % 2, 1U) << m->hybridPattern;
}

// ZeRO-2 and ZeRO-3 with data parallelism run on Megatron-FSDP: Megatron's checks accept the
// flags (the fsdp_dtensor checkpoint format, the environment it needs) and keep the sharding.
TEST(MegatronReference, ZeroThreePlansRunOnMegatronFsdp) {
  std::vector<TransformerShape> shapes(8, llamaShape(1024, 16, 4));
  std::vector<MegatronExport> exports;
  for (int zero : {2, 3}) {
    PlanRequest r = test::request(shapedModel(shapes), test::freeCluster(8, 100, 1), "1f1b", 2, 4, 1);
    r.config.parallel.tensor = 2;
    r.config.parallel.sequenceParallel = true;
    r.config.parallel.data = 2;
    r.config.parallel.zeroStage = zero;
    auto m = megatronExport(planned(r));
    ASSERT_THAT(m, HasValue());
    exports.push_back(*m);
  }
  const auto verdicts = megatronVerdicts({exports[0].text, exports[1].text}, false);
  if (!verdicts) GTEST_SKIP() << "no Megatron-LM copy at reference/megatron-lm";
  for (std::size_t i = 0; i < 2; ++i) {
    const Json& v = (*verdicts)[i];
    ASSERT_TRUE(v.at("ok").get<bool>()) << v.dump() << "\n" << exports[i].text;
    EXPECT_EQ(v.at("use_megatron_fsdp"), true);
    EXPECT_EQ(v.at("ckpt_format"), "fsdp_dtensor");
    EXPECT_EQ(v.at("data_parallel_size"), 2);
  }
  EXPECT_EQ((*verdicts)[0].at("data_parallel_sharding_strategy"), "optim_grads");
  EXPECT_EQ((*verdicts)[1].at("data_parallel_sharding_strategy"), "optim_grads_params");
}

// The Zero Bubble fork's own parser and checks (zbpp_utils.validate_arguments) accept its ZB-H1,
// ZB-V and V-Half exports of a Llama-style model: only flags the fork has, its runtime on.
TEST(MegatronReference, ZeroBubbleForkTakesItsExports) {
  // The fork splits decoder layers evenly and adds Megatron's own embedding and output layer:
  // a model of decoder layers only, split uniformly.
  ModelSpec decoders = shapedModel(std::vector<TransformerShape>(8, llamaShape(1024, 16, 4)));
  auto& layers = decoders.components.front().layers;
  layers.erase(layers.begin());
  layers.pop_back();
  std::vector<MegatronExport> exports;
  for (const auto& [schedule, chunks] :
       std::vector<std::pair<std::string, int>>{{"zb-h1", 1}, {"zb-v", 2}, {"v-half", 2}}) {
    PlanRequest r = test::request(decoders, test::freeCluster(8, 100, 1), schedule, 2, 4, chunks);
    auto plan = makePlan(r);
    ASSERT_THAT(plan, HasValue()) << schedule;
    auto m = megatronExport(*plan);
    ASSERT_THAT(m, HasValue()) << schedule;
    EXPECT_EQ(m->model, MegatronModel::Gpt);
    exports.push_back(*m);
  }
  const auto verdicts = megatronVerdicts({exports[0].text, exports[1].text, exports[2].text}, true);
  if (!verdicts) GTEST_SKIP() << "no Zero Bubble fork copy at reference/zero-bubble-megatron";
  for (std::size_t i = 0; i < verdicts->size(); ++i) {
    const Json& v = (*verdicts)[i];
    ASSERT_TRUE(v.at("ok").get<bool>()) << v.dump() << "\n" << exports[i].text;
    EXPECT_EQ(v.at("commit").get<std::string>(), "39f2c186a27580b7051eb51e0f651e1efd0a8170");
    EXPECT_EQ(v.at("enable_zero_bubble"), true);
    EXPECT_EQ(v.at("num_layers"), 8);
  }
  EXPECT_EQ((*verdicts)[1].at("zero_bubble_v_schedule"), true);
  EXPECT_EQ((*verdicts)[1].at("virtual_pipeline_model_parallel_size"), 2);
}

}  // namespace pipestudio

namespace pipestudio {

// torchtitan main: a Qwen3-30B-A3B pipeline starts from the configuration torchtitan ships for it
// (qwen3.config_registry:qwen3_30b_a3b, defined at the checked commit) and turns off the CUDA
// graphs torchtitan refuses under pipeline parallelism; without that line torchtitan's own
// Trainer.Config refuses the same file (the check can fail).
TEST(TorchtitanReference, PipelinePlansPassTrainerConfigAndStartFromTheShippedBase) {
  auto model = loadModel(std::string(PIPESTUDIO_RESOURCES) + "/models/qwen3-30b-a3b.json");
  auto cluster = loadCluster(std::string(PIPESTUDIO_RESOURCES) + "/clusters/h100-4x8-ib.json");
  ASSERT_TRUE(model.hasValue() && cluster.hasValue());
  PlanRequest r = test::request(*model, *cluster, "interleaved-1f1b", 4, 8, 2);
  r.config.partition = "balanced";
  r.config.parallel.expert = 8;
  r.config.parallel.data = 8;
  r.config.parallel.zeroStage = 3;
  r.config.memoryLimitBytes = std::int64_t{1} << 50;
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  TorchtitanOptions options;
  options.csvPath = "qwen3.csv";
  options.moduleName = "qwen3";
  auto t = torchtitanExport(*plan, options);
  ASSERT_THAT(t, HasValue());
  EXPECT_TRUE(t->notes.empty());  // torchtitan ships a configuration for the model
  std::string withoutFlag;
  std::istringstream lines(t->config);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("disable_cuda_graphs") == std::string::npos) withoutFlag += line + "\n";
  }
  auto v = verdicts(
      "bench/torchtitan/check_main.py",
      {{"qwen3.py", t->config}, {"qwen3.csv", t->csv}, {"nographs.py", withoutFlag}, {"nographs.csv", t->csv}}, "");
  if (!v) GTEST_SKIP() << "no torchtitan copy at reference/torchtitan-main (bench/torchtitan/check_main.py)";
  ASSERT_EQ(v->size(), 2U);
  const Json& ok = (*v)[0];
  ASSERT_TRUE(ok.at("ok").get<bool>()) << ok.dump() << "\n" << t->config;
  EXPECT_EQ(ok.at("commit"), "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a");
  EXPECT_EQ(ok.at("base"), "torchtitan.models.qwen3.config_registry:qwen3_30b_a3b");
  EXPECT_EQ(ok.at("base_defined"), true);
  EXPECT_EQ(ok.at("pipeline_parallel_degree"), 4);
  EXPECT_EQ(ok.at("stages"), 8);
  EXPECT_EQ(ok.at("disable_cuda_graphs"), true);
  const Json& refused = (*v)[1];
  EXPECT_FALSE(refused.at("ok").get<bool>());
  EXPECT_NE(refused.value("error", "").find("CUDA graphs do not support pipeline parallelism"), std::string::npos)
      << refused.dump();
}

}  // namespace pipestudio
