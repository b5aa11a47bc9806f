// Exports to the frameworks (issue 15): Megatron-LM arguments, torchtitan TOML, compute+comms
// CSV, the legacy CSV dialect, and the checks PyTorch applies. Golden files live in
// tests/data/export; PIPESTUDIO_UPDATE_GOLDENS=1 rewrites them (review the diff).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "PlannerFixtures.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "support/BundledPlans.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

using namespace pipestudio;

namespace {

// A decoder-only LM with measured costs: embedding, `decoders` transformer layers, lm_head.
// The ends are nearly free, so a balanced partition splits the decoders evenly when it can.
ModelSpec lm(int decoders, bool tied = false) {
  ModelSpec m = test::equalLayers(decoders + 2, 1.0, 1.0, 0.8);
  m.name = "lm";
  auto& layers = m.components.front().layers;
  for (Layer& layer : layers) layer.kind = "transformer";
  for (Layer* end : {&layers.front(), &layers.back()}) {
    end->forwardMs = end->backwardInputMs = end->backwardWeightMs = 0.01;
    end->tied = tied;
  }
  layers.front().kind = "embedding";
  layers.front().name = "embedding";
  layers.back().kind = "lm_head";
  layers.back().name = "lm_head";
  return m;
}

Plan planOf(const ModelSpec& model, const std::string& schedule, int p, int m, int chunks, int tp = 1,
            const std::string& partition = "balanced") {
  PlanRequest r = test::request(model, test::freeCluster(8, 100, 1), schedule, p, m, chunks);
  r.config.partition = partition;
  r.config.parallel.tensor = tp;
  r.config.parallel.sequenceParallel = tp > 1;
  auto plan = makePlan(r);
  EXPECT_THAT(plan, HasValue());
  return plan ? *plan : Plan{};
}

std::string argOf(const MegatronExport& m, const std::string& flag);
void expectArgs(const MegatronExport& m, std::initializer_list<std::pair<std::string, std::string>> expected);

std::string dataFile(const std::string& name) { return std::string(PIPESTUDIO_TEST_DATA) + "/export/" + name; }

void expectGolden(const std::string& name, const std::string& actual) {
  const std::string path = dataFile(name);
  if (std::getenv("PIPESTUDIO_UPDATE_GOLDENS")) {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path << " missing (run with PIPESTUDIO_UPDATE_GOLDENS=1)";
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_EQ(s.str(), actual) << "golden " << path;
}

std::vector<std::vector<std::string>> rows(const std::string& csv) {
  std::vector<std::vector<std::string>> out;
  std::stringstream in(csv);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.emplace_back();
    std::stringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) out.back().push_back(cell);
  }
  return out;
}

}  // namespace

TEST(MegatronExport, TensorPipelineVirtualGolden) {
  const Plan plan = planOf(lm(16), "interleaved-1f1b", 4, 8, 2, 2);
  auto m = megatronExport(plan);
  ASSERT_THAT(m, HasValue());
  EXPECT_TRUE(m->layout.empty());  // 2 decoders per virtual stage: Megatron's even split
  expectGolden("megatron-tp2-pp4-vpp2.txt", m->text);
  auto t = torchtitanExport(plan, "pp.csv");
  ASSERT_THAT(t, HasValue());
  expectGolden("torchtitan-tp2-pp4-vpp2.toml", t->toml);
  expectGolden("torchtitan-tp2-pp4-vpp2.csv", t->csv);
  // Stage 0 holds the embedding, stage 7 (on rank 3) the head; rank r holds stages r and r + 4.
  EXPECT_EQ(t->moduleFqnsPerModelPart.front().front(), "tok_embeddings");
  EXPECT_EQ(t->moduleFqnsPerModelPart.back().back(), "output");
}

TEST(MegatronExport, UnevenPartitionBecomesALayoutOfThePlansSplit) {
  const Plan plan = planOf(lm(18), "1f1b", 4, 8, 1, 1);
  auto m = megatronExport(plan, {MegatronModel::Gpt});
  ASSERT_THAT(m, HasValue());
  ASSERT_FALSE(m->layout.empty());
  expectGolden("megatron-uneven-pp4.txt", m->text);
  // Parsed with Megatron's grammar, each stage has exactly the plan's layers.
  auto stages = parseMegatronLayout(m->layout);
  ASSERT_THAT(stages, HasValue());
  ASSERT_EQ(stages->size(), plan.virtualStages.size());
  const auto& layers = plan.model.components.front().layers;
  for (const VirtualStage& vs : plan.virtualStages) {
    std::string expected;
    for (int l = vs.firstLayer; l <= vs.lastLayer; ++l) {
      const std::string& kind = layers[static_cast<std::size_t>(l)].kind;
      expected += kind == "embedding" ? "E" : kind == "lm_head" ? "L" : "t";
    }
    EXPECT_EQ((*stages)[static_cast<std::size_t>(vs.id)], expected) << "stage " << vs.id << " of " << m->layout;
  }
  // HybridModel (the default): the same split as pattern segments, two layers per decoder layer,
  // the embedding and loss implied on the first and last segment.
  auto hybrid = megatronExport(plan);
  ASSERT_THAT(hybrid, HasValue());
  EXPECT_EQ(hybrid->model, MegatronModel::Hybrid);
  EXPECT_TRUE(hybrid->layout.empty());
  auto pattern = parseHybridPattern(hybrid->hybridPattern);
  ASSERT_THAT(pattern, HasValue());
  ASSERT_EQ(pattern->segments.size(), stages->size());
  for (std::size_t i = 0; i < stages->size(); ++i) {
    const auto decoders = std::count((*stages)[i].begin(), (*stages)[i].end(), 't');
    std::string expected;
    for (int k = 0; k < decoders; ++k) expected += "*-";
    EXPECT_EQ(pattern->segments[i], expected) << hybrid->hybridPattern;
  }
  EXPECT_EQ(renderHybridPattern(*pattern), hybrid->hybridPattern);
  expectArgs(*hybrid, {{"--num-layers", ""},
                       {"--pipeline-model-parallel-layout", ""},
                       {"--spec", "megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec"}});
  EXPECT_NE(hybrid->text.find("HybridModel (pretrain_hybrid.py)"), std::string::npos) << hybrid->text;
}

