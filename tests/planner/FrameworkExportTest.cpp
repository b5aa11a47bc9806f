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

#include "PlannerFixtures.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Planner.hpp"

using namespace pipestudio;

namespace {

// A decoder-only LM with measured costs: embedding, `decoders` transformer layers, lm_head.
// The ends are nearly free, so a balanced partition splits the decoders evenly when it can.
ModelSpec lm(int decoders, bool tied = false) {
  ModelSpec m = test::equalLayers(decoders + 2, 1.0, 1.0, 0.8);
  m.name = "lm";
  auto& layers = m.components.front().layers;
  for (std::size_t i = 0; i < layers.size(); ++i) layers[i].kind = "transformer";
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
  EXPECT_TRUE(plan.hasValue()) << (plan ? "" : plan.message());
  return plan ? *plan : Plan{};
}

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
  ASSERT_TRUE(m.hasValue()) << m.message();
  EXPECT_TRUE(m->layout.empty());  // 2 decoders per virtual stage: Megatron's even split
  expectGolden("megatron-tp2-pp4-vpp2.txt", m->text);
  auto t = torchtitanExport(plan, "pp.csv");
  ASSERT_TRUE(t.hasValue()) << t.message();
  expectGolden("torchtitan-tp2-pp4-vpp2.toml", t->toml);
  expectGolden("torchtitan-tp2-pp4-vpp2.csv", t->csv);
  // Stage 0 holds the embedding, stage 7 (on rank 3) the head; rank r holds stages r and r + 4.
  EXPECT_EQ(t->moduleFqnsPerModelPart.front().front(), "tok_embeddings");
  EXPECT_EQ(t->moduleFqnsPerModelPart.back().back(), "output");
}

TEST(MegatronExport, UnevenPartitionBecomesALayoutOfThePlansSplit) {
  const Plan plan = planOf(lm(18), "1f1b", 4, 8, 1, 1);
  auto m = megatronExport(plan);
  ASSERT_TRUE(m.hasValue()) << m.message();
  ASSERT_FALSE(m->layout.empty());
  expectGolden("megatron-uneven-pp4.txt", m->text);
  // Parsed with Megatron's grammar, each stage has exactly the plan's layers.
  auto stages = parseMegatronLayout(m->layout);
  ASSERT_TRUE(stages.hasValue()) << stages.message();
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
}

TEST(FrameworkExport, AModelOfDecoderLayersOnlyGetsTheFrameworksOwnEmbeddingAndOutput) {
  // Costs measured for the decoder layers alone: Megatron still builds the embedding (first
  // stage) and the loss (last stage), and its layout must begin with E and end with L.
  ModelSpec decoders = test::equalLayers(8, 1.0, 1.0, 0.5);
  for (Layer& l : decoders.components.front().layers) l.kind = "transformer";
  auto even = megatronExport(planOf(decoders, "zb-h1", 4, 8, 1, 1, "uniform"));
  ASSERT_TRUE(even.hasValue()) << even.message();  // 2,2,2,2 is the fork's even split
  EXPECT_TRUE(even->layout.empty());
  EXPECT_NE(even->text.find("--untie-embeddings-and-output-weights"), std::string::npos);  // the fork asserts it
  EXPECT_NE(even->text.find("no embedding layer"), std::string::npos) << even->text;

  ModelSpec seven = test::equalLayers(7, 1.0, 1.0, 0.5);
  for (Layer& l : seven.components.front().layers) l.kind = "transformer";
  auto uneven = megatronExport(planOf(seven, "1f1b", 2, 4, 1, 1, "uniform"));
  ASSERT_TRUE(uneven.hasValue()) << uneven.message();
  auto stages = parseMegatronLayout(uneven->layout);
  ASSERT_TRUE(stages.hasValue()) << uneven->layout;
  ASSERT_EQ(stages->size(), 2u);
  EXPECT_EQ(stages->front().front(), 'E') << uneven->layout;
  EXPECT_EQ(stages->back().back(), 'L') << uneven->layout;
  EXPECT_EQ(std::count(uneven->layout.begin(), uneven->layout.end(), 'E'), 1) << uneven->layout;

  // torchtitan deletes every module no model part names: the ends are named all the same.
  auto titan = torchtitanExport(planOf(decoders, "1f1b", 4, 8, 1, 1, "uniform"), "pp.csv");
  ASSERT_TRUE(titan.hasValue()) << titan.message();
  const auto& parts = titan->moduleFqnsPerModelPart;
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts.front(), (std::vector<std::string>{"tok_embeddings", "layers.0", "layers.1"}));
  EXPECT_EQ(parts.back(), (std::vector<std::string>{"layers.6", "layers.7", "norm", "output"}));
  EXPECT_NE(titan->toml.find("# the plan's model has no embedding layer"), std::string::npos) << titan->toml;
}

TEST(MegatronExport, LayoutGrammarAsMegatronReadsIt) {
  auto s = parseMegatronLayout("Et*3|(tt|)*2,t|L");
  ASSERT_TRUE(s.hasValue()) << s.message();
  EXPECT_EQ(*s, (std::vector<std::string>{"Ettt", "tt", "tt", "t", "L"}));
  auto empty = parseMegatronLayout("E||t|L");
  ASSERT_TRUE(empty.hasValue());
  EXPECT_EQ((*empty)[1], "");
  auto bad = parseMegatronLayout("Etx|L");
  ASSERT_FALSE(bad.hasValue());
  EXPECT_NE(bad.message().find("'x'"), std::string::npos) << bad.message();
  EXPECT_FALSE(parseMegatronLayout("(tt|*2").hasValue());
  EXPECT_FALSE(parseMegatronLayout("t*999999999").hasValue());  // never expanded without bound
}

