// `make fidelity`: plans published training runs from their shapes and configurations and
// prints predicted against measured, per row, with the mean absolute percentage error
// (issue 13). Data and sources: bench/fidelity/published.json.
//
// One efficiency constant per GPU type is calibrated, on one row named in published.json
// (bisection on the cluster's `efficiency` until that row's prediction equals its measurement);
// every other row of that GPU type is a prediction. Nothing else is fitted.
//
//   pipestudio-fidelity [--data FILE] [--kernels FILE] [--peaks FILE] [--markdown] [--check]
//     --kernels: the kernel timings the GEMM fill is refitted from (bench/fidelity/kernels-h100.jsonl)
//     --peaks: published peak memory to predict (bench/fidelity/peaks.json; printed, not gated)
//     --check: exit 1 when a target is missed (MAPE ≤ 10 % on throughput, bubble rates of
//              1F1B, ZB-H1 and ZB-H2 within 0.005 of the paper's), as CTest runs it.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "CostParts.hpp"
#include "Kernels.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/model/GpuCatalog.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "pipestudio/planner/Simulator.hpp"
#include "pipestudio/planner/Vocab.hpp"

namespace pipestudio {
namespace {

constexpr double kThroughputMapeTarget = 0.10;
constexpr double kBubbleTarget = 0.005;

struct Options {
  std::string data = std::string(PIPESTUDIO_SOURCE_DIR) + "/bench/fidelity/published.json";
  std::string kernels = std::string(PIPESTUDIO_SOURCE_DIR) + "/bench/fidelity/kernels-h100.jsonl";
  std::string peaks = std::string(PIPESTUDIO_SOURCE_DIR) + "/bench/fidelity/peaks.json";
  bool markdown = false;
  bool check = false;
};

// The embedding or the output layer (`kind`, also its name) over the vocabulary of `shape`.
Layer vocabLayer(const std::string& kind, const TransformerShape& shape, bool tied) {
  Layer layer;
  layer.name = kind;
  layer.kind = kind;
  layer.transformer = shape;
  layer.tied = tied;
  return layer;
}

// A decoder: an embedding, `layers` copies of `block` and an output layer over `vocab` tokens,
// the embedding and the output layer sharing their weight when `tied`.
ModelSpec decoderModel(const std::string& name, int layers, const TransformerShape& block, std::int64_t vocab,
                       bool tied) {
  ModelSpec m;
  m.name = name;
  Component c;
  c.name = "backbone";
  TransformerShape vocabShape;
  vocabShape.hidden = block.hidden;
  vocabShape.seq = block.seq;
  vocabShape.heads = block.heads;
  vocabShape.vocab = vocab;
  c.layers.push_back(vocabLayer("embedding", vocabShape, tied));
  for (int l = 0; l < layers; ++l) {
    Layer layer;
    layer.name = "block." + std::to_string(l);
    layer.kind = "transformer";
    layer.transformer = block;
    c.layers.push_back(layer);
  }
  c.layers.push_back(vocabLayer("lm_head", vocabShape, tied));
  m.components.push_back(std::move(c));
  return m;
}

// GPT-style model (learned embeddings tied with the LM head, GELU MLP of 4h, multi-head
// attention) from a published row's shape.
ModelSpec gptModel(const std::string& name, int layers, int hidden, int heads, int seq, int vocab,
                   AttentionKind attention, bool dropout) {
  TransformerShape block;
  block.hidden = hidden;
  block.seq = seq;
  block.heads = heads;
  block.attention = attention;
  block.dropout = dropout;
  return decoderModel(name, layers, block, vocab, true);
}

// The row's cluster: the bundled file's GPU and links, with as many nodes as the run used, and
// `efficiency` as the GPU's efficiency in `precision` (bf16: the one knob of the bf16 tables).
ClusterSpec clusterFor(const ClusterSpec& base, int gpus, double efficiency, Precision precision = Precision::Bf16) {
  ClusterSpec c = base;
  const int perNode = base.gpusPerNode();
  const int nodes = std::max(1, (gpus + perNode - 1) / perNode);
  c.nodes.assign(static_cast<std::size_t>(nodes), NodeSpec{"node", perNode, std::nullopt, std::nullopt});
  if (precision == Precision::Bf16) {
    c.gpu.efficiency = efficiency;
  } else {
    c.gpu.efficiencyByPrecision[static_cast<std::size_t>(precision)] = efficiency;
  }
  return c;
}

struct Prediction {
  double value = 0;  // in the row's measured unit
  double iterationMs = 0;
  double bubble = 0;
  std::int64_t peakBytes = 0;
  MemoryBreakdown peakMemory;  // the fullest GPU's parts
  bool fits = true;            // every GPU's peak plus the stated margin within its capacity
  std::string error;
};

// A predicted row: plans it on `cluster` (memory is reported, not enforced: these runs did run).
using RowPredictor = std::function<Prediction(double efficiency)>;

Prediction planAndMeasure(PlanRequest request, const std::function<double(const Plan&)>& value) {
  Prediction p;
  request.config.memoryLimitBytes = std::int64_t{1} << 60;
  auto plan = makePlan(request);
  if (!plan) {
    p.error = plan.message();
    return p;
  }
  p.value = value(*plan);
  p.iterationMs = plan->metrics.iterationMs;
  p.bubble = plan->metrics.bubbleRatio;
  for (std::size_t d = 0; d < plan->metrics.devices.size(); ++d) {
    const DeviceMetrics& dm = plan->metrics.devices[d];
    if (dm.peakMemoryBytes > p.peakBytes) p.peakMemory = dm.memory;
    p.peakBytes = std::max(p.peakBytes, dm.peakMemoryBytes);
    const std::int64_t capacity = deviceGpu(plan->cluster, plan->config, static_cast<int>(d)).memoryBytes();
    if (dm.peakMemoryBytes + dm.memory.marginBytes() > capacity) p.fits = false;
  }
  return p;
}

// Bisection on the efficiency until the calibration row predicts its measurement (throughput
// is monotone in efficiency).
double calibrate(const RowPredictor& predict, double measured) {
  double lo = 0.05, hi = 1.0;
  for (int i = 0; i < 40; ++i) {
    const double mid = 0.5 * (lo + hi);
    const Prediction p = predict(mid);
    if (!p.error.empty()) return mid;
    (p.value < measured ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

struct Row {
  std::string table, name, configuration;
  double measured = 0;
  double measuredMemoryGb = 0;
  Prediction predicted;
  std::string unit;
  std::string outOfScope;    // why the row is shown but not in the MAPE ("" = in it)
  bool checkMemory = false;  // a run whose memory must fit in ours (the recipes that ran)
  bool calibration = false;  // the row an efficiency was calibrated on (not in the MAPE)
};

double pctError(double predicted, double measured) { return measured != 0 ? (predicted - measured) / measured : 0; }

struct Report {
  std::vector<Row> rows;
  std::map<std::string, double> efficiency;
  std::map<std::string, std::string> calibratedOn;
  /// GPUs with no published BF16 run whose bf16 GEMMs (the output layer of a low-precision
  /// recipe) take the efficiency of one low-precision calibration: GPU → that key ("GB300/fp8").
  std::map<std::string, std::string> bf16From;
  /// (table, row) of every calibration row: shown, marked, and left out of the MAPE (their error
  /// is zero by construction).
  std::set<std::pair<std::string, std::string>> calibrationRows;
};

// --- Megatron-LM SC21, Table 1 ---
RowPredictor sc21Predictor(const Json& table, const Json& row, const ClusterSpec& base) {
  return [&table, &row, &base](double efficiency) {
    const int seq = table["seq"].get<int>();
    const int vocab = table["vocab"].get<int>();
    PlanRequest r;
    r.model = gptModel(row["name"].get<std::string>(), row["layers"].get<int>(), row["hidden"].get<int>(),
                       row["heads"].get<int>(), seq, vocab, AttentionKind::Standard, true);
    const int gpus = row["gpus"].get<int>();
    r.cluster = clusterFor(base, gpus, efficiency);
    PlanConfig& c = r.config;
    const int tp = row["tp"].get<int>();
    const int pp = row["pp"].get<int>();
    const int chunks = row["chunks"].get<int>();
    c.schedule = chunks > 1 ? "interleaved-1f1b" : "1f1b";
    c.devices = pp;
    c.chunksPerDevice = chunks;
    c.partition = "balanced";
    c.parallel.tensor = tp;
    c.parallel.data = gpus / (tp * pp);
    c.parallel.sequenceParallel = false;  // 2021: no sequence parallelism yet
    c.parallel.gradReduceInFp32 = true;   // fp16 training with fp32 main gradients, reduced in fp32
    c.parallel.recompute = Recompute::Full;
    c.parallel.overlapGradReduce = row["overlap_grad_reduce"].get<bool>();
    c.globalBatch = row["global_batch"].get<std::int64_t>();
    c.microBatchSize = row["micro_batch"].get<std::int64_t>();
    const double B = row["global_batch"].get<double>();
    const double l = row["layers"].get<double>();
    const double h = row["hidden"].get<double>();
    const double s = seq;
    const double V = vocab;
    // Narayanan et al. 2021 eq. (3): FLOPs per iteration, recomputation included.
    const double flops = 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
    return planAndMeasure(
        r, [flops, gpus](const Plan& plan) { return flops / (plan.metrics.iterationMs / 1000.0) / gpus / 1e12; });
  };
}

// --- Zero Bubble, Table 4 (from shapes) ---
RowPredictor zbPredictor(const Json& table, const Json& row, const std::string& method, const ClusterSpec& base) {
  return [&table, &row, method, &base](double efficiency) {
    PlanRequest r;
    const int layers = row["layers"].get<int>();
    const int pp = row["pp"].get<int>();
    r.model = gptModel(row["name"].get<std::string>(), layers, row["hidden"].get<int>(), row["heads"].get<int>(),
                       row["seq"].get<int>(), table["vocab"].get<int>(), AttentionKind::Standard, true);
    r.model.samplesPerMicrobatch = row["micro_batch"].get<std::int64_t>();
    const int gpus = row["gpus"].get<int>();
    r.cluster = clusterFor(base, gpus, efficiency);
    PlanConfig& c = r.config;
    c.devices = pp;
    c.microbatches = row["microbatches"].get<int>();
    c.partition = "balanced";
    c.parallel.gradReduceInFp32 = true;  // the authors' Megatron fork reduces fp32 main gradients
    Prediction failed;
    if (method == "1F1B") {
      c.schedule = "1f1b";
    } else if (method == "1F1B-I") {
      // One transformer layer per chunk (the paper's maximum).
      c.schedule = "interleaved-1f1b";
      c.chunksPerDevice = std::max(1, (layers + 2) / pp);
    } else {
      // ZB-1p / ZB-2p: zb-auto at 1× / 2× 1F1B's activation memory, optimizer post-validation.
      PlanRequest base1f1b = r;
      base1f1b.config.schedule = "1f1b";
      base1f1b.config.memoryLimitBytes = std::int64_t{1} << 60;
      auto ref = makePlan(base1f1b);
      if (!ref) {
        failed.error = ref.message();
        return failed;
      }
      std::int64_t limit = 0;
      const double factor = method == "ZB-2p" ? 2.0 : 1.0;
      for (const auto& d : ref->metrics.devices) {
        limit = std::max(limit, d.staticMemoryBytes +
                                    static_cast<std::int64_t>(factor * static_cast<double>(d.peakActivationBytes)));
      }
      c.schedule = "zb-auto";
      c.optimizerSync = "post-validation";
      c.memoryLimitBytes = limit;
      auto plan = makeAutoPlan(r, AutoScheduleOptions{});
      Prediction p;
      if (!plan) {
        p.error = plan.message();
        return p;
      }
      p.iterationMs = plan->metrics.iterationMs;
      p.value = static_cast<double>(c.microbatches) * static_cast<double>(r.model.samplesPerMicrobatch) /
                (plan->metrics.iterationMs / 1000.0) / gpus;
      p.bubble = plan->metrics.bubbleRatio;
      for (const auto& d : plan->metrics.devices) p.peakBytes = std::max(p.peakBytes, d.peakMemoryBytes);
      return p;
    }
    const double samples = static_cast<double>(c.microbatches) * static_cast<double>(r.model.samplesPerMicrobatch);
    return planAndMeasure(
        r, [samples, gpus](const Plan& plan) { return samples / (plan.metrics.iterationMs / 1000.0) / gpus; });
  };
}

// --- Llama 3 405B, Table 4 ---
RowPredictor llamaPredictor(const Json& row, const ModelSpec& llama, const ClusterSpec& base) {
  return [&row, &llama, &base](double efficiency) {
    PlanRequest r;
    r.model = llama;
    const int gpus = row["gpus"].get<int>();
    r.cluster = clusterFor(base, gpus, efficiency);
    PlanConfig& c = r.config;
    c.schedule = "interleaved-1f1b";
    c.chunksPerDevice = 2;
    c.devices = row["pp"].get<int>();
    c.partition = "balanced";
    c.parallel.tensor = row["tp"].get<int>();
    c.parallel.context = row["cp"].get<int>();
    c.parallel.data = row["dp"].get<int>();
    c.parallel.sequenceParallel = true;
    c.parallel.zeroStage = 1;
    c.parallel.gradReduceInFp32 = true;  // §3.3.4: gradients accumulated and reduce-scattered in FP32
    c.globalBatch = row["global_batch"].get<std::int64_t>();
    c.microBatchSize = row["micro_batch"].get<std::int64_t>();
    return planAndMeasure(r, [](const Plan& plan) { return plan.metrics.modelTflopsPerGpu; });
  };
}

// --- Training recipes (Megatron-Bridge / NeMo performance summaries) ---
// A decoder from a model's public architecture: embedding, `layers` blocks, output layer.
// Squared-ReLU MLPs (Nemotron) have GELU's two matrices; FlashAttention, causal, no dropout.
ModelSpec recipeModel(const std::string& name, const Json& arch, int seq) {
  TransformerShape block;
  block.hidden = arch["hidden"].get<int>();
  block.seq = seq;
  block.heads = arch["heads"].get<int>();
  block.kvHeads = arch.value("kv_heads", 0);
  block.ffn = arch["ffn"].get<int>();
  block.mlp = arch.value("mlp", std::string("gelu")) == "swiglu" ? MlpKind::SwiGlu : MlpKind::Gelu;
  block.dropout = false;
  return decoderModel(name, arch["layers"].get<int>(), block, arch["vocab"].get<int>(), arch.value("tied", false));
}

// The row's model: a bundled model file where the table names one (`"file"`: the MoE models, with
// their experts, attention variants and multi-token prediction layers), its layers' sequence set
// to the row's; else a decoder from the table's shape.
Expected<ModelSpec> recipeModelFor(const std::string& name, const Json& arch, int seq) {
  if (!arch.contains("file")) return recipeModel(name, arch, seq);
  PS_ASSIGN_OR_RETURN(
      auto model,
      loadModel(std::string(PIPESTUDIO_RESOURCES).append("/models/").append(arch["file"].get<std::string>())));
  for (Component& c : model.components) {
    for (Layer& l : c.layers) {
      if (l.transformer) l.transformer->seq = seq;
    }
  }
  return model;
}

// The attention kernel a table or row says its Transformer Engine ran, when it says.
void readAttentionBackend(const Json& j, Parallelism& par) {
  if (!j.contains("attention_backend")) return;
  par.attentionBackend =
      attentionBackendFromName(j["attention_backend"].get<std::string>()).value_or(AttentionBackend::Fused);
}

// The recipe's MoE and context-parallel settings, where the row states them (rows without them
// keep the defaults): EP and ETP (Megatron's MoE parallel folding), token dropping, the 1F1B
// all-to-all overlap, the flex (DeepEP / HybridEP) dispatcher, CP's communication type, and
// whether gradients are reduced under the backward passes.
void applyRecipeMoe(const Json& row, Parallelism& par) {
  if (row.contains("ep")) par.expert = row["ep"].get<int>();
  if (row.contains("etp")) par.expertTensor = row["etp"].get<int>();
  if (row.contains("moe_capacity_factor")) par.moeCapacityFactor = row["moe_capacity_factor"].get<double>();
  if (row.contains("moe_a2a_overlap")) par.moeA2aOverlap = row["moe_a2a_overlap"].get<bool>();
  if (row.contains("moe_token_dispatcher")) par.moeFlexDispatcher = row["moe_token_dispatcher"] == "flex";
  if (row.contains("moe_flex_backend")) {
    par.moeFlexBackend = flexBackendFromName(row["moe_flex_backend"].get<std::string>()).value_or(FlexBackend::DeepEp);
  }
  if (row.contains("moe_comm_sms")) par.moeCommSms = row["moe_comm_sms"].get<int>();
  if (row.contains("moe_permute_fusion")) par.moePermuteFusion = row["moe_permute_fusion"].get<bool>();
  if (row.contains("moe_permute_fusion_into_hybridep")) {
    par.moePermuteFusionIntoDispatcher = row["moe_permute_fusion_into_hybridep"].get<bool>();
  }
  if (row.contains("moe_combine_chunk_tokens")) par.moeCombineChunkTokens = row["moe_combine_chunk_tokens"].get<int>();
  if (row.contains("moe_expert_rank_capacity_factor")) {
    par.moeRankCapacityFactor = row["moe_expert_rank_capacity_factor"].get<double>();
  }
  if (row.contains("moe_paged_stash")) par.moePagedStash = row["moe_paged_stash"].get<bool>();
  if (row.contains("moe_paged_stash_buffer_size_factor_cuda")) {
    par.moePagedStashBufferFactor = row["moe_paged_stash_buffer_size_factor_cuda"].get<double>();
  }
  if (row.contains("cuda_graph_impl")) {
    par.cudaGraphImpl = cudaGraphImplFromName(row["cuda_graph_impl"].get<std::string>()).value_or(CudaGraphImpl::None);
  }
  if (row.contains("cuda_graph_modules")) {
    par.cudaGraphModules = cudaGraphModulesFromNames(row["cuda_graph_modules"].get<std::string>()).value_or(0);
  }
  if (row.contains("moe_shared_expert_overlap"))
    par.moeSharedExpertOverlap = row["moe_shared_expert_overlap"].get<bool>();
  if (row.contains("cp_comm_type")) {
    par.cpCommType = cpCommTypeFromName(row["cp_comm_type"].get<std::string>()).value_or(CpCommType::P2p);
  }
  if (row.contains("overlap_grad_reduce")) par.overlapGradReduce = row["overlap_grad_reduce"].get<bool>();
  if (row.contains("overlap_param_gather")) par.overlapParamGather = row["overlap_param_gather"].get<bool>();
  readAttentionBackend(row, par);
}

// The GPU type of a recipe row: its own, or its table's.
std::string rowGpu(const Json& table, const Json& row) {
  return row.contains("gpu") ? row["gpu"].get<std::string>() : table["gpu"].get<std::string>();
}

// A recipe row as the recipe runs it: its degrees, micro and global batch, precision and the
// recipe's recomputation and overlap settings (the row says where they differ from
// Megatron-Bridge's defaults); tokens per second per GPU.
Expected<PlanRequest> recipeRequest(const Json& table, const Json& row, const ClusterSpec& base, const Report& report,
                                    double efficiency) {
  const auto precision = precisionFromName(row["precision"].get<std::string>());
  if (!precision) return Error{"unknown precision " + row["precision"].get<std::string>()};
  const std::string model = row["model"].get<std::string>();
  const int seq = row["seq"].get<int>();
  const int gpus = row["gpus"].get<int>();
  const int tp = row["tp"].get<int>(), pp = row["pp"].get<int>(), cp = row["cp"].get<int>();
  const int vp = row["vp"].is_number() ? row["vp"].get<int>() : 1;
  const int fsdp = row.value("fsdp", 0);
  PlanRequest r;
  PS_ASSIGN_OR_RETURN(auto spec, recipeModelFor(model, table["models"][model], seq));
  r.model = std::move(spec);
  // A row may name another GPU of the catalogue than the table's cluster has (B300 rows on the
  // B200 cluster's links, GB300 on GB200's): the cluster with that GPU.
  const std::string gpu = rowGpu(table, row);
  ClusterSpec withGpu = base;
  if (row.contains("gpu")) {
    const CatalogGpu* entry = findCatalogGpu(gpu);
    if (!entry) return Error{"GPU " + gpu + " is not in the catalogue"};
    withGpu.gpu = entry->gpu;
  }
  // The bf16 GEMMs: the GPU's bf16 calibration, or the low-precision one they follow (while that
  // one is calibrated on this row, the value under trial).
  const auto from = report.bf16From.find(gpu);
  const bool bf16FollowsThisRow = from != report.bf16From.end() &&
                                  from->second == gpu + "/" + std::string(precisionName(gemmRateFallback(*precision)));
  const double bf16 = bf16FollowsThisRow             ? efficiency
                      : report.efficiency.count(gpu) ? report.efficiency.at(gpu)
                                                     : withGpu.gpu.efficiency;
  r.cluster = clusterFor(withGpu, gpus, bf16);
  if (*precision != Precision::Bf16) {
    r.cluster.gpu.efficiencyByPrecision[static_cast<std::size_t>(*precision)] = efficiency;
  } else {
    r.cluster.gpu.efficiency = efficiency;
  }
  PlanConfig& c = r.config;
  c.schedule = vp > 1 ? "interleaved-1f1b" : "1f1b";
  c.chunksPerDevice = vp;
  c.devices = pp;
  c.partition = "megatron";  // the split the recipes ran: blocks evenly, embedding and head at the ends
  c.precision = *precision;
  Parallelism& par = c.parallel;
  par.tensor = tp;
  par.context = cp;
  par.data = gpus / (tp * pp * cp);
  par.sequenceParallel = tp > 1;
  par.zeroStage = fsdp > 0 ? 3 : 1;  // Megatron FSDP, else the distributed optimizer
  par.tpCommOverlap = row.value("tp_comm_overlap", true);
  par.gradReduceInFp32 = row.value("grad_reduce_dtype", std::string("bf16")) == "fp32";
  readAttentionBackend(table, par);  // the table's kernel, unless the row names its own
  applyRecipeMoe(row, par);
  // The framework that ran it (torchtitan: AsyncTP for the TP overlap, per-op selective
  // checkpointing, compiled or eager blocks); Megatron-Core unless the table says.
  par.framework = frameworkFromName(table.value("framework", std::string("megatron"))).value_or(Framework::Megatron);
  par.torchCompile = row.value("compile", true);
  // Memory settings the row states (issue 42): Megatron's layer-level activation offloading and
  // whether the weights are kept only in low precision (else Megatron-Bridge's preset).
  par.cpuOffloadingNumLayers = row.value("cpu_offloading_num_layers", 0);
  if (row.contains("fp8_param_gather")) par.lowPrecisionParams = row["fp8_param_gather"].get<bool>();
  if (row.contains("recompute")) {
    const Json& rc = row["recompute"];
    par.recompute = recomputeFromName(rc.value("granularity", std::string("none"))).value_or(Recompute::None);
    par.recomputeNumLayers = rc.value("num_layers", 0);
    par.recomputeMethod =
        recomputeMethodFromName(rc.value("method", std::string("uniform"))).value_or(RecomputeMethod::Uniform);
    if (rc.contains("modules")) {
      par.recomputeModules = recomputeModulesFromNames(rc["modules"].get<std::string>()).value_or(0);
    }
  }
  c.globalBatch = row["global_batch"].get<std::int64_t>();
  c.microBatchSize = row["micro_batch"].get<std::int64_t>();
  return r;
}

RowPredictor recipePredictor(const Json& table, const Json& row, const ClusterSpec& base, const Report& report) {
  return [&table, &row, &base, &report](double efficiency) {
    auto r = recipeRequest(table, row, base, report, efficiency);
    if (!r) {
      Prediction failed;
      failed.error = r.message();
      return failed;
    }
    const int gpus = row["gpus"].get<int>();
    return planAndMeasure(std::move(*r), [gpus](const Plan& plan) { return plan.metrics.tokensPerS / gpus; });
  };
}

// --- The flex dispatcher against the libraries' own benchmarks (table "ep-dispatch") ---
// A dispatch or combine of `tokens` per GPU over `ranks` GPUs of the cluster, routed as the
// benchmark routes them: the library's algorithm bandwidth, (token, node) pairs times the
// token's bytes over the cost model's time for the call. A row may state the NVLink rate of the
// GPU it ran on (H800's, where the cluster is H100's).
RowPredictor dispatchPredictor(const Json& row, const ClusterSpec& base) {
  return [&row, &base](double /*efficiency*/) {
    const int ranks = row["ranks"].get<int>();
    const double tokens = row["tokens"].get<double>();
    const double bytes = row["hidden"].get<double>() * row["bytes_per_value"].get<double>();
    const costparts::TokenRouting routing{row["top_k"].get<double>(), row.value("router_groups", 0.0),
                                          row.value("router_group_topk", 0.0)};
    Prediction p;
    ClusterSpec cluster = clusterFor(base, ranks, base.gpu.efficiency);
    if (row.contains("nvlink_gbps")) cluster.intraNode.bandwidthGBps = row["nvlink_gbps"].get<double>();
    Parallelism par;
    par.expert = ranks;
    par.data = ranks;
    par.moeFlexDispatcher = true;
    const CollectiveLinks links = collectiveLinks(cluster, par);
    const auto perNode = static_cast<double>(std::max<std::int64_t>(1, links.domainGpus));
    const double pairs = tokens * costparts::domainsHit(routing, std::ceil(ranks / perNode));
    const FlexBackend backend = flexBackendFromName(row["backend"].get<std::string>()).value_or(FlexBackend::DeepEp);
    // HybridEP ran at its default chunk (64 tokens per API call, docs/README_Hybrid-EP.md).
    p.iterationMs = costparts::flexAllToAllMs(links, ranks, 1, tokens, routing, bytes, backend, row.value("sms", 0.0),
                                              row.value("chunk_tokens", 64.0));
    if (p.iterationMs <= 0) {
      p.error = "no time for the call";
      return p;
    }
    p.value = pairs * bytes / (p.iterationMs * 1e6);
    return p;
  };
}

// Bubble rate of Table 5 from the profiled times of Table 6/9: p identical stages with
// measured F, B, W and a transfer of T_comm; rate = (longest device span − m(F+B+W)) / span.
std::optional<double> profiledBubble(const Json& row, const std::string& schedule, double memoryFactor) {
  const Json& t = row["profiled_ms"];
  const int p = row["pp"].get<int>();
  const int m = row["microbatches"].get<int>();
  PlanRequest r;
  r.model.name = "profiled";
  Component c;
  c.name = "backbone";
  constexpr std::int64_t kActivation = 1000000;
  for (int s = 0; s < p; ++s) {
    Layer l;
    l.name = "stage." + std::to_string(s);
    l.forwardMs = t["F"].get<double>();
    l.backwardInputMs = t["B"].get<double>();
    l.backwardWeightMs = t["W"].get<double>();
    l.activationBytes = kActivation;
    l.weightGradBytes = kActivation / 2;
    l.outputBytes = 1000;
    c.layers.push_back(l);
  }
  r.model.components.push_back(std::move(c));
  r.cluster.name = "profiled";
  r.cluster.gpu.peakTflops = 1;
  r.cluster.gpu.memoryGib = 1e4;
  r.cluster.nodes.push_back(NodeSpec{"node", p, std::nullopt, std::nullopt});
  // T_comm as pure latency: the transfer takes exactly the profiled time.
  r.cluster.intraNode = LinkSpec{1e12, t["comm"].get<double>() * 1000.0};
  r.cluster.interNode = r.cluster.intraNode;
  r.config.schedule = schedule;
  r.config.devices = p;
  r.config.microbatches = m;
  r.config.partition = "uniform";
  Expected<Plan> plan = Error{""};
  if (schedule == "zb-auto") {
    // ZB-1p/ZB-2p run with optimizer post-validation: zb-auto then minimises the longest span.
    r.config.optimizerSync = "post-validation";
    r.config.memoryLimitBytes = static_cast<std::int64_t>(memoryFactor * p * kActivation);
    plan = makeAutoPlan(r, AutoScheduleOptions{});
  } else {
    plan = makePlan(r);
  }
  if (!plan) return std::nullopt;
  double span = 0;
  for (const auto& d : plan->metrics.devices) span = std::max(span, d.spanMs);
  const double work = m * (t["F"].get<double>() + t["B"].get<double>() + t["W"].get<double>());
  return span > 0 ? (span - work) / span : 0.0;
}

// --- Vocabulary parallelism (Yeung et al. 2024), the authors' artifact runs ---
// The model of artifact/README.md: `layers` blocks (GELU MLP of `ffn`), run by its
// pretrain_gpt.sh with --use-flash-attn, --untie-embeddings-and-output-weights and dropout 0.
ModelSpec vocabArtifactModel(const Json& table, int seq, int vocab) {
  ModelSpec m = gptModel("vocab-artifact", table["layers"].get<int>(), table["hidden"].get<int>(),
                         table["heads"].get<int>(), seq, vocab, AttentionKind::Flash, false);
  for (Layer& l : m.components[0].layers) {
    l.tied = false;
    if (l.kind == "transformer") l.transformer->ffn = table["ffn"].get<int>();
  }
  return m;
}

// Megatron-LM's baseline: 1F1B, `layers`/p blocks per stage, the embedding on the first stage
// and the output layer on the last (a partition none of the partitioners would choose).
Expected<Plan> megatronVocabBaseline(const PlanRequest& r) {
  const ScheduleGenerator* g = findScheduleGenerator("1f1b");
  const int p = r.config.devices;
  const ScheduleShape shape{p, r.config.microbatches, 1};
  Plan shell;
  shell.config = r.config;
  shell.model = r.model;
  shell.cluster = r.cluster;
  shell.virtualStages = g->placement(shape);
  const int blocks = static_cast<int>(r.model.components[0].layers.size()) - 2;
  for (int s = 0; s < p; ++s) {
    VirtualStage& vs = shell.stage(s);
    vs.component = 0;
    vs.firstLayer = s == 0 ? 0 : 1 + s * blocks / p;
    vs.lastLayer = s == p - 1 ? blocks + 1 : (s + 1) * blocks / p;
  }
  ScheduleInput in;
  in.shape = shape;
  in.virtualStages = shell.virtualStages;
  in.stages = stageEstimates(shell);
  in.request = &r;
  PS_ASSIGN_OR_RETURN(auto skeleton, g->order(in));
  return simulateSkeleton(std::move(shell), skeleton);
}

// Prints measured against predicted MFU gain of Vocab-1 / Vocab-2 over the baseline per row;
// returns false when a plan fails.
bool printVocabTable(const Json& root, const std::map<std::string, ClusterSpec>& clusters, const Report& report,
                     bool markdown) {
  const char* bar = markdown ? "|" : " ";
  bool ok = true;
  for (const Json& table : root["tables"]) {
    if (table["id"] != "vocab") continue;
    std::printf("\n## Vocabulary parallelism: MFU gain over the baseline (measured / predicted)\n\n");
    if (markdown) {
      std::printf(
          "| run | baseline MFU (measured / ours) | Vocab-1 gain | error | Vocab-2 gain | error | Vocab-1 bubble |\n"
          "|---|---|---|---:|---|---:|---:|\n");
    }
    const std::string gpu = table["gpu"].get<std::string>();
    ClusterSpec cluster = clusters.at(table["cluster"].get<std::string>());
    if (report.efficiency.count(gpu)) cluster.gpu.efficiency = report.efficiency.at(gpu);
    double sumErr = 0;
    int n = 0;
    for (const Json& row : table["rows"]) {
      PlanRequest r;
      r.model = vocabArtifactModel(table, row["seq"].get<int>(), row["vocab"].get<int>());
      r.cluster = cluster;
      r.config.schedule = "1f1b";
      r.config.devices = table["pp"].get<int>();
      r.config.microbatches = table["microbatches"].get<int>();
      r.config.partition = "uniform";
      r.config.memoryLimitBytes = std::int64_t{1} << 60;  // these runs did run
      auto base = megatronVocabBaseline(r);
      std::printf("%s %-10s %s", bar, row["name"].get<std::string>().c_str(), bar);
      if (!base) {
        std::printf(" baseline failed: %s\n", base.message().c_str());
        ok = false;
        continue;
      }
      const Json& measured = row["measured_mfu_pct"];
      const double baseMfu = base->metrics.modelTflopsPerGpu / cluster.gpu.peakTflops * 100.0;
      std::printf(" %5.1f%% / %5.1f%% %s", measured["baseline"].get<double>(), baseMfu, bar);
      double bubble = 0;
      for (int barriers : {1, 2}) {
        PlanRequest vr = r;
        vr.config.vocabBarriers = barriers;
        auto vocab = makeVocabParallelPlan(vr);
        if (!vocab) {
          std::printf(" failed: %s %s", vocab.message().c_str(), bar);
          ok = false;
          continue;
        }
        if (barriers == 1) bubble = vocab->metrics.bubbleRatio;
        const double gainMeasured =
            measured[barriers == 1 ? "vocab-1" : "vocab-2"].get<double>() / measured["baseline"].get<double>();
        const double gainOurs = base->metrics.iterationMs / vocab->metrics.iterationMs;
        const double err = pctError(gainOurs, gainMeasured);
        sumErr += std::abs(err);
        ++n;
        std::printf(" %.2fx / %.2fx %s %+6.1f%% %s", gainMeasured, gainOurs, bar, 100.0 * err, bar);
      }
      std::printf(" %5.1f%% %s\n", 100.0 * bubble, markdown ? "|" : "");
    }
    std::printf("\nmean absolute error of the predicted gain: %.1f%% over %d predictions (reported, not a target)\n",
                n ? 100.0 * sumErr / n : 0.0, n);
  }
  return ok;
}

// Every predictor of the document, by (table, row name[, method]).
struct Entry {
  std::string table, gpu, name, method;
  double measured;
  RowPredictor predict;
  double measuredMemoryGb = 0;  // peak memory the paper reports (GB = 10^9 bytes), when it does
  std::string outOfScope;
  bool checkMemory = false;
  /// The efficiency a row of an uncalibrated (GPU, precision) runs at: the catalogue's (a GPU that
  /// borrows another's calibration, calibration_from), else the bf16 default.
  double fallbackEfficiency = 0.5;
};

// The clusters the tables name, by file name.
Expected<std::map<std::string, ClusterSpec>> loadClusters(const Json& root, const std::string& resources) {
  std::map<std::string, ClusterSpec> clusters;
  for (const Json& table : root["tables"]) {
    const std::string file = table["cluster"].get<std::string>();
    if (clusters.count(file)) continue;
    PS_ASSIGN_OR_RETURN(auto c, loadCluster(std::string(resources).append("/clusters/").append(file)));
    clusters.emplace(file, c);
  }
  return clusters;
}

// `report` is read by the recipe predictors when they run (its calibrated efficiencies).
std::vector<Entry> collectEntries(const Json& root, const std::map<std::string, ClusterSpec>& clusters,
                                  const ModelSpec& llama, const Report& report) {
  std::vector<Entry> entries;
  for (const Json& table : root["tables"]) {
    const std::string id = table["id"].get<std::string>();
    const std::string gpu = table["gpu"].get<std::string>();
    const ClusterSpec& base = clusters.at(table["cluster"].get<std::string>());
    for (const Json& row : table["rows"]) {
      const std::string name = row["name"].get<std::string>();
      if (id == "sc21") {
        entries.push_back({id, gpu, name, "", row["measured_tflops_per_gpu"].get<double>(),
                           sc21Predictor(table, row, base), 0, "", false});
      } else if (id == "zb") {
        for (const char* method : {"1F1B", "1F1B-I", "ZB-1p", "ZB-2p"}) {
          entries.push_back({id, gpu, name + " m=" + std::to_string(row["microbatches"].get<int>()), method,
                             row["measured_samples_per_gpu_s"][method].get<double>(),
                             zbPredictor(table, row, method, base), row["measured_memory_gb"][method].get<double>(), "",
                             false});
        }
      } else if (id == "llama3") {
        entries.push_back({id, gpu, name, "", row["measured_tflops_per_gpu"].get<double>(),
                           llamaPredictor(row, llama, base), 0, "", false});
      } else if (table.value("kind", std::string()) == "ep-dispatch") {
        entries.push_back(
            {id, gpu, name, "", row["measured_gbps"].get<double>(), dispatchPredictor(row, base), 0, "", false});
      } else if (table.value("kind", std::string()) == "recipes") {
        // One efficiency per (GPU type, precision): "H100" is bf16's, "H100/fp8" fp8's; a format
        // that runs on another's tensor cores takes that one's (fp8-block: fp8's, as the cost
        // model's GpuSpec::efficiencyFor does).
        const std::string stated = row["precision"].get<std::string>();
        const auto parsed = precisionFromName(stated);
        const std::string precision = parsed ? std::string(precisionName(gemmRateFallback(*parsed))) : stated;
        const std::string rowGpuName = rowGpu(table, row);
        const std::string key =
            precision == "bf16" ? rowGpuName : std::string(rowGpuName).append("/").append(precision);
        Entry e{id,
                key,
                name,
                "",
                row["measured_tokens_per_s_per_gpu"].get<double>(),
                recipePredictor(table, row, base, report),
                0,
                "",
                false};
        // Packed sequences (SFT): attention runs within each packed sample, which the cost
        // model does not know (it costs attention over the whole sequence).
        if (row.value("packed", false)) e.outOfScope = "packed sequences, not modelled";
        // A row whose run differs from the recipe in a way the cost model has no setting for.
        if (row.contains("out_of_scope")) e.outOfScope = row["out_of_scope"].get<std::string>();
        e.checkMemory = table.value("check_memory", false);
        if (parsed) {
          // The catalogue's value for the row's GPU (a row may name another than its table's).
          const CatalogGpu* named = row.contains("gpu") ? findCatalogGpu(rowGpuName) : nullptr;
          e.fallbackEfficiency = (named ? named->gpu : base.gpu).efficiencyFor(gemmRateFallback(*parsed));
        }
        // A peak the run reported (PyTorch's max allocated, GiB): compared, not only checked to fit.
        if (row.contains("measured_peak_gib"))
          e.measuredMemoryGb = row["measured_peak_gib"].get<double>() * 1.073741824;
        // A peak the publisher reports, in GiB (torchtitan's tables).
        if (row.contains("measured_memory_gib")) {
          e.measuredMemoryGb = row["measured_memory_gib"].get<double>() * 1.073741824;
        }
        entries.push_back(std::move(e));
      }
    }
  }
  return entries;
}

// Calibrate one efficiency per GPU type on its named row.
// A calibration marked "sets_bf16" also sets its GPU's bf16 value (calibration keys are visited in
// order, so "GB300/fp8" comes before the "GB300/mxfp8" and "GB300/nvfp4" rows that read it).
void calibrateAll(const Json& root, const std::vector<Entry>& entries, Report& report) {
  for (const auto& [key, spec] : root["calibration"].items()) {
    if (spec.value("sets_bf16", false)) report.bf16From[key.substr(0, key.find('/'))] = key;
  }
  for (const auto& [key, spec] : root["calibration"].items()) {
    const std::string table = spec["table"].get<std::string>();
    const std::string rowName = spec["row"].get<std::string>();
    for (const Entry& e : entries) {
      if (e.table == table && e.name == rowName && e.method.empty()) {
        report.efficiency[key] = calibrate(e.predict, e.measured);
        report.calibratedOn[key] = std::string(table).append(" ").append(rowName);
        report.calibrationRows.emplace(table, rowName);
        if (spec.value("sets_bf16", false)) {
          const std::string gpu = key.substr(0, key.find('/'));
          report.efficiency[gpu] = report.efficiency[key];
          report.calibratedOn[gpu] = "the " + key + " calibration (no published BF16 run on this GPU)";
        }
      }
    }
  }
}

using Mape = std::map<std::string, std::pair<double, int>>;  // per table (method): sum |err|, rows

// Runs every predictor into report.rows; false when a prediction fails.
bool predictAll(const std::vector<Entry>& entries, Report& report, Mape& mape, Mape& memoryMape) {
  bool ok = true;
  for (const Entry& e : entries) {
    const double eff = report.efficiency.count(e.gpu) ? report.efficiency.at(e.gpu) : e.fallbackEfficiency;
    Row row;
    row.table = e.table;
    row.name = e.name;
    row.configuration = e.method;
    row.measured = e.measured;
    row.measuredMemoryGb = e.measuredMemoryGb;
    row.outOfScope = e.outOfScope;
    row.checkMemory = e.checkMemory;
    row.calibration = e.method.empty() && report.calibrationRows.count({e.table, e.name}) > 0;
    row.predicted = e.predict(eff);
    report.rows.push_back(row);
    const std::string key = e.table + (e.method.empty() ? "" : " " + e.method);
    if (!row.predicted.error.empty()) {
      ok = false;
      continue;
    }
    if (!row.outOfScope.empty() || row.calibration) continue;
    auto& [sum, n] = mape[key];
    sum += std::abs(pctError(row.predicted.value, row.measured));
    ++n;
    if (row.measuredMemoryGb > 0) {
      auto& [msum, mn] = memoryMape[key];
      msum += std::abs(pctError(static_cast<double>(row.predicted.peakBytes) / 1e9, row.measuredMemoryGb));
      ++mn;
    }
  }
  return ok;
}

// One table per (published table, method), rows in the paper's order; false when a recipe
// that ran is predicted not to fit.
bool printRows(Report& report, bool markdown) {
  const char* bar = markdown ? "|" : " ";
  bool ok = true;
  std::stable_sort(report.rows.begin(), report.rows.end(), [](const Row& a, const Row& b) {
    return std::make_pair(a.table, a.configuration) < std::make_pair(b.table, b.configuration);
  });
  std::string current;
  for (const Row& r : report.rows) {
    const std::string key = r.table + (r.configuration.empty() ? "" : " " + r.configuration);
    if (key != current) {
      current = key;
      std::printf("\n## %s\n\n", key.c_str());
      if (markdown) {
        std::printf(
            "| run | measured | predicted | error | iteration ms | peak memory GB, predicted (measured) |\n"
            "|---|---:|---:|---:|---:|---:|\n");
      }
    }
    if (!r.predicted.error.empty()) {
      std::printf("%s %s %s failed: %s\n", bar, r.name.c_str(), bar, r.predicted.error.c_str());
      continue;
    }
    std::array<char, 64> memory{};
    // A recipe that ran must fit; a run the cost model does not describe (out of scope) is no
    // check of its memory either.
    const bool missed = r.checkMemory && r.outOfScope.empty() && !r.predicted.fits;
    if (r.measuredMemoryGb > 0) {
      // It states its peak: both the peak and whether it fits.
      std::snprintf(memory.data(), memory.size(), "%6.1f (%.0f)%s", static_cast<double>(r.predicted.peakBytes) / 1e9,
                    r.measuredMemoryGb, missed ? " DOES NOT FIT" : "");
    } else {
      // A peak that does not fit (with the stated margin) is a miss.
      std::snprintf(memory.data(), memory.size(), "%6.1f%s", static_cast<double>(r.predicted.peakBytes) / 1e9,
                    r.predicted.fits ? "" : (missed ? " DOES NOT FIT" : " (over)"));
    }
    if (missed) ok = false;
    const std::string name = r.calibration          ? r.name + " (calibration)"
                             : r.outOfScope.empty() ? r.name
                                                    : r.name + " (" + r.outOfScope + ": not in the MAPE)";
    std::printf("%s %-14s %s %8.2f %s %8.2f %s %+6.1f%% %s %10.1f %s %s %s\n", bar, name.c_str(), bar, r.measured, bar,
                r.predicted.value, bar, 100.0 * pctError(r.predicted.value, r.measured), bar, r.predicted.iterationMs,
                bar, memory.data(), markdown ? "|" : "");
  }
  return ok;
}

// Starts a section of the report: its title and, in Markdown, its table's header (`header`,
// printed as is). Returns the column separator of its rows.
const char* beginTable(bool markdown, const char* title, const char* header) {
  std::printf("\n## %s\n\n", title);
  if (markdown) std::fputs(header, stdout);
  return markdown ? "|" : " ";
}

// Throughput MAPE per table against its target, then peak-memory MAPE; false when a gated
// table misses the target.
bool printMape(const Json& root, const Mape& mape, const Mape& memoryMape, bool markdown) {
  const char* bar =
      beginTable(markdown, "MAPE (throughput)", "| table | MAPE | rows | target 10 % |\n|---|---:|---:|---|\n");
  bool ok = true;
  // Tables the document marks "gated": false are checks held back from the calibration whose
  // recipes are not confirmed: their MAPE is printed, the target not enforced.
  std::map<std::string, bool> tableGated;
  for (const Json& table : root["tables"]) tableGated[table["id"].get<std::string>()] = table.value("gated", true);
  for (const auto& [key, v] : mape) {
    const double value = v.second ? v.first / v.second : 0;
    // ZB-1p/ZB-2p/1F1B-I depend on the auto-scheduler and interleaving as well; the targets
    // apply to every gated table.
    const bool met = value <= kThroughputMapeTarget;
    const bool enforced = tableGated[key.substr(0, key.find(' '))];
    ok = ok && (met || !enforced);
    std::printf("%s %-20s %s %5.1f%% %s %3d %s %s%s %s\n", bar, key.c_str(), bar, 100.0 * value, bar, v.second, bar,
                met ? "met" : "MISSED", enforced ? "" : " (not enforced)", markdown ? "|" : "");
  }

  std::printf("\n## MAPE (peak memory, where the paper reports it; not a target)\n\n");
  if (markdown) std::printf("| table | MAPE | rows |\n|---|---:|---:|\n");
  for (const auto& [key, v] : memoryMape) {
    std::printf("%s %-20s %s %5.1f%% %s %3d %s\n", bar, key.c_str(), bar, 100.0 * (v.second ? v.first / v.second : 0),
                bar, v.second, markdown ? "|" : "");
  }
  return ok;
}

// A table's "pairs": two runs of one configuration that differ in one recipe setting, with
// the throughput ratio measured and predicted — what a planner choosing that setting relies on.
// Not a target; the direction is counted.
void printSettingPairs(const Json& root, const Report& report, bool markdown) {
  const char* bar = markdown ? "|" : " ";
  for (const Json& table : root["tables"]) {
    if (!table.contains("pairs")) continue;
    const std::string id = table["id"].get<std::string>();
    auto find = [&](const std::string& name) -> const Row* {
      for (const Row& r : report.rows) {
        if (r.table == id && r.name == name && r.predicted.error.empty()) return &r;
      }
      return nullptr;
    };
    std::printf("\n## %s: one setting changed (tokens/s/GPU after / before)\n\n", id.c_str());
    if (markdown) std::printf("| change | measured | predicted | direction |\n|---|---:|---:|---|\n");
    int right = 0, counted = 0;
    for (const Json& pair : table["pairs"]) {
      const Row* before = find(pair["before"].get<std::string>());
      const Row* after = find(pair["after"].get<std::string>());
      const std::string change = pair["change"].get<std::string>();
      if (!before || !after || before->measured <= 0 || before->predicted.value <= 0) {
        std::printf("%s %s %s (a run of the pair is missing or failed)\n", bar, change.c_str(), bar);
        continue;
      }
      const double measured = after->measured / before->measured;
      const double predicted = after->predicted.value / before->predicted.value;
      // A prediction within half a per cent of no change says neither way: not counted right.
      const bool flat = std::abs(predicted - 1.0) < 0.005;
      const bool same = !flat && (measured >= 1.0) == (predicted >= 1.0);
      right += same ? 1 : 0;
      ++counted;
      std::printf("%s %-40s %s %6.3f %s %6.3f %s %s %s\n", bar, change.c_str(), bar, measured, bar, predicted, bar,
                  flat   ? "no change"
                  : same ? "right"
                         : "WRONG",
                  markdown ? "|" : "");
    }
    std::printf("\nright direction in %d of %d changes\n", right, counted);
  }
}

// A table's "ladder": one configuration under a sequence of recipes, each a step from the one
// before (Megatron-Bridge's dispatcher ladder on Qwen3-30B-A3B). Each step's speed-up, measured
// and predicted, must agree within the ladder's tolerance: a planner choosing a recipe relies on
// them. False when a step misses (or a row failed).
bool printLadders(const Json& root, const Report& report, bool markdown) {
  const char* bar = markdown ? "|" : " ";
  bool ok = true;
  for (const Json& table : root["tables"]) {
    if (!table.contains("ladder")) continue;
    const Json& ladder = table["ladder"];
    const std::string id = table["id"].get<std::string>();
    const double tolerance = ladder.value("tolerance", 0.10);
    std::printf("\n## %s ladder: %s (tokens/s/GPU; each step against the one before)\n\n", id.c_str(),
                ladder.value("title", std::string()).c_str());
    if (markdown) {
      std::printf(
          "| rung | step time, measured (first = 1) | predicted | speed-up, measured | predicted | error |\n"
          "|---|---:|---:|---:|---:|---:|\n");
    }
    const Row* first = nullptr;
    const Row* previous = nullptr;
    int missed = 0;
    for (const Json& name : ladder["rows"]) {
      const Row* row = nullptr;
      for (const Row& r : report.rows) {
        if (r.table == id && r.name == name.get<std::string>() && r.predicted.error.empty()) row = &r;
      }
      if (!row || row->measured <= 0 || row->predicted.value <= 0) {
        std::printf("%s %s %s (failed or missing)\n", bar, name.get<std::string>().c_str(), bar);
        ok = false;
        continue;
      }
      // Step times relative to the first rung's, from the throughput (every rung runs the same
      // tokens per step).
      if (!first) first = row;
      const double measuredS = first->measured / row->measured;
      const double predictedS = first->predicted.value / row->predicted.value;
      if (!previous) {
        std::printf("%s %-60s %s %6.3f %s %6.3f %s %s %s %s %s\n", bar, row->name.c_str(), bar, measuredS, bar,
                    predictedS, bar, "-", bar, "-", markdown ? "|" : "");
      } else {
        const double measuredUp = row->measured / previous->measured;
        const double predictedUp = row->predicted.value / previous->predicted.value;
        const double err = pctError(predictedUp, measuredUp);
        const bool within = std::abs(err) <= tolerance;
        missed += within ? 0 : 1;
        std::printf("%s %-60s %s %6.3f %s %6.3f %s %6.3f %s %6.3f %s %+5.1f%%%s %s\n", bar, row->name.c_str(), bar,
                    measuredS, bar, predictedS, bar, measuredUp, bar, predictedUp, bar, 100.0 * err,
                    within ? "" : " MISSED", markdown ? "|" : "");
      }
      previous = row;
    }
    if (first && previous && first != previous) {
      const double measuredAll = previous->measured / first->measured;
      const double predictedAll = previous->predicted.value / first->predicted.value;
      std::printf("\nfirst to last rung: measured %.3f, predicted %.3f (%+.1f%%); steps within %.0f %%: %s\n",
                  measuredAll, predictedAll, 100.0 * pctError(predictedAll, measuredAll), 100.0 * tolerance,
                  missed == 0 ? "all" : "MISSED");
    }
    ok = ok && missed == 0;
  }
  return ok;
}

// Where a MoE block's time goes in the cost model, for the rows the document names under
// "breakdown": one microbatch's forward, input- and weight-gradient passes of each kind of block
// (GPT-OSS: its sliding-window and full-attention layers), split into the attention core, the
// attention's weight GEMMs, the expert GEMMs, the permutation, the experts' activation, the
// all-to-alls and host waits the pass shows, and the rest (router, norms, residuals, casts).
// The parts are the cost model's own kernel terms (CostParts.hpp) on the row's GPU and layout.
struct MoeBlockSplit {
  double total = 0, attentionCore = 0, attentionGemms = 0, expertGemms = 0, permutation = 0, activation = 0,
         exposedComm = 0;
};

MoeBlockSplit moeBlockSplit(const Layer& layer, const CostContext& ctx) {
  MoeBlockSplit b;
  const TransformerShape& t = *layer.transformer;
  const LayerCosts c = layerCosts(layer, ctx);
  b.total = c.forwardMs + c.backwardInputMs + c.backwardWeightMs;
  b.exposedComm = c.forwardCommMs + c.backwardInputCommMs + c.backwardWeightCommMs;
  const Parallelism& par = ctx.parallel;
  const double T = std::max(1, par.tensor), C = std::max(1, par.context);
  const double tokens = static_cast<double>(ctx.samplesPerMicrobatch) * static_cast<double>(t.seq) / C;
  const auto h = static_cast<double>(t.hidden);
  const auto a = static_cast<double>(t.heads);
  const auto d = static_cast<double>(t.headDimOrDefault());
  const auto kv = static_cast<double>(t.kvHeadsOrHeads());
  const costparts::FlashTimes core =
      costparts::flashAttention(ctx.gpu,
                                {static_cast<double>(ctx.samplesPerMicrobatch) * a / T, static_cast<double>(t.seq),
                                 static_cast<double>(t.seq), d, d, t.causal, static_cast<double>(t.window)},
                                par.attentionBackend);
  b.attentionCore = core.forwardMs + core.backwardMs;
  const double wgradOut = 2.0 * (par.gradReduceInFp32 ? 4.0 : 2.0);
  for (const auto& [n, k] : {std::pair{(a + 2 * kv) * d / T, h}, std::pair{h, a * d / T}}) {
    b.attentionGemms += costparts::gemmMs(ctx.gpu, ctx.precision, tokens, n, k) +
                        costparts::gemmMs(ctx.gpu, ctx.precision, tokens, k, n) +
                        costparts::gemmMs(ctx.gpu, ctx.precision, k, n, tokens, wgradOut);
  }
  costparts::MoeShape m;
  m.tensor = par.tensor;
  m.tokens = tokens / (par.sequenceParallel ? T : 1.0);
  m.hidden = h;
  m.expertFfn = static_cast<double>(t.expertFfnOrDefault());
  m.experts = static_cast<double>(t.experts);
  m.topK = static_cast<double>(t.topK);
  m.swiglu = t.mlp == MlpKind::SwiGlu;
  m.ep = par.expert;
  m.etp = par.expertTensorOrTensor();
  m.precision = ctx.precision;
  m.wgradOutputBytes = wgradOut;
  m.flexDispatcher = par.moeFlexDispatcher;
  m.flexBackend = par.moeFlexBackend;
  m.permuteFusion = par.moePermuteFusion;
  m.permuteInDispatcher = par.moePermuteFusionIntoDispatcher;
  const costparts::MoeCosts moe = costparts::moeCosts(ctx.gpu, ctx.links, m);
  b.permutation = 2.0 * moe.permuteMs;
  b.activation = 3.0 * moe.expertActMs;
  const double local = std::max(1.0, m.experts / m.ep), ffn = m.expertFfn / m.etp, act = (m.swiglu ? 2.0 : 1.0) * ffn;
  const double rows = moe.routedTokensPerExpert;
  for (const auto& [gm, gn, gk, wgrad, out] :
       {std::tuple{rows, act, h, false, 2.0}, std::tuple{rows, h, ffn, false, 2.0},
        std::tuple{rows, h, act, false, 2.0}, std::tuple{rows, ffn, h, false, 2.0},
        std::tuple{h, act, rows, true, wgradOut}, std::tuple{ffn, h, rows, true, wgradOut}}) {
    b.expertGemms += costparts::expertGemmMs(ctx.gpu, ctx.precision, {local, gm, gn, gk, wgrad, h, ffn}, out);
  }
  return b;
}

void printLayerBreakdowns(const Json& root, const std::map<std::string, ClusterSpec>& clusters, const Report& report,
                          bool markdown) {
  if (!root.contains("breakdown")) return;
  const char* bar = beginTable(markdown, "Where a MoE block's time goes (cost model; one microbatch, F + B + W, ms)",
                               "| row, block | total | attention core | attention GEMMs | expert GEMMs | permutation | "
                               "expert activation | exposed all-to-alls and waits | rest "
                               "|\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Json& item : root["breakdown"]) {
    for (const Json& table : root["tables"]) {
      if (table["id"] != item["table"]) continue;
      for (const Json& row : table["rows"]) {
        if (row["name"] != item["row"]) continue;
        const std::string precision(precisionName(
            gemmRateFallback(precisionFromName(row["precision"].get<std::string>()).value_or(Precision::Bf16))));
        const std::string gpu = rowGpu(table, row);
        const std::string key = precision == "bf16" ? gpu : std::string(gpu).append("/").append(precision);
        const double efficiency = report.efficiency.count(key) ? report.efficiency.at(key) : 0.5;
        auto request = recipeRequest(table, row, clusters.at(table["cluster"].get<std::string>()), report, efficiency);
        auto resolved = request ? resolveRequest(*request) : Expected<PlanRequest>(request.error());
        if (!resolved) {
          std::printf("%s %s %s failed: %s\n", bar, row["name"].get<std::string>().c_str(), bar,
                      resolved.message().c_str());
          continue;
        }
        const CostContext ctx =
            costContext(resolved->cluster, resolved->config, resolved->model.samplesPerMicrobatch, 0, true);
        std::vector<std::int64_t> windows;  // one block of each kind
        for (const Layer& layer : resolved->model.components.front().layers) {
          if (layer.kind != "transformer" || !layer.transformer || !layer.transformer->isMoe()) continue;
          if (layer.transformer->mtpLayers > 0) continue;
          if (std::find(windows.begin(), windows.end(), layer.transformer->window) != windows.end()) continue;
          windows.push_back(layer.transformer->window);
          const MoeBlockSplit b = moeBlockSplit(layer, ctx);
          const double rest = b.total - b.attentionCore - b.attentionGemms - b.expertGemms - b.permutation -
                              b.activation - b.exposedComm;
          const std::string name =
              row["name"].get<std::string>() + (layer.transformer->window > 0
                                                    ? ", window " + std::to_string(layer.transformer->window)
                                                    : std::string(", full attention"));
          std::printf("%s %-50s %s %7.2f %s %6.2f %s %6.2f %s %6.2f %s %6.2f %s %6.2f %s %6.2f %s %6.2f %s\n", bar,
                      name.c_str(), bar, b.total, bar, b.attentionCore, bar, b.attentionGemms, bar, b.expertGemms, bar,
                      b.permutation, bar, b.activation, bar, b.exposedComm, bar, rest, markdown ? "|" : "");
        }
      }
    }
  }
}

// --- Zero Bubble Table 5: bubble rates from profiled times ---
bool printZbBubbles(const Json& root, bool markdown) {
  const char* bar =
      beginTable(markdown, "Zero Bubble Table 5: bubble rate from the profiled times (paper / ours)",
                 "| model | m | 1F1B | ZB-H1 | ZB-H2 | ZB-1p | ZB-2p |\n|---|---:|---|---|---|---|---|\n");
  bool ok = true;
  double worst = 0;
  for (const Json& table : root["tables"]) {
    if (table["id"] != "zb") continue;
    for (const Json& row : table["rows"]) {
      std::printf("%s %-6s %s %4d %s", bar, row["name"].get<std::string>().c_str(), bar, row["microbatches"].get<int>(),
                  bar);
      const std::array<std::pair<const char*, std::pair<const char*, double>>, 5> methods{{{"1F1B", {"1f1b", 0}},
                                                                                           {"ZB-H1", {"zb-h1", 0}},
                                                                                           {"ZB-H2", {"zb-h2", 0}},
                                                                                           {"ZB-1p", {"zb-auto", 1}},
                                                                                           {"ZB-2p", {"zb-auto", 2}}}};
      for (const auto& [label, how] : methods) {
        const double paper = row["bubble_rate"][label].get<double>();
        const auto ours = profiledBubble(row, how.first, how.second);
        if (!ours) {
          std::printf(" %.4f / failed %s", paper, bar);
          ok = false;
          continue;
        }
        const bool gated =
            std::string(label) == "1F1B" || std::string(label) == "ZB-H1" || std::string(label) == "ZB-H2";
        if (gated) worst = std::max(worst, std::abs(*ours - paper));
        std::printf(" %.4f / %.4f %s", paper, *ours, bar);
      }
      std::printf("\n");
    }
  }
  const bool bubblesMet = worst <= kBubbleTarget;
  ok = ok && bubblesMet;
  std::printf("\nlargest bubble-rate difference (1F1B, ZB-H1, ZB-H2): %.4f (target %.3f)%s\n", worst, kBubbleTarget,
              bubblesMet ? "" : " MISSED");
  return ok;
}

// The GPU catalogue carries the calibrated values (one per GPU type and precision), which every
// bundled cluster naming the GPU reads: each knob is set in one place. False when one differs.
bool printCatalogue(const Report& report, bool markdown) {
  const char* bar = markdown ? "|" : " ";
  bool ok = true;
  std::printf("\n## GPU catalogue (resources/gpus/catalog.json)\n\n");
  for (const auto& [key, eff] : report.efficiency) {
    const auto slash = key.find('/');
    const std::string gpu = key.substr(0, slash);
    const Precision precision = slash == std::string::npos
                                    ? Precision::Bf16
                                    : precisionFromName(key.substr(slash + 1)).value_or(Precision::Bf16);
    const CatalogGpu* entry = findCatalogGpu(gpu);
    const double stored = entry ? entry->gpu.efficiencyFor(precision) : 0.0;
    const bool same = entry && std::abs(stored - eff) <= 0.01;
    ok = ok && same;
    std::printf("%s %-24s %s %-6s %s efficiency %.3f %s\n", bar, entry ? entry->gpu.name.c_str() : gpu.c_str(), bar,
                std::string(precisionName(precision)).c_str(), bar, stored,
                same ? "(calibrated)" : "DIFFERS from the calibration");
  }
  // GPUs without a calibrating run of their own take another entry's values (the same silicon).
  for (const CatalogGpu& g : gpuCatalog()) {
    if (g.calibrationFrom.empty()) continue;
    std::printf("%s %-24s %s all    %s efficiencies of %s (calibration_from) %s\n", bar, g.gpu.name.c_str(), bar, bar,
                g.calibrationFrom.c_str(), markdown ? "|" : "");
  }
  return ok;
}

// --- Peak memory against published measurements (bench/fidelity/peaks.json, issue 42) ---
// What a run reports of its peak: PyTorch's caching allocator's allocated bytes (the plan's
// parts less Transformer Engine's userbuffers, which TE allocates outside the allocator), or
// its reserved bytes (with the allocator's fragmentation).
double reportedPeakBytes(const MemoryBreakdown& m, const std::string& reported) {
  const auto allocated = static_cast<double>(m.allocatedBytes() - m.userbufferBytes);
  return reported == "reserved" ? allocated + static_cast<double>(m.fragmentationBytes) : allocated;
}

// Prints each row's predicted against published peak with the fullest GPU's parts and the mean
// error (target 5 %, printed); false when a row cannot be planned.
bool printPeaks(const std::string& path, const Report& report, bool markdown) {
  auto doc = loadJsonFile(path);
  if (!doc) {
    std::printf("\n%s\n", doc.message().c_str());
    return false;
  }
  const char* bar = beginTable(markdown, "Peak memory against published measurements (issue 42)",
                               "| run | reported | measured | predicted | error | fullest GPU's parts (GiB) |\n"
                               "|---|---|---:|---:|---:|---|\n");
  bool ok = true;
  double sumErr = 0;
  int n = 0;
  for (const Json& table : doc->root["tables"]) {
    auto cluster = loadCluster(std::string(PIPESTUDIO_RESOURCES) + "/clusters/" + table["cluster"].get<std::string>());
    if (!cluster) {
      std::printf("%s\n", cluster.message().c_str());
      return false;
    }
    if (table.contains("gpu_memory_gib")) cluster->gpu.memoryGib = table["gpu_memory_gib"].get<double>();
    for (const Json& row : table["rows"]) {
      const Json& m = row["measured_peak"];
      const std::string unit = m["unit"].get<std::string>();
      const std::string reported = m["reported"].get<std::string>();
      const double scale = unit == "GiB" ? 1024.0 * 1024.0 * 1024.0 : 1e9;
      const double measured = m["value"].get<double>();
      const Prediction p = recipePredictor(table, row, *cluster, report)(cluster->gpu.efficiency);
      if (!p.error.empty()) {
        std::printf("%s %s %s failed: %s\n", bar, row["name"].get<std::string>().c_str(), bar, p.error.c_str());
        ok = false;
        continue;
      }
      const double predicted = reportedPeakBytes(p.peakMemory, reported) / scale;
      const double err = pctError(predicted, measured);
      sumErr += std::abs(err);
      ++n;
      std::string parts;
      for (const MemoryPart& part : memoryParts()) {
        const std::int64_t b = p.peakMemory.*part.bytes;
        if (b == 0 || part.keptBack) continue;
        std::array<char, 64> item{};
        std::snprintf(item.data(), item.size(), "%s%s %.1f", parts.empty() ? "" : ", ",
                      std::string(part.shortName).c_str(), static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
        parts += item.data();
      }
      std::printf(
          "%s %s%s %s %s %s %.1f %s %s %.1f %s %+6.1f%% %s %s %s\n", bar, row["name"].get<std::string>().c_str(),
          row.contains("not_modelled") ? (" (not modelled: " + row["not_modelled"].get<std::string>() + ")").c_str()
                                       : "",
          bar, reported.c_str(), bar, measured, unit.c_str(), bar, predicted, bar, 100.0 * err, bar, parts.c_str(),
          markdown ? "|" : "");
    }
  }
  if (n > 0) {
    std::printf("\npeak memory: mean absolute error %.1f %% over %d rows (target 5 %%, printed, not enforced)\n",
                100.0 * sumErr / n, n);
  }
  return ok;
}

int run(const Options& o) {
  auto doc = loadJsonFile(o.data);
  if (!doc) {
    std::cerr << doc.message() << '\n';
    return 1;
  }
  const Json& root = doc->root;
  const std::string resources = PIPESTUDIO_RESOURCES;
  auto clusters = loadClusters(root, resources);
  if (!clusters) {
    std::cerr << clusters.message() << '\n';
    return 1;
  }
  auto llama = loadModel(resources + "/models/llama3-405b.json");
  if (!llama) {
    std::cerr << llama.message() << '\n';
    return 1;
  }

  Report report;
  const std::vector<Entry> entries = collectEntries(root, *clusters, *llama, report);
  calibrateAll(root, entries, report);
  Mape mape;
  Mape memoryMape;
  bool ok = predictAll(entries, report, mape, memoryMape);

  // --- print ---
  std::printf("# Fidelity: predicted vs measured (published runs)\n\n");
  for (const auto& [gpu, eff] : report.efficiency) {
    std::printf("%s efficiency %.4f, calibrated on %s\n", gpu.c_str(), eff, report.calibratedOn[gpu].c_str());
  }
  ok = printRows(report, o.markdown) && ok;
  ok = printMape(root, mape, memoryMape, o.markdown) && ok;
  printSettingPairs(root, report, o.markdown);
  ok = printLadders(root, report, o.markdown) && ok;
  printLayerBreakdowns(root, *clusters, report, o.markdown);
  ok = printZbBubbles(root, o.markdown) && ok;
  ok = printVocabTable(root, *clusters, report, o.markdown) && ok;
  ok = printCatalogue(report, o.markdown) && ok;
  ok = fidelity::printKernelChecks(o.kernels, o.markdown) && ok;
  ok = printPeaks(o.peaks, report, o.markdown) && ok;
  if (o.check && !ok) {
    std::fprintf(stderr, "fidelity: a target was missed (see above)\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace pipestudio

int main(int argc, char** argv) {
  // A data document of the wrong shape (a field of another type) throws from the JSON reader.
  try {
    pipestudio::Options o;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--markdown") {
        o.markdown = true;
      } else if (a == "--check") {
        o.check = true;
      } else if (a == "--data" && i + 1 < argc) {
        o.data = argv[++i];
      } else if (a == "--kernels" && i + 1 < argc) {
        o.kernels = argv[++i];
      } else if (a == "--peaks" && i + 1 < argc) {
        o.peaks = argv[++i];
      } else {
        std::cerr
            << "usage: pipestudio-fidelity [--data FILE] [--kernels FILE] [--peaks FILE] [--markdown] [--check]\n";
        return 2;
      }
    }
    return pipestudio::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipestudio-fidelity: %s\n", e.what());
    return 1;
  }
}