namespace {

// `shape` with measured times kept (the export reads the shapes, the plan the times).
TransformerShape shapeOf(std::int64_t hidden, std::int64_t heads) {
  TransformerShape t;
  t.hidden = hidden;
  t.seq = 128;
  t.heads = heads;
  t.mlp = MlpKind::SwiGlu;
  return t;
}

// The values after `flag` in an export's arguments, space-separated (empty when the flag is
// absent, "-" when it stands alone).
std::string argOf(const MegatronExport& m, const std::string& flag) {
  const std::vector<std::string>& args = m.arguments;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] != flag) continue;
    std::string values;
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) values += (values.empty() ? "" : " ") + args[++i];
    return values.empty() ? "-" : values;
  }
  return "";
}

// Each flag's values in the export's arguments, as argOf gives them.
void expectArgs(const MegatronExport& m, std::initializer_list<std::pair<std::string, std::string>> expected) {
  for (const auto& [flag, values] : expected) EXPECT_EQ(argOf(m, flag), values) << flag;
}

}  // namespace

// DeepSeek-V3's features in small: multi-head latent attention, dense layers before the MoE
// ones, a shared expert, group-limited routing and a multi-token-prediction layer, with the
// recipe's dispatcher, overlap, FP8 and recomputation: Megatron's flags for each, the MTP block
// outside --num-layers and as `m` before the loss in the layout.
TEST(MegatronExport, MoeMlaAndMtpAsMegatronNamesThem) {
  ModelSpec model = lm(6);
  auto& layers = model.components.front().layers;
  TransformerShape dense = shapeOf(256, 4);
  dense.ffn = 1024;
  dense.mla = TransformerShape::Mla{96, 64, 32, 16, 32};
  TransformerShape moe = test::withExperts(dense, 16, 4, 128, 1);
  moe.routerGroups = 4;
  moe.routerGroupTopK = 2;
  TransformerShape mtp = moe;
  mtp.mtpLayers = 1;
  mtp.vocab = 1000;
  for (std::size_t i = 1; i <= 6; ++i) layers[i].transformer = i <= 2 ? dense : i <= 5 ? moe : mtp;
  PlanRequest r = test::request(model, test::freeCluster(8, 100, 1), "1f1b", 2, 4, 1);
  r.cluster.gpu.peakTflopsByPrecision[static_cast<std::size_t>(Precision::Fp8)] = 2 * r.cluster.gpu.peakTflops;
  r.config.partition = "uniform";
  r.config.precision = Precision::Fp8;
  r.config.parallel.data = 4;
  r.config.parallel.expert = 4;
  r.config.parallel.moeFlexDispatcher = true;
  r.config.parallel.moeFlexBackend = FlexBackend::HybridEp;
  r.config.parallel.moeA2aOverlap = true;
  r.config.parallel.moeCommSms = 32;
  r.config.parallel.recompute = Recompute::Selective;
  r.config.parallel.recomputeModules = kRecomputeMlaUpProj | kRecomputeMoeAct;
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  auto m = megatronExport(*plan, {MegatronModel::Gpt});
  ASSERT_THAT(m, HasValue());
  const std::map<std::string, std::string> expected{
      {"--num-layers", "5"},
      {"--mtp-num-layers", "1"},
      {"--ffn-hidden-size", "1024"},
      {"--multi-latent-attention", "-"},
      {"--q-lora-rank", "96"},
      {"--kv-lora-rank", "64"},
      {"--qk-head-dim", "32"},
      {"--qk-pos-emb-head-dim", "16"},
      {"--v-head-dim", "32"},
      {"--num-experts", "16"},
      {"--moe-router-topk", "4"},
      {"--moe-ffn-hidden-size", "128"},
      {"--moe-shared-expert-intermediate-size", "128"},
      {"--moe-layer-freq", "([0]*2+[1]*3)"},
      {"--moe-token-dispatcher-type", "flex"},
      {"--moe-flex-dispatcher-backend", "hybridep"},
      {"--moe-flex-dispatcher-num-sms", "32"},
      {"--moe-router-num-groups", "4"},
      {"--moe-router-group-topk", "2"},
      {"--overlap-moe-expert-parallel-comm", "-"},
      {"--expert-model-parallel-size", "4"},
      {"--bf16", "-"},
      {"--fp8-format", "hybrid"},
      {"--fp8-recipe", "tensorwise"},
      {"--recompute-granularity", "selective"},
      {"--recompute-modules", "moe_act mla_up_proj"},
  };
  for (const auto& [flag, value] : expected) EXPECT_EQ(argOf(*m, flag), value) << flag << "\n" << m->text;
  EXPECT_EQ(argOf(*m, "--group-query-attention"), "");  // MLA has no query groups
  // The uniform split (4 layers a stage) is uneven in decoders: a layout, the MTP block on the
  // last stage before the loss.
  EXPECT_EQ(m->layout, "Et*3|t*2mL") << m->text;
  auto stages = parseMegatronLayout(m->layout);
  ASSERT_THAT(stages, HasValue());
  EXPECT_EQ(stages->back(), "ttmL");
  // torchtitan builds no MTP module: refused with the reason.
  auto t = torchtitanExport(*plan, "pp.csv");
  EXPECT_THAT(t, HasError("multi-token-prediction"));
  // HybridModel: MLA blocks `+-` (dense) and `+E` (MoE), the MTP depth after `/` with the loss.
  auto hybrid = megatronExport(*plan);
  ASSERT_THAT(hybrid, HasValue());
  EXPECT_EQ(hybrid->hybridPattern, "+-+-+E|+E+E/+E");
  EXPECT_EQ(argOf(*hybrid, "--moe-layer-freq"), "");               // the pattern says which layers are MoE
  EXPECT_EQ(argOf(*hybrid, "--position-embedding-type"), "rope");  // MTP needs it (inferred from SwiGLU)
  // Learned positions with MTP: Megatron refuses, so do we.
  Plan learned = *plan;
  for (Layer& l : learned.model.components.front().layers) {
    if (l.transformer) l.transformer->architecture.position = PositionKind::Learned;
  }
  auto refused = megatronExport(learned);
  EXPECT_THAT(refused, HasError("rotary or no position embeddings"));
}