TEST(MegatronExport, ZeroBubbleVGoldenAndMemorySetups) {
  const Plan zbv = planOf(lm(16), "zb-v", 4, 8, 2, 2);
  auto m = megatronExport(zbv);
  ASSERT_TRUE(m.hasValue()) << m.message();
  expectGolden("megatron-zbv-pp4.txt", m->text);
  auto half = megatronExport(planOf(lm(16), "v-half", 4, 8, 2));
  ASSERT_TRUE(half.hasValue()) << half.message();
  EXPECT_NE(half->text.find("--zero-bubble-v-schedule-mem-setup half"), std::string::npos);
  auto h1 = megatronExport(planOf(lm(16), "zb-h1", 4, 8, 1));
  ASSERT_TRUE(h1.hasValue()) << h1.message();
  EXPECT_NE(h1->text.find("--enable-zero-bubble"), std::string::npos);
  EXPECT_NE(h1->text.find("--zero-bubble-max-pending-backward 4"), std::string::npos) << h1->text;
}

TEST(MegatronExport, RefusesWhatMegatronCannotExpressWithTheReason) {
  const auto refusal = [](const Plan& plan) {
    auto m = megatronExport(plan);
    EXPECT_FALSE(m.hasValue());
    return m ? std::string() : m.message();
  };
  EXPECT_NE(refusal(planOf(lm(16), "gpipe", 4, 8, 1)).find("no GPipe schedule"), std::string::npos);
  EXPECT_NE(refusal(planOf(lm(16), "dualpipe", 4, 8, 2)).find("holds the model twice"), std::string::npos);
  EXPECT_NE(refusal(planOf(lm(18), "zb-h1", 4, 8, 1)).find("splits decoder layers evenly"), std::string::npos);
  EXPECT_NE(refusal(planOf(lm(16, true), "zb-h1", 4, 8, 1)).find("untied embeddings"), std::string::npos);
  Plan zero3 = planOf(lm(16), "1f1b", 4, 8, 1);
  zero3.config.parallel.data = 2;
  zero3.config.parallel.zeroStage = 3;
  EXPECT_NE(refusal(zero3).find("ZeRO-3 is not expressible in Megatron-LM"), std::string::npos);
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
  ASSERT_TRUE(t.hasValue()) << t.message();
  EXPECT_NE(t->toml.find("pipeline_parallel_schedule = \"ZBVZeroBubble\""), std::string::npos);
  EXPECT_NE(t->toml.find("pipeline_parallel_schedule_csv = \"zbv.csv\""), std::string::npos);
  Plan zero1 = planOf(lm(16), "1f1b", 4, 8, 1);
  zero1.config.parallel.data = 2;
  zero1.config.parallel.zeroStage = 1;
  auto refused = torchtitanExport(zero1, "x.csv");
  ASSERT_FALSE(refused.hasValue());
  EXPECT_NE(refused.message().find("ZeRO-1 is not expressible in torchtitan"), std::string::npos);
}

TEST(ComputeCommsCsv, GoldenAndRuntimeInvariants) {
  const Plan plan = planOf(lm(16), "interleaved-1f1b", 4, 8, 2);
  auto csv = scheduleCsv(plan, CsvFormat::ComputeComms);
  ASSERT_TRUE(csv.hasValue()) << csv.message();
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
    ASSERT_TRUE(csv.hasValue()) << schedule << ": " << csv.message();
    auto back = importScheduleCsv(plan, *csv, schedule + ".csv");
    ASSERT_TRUE(back.hasValue()) << schedule << ": " << back.message();
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
  ASSERT_TRUE(legacy.hasValue()) << legacy.message();
  EXPECT_EQ(legacy->find('I'), std::string::npos);  // legacy spells the input gradient B
  auto back = importScheduleCsv(plan, *legacy, "legacy.csv", CsvDialect::Legacy);
  ASSERT_TRUE(back.hasValue()) << back.message();
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
  ASSERT_FALSE(wrong.hasValue());
  EXPECT_NE(wrong.message().find("old.csv:1:"), std::string::npos) << wrong.message();
  EXPECT_NE(wrong.message().find("'BW'"), std::string::npos);
  EXPECT_NE(wrong.message().find("--csv-dialect legacy"), std::string::npos);
  auto unknown = convertScheduleCsv("0F0,0X0\r\n", CsvDialect::Legacy, CsvDialect::Current, "u.csv");
  ASSERT_FALSE(unknown.hasValue());
  EXPECT_NE(unknown.message().find("u.csv:1:5"), std::string::npos) << unknown.message();
  EXPECT_NE(unknown.message().find("current dialect"), std::string::npos);
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
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("runs before its input-gradient backward"), std::string::npos) << st.message();
  // A missing microbatch.
  Plan missing = plan;
  missing.ops.erase(std::remove_if(missing.ops.begin(), missing.ops.end(),
                                   [](const Op& o) { return o.microbatch == 3 && o.virtualStage == 1; }),
                    missing.ops.end());
  st = validateTorchSchedule(missing);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("stage 1: 3 forward microbatches, expected 4"), std::string::npos) << st.message();
  // A stage on two ranks.
  Plan moved = plan;
  for (Op& o : moved.ops) {
    if (o.virtualStage == 0 && o.microbatch == 2 && o.kind == OpKind::W) o.device = 1;
  }
  st = validateTorchSchedule(moved);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("PyTorch runs each stage on one rank"), std::string::npos) << st.message();
  // Frozen-component ops have no action.
  Plan withN = plan;
  withN.ops.front().kind = OpKind::N;
  st = validateTorchSchedule(withN);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("frozen-component fill"), std::string::npos);
}
