#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <optional>
#include <ostream>
#include <string>

#include "Commands.hpp"
#include "Flags.hpp"
#include "Inputs.hpp"
#include "PlanSummary.hpp"
#include "RecipeFlags.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/SequenceSplits.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "pipestudio/planner/Vocab.hpp"

namespace pipestudio::cli {
namespace {

struct PlanOptions {
  std::string model, cluster, schedule, partition = "balanced", fill = "none", memoryLimit, output;
  int devices = 0, microbatches = 0, chunks = 0;
  bool json = false;
  std::string csv;                     // custom: the schedule CSV ("auto" helper)
  std::string csvDialect = "current";  // legacy: PyTorch ≈2.5 / Zero Bubble fork letters (B = I, BW = B)
  bool overlapFB = false;              // custom: OVERLAP_F_B pairs timed overlapped (a registered custom function)
  bool exact = false;                  // zb-auto: ILP through CBC ("auto" helper)
  bool vocabParallel = false;          // embedding/LM head split over all devices (Vocab.hpp)
  int vocabBarriers = 1;               // 1: Algorithm 2 (Vocab-1), 2: Algorithm 1 (Vocab-2)
  int unit = 0;                        // zeropp: microbatches per scheduling unit (0: the schedule's default)
  int seqSplits = 1;                   // seq1f1b: sequence chunks per microbatch
  std::string seqSplit = "balanced";   // where the chunk boundaries fall
  std::optional<double> offloadRatio;  // share of activations offloaded to host memory (PipeOffload)
  // Megatron-Core's activation offloading (Parallelism::cpuOffloadingNumLayers, offloadModules).
  int cpuOffloadingNumLayers = 0;
  std::string offloadModules, offloadDelta;
  double offloadFraction = 1.0;
  std::optional<double> exactTimeLimitS;  // zb-auto --exact: the ILP's seconds (default 30)
  // Hybrid parallelism (issue 13); every flag optional, defaults are today's pure pipeline.
  int tp = 1, cp = 1, ep = 1, dp = 1, zero = 0;
  std::string recompute = "none", optimizerSync = "global";
  bool sequenceParallel = false, noSequenceParallel = false;
  RecipeOptions recipe;  // precision, overlaps, recomputation details (RecipeFlags.hpp)
  std::int64_t globalBatch = 0, microBatchSize = 0;
  std::string megatronLayout;  // a given Megatron-LM layout or hybrid pattern (partition "layout")
};

// Stages per layer split of a plan's virtual stages, in id order ("4,5,5,4").
std::string stageLayerCounts(const Plan& plan) {
  std::vector<const VirtualStage*> stages;
  for (const VirtualStage& vs : plan.virtualStages) stages.push_back(&vs);
  std::sort(stages.begin(), stages.end(), [](const VirtualStage* a, const VirtualStage* b) { return a->id < b->id; });
  std::string out;
  for (const VirtualStage* vs : stages)
    out += (out.empty() ? "" : ",") + std::to_string(vs->lastLayer - vs->firstLayer + 1);
  return out;
}

// `--megatron-layout`: the given split beside the planner's own choice for the same request.
struct LayoutComparison {
  std::string partition;
  Expected<Plan> planner = Error{"not planned"};
};

Json layoutComparisonJson(const std::string& layout, const Plan& given, const LayoutComparison& c) {
  Json j{{"layout", layout}, {"iteration_ms", given.metrics.iterationMs}, {"stage_layers", stageLayerCounts(given)}};
  Json planner{{"partition", c.partition}};
  if (c.planner) {
    planner["iteration_ms"] = c.planner->metrics.iterationMs;
    planner["stage_layers"] = stageLayerCounts(*c.planner);
  } else {
    planner["error"] = c.planner.message();
  }
  j["planner"] = std::move(planner);
  return j;
}

void printLayoutComparison(const Plan& given, const LayoutComparison& c, std::ostream& out) {
  out << "\nmegatron layout (this plan): iteration " << formatMs(given.metrics.iterationMs) << ", layers per stage "
      << stageLayerCounts(given) << '\n';
  if (!c.planner) {
    out << "planner's " << c.partition << " partition: " << c.planner.message() << '\n';
    return;
  }
  const double ratio = c.planner->metrics.iterationMs / std::max(1e-12, given.metrics.iterationMs) - 1.0;
  std::array<char, 64> pct{};
  std::snprintf(pct.data(), pct.size(), "%+.1f %%", 100.0 * ratio);
  out << "planner's " << c.partition << " partition: iteration " << formatMs(c.planner->metrics.iterationMs) << " ("
      << pct.data() << " against the layout), layers per stage " << stageLayerCounts(*c.planner) << '\n';
}

Json fillReportJson(const FillReport& r) {
  Json devices = Json::array();
  for (const auto& d : r.devices) {
    devices.push_back(Json{{"bubble_ms", d.bubbleMs}, {"filled_ms", d.filledMs}, {"overflow_ms", d.overflowMs}});
  }
  Json j{{"mode", r.mode},
         {"backbone_only_ms", r.backboneOnlyMs},
         {"no_fill_ms", r.noFillMs},
         {"iteration_ms", r.iterationMs},
         {"frozen_work_ms", r.frozenWorkMs},
         {"speedup_over_no_fill", r.speedupOverNoFill},
         {"devices", std::move(devices)}};
  if (r.dataParallelMs) {
    j["data_parallel_ms"] = *r.dataParallelMs;
    j["speedup_over_data_parallel"] = r.speedupOverDataParallel;
  } else {
    j["data_parallel_note"] = r.dataParallelNote;
  }
  return j;
}

std::string times(double factor) {
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%.2fx", factor);
  return buf.data();
}

void printFillReport(const FillReport& r, std::ostream& out) {
  out << "\nfrozen components (fill " << r.mode << (r.usedNoFillLayout ? ", greedy kept the no-fill layout" : "")
      << "): backbone only " << formatMs(r.backboneOnlyMs) << ", fill none " << formatMs(r.noFillMs) << ", this plan "
      << formatMs(r.iterationMs) << " (" << times(r.speedupOverNoFill) << " over fill none)\n";
  if (r.dataParallelMs) {
    out << "data parallel on the same devices: " << formatMs(*r.dataParallelMs) << " (the pipeline runs at "
        << times(r.speedupOverDataParallel) << " its speed)\n";
  } else {
    out << "data parallel: " << r.dataParallelNote << '\n';
  }
  out << "device  bubble      filled      overflow\n";
  for (std::size_t d = 0; d < r.devices.size(); ++d) {
    const auto& dev = r.devices[d];
    out << "  " << d << "     " << formatMs(dev.bubbleMs) << "  " << formatMs(dev.filledMs) << "  "
        << formatMs(dev.overflowMs) << '\n';
  }
}

// Each step below reads some of the flags into the request; a step that refuses them prints why
// on stderr and returns the exit status (kExitOk: go on).
int refuse(int exitCode, const std::string& message) {
  std::cerr << "plan: " << message << '\n';
  return exitCode;
}

// The schedule (PyTorch's aliases taken), devices and the microbatch count or global batch.
int readScheduleFlags(const PlanOptions& o, PlanConfig& cfg) {
  cfg.schedule = o.schedule;
  if (auto ours = scheduleForAlias(o.schedule); ours && *ours != o.schedule) {
    std::cerr << "plan: " << o.schedule << " is PyTorch's name for our " << *ours << '\n';
    cfg.schedule = std::string(*ours);
  }
  cfg.devices = o.devices;
  cfg.microbatches = o.microbatches;
  cfg.partition = o.partition;
  cfg.fill = o.fill;
  if (o.microbatches <= 0 && o.globalBatch <= 0)
    return refuse(kExitUsage, "give --microbatches M, or --global-batch G (with --micro-batch-size B: M = G / (B·D))");
  if (o.microbatches > 0 && o.globalBatch > 0) {
    return refuse(kExitUsage, "--microbatches and --global-batch both set the microbatch count (expected one of them)");
  }
  return kExitOk;
}

// Megatron-Core's activation offloading: whole layers, or named modules of every layer.
int readActivationOffload(const PlanOptions& o, Parallelism& par) {
  par.cpuOffloadingNumLayers = o.cpuOffloadingNumLayers;
  par.activationOffloadFraction = o.offloadFraction;
  if (!o.offloadModules.empty()) {
    std::string unknown;
    const auto bits = offloadModulesFromNames(o.offloadModules, &unknown);
    if (!bits) {
      return refuse(kExitUsage, "--offload-modules: '" + unknown + "' is not a module (expected " +
                                    std::string(offloadModuleChoices()) + ")");
    }
    par.offloadModules = *bits;
  }
  if (!o.offloadDelta.empty()) {
    auto bytes = parseBytes(o.offloadDelta);
    if (!bytes) return refuse(kExitUsage, "--delta-offload-bytes-across-pp-ranks: " + bytes.message());
    par.deltaOffloadBytesAcrossPpRanks = *bytes;
  }
  if ((o.offloadFraction < 1.0 || !o.offloadDelta.empty()) && par.offloadModules == 0) {
    return refuse(kExitUsage,
                  "--activation-offload-fraction and --delta-offload-bytes-across-pp-ranks apply to "
                  "--offload-modules (fine-grained activation offloading)");
  }
  return kExitOk;
}

// Hybrid parallelism (issue 13): degrees, ZeRO, sequence parallelism, recomputation, offloading.
int readParallelismFlags(const PlanOptions& o, Parallelism& par) {
  par.tensor = o.tp;
  par.context = o.cp;
  par.expert = o.ep;
  par.data = o.dp;
  par.zeroStage = o.zero;
  // Sequence parallelism is on by default whenever T > 1 (Megatron-LM's recommendation).
  par.sequenceParallel = o.tp > 1 && !o.noSequenceParallel;
  if (o.sequenceParallel && o.noSequenceParallel)
    return refuse(kExitUsage, "--sequence-parallel and --no-sequence-parallel contradict each other");
  if (auto r = recomputeFromName(o.recompute)) {
    par.recompute = *r;
  } else {
    return refuse(kExitUsage, "--recompute '" + o.recompute + "' is not a mode (expected none, selective or full)");
  }
  return readActivationOffload(o, par);
}

// The recipe, the optimizer sync, and what sets the microbatch count and the chunks per device:
// sequence splits (the plan's microbatches count chunks, K per training microbatch), PipeOffload.
int readRecipeAndBatchFlags(const PlanOptions& o, PlanConfig& cfg) {
  if (auto st = applyRecipeFlags(o.recipe, cfg); !st) return refuse(kExitUsage, st.message());
  if (o.optimizerSync != "global" && o.optimizerSync != "post-validation") {
    return refuse(kExitUsage,
                  "--optimizer-sync '" + o.optimizerSync + "' is not a mode (expected global or post-validation)");
  }
  cfg.optimizerSync = o.optimizerSync;
  cfg.vocabBarriers = o.vocabBarriers;
  cfg.unitMicrobatches = o.unit;
  cfg.seqSplits = o.seqSplits;
  cfg.seqSplit = o.seqSplit;
  if (o.microbatches > 0 && static_cast<std::int64_t>(o.microbatches) * o.seqSplits > 1'000'000) {
    return refuse(kExitUsage, "--microbatches " + std::to_string(o.microbatches) + " × --seq-splits " +
                                  std::to_string(o.seqSplits) + " exceeds 1000000 sequence chunks");
  }
  if (o.microbatches > 0) cfg.microbatches = o.microbatches * o.seqSplits;
  if (o.offloadRatio && *o.offloadRatio == 0 && o.schedule == "pipeoffload") {
    // PlanConfig's 0 is "the schedule's default" for pipeoffload (one chunk per device).
    return refuse(kExitUsage,
                  "--offload-ratio 0: pipeoffload always offloads (expected a ratio in (0, 1]; without "
                  "offloading plan interleaved-1f1b or another one-pipeline schedule)");
  }
  cfg.offloadRatio = o.offloadRatio.value_or(0.0);
  if (o.globalBatch > 0) cfg.globalBatch = o.globalBatch;
  if (o.microBatchSize > 0) cfg.microBatchSize = o.microBatchSize;
  const ScheduleGenerator* generator = findScheduleGenerator(o.schedule);
  cfg.chunksPerDevice = o.chunks > 0 ? o.chunks : (generator ? generator->defaultChunksPerDevice() : 1);
  return kExitOk;
}

// `--megatron-layout`: the given split replaces the partitioner and sets the chunks per device.
int readMegatronLayout(const PlanOptions& o, PlanRequest& request) {
  PlanConfig& cfg = request.config;
  if (o.vocabParallel || o.schedule == "custom" || o.schedule == "zb-auto" ||
      !request.model.frozenComponents().empty()) {
    return refuse(kExitUsage,
                  "--megatron-layout splits one decoder under a generated schedule (not with --vocab-parallel, "
                  "--schedule custom or zb-auto, or frozen components)");
  }
  // A hybrid pattern that ends a segment between a block's attention and its MLP is planned over
  // the blocks' halves (makePlan does the same).
  const bool halves = layoutCutsBlocks(request.model, o.megatronLayout);
  auto split = megatronLayoutSplit(halves ? splitTransformerBlocks(request.model) : request.model, o.megatronLayout);
  if (!split) return refuse(kExitFailure, "--megatron-layout: " + split.message());
  const auto stages = static_cast<int>(split->size());
  if (o.chunks == 0 && stages % cfg.devices == 0) cfg.chunksPerDevice = stages / cfg.devices;
  if (stages != cfg.devices * cfg.chunksPerDevice) {
    return refuse(kExitFailure, "--megatron-layout has " + std::to_string(stages) + " stages, --devices " +
                                    std::to_string(cfg.devices) + " × chunks " + std::to_string(cfg.chunksPerDevice) +
                                    " virtual stages (expected the layout's stages to be devices × chunks, "
                                    "index = virtual rank · P + pipeline rank)");
  }
  cfg.partition = "layout";
  cfg.layout = o.megatronLayout;
  return kExitOk;
}

// The plan's size and memory limit, and the flags only some schedules take.
int readLimitsAndSolverFlags(const PlanOptions& o, PlanConfig& cfg) {
  // Every schedule (zb-auto, custom, vocab-parallel too): refuse before anything is allocated.
  if (auto st = checkPlanSize(cfg.devices, cfg.chunksPerDevice, cfg.microbatches); !st)
    return refuse(kExitFailure, st.message());
  if (!o.memoryLimit.empty()) {
    auto bytes = parseBytes(o.memoryLimit);
    if (!bytes) {
      std::cerr << "--memory-limit: " << bytes.message() << '\n';
      return kExitFailure;
    }
    cfg.memoryLimitBytes = *bytes;
  }
  // zb-auto and custom take extra inputs (AutoSchedule.hpp); every other schedule is makePlan.
  if ((!o.csv.empty() && o.schedule != "custom") || (o.exact && o.schedule != "zb-auto") ||
      (o.overlapFB && o.schedule != "custom"))
    return refuse(kExitUsage, "--csv and --overlap-f-b apply to --schedule custom, --exact to --schedule zb-auto");
  if (o.overlapFB) cfg.overlapForwardBackward = true;
  if (o.exactTimeLimitS && !o.exact)
    return refuse(kExitUsage, "--exact-time-limit is the time of the exact solve: it needs --exact (zb-auto)");
  return kExitOk;
}

// The request the flags describe, on the model and cluster they name.
int buildRequest(const PlanOptions& o, PlanRequest& request) {
  auto inputs = loadModelAndCluster(o.model, o.cluster);
  if (!inputs) return kExitFailure;
  request.model = std::move(inputs->first);
  request.cluster = std::move(inputs->second);
  if (auto st = applyExpertGemmCurve(o.recipe, request.cluster); !st) return refuse(kExitFailure, st.message());
  PlanConfig& cfg = request.config;
  if (int rc = readScheduleFlags(o, cfg); rc != kExitOk) return rc;
  if (int rc = readParallelismFlags(o, cfg.parallel); rc != kExitOk) return rc;
  if (int rc = readRecipeAndBatchFlags(o, cfg); rc != kExitOk) return rc;
  if (!o.megatronLayout.empty()) {
    if (int rc = readMegatronLayout(o, request); rc != kExitOk) return rc;
  }
  return readLimitsAndSolverFlags(o, cfg);
}

// What solving gave: the plan, and the reports of the solvers that write one.
struct PlanOutcome {
  Expected<Plan> plan = Error{"no plan"};
  AutoScheduleReport autoReport;
  std::optional<FillReport> fillReport;
  std::optional<LayoutComparison> comparison;
};

// The solver the flags pick: vocabulary parallelism, a custom CSV, zb-auto, the filler for
// models with frozen components, else makePlan.
int solve(const PlanOptions& o, const PlanRequest& request, PlanOutcome& out) {
  if (o.vocabParallel) {
    out.plan = makeVocabParallelPlan(request);
  } else if (o.schedule == "custom" && !o.csv.empty()) {
    auto text = readScheduleCsvFile(o.csv);
    if (text && o.csvDialect == "legacy")
      text = convertScheduleCsv(*text, CsvDialect::Legacy, CsvDialect::Current, o.csv);
    if (!text) return refuse(kExitFailure, text.message());
    out.plan = makeCustomPlan(request, *text, o.csv);
  } else if (o.schedule == "zb-auto") {
    AutoScheduleOptions autoOptions;
    autoOptions.exact = o.exact;
    autoOptions.exactTimeLimitS = o.exactTimeLimitS.value_or(autoOptions.exactTimeLimitS);
    out.plan = makeAutoPlan(request, autoOptions, &out.autoReport);
  } else if (!request.model.frozenComponents().empty()) {
    // Models with frozen components: solve through the filler so the report can say how
    // much bubble was filled and what it gains over --fill none and data parallelism.
    auto filled = makeFilledPlan(request);
    if (filled) {
      out.fillReport = filled->report;
      out.plan = std::move(filled->plan);
    } else {
      out.plan = filled.error();
    }
  } else {
    out.plan = makePlan(request);
  }
  if (!out.plan) return refuse(kExitFailure, out.plan.message());
  if (!o.megatronLayout.empty()) {
    PlanRequest own = request;
    own.config.partition = o.partition;
    own.config.layout.clear();
    out.comparison = LayoutComparison{o.partition, makePlan(own)};
  }
  return kExitOk;
}

// The plan file (-o), then the summary with the solvers' reports, as JSON or text.
int writeOutcome(const PlanOptions& o, const PlanOutcome& out) {
  const Plan& plan = *out.plan;
  if (!o.output.empty()) {
    if (auto st = savePlan(o.output, plan); !st) return refuse(kExitFailure, st.message());  // it names the file
  }
  if (o.json) {
    Json summary = planSummaryJson(plan);
    if (o.schedule == "zb-auto") summary["zb_auto"] = autoScheduleReportJson(out.autoReport);
    if (out.fillReport) summary["fill"] = fillReportJson(*out.fillReport);
    if (out.comparison) summary["megatron_layout"] = layoutComparisonJson(o.megatronLayout, plan, *out.comparison);
    std::cout << summary.dump(2) << '\n';
  } else {
    printPlanSummary(plan, std::cout);
    if (o.schedule == "zb-auto") std::cout << formatAutoScheduleReport(out.autoReport);
    if (out.fillReport) printFillReport(*out.fillReport, std::cout);
    if (out.comparison) printLayoutComparison(plan, *out.comparison, std::cout);
    if (!o.output.empty()) std::cout << "plan written to " << o.output << '\n';
  }
  return kExitOk;
}

int runPlan(const PlanOptions& o) {
  PlanRequest request;
  if (int rc = buildRequest(o, request); rc != kExitOk) return rc;
  PlanOutcome outcome;
  if (int rc = solve(o, request, outcome); rc != kExitOk) return rc;
  return writeOutcome(o, outcome);
}

}  // namespace

void addPlanCommand(CLI::App& root, int& exitCode) {
  static PlanOptions o;
  auto* cmd = root.add_subcommand("plan", "Partition, schedule and simulate a model on a cluster");
  cmd->add_option("--model", o.model, "Model file (pipestudio.model/1)")->required();
  cmd->add_option("--cluster", o.cluster, "Cluster file (pipestudio.cluster/1)")->required();
  cmd->add_option("--schedule", o.schedule, "Schedule name (see `schedules`)")->required();
  cmd->add_option("--devices", o.devices, "Pipeline devices")->required()->check(intIn(1, 1'000'000));
  cmd->add_option("--microbatches", o.microbatches, "Microbatches per iteration (or --global-batch)")
      ->check(intIn(1, 1'000'000));
  cmd->add_option("--chunks", o.chunks, "Virtual stages per device (default: the schedule's)")->check(intIn(1, 1024));
  cmd->add_option("--partition", o.partition,
                  joinNames(partitionNames(), "|") +
                      " (default balanced: uniform refuses unequal chunks for multi-chunk schedules)");
  cmd->add_option("--fill", o.fill, joinNames(fillModeNames(), "|"));
  cmd->add_option("--memory-limit", o.memoryLimit, "Per-device memory limit, bytes or e.g. 40GiB")->check(byteSize());
  cmd->add_option("-o,--output", o.output, "Write the plan document here")->check(nonEmptyPath());
  cmd->add_flag("--json", o.json, "Print config and metrics as one JSON document");
  cmd->add_option("--csv", o.csv, "custom: per-device order from a torch.distributed.pipelining schedule CSV");
  cmd->add_option(
         "--csv-dialect", o.csvDialect,
         "custom: current (I input gradient, B full backward) or legacy (PyTorch 2.5 and the Zero Bubble fork: "
         "B input gradient, BW full backward)")
      ->check(CLI::IsMember({"current", "legacy"}));
  cmd->add_flag("--overlap-f-b", o.overlapFB,
                "custom: time each (F;B)OVERLAP_F_B cell as one overlapped pair, as a custom function registered for "
                "OVERLAP_F_B runs it (default: F then B, each when its input is there, as torch.distributed."
                "pipelining's runtime.py runs them)");
  cmd->add_flag("--vocab-parallel", o.vocabParallel,
                "Split embedding and LM head over all devices (S/T passes; Yeung et al. 2024)");
  cmd->add_option("--vocab-barriers", o.vocabBarriers,
                  "--vocab-parallel: all-reduce barriers per microbatch, 1 (Vocab-1, default) or 2 (Vocab-2)")
      ->check(intIn(1, 2));
  cmd->add_option("--unit", o.unit, "zeropp: microbatches per scheduling unit (default: the devices)")
      ->check(intIn(1, 1'000'000));
  cmd->add_option("--seq-splits", o.seqSplits,
                  "seq1f1b: sequence chunks per microbatch K (Seq1F1B; the plan's microbatches count chunks)")
      ->check(intIn(1, kMaxSeqSplits));
  cmd->add_option("--seq-split", o.seqSplit,
                  "--seq-splits: balanced (equal compute per chunk, Seq1F1B's partition; default) or even (equal "
                  "tokens)")
      ->check(CLI::IsMember({"balanced", "even"}));
  cmd->add_option("--offload-ratio", o.offloadRatio,
                  "Share of each device's activations offloaded to host memory between forward and backward, chunk "
                  "0 first (PipeOffload; pipeoffload default: one chunk)")
      ->check(numberIn(0, 1));
  cmd->add_option("--cpu-offloading-num-layers,--cpu-offload-layers", o.cpuOffloadingNumLayers,
                  "Offload the activations of the first N transformer layers to host memory over the GPU's host "
                  "link (Megatron-Core CPU offloading, Transformer Engine's scheduling; one pipeline rank, no "
                  "recomputation, N below the rank's layers)")
      ->check(intIn(1, 100000));
  cmd->add_option("--offload-modules,--activation-offload-modules", o.offloadModules,
                  "Fine-grained activation offloading: comma-separated attn_norm,qkv_linear,core_attn,attn_proj,"
                  "mlp_norm,expert_fc1,moe_act (Megatron-Core --fine-grained-activation-offloading "
                  "--offload-modules)");
  cmd->add_option("--activation-offload-fraction", o.offloadFraction,
                  "--offload-modules: share of each microbatch's eligible groups offloaded, the first in forward "
                  "order (default 1)")
      ->check(numberIn(0, 1));
  cmd->add_option("--delta-offload-bytes-across-pp-ranks", o.offloadDelta,
                  "--offload-modules: pipeline rank r keeps r × BYTES (e.g. 1GiB) more on the GPU")
      ->check(byteSize());
  cmd->add_flag("--exact", o.exact, "zb-auto: also solve exactly (ILP through CBC; p <= 4, m <= 8)");
  cmd->add_option("--exact-time-limit", o.exactTimeLimitS, "zb-auto --exact: seconds for the ILP (default 30)")
      ->check(numberIn(0.001, 86400));
  cmd->add_option("--tp", o.tp, "Tensor-parallel degree T (Megatron: QKV/MLP split over T GPUs of a node)")
      ->check(intIn(1, 1024));
  cmd->add_option("--cp", o.cp, "Context-parallel degree C (ring attention, sequence split over C)")
      ->check(intIn(1, 1024));
  cmd->add_option("--ep", o.ep, "Expert-parallel degree E (MoE, inside the data-parallel group)")
      ->check(intIn(1, 1'000'000));
  cmd->add_option("--dp", o.dp, "Data-parallel degree D (replicas of the whole pipeline)")->check(intIn(1, 1'000'000));
  cmd->add_option("--zero", o.zero, "ZeRO stage 0|1|2|3 (1: distributed optimizer, 3: FSDP)")->check(intIn(0, 3));
  cmd->add_option("--recompute", o.recompute, "Activation recomputation none|selective|full");
  cmd->add_flag("--sequence-parallel", o.sequenceParallel, "Sequence parallelism (default on when --tp > 1)");
  cmd->add_flag("--no-sequence-parallel", o.noSequenceParallel, "Turn sequence parallelism off");
  addRecipeFlags(cmd, o.recipe);
  cmd->add_option("--global-batch", o.globalBatch, "Global batch G in samples (microbatches = G / (B·D))")
      ->check(intIn(1, std::int64_t{1} << 40));
  cmd->add_option("--micro-batch-size", o.microBatchSize, "Samples per microbatch B (default: the model's)")
      ->check(intIn(1, 1'000'000));
  cmd->add_option("--megatron-layout", o.megatronLayout,
                  "Plan exactly the split of a Megatron-LM --pipeline-model-parallel-layout (e.g. "
                  "'Et*2|(t*2|)*34,t*3|(t*2|)*3,tL') or --hybrid-layer-pattern; chunks = its stages / --devices; "
                  "prints it beside the planner's own --partition")
      ->check(CLI::Validator(
          [](std::string& text) { return text.empty() ? std::string("empty layout (expected e.g. 'Et*3|t*3L')") : ""; },
          "LAYOUT", "megatronLayout"));
  cmd->add_option("--optimizer-sync", o.optimizerSync,
                  "global (default) | post-validation (Zero Bubble: iterations overlap, steady-state period)");
  cmd->callback([&exitCode] { exitCode = runPlan(o); });
}

}  // namespace pipestudio::cli