// Each low-precision recipe as Megatron spells it (megatron/training/arguments.py, the recipes of
// Megatron-Bridge's mixed_precision.py): block-scaled FP8 is hybrid E4M3/E5M2 with the blockwise
// recipe (bf16_with_fp8_subchannel_scaling_mixed), not the per-tensor one.
TEST(MegatronExport, EachFp8RecipeGetsItsOwnFlag) {
  const std::map<Precision, std::pair<std::string, std::string>> expected{
      {Precision::Fp8, {"hybrid", "tensorwise"}},
      {Precision::Fp8Block, {"hybrid", "blockwise"}},
      {Precision::Mxfp8, {"e4m3", "mxfp8"}},
  };
  for (const auto& [precision, flags] : expected) {
    PlanRequest r = test::request(lm(4), test::freeCluster(8, 100, 1), "1f1b", 2, 4, 1);
    r.cluster.gpu.peakTflopsByPrecision[static_cast<std::size_t>(Precision::Fp8)] = 2 * r.cluster.gpu.peakTflops;
    r.cluster.gpu.peakTflopsByPrecision[static_cast<std::size_t>(Precision::Mxfp8)] = 2 * r.cluster.gpu.peakTflops;
    r.config.precision = precision;
    auto plan = makePlan(r);
    ASSERT_THAT(plan, HasValue());
    auto m = megatronExport(*plan);
    ASSERT_THAT(m, HasValue());
    EXPECT_EQ(argOf(*m, "--bf16"), "-") << precisionName(precision);
    EXPECT_EQ(argOf(*m, "--fp8-format"), flags.first) << precisionName(precision);
    EXPECT_EQ(argOf(*m, "--fp8-recipe"), flags.second) << precisionName(precision);
  }
}

// GPT-OSS's attention in small: a head size apart from hidden / heads and a 64-token window on
// every other layer (the first windowed): --kv-channels, --window-size 63,0 and
// --window-attn-skip-freq 2. Windows Megatron cannot express are left out with a note.
TEST(MegatronExport, HeadSizeAndSlidingWindowsAsMegatronTakesThem) {
  ModelSpec model = lm(4);
  auto& layers = model.components.front().layers;
  TransformerShape t = shapeOf(288, 4);
  t.headDim = 64;
  t.kvHeads = 2;
  for (std::size_t i = 1; i <= 4; ++i) {
    layers[i].transformer = t;
    layers[i].transformer->window = i % 2 == 1 ? 64 : 0;
  }
  auto m = megatronExport(planOf(model, "1f1b", 2, 4, 1), {MegatronModel::Gpt});
  ASSERT_THAT(m, HasValue());
  expectArgs(*m, {{"--kv-channels", "64"},
                  {"--num-query-groups", "2"},
                  {"--window-size", "63,0"},
                  {"--window-attn-skip-freq", "2"},
                  {"--num-experts", ""}});
  // HybridModel numbers attention and MLP layers apart: the windowed attention layers are listed.
  auto hybrid = megatronExport(planOf(model, "1f1b", 2, 4, 1));
  ASSERT_THAT(hybrid, HasValue());
  EXPECT_EQ(argOf(*hybrid, "--window-attn-skip-freq"), "([1,0,0,0]*2)");
  // Windows on layers 1 and 2, full attention on 3 and 4: no every-k-th pattern in GPTModel's form.
  layers[2].transformer->window = 64;
  layers[3].transformer->window = 0;
  auto odd = megatronExport(planOf(model, "1f1b", 2, 4, 1), {MegatronModel::Gpt});
  ASSERT_THAT(odd, HasValue());
  EXPECT_EQ(argOf(*odd, "--window-size"), "");
  EXPECT_NE(odd->text.find("no every-k-th pattern"), std::string::npos) << odd->text;
}

// The recipe's communication settings (issues 25 and 26): context parallelism's communication
// type with hierarchical CP's group sizes, the attention kernels, the parameter all-gather's and
// the tensor-parallel overlaps, gradients reduced in bf16.
TEST(MegatronExport, RecipeCommunicationSettings) {
  ModelSpec model = lm(4);
  for (std::size_t i = 1; i <= 4; ++i) model.components.front().layers[i].transformer = shapeOf(256, 4);
  PlanRequest r = test::request(model, test::freeCluster(8, 100, 1), "1f1b", 2, 4, 1);
  Parallelism& par = r.config.parallel;
  par.context = 2;
  par.data = 2;
  par.zeroStage = 1;
  par.cpCommType = CpCommType::A2aP2p;
  par.attentionBackend = AttentionBackend::Flash;
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  auto m = megatronExport(*plan);
  ASSERT_THAT(m, HasValue());
  expectArgs(*m, {{"--context-parallel-size", "2"}, {"--cp-comm-type", "a2a+p2p"}});
  // Both CP ranks share the 8-GPU NVLink domain and split the 4 heads: one all-to-all group of 2.
  expectArgs(*m, {{"--hierarchical-context-parallel-sizes", "2 1"},
                  {"--attention-backend", "flash"},
                  {"--overlap-param-gather", "-"},
                  {"--grad-reduce-in-bf16", "-"}});
  EXPECT_EQ(argOf(*m, "--tp-comm-overlap"), "");  // no tensor parallelism
  EXPECT_NE(m->text.find("--hierarchical-context-parallel-sizes 2 1 \\\n"), std::string::npos) << m->text;
  par.gradReduceInFp32 = true;
  par.overlapParamGather = false;
  auto fp32 = makePlan(r);
  ASSERT_THAT(fp32, HasValue());
  auto m32 = megatronExport(*fp32);
  ASSERT_THAT(m32, HasValue());
  expectArgs(*m32, {{"--grad-reduce-in-bf16", ""}, {"--overlap-param-gather", ""}});
}

// An MTP layer before a decoder layer is not what Megatron builds: refused with both named.
TEST(MegatronExport, MtpBeforeADecoderIsRefused) {
  ModelSpec model = lm(3);
  auto& layers = model.components.front().layers;
  TransformerShape t = shapeOf(256, 4);
  t.vocab = 1000;
  for (std::size_t i = 1; i <= 3; ++i) layers[i].transformer = t;
  layers[1].transformer->mtpLayers = 1;
  auto m = megatronExport(planOf(model, "1f1b", 2, 4, 1));
  EXPECT_THAT(m, HasError("multi-token prediction after the last decoder layer"));
}

TEST(FrameworkExport, AModelOfDecoderLayersOnlyGetsTheFrameworksOwnEmbeddingAndOutput) {
  // Costs measured for the decoder layers alone: Megatron still builds the embedding (first
  // stage) and the loss (last stage), and its layout must begin with E and end with L.
  ModelSpec decoders = test::equalLayers(8, 1.0, 1.0, 0.5);
  for (Layer& l : decoders.components.front().layers) l.kind = "transformer";
  auto even = megatronExport(planOf(decoders, "zb-h1", 4, 8, 1, 1, "uniform"));
  ASSERT_THAT(even, HasValue());  // 2,2,2,2 is the fork's even split
  EXPECT_TRUE(even->layout.empty());
  EXPECT_NE(even->text.find("--untie-embeddings-and-output-weights"), std::string::npos);  // the fork asserts it
  EXPECT_NE(even->text.find("no embedding layer"), std::string::npos) << even->text;

  ModelSpec seven = test::equalLayers(7, 1.0, 1.0, 0.5);
  for (Layer& l : seven.components.front().layers) l.kind = "transformer";
  auto uneven = megatronExport(planOf(seven, "1f1b", 2, 4, 1, 1, "uniform"), {MegatronModel::Gpt});
  ASSERT_THAT(uneven, HasValue());
  auto stages = parseMegatronLayout(uneven->layout);
  ASSERT_TRUE(stages.hasValue()) << uneven->layout;
  ASSERT_EQ(stages->size(), 2u);
  EXPECT_EQ(stages->front().front(), 'E') << uneven->layout;
  EXPECT_EQ(stages->back().back(), 'L') << uneven->layout;
  EXPECT_EQ(std::count(uneven->layout.begin(), uneven->layout.end(), 'E'), 1) << uneven->layout;

  // torchtitan deletes every module no model part names: the ends are named all the same.
  auto titan = torchtitanExport(planOf(decoders, "1f1b", 4, 8, 1, 1, "uniform"), "pp.csv");
  ASSERT_THAT(titan, HasValue());
  const auto& parts = titan->moduleFqnsPerModelPart;
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts.front(), (std::vector<std::string>{"tok_embeddings", "layers.0", "layers.1"}));
  EXPECT_EQ(parts.back(), (std::vector<std::string>{"layers.6", "layers.7", "norm", "output"}));
  EXPECT_NE(titan->toml.find("# the plan's model has no embedding layer"), std::string::npos) << titan->toml;
}

TEST(MegatronExport, LayoutGrammarAsMegatronReadsIt) {
  auto s = parseMegatronLayout("Et*3|(tt|)*2,t|L");
  ASSERT_THAT(s, HasValue());
  EXPECT_EQ(*s, (std::vector<std::string>{"Ettt", "tt", "tt", "t", "L"}));
  auto empty = parseMegatronLayout("E||t|L");
  ASSERT_TRUE(empty.hasValue());
  EXPECT_EQ((*empty)[1], "");
  auto bad = parseMegatronLayout("Etx|L");
  EXPECT_THAT(bad, HasError("'x'"));
  EXPECT_FALSE(parseMegatronLayout("(tt|*2").hasValue());
  EXPECT_FALSE(parseMegatronLayout("t*999999999").hasValue());  // never expanded without bound
}

// Megatron-Core's hybrid layer pattern (hybrid_layer_allocation.py: parse_hybrid_pattern and its
// docstring's examples): segments at `|`, one MTP depth per `/`, every depth the same; what it
// refuses we refuse; what we write reads back to the same text.
TEST(MegatronExport, HybridPatternGrammarAsMegatronReadsIt) {
  auto fvpp = parseHybridPattern("M-M-|M-M*-/MM/MM");
  ASSERT_THAT(fvpp, HasValue());
  EXPECT_EQ(fvpp->segments, (std::vector<std::string>{"M-M-", "M-M*-"}));
  EXPECT_EQ(fvpp->mtp, "MM");
  EXPECT_EQ(fvpp->mtpDepths, 2);
  auto plain = parseHybridPattern("M*M*");
  ASSERT_TRUE(plain.hasValue());
  EXPECT_EQ(plain->segments, (std::vector<std::string>{"M*M*"}));
  EXPECT_EQ(plain->mtpDepths, 0);
  auto emptyDepths = parseHybridPattern("M*M*//");  // a separator with nothing after it: no MTP
  ASSERT_TRUE(emptyDepths.hasValue());
  EXPECT_EQ(emptyDepths->mtpDepths, 0);
  auto emptySegment = parseHybridPattern("|+E+E");  // an embedding-only first stage
  ASSERT_TRUE(emptySegment.hasValue());
  EXPECT_EQ(emptySegment->segments, (std::vector<std::string>{"", "+E+E"}));
  for (const char* text : {"M-M-|M-M*-/MM/MM", "M*M*", "|+E+E", "*-*-|*-*E/*E", "+-+E/+E/+E/+E"}) {
    auto parsed = parseHybridPattern(text);
    ASSERT_TRUE(parsed.hasValue()) << text;
    EXPECT_EQ(renderHybridPattern(*parsed), text);
  }
  const auto refusal = [](const char* text) {
    auto parsed = parseHybridPattern(text);
    EXPECT_FALSE(parsed.hasValue()) << text;
    return parsed ? std::string() : parsed.message();
  };
  EXPECT_NE(refusal("*-x-").find("'x' at 2 is not a layer symbol"), std::string::npos);
  EXPECT_NE(refusal("*-+-").find("beside MLA"), std::string::npos);
  EXPECT_NE(refusal("*-/MM/M-").find("MTP depth 2 is 'M-'"), std::string::npos);
  EXPECT_NE(refusal("*-/M|M").find("in the MTP pattern"), std::string::npos);
  EXPECT_NE(refusal("*-\x1b[2J").find("\\e"), std::string::npos);  // control characters echoed escaped
  EXPECT_FALSE(parseHybridPattern(std::string(2'000'000, '*')).hasValue());
}

TEST(MegatronExport, ZeroBubbleVGoldenAndMemorySetups) {
  const Plan zbv = planOf(lm(16), "zb-v", 4, 8, 2, 2);
  auto m = megatronExport(zbv);
  ASSERT_THAT(m, HasValue());
  expectGolden("megatron-zbv-pp4.txt", m->text);
  auto half = megatronExport(planOf(lm(16), "v-half", 4, 8, 2));
  ASSERT_THAT(half, HasValue());
  EXPECT_NE(half->text.find("--zero-bubble-v-schedule-mem-setup half"), std::string::npos);
  auto h1 = megatronExport(planOf(lm(16), "zb-h1", 4, 8, 1));
  ASSERT_THAT(h1, HasValue());
  EXPECT_NE(h1->text.find("--enable-zero-bubble"), std::string::npos);
  EXPECT_NE(h1->text.find("--zero-bubble-max-pending-backward 4"), std::string::npos) << h1->text;
}

// Issue 31: the fork runs V-1F1B (--enable-1f1b-v) and Seq1F1B (--num-seq-splits, equal-token
// chunks, one stage per rank); offloading plans are refused with the flags the fork would need.
TEST(MegatronExport, ForkFlagsForVOneFOneBAndSeq1F1BAndARefusalForOffloading) {
  auto v = megatronExport(planOf(lm(16), "v-1f1b", 4, 8, 2));
  ASSERT_THAT(v, HasValue());
  EXPECT_NE(v->text.find("--enable-1f1b-v"), std::string::npos) << v->text;
  EXPECT_EQ(v->text.find("--zero-bubble-v-schedule"), std::string::npos) << v->text;

  PlanRequest r = test::request(lm(16), test::freeCluster(8, 100, 1), "seq1f1b", 4, 8 * 2, 1);
  r.config.seqSplits = 2;
  r.config.seqSplit = "even";
  r.config.partition = "balanced";  // as planOf: the fork's even decoder split
  auto seq = makePlan(r);
  ASSERT_THAT(seq, HasValue());
  auto m = megatronExport(*seq);
  ASSERT_THAT(m, HasValue());
  EXPECT_NE(m->text.find("--num-seq-splits 2"), std::string::npos) << m->text;
  EXPECT_NE(m->text.find("--global-batch-size 8"), std::string::npos) << m->text;  // training microbatches
  EXPECT_EQ(m->text.find("equal tokens"), std::string::npos) << m->text;           // no note: even split

  Plan offload = planOf(lm(16), "interleaved-1f1b", 4, 8, 2);
  offload.config.offloadRatio = 0.5;
  auto refused = megatronExport(offload);
  EXPECT_THAT(refused, HasError("--offload-chunk-num"));
}

TEST(MegatronExport, RefusesWhatMegatronCannotExpressWithTheReason) {
  const auto refusal = [](const Plan& plan) {
    auto m = megatronExport(plan);
    EXPECT_FALSE(m.hasValue());
    return m ? std::string() : m.message();
  };
  EXPECT_NE(refusal(planOf(lm(16), "gpipe", 4, 8, 1)).find("no GPipe schedule"), std::string::npos);
  EXPECT_NE(refusal(planOf(lm(16), "dualpipe", 4, 8, 2)).find("holds the model twice"), std::string::npos);
  EXPECT_NE(refusal(planOf(lm(18), "zb-h1", 4, 8, 1)).find("splits the decoder layers evenly"), std::string::npos);
  EXPECT_NE(refusal(planOf(lm(16, true), "zb-h1", 4, 8, 1)).find("untied embeddings"), std::string::npos);
  // ZeRO-3 runs on Megatron-FSDP in mainline Megatron-LM; the fork has none.
  Plan zero3 = planOf(lm(16), "zb-h1", 4, 8, 1);
  zero3.config.parallel.data = 2;
  zero3.config.parallel.zeroStage = 3;
  EXPECT_NE(refusal(zero3).find("ZeRO-3 is not expressible in the Zero Bubble fork"), std::string::npos);
  // A frozen component and its fill (bubble filling) has no Megatron counterpart.
  ModelSpec two = lm(16);
  Component frozen = two.components.front();
  frozen.name = "encoder";
  frozen.trainable = false;
  two.components.insert(two.components.begin(), frozen);
  Plan filled = planOf(lm(16), "1f1b", 4, 8, 1);
  filled.model = two;
  filled.config.fill = "greedy";
  EXPECT_NE(refusal(filled).find("cannot run a frozen-component fill"), std::string::npos);
  // Layers Megatron has no symbol for.
  ModelSpec conv = lm(16);
  conv.components.front().layers[3].kind = "conv";
  Plan convPlan = planOf(conv, "1f1b", 4, 8, 1);
  EXPECT_NE(refusal(convPlan).find("kind 'conv'"), std::string::npos);
}

TEST(TorchtitanExport, VPlacementUsesZbvStageStyleAndPlacementIsChecked) {
  auto t = torchtitanExport(planOf(lm(16), "zb-v", 4, 8, 2), "zbv.csv");
  ASSERT_THAT(t, HasValue());
  EXPECT_NE(t->toml.find("pipeline_parallel_schedule = \"ZBVZeroBubble\""), std::string::npos);
  EXPECT_NE(t->toml.find("pipeline_parallel_schedule_csv = \"zbv.csv\""), std::string::npos);
  Plan zero1 = planOf(lm(16), "1f1b", 4, 8, 1);
  zero1.config.parallel.data = 2;
  zero1.config.parallel.zeroStage = 1;
  auto refused = torchtitanExport(zero1, "x.csv");
  EXPECT_THAT(refused, HasError("ZeRO-1 is not expressible in torchtitan"));
}

TEST(ComputeCommsCsv, GoldenAndRuntimeInvariants) {
  const Plan plan = planOf(lm(16), "interleaved-1f1b", 4, 8, 2);
  auto csv = scheduleCsv(plan, CsvFormat::ComputeComms);
  ASSERT_THAT(csv, HasValue());
  expectGolden("compute-comms-pp4-vpp2.csv", *csv);
  std::map<int, int> stageRank;
  for (const VirtualStage& vs : plan.virtualStages) stageRank[vs.id] = vs.device;
  const auto table = rows(*csv);
  ASSERT_EQ(table.size(), 4u);
  for (std::size_t r = 0; r < table.size(); ++r) {
    std::set<std::string> seen;
    for (const std::string& a : table[r]) {
      const std::size_t type = a.find_first_not_of("0123456789");
      const int stage = std::stoi(a.substr(0, type));
      EXPECT_EQ(stageRank[stage], static_cast<int>(r)) << a << " on rank " << r;
      const std::string rest = a.substr(type);
      // A forward on a stage fed from another rank has its RECV_F placed before it.
      if (rest[0] == 'F' && stage > 0 && stageRank[stage - 1] != static_cast<int>(r)) {
        EXPECT_TRUE(seen.count(std::to_string(stage) + "RECV_F" + rest.substr(1))) << a << " before its receive";
      }
      if (rest.rfind("SEND_F", 0) == 0) {
        EXPECT_TRUE(seen.count(std::to_string(stage) + "F" + rest.substr(6)));
      }
      seen.insert(a);
    }
    // REDUCE_GRAD once per local stage, after its last backward; FSDP unshard/reshard balanced.
    int reduce = 0, unshard = 0, reshard = 0;
    for (const std::string& a : table[r]) {
      reduce += a.find("REDUCE_GRAD") != std::string::npos;
      unshard += a.find("UNSHARD") != std::string::npos && a.find("RESHARD") == std::string::npos;
      reshard += a.find("RESHARD") != std::string::npos;
    }
    EXPECT_EQ(reduce, 2);
    EXPECT_EQ(unshard, reshard);
  }
}

TEST(ScheduleCsvExport, ReimportedCsvResimulatesToTheSamePlan) {
  for (const std::string schedule : {"1f1b", "zb-h1", "interleaved-1f1b", "zb-v"}) {
    const int chunks = schedule == "interleaved-1f1b" || schedule == "zb-v" ? 2 : 1;
    const Plan plan = planOf(lm(16), schedule, 4, 8, chunks);
    auto csv = scheduleCsv(plan);
    ASSERT_THAT(csv, HasValue()) << schedule;
    auto back = importScheduleCsv(plan, *csv, schedule + ".csv");
    ASSERT_THAT(back, HasValue()) << schedule;
    ASSERT_EQ(back->ops.size(), plan.ops.size()) << schedule;
    for (std::size_t i = 0; i < plan.ops.size(); ++i) {
      EXPECT_EQ(back->ops[i].device, plan.ops[i].device);
      EXPECT_EQ(back->ops[i].kind, plan.ops[i].kind);
      EXPECT_EQ(back->ops[i].microbatch, plan.ops[i].microbatch);
      EXPECT_NEAR(back->ops[i].startMs, plan.ops[i].startMs, 1e-9) << schedule << " op " << i;
    }
    EXPECT_NEAR(back->metrics.makespanMs, plan.metrics.makespanMs, 1e-9) << schedule;
  }
}

TEST(ScheduleCsvDialect, LegacyRoundTripAndMessagesNameBothDialects) {
  const Plan plan = planOf(lm(16), "zb-h1", 4, 8, 1);
  auto current = scheduleCsv(plan);
  ASSERT_TRUE(current.hasValue());
  auto legacy = convertScheduleCsv(*current, CsvDialect::Current, CsvDialect::Legacy, "zb.csv");
  ASSERT_THAT(legacy, HasValue());
  EXPECT_EQ(legacy->find('I'), std::string::npos);  // legacy spells the input gradient B
  auto back = importScheduleCsv(plan, *legacy, "legacy.csv", CsvDialect::Legacy);
  ASSERT_THAT(back, HasValue());
  EXPECT_NEAR(back->metrics.makespanMs, plan.metrics.makespanMs, 1e-9);
  auto again = convertScheduleCsv(*legacy, CsvDialect::Legacy, CsvDialect::Current, "zb.csv");
  ASSERT_TRUE(again.hasValue());
  EXPECT_EQ(*again, *current);
  // Fused backward: B in the current dialect, BW in the legacy one.
  const Plan fused = planOf(lm(16), "1f1b", 4, 8, 1);
  auto fusedLegacy = convertScheduleCsv(*scheduleCsv(fused), CsvDialect::Current, CsvDialect::Legacy);
  ASSERT_TRUE(fusedLegacy.hasValue());
  EXPECT_NE(fusedLegacy->find("0BW0"), std::string::npos);
  // A legacy file read as current: the message names the cell and both dialects.
  auto wrong = importScheduleCsv(fused, *fusedLegacy, "old.csv");
  EXPECT_THAT(wrong, HasError("old.csv:1:"));
  EXPECT_THAT(wrong, HasError("'BW'"));
  EXPECT_THAT(wrong, HasError("--csv-dialect legacy"));
  auto unknown = convertScheduleCsv("0F0,0X0\r\n", CsvDialect::Legacy, CsvDialect::Current, "u.csv");
  EXPECT_THAT(unknown, HasError("u.csv:1:5"));
  EXPECT_THAT(unknown, HasError("current dialect"));
}

// A compute_comms file of PyTorch ≈2.5 (legacy letters): its SEND/RECV/UNSHARD/RESHARD cells are
// spelled alike in both dialects and pass through the conversion; the batched send-and-receive
// cell of 2.5's lowering (`0SEND_F0_1RECV_B0`) is refused with its cell and the two cells expected.
TEST(ScheduleCsvDialect, LegacyComputeCommsFileIsTakenAndItsBatchedCellsNamed) {
  const Plan plan = planOf(lm(16), "zb-h1", 4, 8, 1);
  auto comms = scheduleCsv(plan, CsvFormat::ComputeComms);
  ASSERT_THAT(comms, HasValue());
  ASSERT_NE(comms->find("UNSHARD"), std::string::npos);  // runtime.py's lowering always adds them
  auto legacy = convertScheduleCsv(*comms, CsvDialect::Current, CsvDialect::Legacy, "comms.csv");
  ASSERT_THAT(legacy, HasValue());
  EXPECT_NE(legacy->find("0SEND_F0"), std::string::npos);
  EXPECT_NE(legacy->find("0UNSHARD"), std::string::npos);
  auto again = convertScheduleCsv(*legacy, CsvDialect::Legacy, CsvDialect::Current, "legacy.csv");
  ASSERT_THAT(again, HasValue());
  EXPECT_EQ(*again, *comms);
  auto back = importScheduleCsv(plan, *legacy, "legacy.csv", CsvDialect::Legacy);
  ASSERT_THAT(back, HasValue());
  auto direct = importScheduleCsv(plan, *comms, "comms.csv");
  ASSERT_THAT(direct, HasValue());
  EXPECT_NEAR(back->metrics.makespanMs, direct->metrics.makespanMs, 1e-9);
  // PyTorch 2.5's batched cell, in either dialect and through the conversion.
  const std::string batched = "0F0,0SEND_F0_1RECV_B0\n";
  for (CsvDialect dialect : {CsvDialect::Legacy, CsvDialect::Current}) {
    auto refused = importScheduleCsv(plan, batched, "batched.csv", dialect);
    EXPECT_THAT(refused, HasError("batched.csv:1:5: '0SEND_F0_1RECV_B0': a batched send and receive"));
    EXPECT_THAT(refused, HasError("'0SEND_F0' then '1RECV_B0'"));
  }
  auto converted = convertScheduleCsv(batched, CsvDialect::Legacy, CsvDialect::Current, "batched.csv");
  ASSERT_FALSE(converted.hasValue());
  EXPECT_NE(converted.message().find("batched.csv:1:5:"), std::string::npos) << converted.message();
  EXPECT_NE(converted.message().find("is not taken"), std::string::npos) << converted.message();
}

TEST(TorchScheduleValidation, PyTorchsRulesWithOurMessages) {
  Plan plan = planOf(lm(16), "zb-h1", 2, 4, 1);
  EXPECT_TRUE(validateTorchSchedule(plan));
  // W before its I on the same device.
  Plan swapped = plan;
  for (std::size_t i = 0; i + 1 < swapped.ops.size(); ++i) {
    if (swapped.ops[i].kind == OpKind::B && swapped.ops[i + 1].kind == OpKind::W &&
        swapped.ops[i].microbatch == swapped.ops[i + 1].microbatch) {
      std::swap(swapped.ops[i], swapped.ops[i + 1]);
      break;
    }
  }
  auto st = validateTorchSchedule(swapped);
  EXPECT_THAT(st, HasError("runs before its input-gradient backward"));
  // A missing microbatch.
  Plan missing = plan;
  missing.ops.erase(std::remove_if(missing.ops.begin(), missing.ops.end(),
                                   [](const Op& o) { return o.microbatch == 3 && o.virtualStage == 1; }),
                    missing.ops.end());
  st = validateTorchSchedule(missing);
  EXPECT_THAT(st, HasError("stage 1: 3 forward microbatches, expected 4"));
  // A stage on two ranks.
  Plan moved = plan;
  for (Op& o : moved.ops) {
    if (o.virtualStage == 0 && o.microbatch == 2 && o.kind == OpKind::W) o.device = 1;
  }
  st = validateTorchSchedule(moved);
  EXPECT_THAT(st, HasError("PyTorch runs each stage on one rank"));
  // Frozen-component ops have no action.
  Plan withN = plan;
  withN.ops.front().kind = OpKind::N;
  st = validateTorchSchedule(withN);
  EXPECT_THAT(st, HasError("frozen-component fill"));
}

// --- issue 28 items 9, 10, 12 ---

// The Zero Bubble fork splits the decoder layers evenly and adds the embedding and the output
// layer to the first and last stage. A uniform plan of E + 32 decoders + L over 4 devices splits
// all 34 layers 8,8,9,9, leaving 7,8,9,8 decoders: uneven only because of the ends. The message
// says so and what works, and what it suggests does work.
TEST(MegatronExport, ForkRefusalSaysWhatMakesTheSplitUnevenAndWhatWorks) {
  auto uniform = megatronExport(planOf(lm(32), "zb-h1", 4, 8, 1, 1, "uniform"));
  ASSERT_FALSE(uniform.hasValue());
  const std::string& why = uniform.message();
  EXPECT_NE(why.find("7,8,9,8 decoder layers, where the fork runs 8 on each"), std::string::npos) << why;
  EXPECT_NE(why.find("uneven only because the uniform partition counts the model's embedding and lm_head as layers"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("8,8,9,9 of the 34 layers"), std::string::npos) << why;
  EXPECT_NE(why.find("plan the model without its embedding and lm_head layers with --partition uniform"),
            std::string::npos)
      << why;
  EXPECT_EQ(why.find("re-plan with --partition uniform"), std::string::npos) << why;  // it is uniform already
  ModelSpec decoders = test::equalLayers(32, 1.0, 1.0, 0.8);
  for (Layer& l : decoders.components.front().layers) l.kind = "transformer";
  auto works = megatronExport(planOf(decoders, "zb-h1", 4, 8, 1, 1, "uniform"));
  ASSERT_THAT(works, HasValue());
  EXPECT_NE(works->text.find("--num-layers 32"), std::string::npos);

  // A balanced split of a model whose uniform split is the fork's: re-plan with uniform.
  ModelSpec heavyEnds = lm(16);
  auto& layers = heavyEnds.components.front().layers;
  layers.front().forwardMs = layers.front().backwardInputMs = layers.front().backwardWeightMs = 3.0;
  auto balanced = megatronExport(planOf(heavyEnds, "zb-h1", 2, 4, 1));
  EXPECT_THAT(balanced, HasError("re-plan with --partition uniform"));
  EXPECT_TRUE(megatronExport(planOf(heavyEnds, "zb-h1", 2, 4, 1, 1, "uniform")).hasValue());

  // Decoder layers that do not divide over the stages: no even split exists.
  auto odd = megatronExport(planOf(lm(18), "zb-h1", 4, 8, 1));
  EXPECT_THAT(odd, HasError("18 decoder layers do not divide over 4 stages"));
  EXPECT_THAT(odd, HasError("--pipeline-model-parallel-layout"));
}

TEST(MegatronExport, MeasuredModelsSayWhichRequiredArgumentsAreMissing) {
  auto measured = megatronExport(planOf(lm(16), "1f1b", 4, 8, 1));
  ASSERT_THAT(measured, HasValue());
  EXPECT_EQ(measured->missingArguments, (std::vector<std::string>{"--hidden-size", "--num-attention-heads",
                                                                  "--max-position-embeddings", "--seq-length"}));
  EXPECT_NE(measured->text.find("# MISSING: the model has measured times"), std::string::npos) << measured->text;
  EXPECT_NE(measured->text.find("required by Megatron's argument check"), std::string::npos);
  // A model with transformer shapes writes them and misses nothing.
  PlanRequest r;
  auto model = loadModel(std::string(PIPESTUDIO_RESOURCES) + "/models/gpt3-1.3b.json");
  ASSERT_TRUE(model.hasValue());
  r = test::request(*model, test::freeCluster(8, 100, 1), "1f1b", 4, 8, 1);
  r.config.partition = "balanced";
  auto shaped = makePlan(r);
  ASSERT_THAT(shaped, HasValue());
  auto args = megatronExport(*shaped);
  ASSERT_THAT(args, HasValue());
  EXPECT_TRUE(args->missingArguments.empty());
  EXPECT_NE(args->text.find("--max-position-embeddings"), std::string::npos);
  EXPECT_EQ(args->text.find("MISSING"), std::string::npos);
}

// torchtitan main: a Python configuration function (--module/--config). The golden is checked by
// hand against torchtitan's config classes (ParallelismConfig, TrainingConfig, SelectiveAC/FullAC)
// and run_train.sh; the TOML stays for torchtitan v0.2.2 and earlier.
TEST(TorchtitanExport, PythonConfigurationForTorchtitanMainByDefault) {
  const Plan plan = planOf(lm(16), "interleaved-1f1b", 4, 8, 2, 2);
  TorchtitanOptions options;
  options.csvPath = "out/pp4.csv";
  options.moduleName = "pp4";
  auto py = torchtitanExport(plan, options);
  ASSERT_THAT(py, HasValue());
  EXPECT_EQ(py->format, TorchtitanFormat::Python);
  EXPECT_TRUE(py->toml.empty());
  expectGolden("torchtitan-tp2-pp4-vpp2.py", py->config);
  EXPECT_NE(py->config.find("MODULE=pp4 CONFIG=pipestudio_plan ./run_train.sh"), std::string::npos);
  EXPECT_NE(py->config.find("SCHEDULE_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), \"pp4.csv\")"),
            std::string::npos);
  EXPECT_NE(py->config.find("parallelism.num_pp_microbatches = 8"), std::string::npos);
  // torchtitan main refuses its default CUDA graphs under pipeline parallelism (f84224af0).
  EXPECT_NE(py->config.find("training.disable_cuda_graphs = True"), std::string::npos);
  EXPECT_EQ(py->moduleFqnsPerModelPart.back().back(), "lm_head");  // torchtitan main's name
  // A model torchtitan ships no configuration for: the file asks for one, and the export says so.
  EXPECT_NE(py->config.find("BASE = os.environ.get(\"PIPESTUDIO_TORCHTITAN_BASE\", \"\")"), std::string::npos);
  ASSERT_EQ(py->notes.size(), 1u);
  EXPECT_NE(py->notes.front().find("--torchtitan-base"), std::string::npos);
  options.base = "my_configs:lm16";
  auto named = torchtitanExport(plan, options);
  ASSERT_TRUE(named.hasValue());
  EXPECT_NE(named->config.find("\"my_configs:lm16\")"), std::string::npos);
  EXPECT_TRUE(named->notes.empty());
  // The same plan as TOML for torchtitan v0.2.2 (unchanged golden; output, not lm_head).
  options.format = TorchtitanFormat::Toml;
  auto toml = torchtitanExport(plan, options);
  ASSERT_TRUE(toml.hasValue());
  EXPECT_EQ(toml->config, toml->toml);
  EXPECT_EQ(toml->moduleFqnsPerModelPart.back().back(), "output");
  EXPECT_EQ(toml->csv, py->csv);
}

// Mixtral-8x7B, PP 2 × TP 2 × EP 4 × DP 4: our costs run EP inside data parallelism and split each
// expert over TP, as Megatron-LM does.
PlanRequest mixtralRequest(int tp, int zero) {
  PlanRequest r = test::bundledRequest("mixtral-8x7b", "h100-4x8-ib", "1f1b", 2, 8);
  r.config.partition = "uniform";
  r.config.parallel.tensor = tp;
  r.config.parallel.sequenceParallel = tp > 1;
  r.config.parallel.expert = 4;
  r.config.parallel.data = 4;
  r.config.parallel.zeroStage = zero;
  r.config.memoryLimitBytes = std::int64_t{1} << 50;
  return r;
}

TEST(TorchtitanExport, MoeLayoutsTorchtitanCanBuildAsCostedOrARefusalWithTheReason) {
  auto replicated = makePlan(mixtralRequest(2, 0));
  ASSERT_THAT(replicated, HasValue());
  // Replicated data parallelism leaves torchtitan no FSDP ranks for EP: 1·1·2 / (2·4).
  auto refused = torchtitanExport(*replicated, "mixtral.csv");
  EXPECT_THAT(refused, HasError("1·1·2 / (2·4) is not a whole number"));
  EXPECT_THAT(refused, HasError("Re-plan with --zero 2 or --zero 3"));
  EXPECT_THAT(refused, HasError("4·1·2 / (2·4) = 1"));

  // FSDP over the 4 data-parallel ranks: torchtitan v0.2.2 builds it, experts split over TP.
  auto sharded = makePlan(mixtralRequest(2, 3));
  ASSERT_THAT(sharded, HasValue());
  auto toml = torchtitanExport(*sharded, "mixtral.csv");
  ASSERT_THAT(toml, HasValue());
  EXPECT_NE(toml->config.find("expert_parallel_degree = 4\nexpert_tensor_parallel_degree = 2\n"), std::string::npos)
      << toml->config;
  EXPECT_NE(toml->config.find("data_parallel_shard_degree = 4\n"), std::string::npos);
  // torchtitan main has no expert TP: refused, with what works.
  TorchtitanOptions python;
  python.csvPath = "mixtral.csv";
  auto main = torchtitanExport(*sharded, python);
  EXPECT_THAT(main, HasError("no longer splits experts over tensor parallelism"));
  EXPECT_THAT(main, HasError("--torchtitan-config toml"));

  // Without TP, torchtitan main builds it: EP 4 inside FSDP 4 (4·1·1 / 4 = 1).
  auto noTp = makePlan(mixtralRequest(1, 3));
  ASSERT_THAT(noTp, HasValue());
  auto py = torchtitanExport(*noTp, python);
  ASSERT_THAT(py, HasValue());
  EXPECT_NE(py->config.find("parallelism.expert_parallel_degree = 4\n"), std::string::npos) << py->config;
  EXPECT_NE(py->config.find("parallelism.data_parallel_shard_degree = 4\n"), std::string::npos);
  EXPECT_EQ(py->config.find("expert_tensor"), std::string::npos);
}
