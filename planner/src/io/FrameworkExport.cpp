// Plans as the training frameworks take them: Megatron-LM command-line arguments (with the
// Zero Bubble fork's flags for zero-bubble schedules) and torchtitan's configuration (a Python
// configuration function for torchtitan main, the `[parallelism]` TOML job config for v0.2.2 and
// earlier). Facts used (argument names, rules) are those of megatron/training/arguments.py,
// megatron/core/transformer/pipeline_parallel_layer_layout.py and transformer_config.py
// (NVIDIA/Megatron-LM), megatron/core/zbpp_utils.py (sail-sg/zero-bubble-pipeline-parallelism),
// torchtitan/config/configs.py, torchtitan/distributed/{pipeline_parallel,parallel_dims,fsdp,
// activation_checkpoint}.py and run_train.sh (pytorch/torchtitan main, August 2026) and
// torchtitan/config/job_config.py of v0.2.2 (the TOML era). Each refusal names the rule the
// framework would apply.
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "TorchSchedule.hpp"
#include "partition/Uniform.hpp"
#include "pipestudio/common/SourceText.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/model/BlockHalves.hpp"
#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Request.hpp"

namespace pipestudio {
namespace {

// A factor as a flag's value: the shortest form printf's %g gives (1.5, 1.1, 7).
std::string shortNumber(double value) {
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "%g", value);
  return text.data();
}

// What Megatron and torchtitan call the layers of a decoder-only language model; a transformer
// layer of multi-token-prediction modules (DeepSeek-V3 §2.2) is Megatron's MTP block, built
// after the decoder stack on the last stage (--mtp-num-layers).
enum class LayerRole { Embedding, Decoder, AttentionHalf, MlpHalf, Mtp, Head, Other };

LayerRole roleOf(const Layer& layer) {
  if (layer.kind == "embedding") return LayerRole::Embedding;
  if (const auto half = blockHalfOf(layer)) {
    return *half == BlockHalf::Attention ? LayerRole::AttentionHalf : LayerRole::MlpHalf;
  }
  if (layer.kind == "transformer" && layer.transformer && layer.transformer->mtpLayers > 0) return LayerRole::Mtp;
  if (layer.kind == "transformer") return LayerRole::Decoder;
  if (layer.kind == "lm_head") return LayerRole::Head;
  return LayerRole::Other;
}

// One trainable component, no frozen ones, no fill, no vocabulary passes: what both frameworks
// train. Each refusal names the plan's feature (fill, vocabulary parallelism, frozen or several
// trainable components, a bidirectional schedule), checked in that order.
Status requireSingleBackbone(const Plan& plan, const char* framework) {
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const OpKind k = plan.ops[i].kind;
    if (k == OpKind::S || k == OpKind::T) {
      return Error{"/ops/" + std::to_string(i) + ": the plan splits the vocabulary layers over the devices (" +
                   std::string(opKindName(k)) + " passes, --vocab-parallel), which " + framework +
                   " has no setting for (expected a plan without --vocab-parallel)"};
    }
  }
  if (plan.config.fill != "none") {
    return Error{std::string(framework) + " cannot run a frozen-component fill (plan fill '" + plan.config.fill +
                 "'; expected fill none)"};
  }
  std::string trainable;
  std::string frozen;
  for (const Component& c : plan.model.components) {
    std::string& list = c.trainable ? trainable : frozen;
    list += (list.empty() ? "'" : ", '") + excerpt(c.name) + "'";
  }
  if (plan.model.components.size() != 1 || !plan.model.components.front().trainable) {
    return Error{std::string(framework) + " trains one decoder stack; this model has " +
                 (trainable.empty() ? std::string("no trainable component") : "trainable " + trainable) +
                 (frozen.empty() ? std::string() : " and frozen " + frozen) + " (expected one trainable component)"};
  }
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const OpKind k = plan.ops[i].kind;
    if (k != OpKind::F && k != OpKind::B && k != OpKind::W && k != OpKind::BW) {
      return Error{"/ops/" + std::to_string(i) + ": a " + std::string(opKindName(k)) + " op has no " + framework +
                   " counterpart (expected F, B, W and BW ops only)"};
    }
  }
  for (const VirtualStage& vs : plan.virtualStages) {
    if (vs.pipeline != 0) {
      return Error{std::string(framework) + " holds each stage once; the " + plan.config.schedule +
                   " plan holds the model twice (bidirectional pipelines)"};
    }
  }
  // The degrees must still pass the planner's checks (a hand-edited plan, or one made before a
  // rule): the framework asserts the same at start-up.
  if (auto resolved = resolveRequest(PlanRequest{plan.model, plan.cluster, plan.config}); !resolved) {
    return Error{std::string(framework) + " would refuse the plan's parallel settings: " + resolved.message()};
  }
  return {};
}

// Per virtual stage (by id): counts of embedding, decoder and head layers.
struct StageLayers {
  int embedding = 0;
  int decoder = 0;
  int mtp = 0;  ///< multi-token-prediction modules
  int head = 0;
  std::vector<int> decoderIndex;  ///< index of each decoder layer among all decoder layers
};

Expected<std::vector<StageLayers>> stageLayers(const Plan& plan, const char* framework) {
  const auto& layers = plan.model.components.front().layers;
  std::vector<int> decoderIndex(layers.size(), -1);
  int decoders = 0;
  std::optional<std::size_t> firstMtp;  // a decoder after it is refused
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerRole role = roleOf(layers[i]);
    if (role == LayerRole::Other) {
      return Error{"layer " + std::to_string(i) + " '" + excerpt(layers[i].name) + "' is of kind '" +
                   excerpt(layers[i].kind) + "', which " + framework +
                   " has no name for (expected embedding, transformer or lm_head layers)"};
    }
    if (role == LayerRole::Embedding && i != 0) {
      return Error{"layer " + std::to_string(i) + " '" + excerpt(layers[i].name) + "': " + framework +
                   " puts the embedding first (expected it as layer 0)"};
    }
    if (role == LayerRole::Head && i + 1 != layers.size()) {
      return Error{"layer " + std::to_string(i) + " '" + excerpt(layers[i].name) + "': " + framework +
                   " puts the output layer last (expected the lm_head as the last layer)"};
    }
    if (role == LayerRole::Mtp && !firstMtp) firstMtp = i;
    if ((role == LayerRole::Decoder || role == LayerRole::AttentionHalf || role == LayerRole::MlpHalf) && firstMtp) {
      const std::size_t k = *firstMtp;
      return Error{"layer " + std::to_string(k) + " '" + excerpt(layers[k].name) + "': " + framework +
                   " runs multi-token prediction after the last decoder layer (expected it after layer " +
                   std::to_string(i) + " '" + excerpt(layers[i].name) + "')"};
    }
    if (role == LayerRole::Decoder || role == LayerRole::AttentionHalf) decoderIndex[i] = decoders++;
  }
  std::vector<StageLayers> out(plan.virtualStages.size());
  for (const VirtualStage& vs : plan.virtualStages) {
    if (vs.id < 0 || vs.id >= static_cast<int>(out.size())) {
      return Error{"/virtual_stages: id " + std::to_string(vs.id) + " out of range"};
    }
    StageLayers& s = out[static_cast<std::size_t>(vs.id)];
    for (int l = vs.firstLayer; l <= vs.lastLayer; ++l) {
      if (l < 0 || l >= static_cast<int>(layers.size())) continue;
      switch (roleOf(layers[static_cast<std::size_t>(l)])) {
        case LayerRole::Embedding:
          ++s.embedding;
          break;
        case LayerRole::Head:
          ++s.head;
          break;
        case LayerRole::Mtp:
          s.mtp += static_cast<int>(layers[static_cast<std::size_t>(l)].transformer->mtpLayers);
          break;
        case LayerRole::Decoder:
        case LayerRole::AttentionHalf:  // a split block counts where its attention is
          ++s.decoder;
          s.decoderIndex.push_back(decoderIndex[static_cast<std::size_t>(l)]);
          break;
        case LayerRole::MlpHalf:
        case LayerRole::Other:
          break;
      }
    }
  }
  return out;
}

// Both frameworks always build the embedding and the output layer (Megatron's layout must begin
// with E and end with L; torchtitan deletes every module no model part names): a model that costs
// its decoder layers only gets them on the first and the last stage. Returns what was placed.
std::vector<std::string> placeFrameworkEnds(std::vector<StageLayers>& stages, const std::string& framework) {
  std::vector<std::string> notes;
  if (stages.empty()) return notes;
  const auto any = [&](int StageLayers::*count) {
    return std::any_of(stages.begin(), stages.end(), [&](const StageLayers& s) { return s.*count > 0; });
  };
  if (!any(&StageLayers::embedding)) {
    stages.front().embedding = 1;
    notes.push_back("the plan's model has no embedding layer: " + framework + " places its own on the first stage");
  }
  if (!any(&StageLayers::head)) {
    stages.back().head = 1;
    notes.push_back("the plan's model has no lm_head layer: " + framework +
                    " places its output layer and loss on the last stage");
  }
  return notes;
}

int decoderCount(const std::vector<StageLayers>& stages) {
  int n = 0;
  for (const auto& s : stages) n += s.decoder;
  return n;
}

// Megatron's interleaved placement: virtual stage id = virtual rank · P + pipeline rank.
bool loopPlacement(const Plan& plan) {
  const int p = plan.config.devices;
  return std::all_of(plan.virtualStages.begin(), plan.virtualStages.end(),
                     [p](const VirtualStage& vs) { return vs.device == vs.id % p; });
}

// The V of ZB-V, DualPipeV and torchtitan's "v" style: stage s < P on rank s, stage s ≥ P on 2P−1−s.
bool vPlacement(const Plan& plan) {
  const int p = plan.config.devices;
  if (static_cast<int>(plan.virtualStages.size()) != 2 * p) return false;
  return std::all_of(plan.virtualStages.begin(), plan.virtualStages.end(),
                     [p](const VirtualStage& vs) { return vs.device == (vs.id < p ? vs.id : 2 * p - 1 - vs.id); });
}

std::string stageSymbols(const StageLayers& s) {
  std::string out;
  if (s.embedding > 0) out += 'E';
  if (s.decoder == 1) out += 't';
  if (s.decoder > 1) out += "t*" + std::to_string(s.decoder);
  out += std::string(static_cast<std::size_t>(s.mtp), 'm');
  if (s.head > 0) out += 'L';
  return out;
}

// Layout string with runs of equal stages folded as `(s|)*n`.
std::string layoutString(const std::vector<StageLayers>& stages) {
  std::vector<std::string> symbols;
  symbols.reserve(stages.size());
  for (const auto& s : stages) symbols.push_back(stageSymbols(s));
  std::string out;
  std::size_t i = 0;
  while (i < symbols.size()) {
    std::size_t j = i + 1;
    while (j < symbols.size() && symbols[j] == symbols[i]) ++j;
    const std::size_t run = j - i;
    const bool last = j == symbols.size();
    if (run >= 2 && !symbols[i].empty() && !last) {
      out += "(" + symbols[i] + "|)*" + std::to_string(run);
    } else if (run >= 3 && !symbols[i].empty() && last) {
      out += "(" + symbols[i] + "|)*" + std::to_string(run - 1) + symbols[i];
    } else {
      for (std::size_t k = i; k < j; ++k) out += symbols[k] + (k + 1 < symbols.size() ? "|" : "");
    }
    i = j;
  }
  return out;
}

std::string joinCounts(const std::vector<int>& counts) {
  std::string s;
  for (int n : counts) s += (s.empty() ? "" : ",") + std::to_string(n);
  return s;
}

// Decoder layers per virtual stage (by id) of `virtualStages` over the backbone's layers.
std::vector<int> decodersPerStage(const std::vector<Layer>& layers, const std::vector<VirtualStage>& virtualStages) {
  std::vector<int> out(virtualStages.size(), 0);
  for (const VirtualStage& vs : virtualStages) {
    if (vs.id < 0 || vs.id >= static_cast<int>(out.size())) continue;
    for (int l = std::max(0, vs.firstLayer); l <= vs.lastLayer && l < static_cast<int>(layers.size()); ++l) {
      if (roleOf(layers[static_cast<std::size_t>(l)]) == LayerRole::Decoder) ++out[static_cast<std::size_t>(vs.id)];
    }
  }
  return out;
}

// Why the Zero Bubble fork cannot run this plan's split, and what would. The fork (an older
// Megatron-LM, no --pipeline-model-parallel-layout) gives every stage num_layers / stages
// decoder layers and adds the embedding to the first stage and the output layer to the last.
std::string forkUnevenReason(const Plan& plan, const std::vector<StageLayers>& stages, int decoders, int stageCount) {
  std::vector<int> planCounts;
  planCounts.reserve(stages.size());
  for (const StageLayers& s : stages) planCounts.push_back(s.decoder);
  const std::string& partitionName = plan.config.partition;
  std::string out =
      "the Zero Bubble fork splits the decoder layers evenly over its stages and adds the embedding to the first "
      "stage and the output layer to the last (it has no --pipeline-model-parallel-layout); this plan's stages "
      "hold " +
      joinCounts(planCounts) + " decoder layers";
  const std::string mainline =
      "; or plan --schedule 1f1b or interleaved-1f1b, which mainline Megatron-LM runs with this split "
      "(--pipeline-model-parallel-layout)";
  if (stageCount <= 0 || decoders % stageCount != 0) {
    return out + ": " + std::to_string(decoders) + " decoder layers do not divide over " + std::to_string(stageCount) +
           " stages (expected a pipeline whose stage count divides " + std::to_string(decoders) + ")" + mainline;
  }
  const int perStage = decoders / stageCount;
  out += ", where the fork runs " + std::to_string(perStage) + " on each";
  const auto& layers = plan.model.components.front().layers;
  const auto evenSplit = [&](const std::vector<VirtualStage>& split) {
    const std::vector<int> counts = decodersPerStage(layers, split);
    return std::all_of(counts.begin(), counts.end(), [&](int n) { return n == perStage; });
  };
  auto uniform = partition::partitionUniform(plan.model, plan.virtualStages);
  if (partitionName != "uniform" && uniform && evenSplit(*uniform)) {
    return out + " (its " + partitionName + " partition balances times, not decoder layers): re-plan with " +
           "--partition uniform" + mainline;
  }
  const bool endsAreLayers = std::any_of(layers.begin(), layers.end(), [](const Layer& l) {
    return roleOf(l) == LayerRole::Embedding || roleOf(l) == LayerRole::Head;
  });
  if (!endsAreLayers) return out + ": re-plan with --partition uniform" + mainline;
  const std::string withoutEnds =
      "What would work: plan the model without its embedding and lm_head layers with --partition uniform (" +
      std::to_string(perStage) +
      " decoder layers per stage; the export then places Megatron's own embedding and output layer on the first and "
      "last stage, as the fork does)";
  if (partitionName != "uniform") {
    return out + ". Its " + partitionName +
           " partition balances times, not decoder layers, and --partition uniform counts the model's embedding and "
           "lm_head as layers, which leaves the stages beside them with fewer decoder layers. " +
           withoutEnds + mainline;
  }
  std::vector<int> layerCounts;
  for (const VirtualStage& vs : plan.virtualStages) layerCounts.push_back(vs.lastLayer - vs.firstLayer + 1);
  return out + ". It is uneven only because the uniform partition counts the model's embedding and lm_head as " +
         "layers (its stages hold " + joinCounts(layerCounts) + " of the " + std::to_string(layers.size()) +
         " layers), so the stages beside them get fewer decoder layers than the fork gives them. " + withoutEnds +
         mainline;
}

// Microbatches a device holds activations for at once (F started, last backward not done):
// the Zero Bubble fork's --zero-bubble-max-pending-backward counts memory in these units.
int maxPendingBackward(const Plan& plan) {
  int best = 0;
  std::map<int, int> pending;
  std::map<std::pair<int, int>, bool> split;  // (device, microbatch) has a W
  for (const Op& op : plan.ops) {
    if (op.kind == OpKind::W) split[{op.device, op.microbatch}] = true;
  }
  for (const Op& op : plan.ops) {
    int& n = pending[op.device];
    if (op.kind == OpKind::F) best = std::max(best, ++n);
    if (op.kind == OpKind::W || (op.kind == OpKind::BW && !split.count({op.device, op.microbatch}))) --n;
  }
  return best;
}

std::int64_t microBatchSize(const Plan& plan) {
  return plan.config.microBatchSize.value_or(std::max<std::int64_t>(1, plan.model.samplesPerMicrobatch));
}

std::int64_t globalBatch(const Plan& plan) {
  // A sequence-split plan's microbatches count chunks: the batch counts training microbatches.
  return plan.config.globalBatch.value_or(microBatchSize(plan) * plan.config.trainingMicrobatches() *
                                          plan.config.parallel.data);
}

// The first decoder layer's shape that `pick` accepts (MTP blocks apart); null when none does.
bool isDecoderPart(LayerRole role) {
  return role == LayerRole::Decoder || role == LayerRole::AttentionHalf || role == LayerRole::MlpHalf;
}

template <typename Pick>
const TransformerShape* firstDecoderShape(const Plan& plan, Pick pick) {
  for (const Layer& l : plan.model.components.front().layers) {
    if (isDecoderPart(roleOf(l)) && l.transformer && pick(*l.transformer)) return &*l.transformer;
  }
  return nullptr;
}

// Whether the plan's model has blocks split into attention and MLP halves (BlockHalves.hpp).
bool hasBlockHalves(const Plan& plan) {
  const auto& layers = plan.model.components.front().layers;
  return std::any_of(layers.begin(), layers.end(),
                     [](const Layer& l) { return roleOf(l) == LayerRole::AttentionHalf; });
}

const TransformerShape* decoderShape(const Plan& plan) {
  return firstDecoderShape(plan, [](const TransformerShape&) { return true; });
}
const TransformerShape* denseDecoderShape(const Plan& plan) {
  return firstDecoderShape(plan, [](const TransformerShape& t) { return !t.isMoe(); });
}
const TransformerShape* moeShape(const Plan& plan) {
  return firstDecoderShape(plan, [](const TransformerShape& t) { return t.isMoe(); });
}

bool tiedEmbedding(const Plan& plan) {
  for (const Layer& l : plan.model.components.front().layers) {
    if (roleOf(l) != LayerRole::Decoder && l.tied) return true;
  }
  return false;
}

// Text this export writes into source code goes through sourceText (SourceText.hpp), so no
// name or path can end its literal or comment. `literal` is for text that cannot be refused
// (every context but TOML and shell words holds any bytes; ASCII this file makes holds in all).
std::string literal(SourceContext context, std::string_view text) {
  auto out = sourceText(context, text);
  return out ? std::move(*out) : std::string("\"\"");
}
std::string tomlString(std::string_view ascii) { return literal(SourceContext::TomlString, ascii); }
std::string pyString(std::string_view text) { return literal(SourceContext::PythonString, text); }
std::string comment(std::string_view text) { return literal(SourceContext::Comment, text); }
std::string docstring(std::string_view text) { return literal(SourceContext::PythonDocstring, text); }

// The flags of a Megatron-LM export, in order, with the notes written above them.
struct MegatronFlags {
  std::vector<std::string> args;
  std::vector<std::string> missing;  // required flags the model cannot give
  std::vector<std::string> notes;
  std::string layout;  // --pipeline-model-parallel-layout, when the partition is uneven
  void add(std::string flag, std::optional<std::string> value = std::nullopt) {
    args.push_back(std::move(flag));
    if (value) args.push_back(std::move(*value));
  }
};

// Schedules and ZeRO stages Megatron-LM (or the Zero Bubble fork) runs.
Status megatronRuns(const PlanConfig& c, bool zbFork, bool zbV) {
  const std::string& schedule = c.schedule;
  if (schedule == "gpipe") {
    return Error{
        "Megatron-LM has no GPipe schedule: without virtual stages it runs 1F1B "
        "(forward_backward_pipelining_without_interleaving); plan with --schedule 1f1b, or export GPipe "
        "with --format torchtitan"};
  }
  if (schedule != "1f1b" && schedule != "interleaved-1f1b" && !zbFork && !zbV) {
    return Error{"Megatron-LM cannot run the " + schedule +
                 " schedule: it runs 1F1B, interleaved 1F1B, and the Zero Bubble fork's ZB and ZB-V schedules "
                 "(use --format torchtitan to run this order through torch.distributed.pipelining)"};
  }
  if (c.parallel.zeroStage >= 2 && c.parallel.data > 1 && (zbFork || zbV)) {
    return Error{"ZeRO-" + std::to_string(c.parallel.zeroStage) +
                 " is not expressible in the Zero Bubble fork: it has no Megatron-FSDP, and its distributed optimizer "
                 "(--use-distributed-optimizer) shards the optimizer state only (ZeRO-1); re-plan with --zero 1 or 0"};
  }
  return {};
}

// The decoder layers of the backbone, in order (MTP blocks apart; a split block once).
std::vector<const TransformerShape*> decoderShapes(const Plan& plan) {
  std::vector<const TransformerShape*> out;
  for (const Layer& l : plan.model.components.front().layers) {
    const LayerRole role = roleOf(l);
    if ((role == LayerRole::Decoder || role == LayerRole::AttentionHalf) && l.transformer) {
      out.push_back(&*l.transformer);
    }
  }
  return out;
}

// Sliding-window attention as Megatron takes it: --window-size W-1,0 for every layer, or for all
// but every k-th (--window-attn-skip-freq k: layer numbers divisible by k attend to the whole
// sequence; GPT-OSS: W = 128 on odd layers, Megatron-Bridge's GPTOSSBridge writes
// window_size (sliding_window − 1, 0) and window_attn_skip_freq 2). Another pattern is noted.
// The Python list Megatron's --window-attn-skip-freq and --moe-layer-freq take (megatron/training/
// arguments.py _eval_pattern: digits, commas, brackets, + and *): the shortest period repeated, or
// runs of equal values.
std::string pythonListPattern(const std::vector<int>& values) {
  const std::size_t n = values.size();
  for (std::size_t period = 1; period <= n / 2; ++period) {
    if (n % period != 0) continue;
    bool periodic = true;
    for (std::size_t i = period; i < n && periodic; ++i) periodic = values[i] == values[i - period];
    if (!periodic) continue;
    std::string body;
    for (std::size_t i = 0; i < period; ++i) body += (i ? "," : "") + std::to_string(values[i]);
    if (period == 1) return "([" + body + "]*" + std::to_string(n) + ")";
    return "([" + body + "]*" + std::to_string(n / period) + ")";
  }
  std::string out;
  std::size_t i = 0;
  while (i < n) {
    std::size_t j = i;
    while (j < n && values[j] == values[i]) ++j;
    out += std::string(out.empty() ? "" : "+") + "[" + std::to_string(values[i]) + "]*" + std::to_string(j - i);
    i = j;
  }
  return "(" + out + ")";
}

void addMegatronWindowFlags(const Plan& plan, MegatronFlags& f, bool hybrid) {
  const std::vector<const TransformerShape*> shapes = decoderShapes(plan);
  std::int64_t window = 0;
  for (const TransformerShape* t : shapes) {
    if (t->window > 0 && window > 0 && t->window != window) {
      f.notes.emplace_back(
          "the decoder layers use different attention windows, which Megatron's --window-size "
          "cannot express: the export writes none (every layer attends to the whole sequence)");
      return;
    }
    if (t->window > 0) window = t->window;
  }
  if (window == 0) return;
  if (hybrid) {
    // HybridModel numbers its attention and MLP layers apart (a block is two layers), so the
    // windowed layers are listed over the whole pattern: 1 sliding window, 0 full attention (and
    // every MLP layer).
    std::vector<int> perLayer;
    for (const TransformerShape* t : shapes) {
      perLayer.push_back(t->window > 0 ? 1 : 0);
      perLayer.push_back(0);
    }
    f.add("--window-size", std::to_string(window - 1) + ",0");
    f.add("--window-attn-skip-freq", pythonListPattern(perLayer));
    return;
  }
  const auto n = static_cast<int>(shapes.size());
  // The skip frequency k whose multiples (1-based) are exactly the full-attention layers.
  std::optional<int> skip;
  bool anyFull = false;
  for (const TransformerShape* t : shapes) anyFull = anyFull || t->window == 0;
  if (!anyFull) {
    skip = 0;
  } else {
    for (int k = 2; k <= n && !skip; ++k) {
      bool matches = true;
      for (int i = 0; i < n && matches; ++i)
        matches = ((i + 1) % k == 0) == (shapes[static_cast<std::size_t>(i)]->window == 0);
      if (matches) skip = k;
    }
  }
  if (!skip) {
    f.notes.emplace_back("the decoder layers' windows (" + std::to_string(window) +
                         " tokens on some layers) follow no every-k-th pattern Megatron's --window-attn-skip-freq "
                         "expresses: the export writes none (every layer attends to the whole sequence)");
    return;
  }
  f.add("--window-size", std::to_string(window - 1) + ",0");
  if (*skip > 0) f.add("--window-attn-skip-freq", std::to_string(*skip));
}

// Which decoder layers are MoE, as Megatron's --moe-layer-freq takes a list: runs folded, e.g.
// ([0]*3+[1]*58) for DeepSeek-V3's three dense layers first.
std::string moeLayerPattern(const std::vector<const TransformerShape*>& shapes) {
  std::vector<int> moe;
  moe.reserve(shapes.size());
  for (const TransformerShape* t : shapes) moe.push_back(t->isMoe() ? 1 : 0);
  return pythonListPattern(moe);
}

// The mixture of experts and the recipe's MoE settings, as Megatron-Core's arguments name them
// (megatron/core/transformer/moe/README.md): experts and their size, the shared experts, dense
// layers among them, the token dispatcher and its backend, expert tensor parallelism, token
// dropping, group-limited routing, the all-to-all overlaps, and multi-token prediction.
void addMegatronMoeFlags(const Plan& plan, MegatronFlags& f, bool hybrid) {
  int mtp = 0;
  for (const Layer& l : plan.model.components.front().layers) {
    if (roleOf(l) == LayerRole::Mtp) mtp += static_cast<int>(l.transformer->mtpLayers);
  }
  if (mtp > 0) f.add("--mtp-num-layers", std::to_string(mtp));
  const TransformerShape* moe = moeShape(plan);
  if (!moe) return;
  const TransformerShape& t = *moe;
  const Parallelism& par = plan.config.parallel;
  f.add("--num-experts", std::to_string(t.experts));
  f.add("--moe-router-topk", std::to_string(t.topK));
  f.add("--moe-ffn-hidden-size", std::to_string(t.expertFfnOrDefault()));
  if (t.sharedExperts > 0) {
    f.add("--moe-shared-expert-intermediate-size", std::to_string(t.sharedExperts * t.expertFfnOrDefault()));
  }
  // Not every decoder layer is MoE (DeepSeek-V3's first three are dense); HybridModel reads that
  // from its pattern (- or E).
  if (denseDecoderShape(plan) && !hybrid) f.add("--moe-layer-freq", moeLayerPattern(decoderShapes(plan)));
  f.add("--moe-grouped-gemm");
  f.add("--moe-token-dispatcher-type", std::string(par.moeFlexDispatcher ? "flex" : "alltoall"));
  if (par.moeFlexDispatcher) {
    f.add("--moe-flex-dispatcher-backend", std::string(flexBackendName(par.moeFlexBackend)));
    // The SMs the plan gave the dispatcher, where it names them (NCCL's all-to-all has no flag).
    if (par.moeCommSms > 0) f.add("--moe-flex-dispatcher-num-sms", std::to_string(par.moeCommSms));
    if (par.moePermuteFusionIntoDispatcher) f.add("--moe-permute-fusion-into-hybridep");
    if (par.moeRankCapacityFactor) {
      // Megatron's sync-free MoE: the budget needs Transformer Engine's op fuser with HybridEP
      // (TransformerConfig.__post_init__ at d98e8a64).
      f.add("--moe-expert-rank-capacity-factor", shortNumber(*par.moeRankCapacityFactor));
      f.add("--use-transformer-engine-op-fuser");
    }
    if (par.moePagedStash) {
      f.add("--moe-paged-stash");
      if (par.moePagedStashBufferFactor > 0) {
        f.add("--moe-paged-stash-buffer-size-factor-cuda", shortNumber(par.moePagedStashBufferFactor));
      }
    }
    if (par.moeCombineChunkTokens > 0 && par.moeFlexBackend == FlexBackend::HybridEp) {
      f.notes.emplace_back(
          "HybridEP's combine chunk is an environment variable, not an argument: set "
          "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API=" +
          std::to_string(par.moeCombineChunkTokens) + " for every rank");
    }
  }
  // Megatron's default is PyTorch's permutation; the recipes fuse it (Transformer Engine).
  if (par.moePermuteFusion) f.add("--moe-permute-fusion");
  if (par.expertTensor > 0 && par.expertTensor != par.tensor) {
    f.add("--expert-tensor-parallel-size", std::to_string(par.expertTensor));
  }
  const std::optional<double> capacity =
      par.moeCapacityFactor ? (*par.moeCapacityFactor > 0 ? par.moeCapacityFactor : std::nullopt) : t.capacityFactor;
  if (capacity) {
    f.add("--moe-expert-capacity-factor", shortNumber(*capacity));
    f.add("--moe-pad-expert-input-to-capacity");
  }
  if (t.routerGroups > 0) {
    f.add("--moe-router-num-groups", std::to_string(t.routerGroups));
    f.add("--moe-router-group-topk", std::to_string(t.routerGroupTopK));
  }
  if (par.moeA2aOverlap) f.add("--overlap-moe-expert-parallel-comm");
  if (par.moeSharedExpertOverlap) f.add("--moe-shared-expert-overlap");
}

// CUDA graphs as Megatron-Core takes them (megatron/training/arguments.py at d98e8a64:
// --cuda-graph-impl from TransformerConfig, --cuda-graph-modules with the names as separate
// words; validate_args turns on Transformer Engine's RNG tracker that graphs need).
void addMegatronCudaGraphFlags(const Parallelism& par, MegatronFlags& f) {
  if (par.cudaGraphImpl == CudaGraphImpl::None) return;
  f.add("--cuda-graph-impl", std::string(cudaGraphImplName(par.cudaGraphImpl)));
  if (par.cudaGraphModules != 0 && par.cudaGraphImpl != CudaGraphImpl::FullIteration) {
    f.add("--cuda-graph-modules");
    std::stringstream modules(cudaGraphModulesName(par.cudaGraphModules));
    for (std::string name; std::getline(modules, name, ',');) f.args.push_back(name);
  }
}

// The plan's weight-GEMM format as Megatron-Bridge's precision recipes set it
// (src/megatron/bridge/training/mixed_precision.py): bf16_mixed; FP8 with per-tensor current
// scaling (bf16_with_fp8_current_scaling_mixed: hybrid E4M3/E5M2, recipe tensorwise), which the
// cost model's fp8 is; FP8 with 1×128 / 128×128 block scales
// (bf16_with_fp8_subchannel_scaling_mixed: hybrid, recipe blockwise); MXFP8 (E4M3, recipe
// mxfp8); NVFP4 (E2M1, recipe nvfp4).
void addMegatronPrecisionFlags(Precision precision, MegatronFlags& f) {
  f.add(precision == Precision::Fp16 ? "--fp16" : "--bf16");
  // Transformer Engine's low-precision formats: --fp8-format/--fp8-recipe, --fp4-format/--fp4-recipe.
  auto lowPrecision = [&f](const std::string& bits, const char* format, const char* recipe) {
    f.add("--" + bits + "-format", std::string(format));
    f.add("--" + bits + "-recipe", std::string(recipe));
  };
  switch (precision) {
    case Precision::Fp16:
    case Precision::Bf16:
      return;
    case Precision::Fp8:
      lowPrecision("fp8", "hybrid", "tensorwise");
      return;
    case Precision::Fp8Block:
      lowPrecision("fp8", "hybrid", "blockwise");
      return;
    case Precision::Mxfp8:
      lowPrecision("fp8", "e4m3", "mxfp8");
      return;
    case Precision::Nvfp4:
      lowPrecision("fp4", "e2m1", "nvfp4");
      return;
  }
}

// Parallelism, batch and model shape.
void addMegatronModelFlags(const Plan& plan, int decoders, bool hybrid, MegatronFlags& f) {
  const PlanConfig& c = plan.config;
  f.add("--tensor-model-parallel-size", std::to_string(c.parallel.tensor));
  f.add("--pipeline-model-parallel-size", std::to_string(c.devices));
  if (c.parallel.context > 1) {
    f.add("--context-parallel-size", std::to_string(c.parallel.context));
    f.add("--cp-comm-type", std::string(cpCommTypeName(c.parallel.cpCommType)));
    const TransformerShape* t = decoderShape(plan);
    if (c.parallel.cpCommType == CpCommType::A2aP2p && t) {
      const int a2a = hierarchicalContextA2aRanks(plan.cluster, c.parallel, *t);
      f.add("--hierarchical-context-parallel-sizes");
      f.args.push_back(std::to_string(a2a));
      f.args.push_back(std::to_string(c.parallel.context / std::max(1, a2a)));
    }
  }
  if (c.parallel.expert > 1) f.add("--expert-model-parallel-size", std::to_string(c.parallel.expert));
  if (c.parallel.sequenceParallel && c.parallel.tensor > 1) f.add("--sequence-parallel");
  f.add("--micro-batch-size", std::to_string(microBatchSize(plan)));
  f.add("--global-batch-size", std::to_string(globalBatch(plan)));
  if (!hybrid) f.add("--num-layers", std::to_string(decoders));  // HybridModel counts its pattern
  if (const TransformerShape* t = decoderShape(plan)) {
    f.add("--hidden-size", std::to_string(t->hidden));
    // --ffn-hidden-size sizes the dense MLPs (a MoE model's dense layers), --moe-ffn-hidden-size
    // the experts (addMegatronMoeFlags).
    const TransformerShape* dense = denseDecoderShape(plan);
    const std::int64_t ffn = dense ? dense->ffnOrDefault() : (t->ffn > 0 ? t->ffn : t->expertFfnOrDefault());
    f.add("--ffn-hidden-size", std::to_string(ffn));
    f.add("--num-attention-heads", std::to_string(t->heads));
    if (t->mla) {
      // Multi-head latent attention (megatron/core/transformer/multi_latent_attention.py).
      f.add("--multi-latent-attention");
      if (t->mla->qLoraRank > 0) f.add("--q-lora-rank", std::to_string(t->mla->qLoraRank));
      f.add("--kv-lora-rank", std::to_string(t->mla->kvLoraRank));
      f.add("--qk-head-dim", std::to_string(t->mla->qkNopeHeadDim));
      f.add("--qk-pos-emb-head-dim", std::to_string(t->mla->qkRopeHeadDim));
      f.add("--v-head-dim", std::to_string(t->mla->vHeadDim));
    } else {
      if (t->kvHeadsOrHeads() != t->heads) {
        f.add("--group-query-attention");
        f.add("--num-query-groups", std::to_string(t->kvHeadsOrHeads()));
      }
      // A head size apart from hidden / heads (Qwen3, GPT-OSS): Megatron's kv_channels.
      if (t->headDim > 0 && t->headDim * t->heads != t->hidden) f.add("--kv-channels", std::to_string(t->headDim));
    }
    f.add("--seq-length", std::to_string(t->seq));
    f.add("--max-position-embeddings", std::to_string(t->seq));
    if (t->mlp == MlpKind::SwiGlu) f.add("--swiglu");
    f.add("--attention-backend", std::string(attentionBackendName(c.parallel.attentionBackend)));
    addMegatronWindowFlags(plan, f, hybrid);
    addMegatronMoeFlags(plan, f, hybrid);
  } else {
    // megatron/training/arguments.py (validate_args) requires the first three and asserts a
    // sequence length; a model of measured times does not know them.
    f.missing = {"--hidden-size", "--num-attention-heads", "--max-position-embeddings", "--seq-length"};
    f.notes.emplace_back(
        "MISSING: the model has measured times, not a transformer shape, so --hidden-size, "
        "--num-attention-heads and --max-position-embeddings (required by Megatron's argument check) and "
        "--seq-length are not written: add them for the model you measured");
  }
}

// The block's architecture (BlockArchitecture) as Megatron's arguments build it: the norm, the
// position embedding and RoPE's base, biases, query/key norms, attention sinks (GPT-OSS's learned
// softmax offset), and no dropout where the model trains without (Llama). A field the model leaves
// out is inferred from the MLP, as the families that use each MLP build it, and said so.
Status addMegatronArchitectureFlags(const Plan& plan, MegatronFlags& f) {
  const TransformerShape* t = decoderShape(plan);
  if (!t) return {};
  const BlockArchitecture& a = t->architecture;
  const bool llamaLike = t->mlp == MlpKind::SwiGlu;
  std::vector<std::string> inferred;
  const NormKind norm = a.norm.value_or(llamaLike ? NormKind::RmsNorm : NormKind::LayerNorm);
  if (!a.norm) inferred.emplace_back(norm == NormKind::RmsNorm ? "RMSNorm" : "LayerNorm");
  const PositionKind position = a.position.value_or(llamaLike ? PositionKind::Rope : PositionKind::Learned);
  if (!a.position) inferred.emplace_back(position == PositionKind::Rope ? "rotary positions" : "learned positions");
  const bool bias = a.bias.value_or(!llamaLike);
  if (!a.bias) inferred.emplace_back(bias ? "linear biases" : "no linear biases");
  f.add("--normalization", std::string(norm == NormKind::RmsNorm ? "RMSNorm" : "LayerNorm"));
  static constexpr std::array<const char*, 4> kPositions{"learned_absolute", "rope", "yarn", "none"};
  f.add("--position-embedding-type", std::string(kPositions[static_cast<std::size_t>(position)]));
  if (a.rotaryBase) f.add("--rotary-base", std::to_string(*a.rotaryBase));
  if (!bias) f.add("--disable-bias-linear");
  if (a.qkvBias) f.add("--add-qkv-bias");
  if (a.qkNorm) f.add("--qk-layernorm");
  if (a.attentionSinks) f.add("--softmax-type", std::string("learnable"));
  if (!t->dropout) {
    f.add("--attention-dropout", std::string("0.0"));
    f.add("--hidden-dropout", std::string("0.0"));
  }
  if (!inferred.empty()) {
    std::string list;
    for (const std::string& i : inferred) list += (list.empty() ? "" : ", ") + i;
    f.notes.push_back("the model does not name its norm, positions or biases: " + list + " inferred from its " +
                      (llamaLike ? "SwiGLU MLP (Llama's)" : "GELU MLP (GPT's)") +
                      " (set norm, position_embedding, bias in the model's transformer shape)");
  }
  // Megatron-Core builds biased expert MLPs only without expert tensor parallelism
  // (transformer_config.py __post_init__: "Bias in Moe is only supported when ETP==1").
  if (bias && moeShape(plan) && plan.config.parallel.expertTensorOrTensor() > 1) {
    return Error{
        "the model's linear layers have biases, which Megatron-Core builds in MoE layers only with expert "
        "tensor parallelism 1; this plan splits each expert over ETP = " +
        std::to_string(plan.config.parallel.expertTensorOrTensor()) + " (re-plan with --etp 1)"};
  }
  // Megatron's multi-token prediction needs rotary or no positions (arguments.py validate_args).
  const bool mtp = std::any_of(plan.model.components.front().layers.begin(), plan.model.components.front().layers.end(),
                               [](const Layer& l) { return roleOf(l) == LayerRole::Mtp; });
  if (mtp && position != PositionKind::Rope && position != PositionKind::None) {
    return Error{std::string("Megatron-LM runs multi-token prediction with rotary or no position embeddings only; the "
                             "model's positions are ") +
                 (position == PositionKind::Yarn ? "yarn" : "learned") +
                 R"( (expected "position_embedding": "rope" or "none" in its transformer shape))"};
  }
  return {};
}

// Megatron's interleaved schedules' placement and microbatch groups (GPTModel and HybridModel).
Status checkMegatronPlacement(const Plan& plan) {
  const PlanConfig& c = plan.config;
  const int p = c.devices;
  const int v = static_cast<int>(plan.virtualStages.size()) / std::max(1, p);
  if (!loopPlacement(plan)) {
    return Error{
        "Megatron-LM places virtual stage id on pipeline rank id mod P (index = virtual rank * P + "
        "pipeline rank); this plan places its stages otherwise"};
  }
  if (v > 1 && (c.microbatches < p || c.microbatches % p != 0)) {
    return Error{"Megatron-LM's interleaved schedule runs microbatches in groups of P = " + std::to_string(p) +
                 " (microbatch_group_size_per_vp_stage); " + std::to_string(c.microbatches) +
                 " microbatches leave a partial group (expected a multiple of " + std::to_string(p) + ")"};
  }
  return {};
}

// HybridModel's symbols of one transformer shape: attention (* or + for MLA), then MLP (- or E).
std::string hybridBlockSymbols(const TransformerShape& t) {
  return std::string(1, t.mla ? '+' : '*') + (t.isMoe() ? 'E' : '-');
}

// --hybrid-layer-pattern: one segment per virtual stage (by id: virtual rank · P + pipeline rank),
// each decoder layer two symbols; the MTP depths after `/`. HybridModel builds the embedding on
// the first segment's rank and the output layer, loss and MTP on the last one's
// (hybrid_model.py: pre_process, post_process, mtp_on_this_rank).
Expected<HybridPattern> hybridPatternOf(const Plan& plan) {
  const auto& layers = plan.model.components.front().layers;
  HybridPattern pattern;
  pattern.segments.resize(plan.virtualStages.size());
  const int lastStage = static_cast<int>(plan.virtualStages.size()) - 1;
  for (const VirtualStage& vs : plan.virtualStages) {
    for (int l = std::max(0, vs.firstLayer); l <= vs.lastLayer && l < static_cast<int>(layers.size()); ++l) {
      const Layer& layer = layers[static_cast<std::size_t>(l)];
      const LayerRole role = roleOf(layer);
      std::string& segment = pattern.segments[static_cast<std::size_t>(vs.id)];
      if (role == LayerRole::Decoder) {
        // A layer of measured times is a dense attention + MLP block as far as Megatron knows.
        segment += layer.transformer ? hybridBlockSymbols(*layer.transformer) : std::string("*-");
      } else if (role == LayerRole::AttentionHalf) {
        segment += hybridBlockSymbols(*layer.transformer).front();
      } else if (role == LayerRole::MlpHalf) {
        segment += hybridBlockSymbols(*layer.transformer).back();
      } else if (role == LayerRole::Mtp) {
        if (vs.id != lastStage) {
          return Error{"layer " + std::to_string(l) + " '" + excerpt(layer.name) +
                       "': HybridModel builds multi-token "
                       "prediction on the last pipeline stage with the loss (mtp_on_this_rank); this plan runs it on "
                       "stage " +
                       std::to_string(vs.id) + " of " + std::to_string(lastStage + 1) +
                       " (export --megatron-model gpt, whose layout places it, or plan it on the last stage)"};
        }
        const std::string depth = hybridBlockSymbols(*layer.transformer);
        if (pattern.mtpDepths > 0 && depth != pattern.mtp) {
          return Error{"layer " + std::to_string(l) + " '" + excerpt(layer.name) +
                       "': HybridModel repeats one MTP "
                       "pattern per depth ('" +
                       pattern.mtp + "'); this MTP layer is '" + depth + "'"};
        }
        pattern.mtp = depth;
        pattern.mtpDepths += static_cast<int>(layer.transformer->mtpLayers);
      }
    }
  }
  std::string all;
  for (const std::string& segment : pattern.segments) all += segment;
  if (all.find('*') != std::string::npos && all.find('+') != std::string::npos) {
    return Error{
        "the model mixes multi-head latent attention with standard attention, which HybridModel refuses "
        "in one pattern (\"Not supported to have both Attention and MLA/DSA in one model\"); export "
        "--megatron-model gpt"};
  }
  // What Megatron reads back must be what was written.
  PS_RETURN_IF_ERROR(parseHybridPattern(renderHybridPattern(pattern)));
  return pattern;
}

Status addHybridLayoutFlags(const Plan& plan, MegatronFlags& f, std::string& patternText) {
  PS_RETURN_IF_ERROR(checkMegatronPlacement(plan));
  PS_ASSIGN_OR_RETURN(auto pattern, hybridPatternOf(plan));
  patternText = renderHybridPattern(pattern);
  f.add("--hybrid-layer-pattern", patternText);
  f.add("--spec", std::string("megatron.core.models.hybrid.hybrid_layer_specs"));
  f.args.emplace_back("hybrid_stack_spec");
  return {};
}

// ZeRO-2/3 as Megatron runs them today: Megatron-FSDP (megatron/training/arguments.py validate_args:
// the fsdp_dtensor checkpoint format is required, v1 runs beside the distributed optimizer, and
// CUDA_DEVICE_MAX_CONNECTIONS must not be 1). ZeRO-2 shards optimizer and gradients
// (optim_grads), ZeRO-3 the parameters too (optim_grads_params).
void addMegatronFsdpFlags(const Plan& plan, MegatronFlags& f) {
  const Parallelism& par = plan.config.parallel;
  f.add("--use-megatron-fsdp");
  f.add("--data-parallel-sharding-strategy", std::string(par.zeroStage >= 3 ? "optim_grads_params" : "optim_grads"));
  f.add("--ckpt-format", std::string("fsdp_dtensor"));
  f.add("--use-distributed-optimizer");
}

// The environment Megatron's argument check asks for: CUDA_DEVICE_MAX_CONNECTIONS=1 for tensor or
// context parallelism on Hopper and before (megatron/training/arguments.py validate_args), which
// Megatron-FSDP refuses (more than 1), as does the Zero Bubble fork's runtime with p2p overlap (at
// least 8, zbpp_utils.py).
std::string megatronEnvironment(const PlanConfig& c, bool fork) {
  const Parallelism& par = c.parallel;
  if (fork) return "CUDA_DEVICE_MAX_CONNECTIONS=8 (the Zero Bubble fork's runtime overlaps p2p: at least 8)";
  if (par.zeroStage >= 2 && par.data > 1) return "CUDA_DEVICE_MAX_CONNECTIONS=8 (Megatron-FSDP refuses 1)";
  if ((par.tensor > 1 || par.context > 1) && !par.moeA2aOverlap) {
    return "CUDA_DEVICE_MAX_CONNECTIONS=1 (tensor or context parallelism, as Megatron's argument check requires)";
  }
  return {};
}

// Flags the Zero Bubble fork's arguments.py (sail-sg/zero-bubble-pipeline-parallelism 39f2c186a2,
// an older Megatron-LM) does not have. A flag that only tunes how a setting runs is left out with a
// note (the fork runs its own way); one whose setting the fork cannot build is refused.
struct ForkMissingFlag {
  std::string_view flag;
  bool refuse;
  std::string_view what;
};
constexpr std::array<ForkMissingFlag, 27> kForkMissingFlags{{
    {"--attention-backend", false, "the fork picks its attention kernel itself"},
    {"--grad-reduce-in-bf16", false, "the fork reduces gradients in fp32"},
    {"--moe-shared-expert-overlap", false, "the fork does not overlap shared experts"},
    {"--overlap-moe-expert-parallel-comm", false, "the fork does not overlap the expert all-to-all"},
    {"--recompute-modules", false, "the fork's selective recomputation covers the attention core only"},
    {"--fp8-recipe", false, "the fork's FP8 is Transformer Engine's delayed scaling"},
    {"--cp-comm-type", true, "the fork's context parallelism is a p2p ring only"},
    {"--hierarchical-context-parallel-sizes", true, "the fork's context parallelism is a p2p ring only"},
    {"--fp4-format", true, "the fork has no FP4"},
    {"--fp4-recipe", true, "the fork has no FP4"},
    {"--expert-tensor-parallel-size", true, "the fork splits experts over TP like the dense layers"},
    {"--moe-ffn-hidden-size", true, "the fork sizes experts with --ffn-hidden-size"},
    {"--moe-layer-freq", true, "every layer of the fork's MoE models is MoE"},
    {"--moe-shared-expert-intermediate-size", true, "the fork has no shared experts"},
    {"--moe-router-num-groups", true, "the fork has no group-limited routing"},
    {"--moe-router-group-topk", true, "the fork has no group-limited routing"},
    {"--moe-flex-dispatcher-backend", true, "the fork has no flex token dispatcher"},
    {"--moe-flex-dispatcher-num-sms", true, "the fork has no flex token dispatcher"},
    {"--mtp-num-layers", true, "the fork has no multi-token prediction"},
    {"--multi-latent-attention", true, "the fork has no multi-head latent attention"},
    {"--window-size", true, "the fork has no sliding-window attention"},
    {"--window-attn-skip-freq", true, "the fork has no sliding-window attention"},
    {"--softmax-type", true, "the fork has no attention sinks"},
    {"--num-virtual-stages-per-pipeline-rank", true, "the fork sizes virtual stages in layers"},
    {"--pipeline-model-parallel-layout", true, "the fork splits layers evenly"},
    {"--use-megatron-fsdp", true, "the fork has no Megatron-FSDP"},
    {"--ckpt-format", true, "the fork has no Megatron-FSDP"},
}};

// The fork's form of the flags: what it lacks is left out (with a note) or refused; a MoE model
// whose every layer is MoE sizes its experts with --ffn-hidden-size, as the fork does.
Status keepForkFlags(const Plan& plan, MegatronFlags& f) {
  const TransformerShape* moe = moeShape(plan);
  std::vector<std::string> kept;
  std::vector<std::string> omitted;
  for (std::size_t i = 0; i < f.args.size(); ++i) {
    const std::string& flag = f.args[i];
    std::size_t end = i + 1;
    while (end < f.args.size() && f.args[end].rfind("--", 0) != 0) ++end;
    const auto* missing = std::find_if(kForkMissingFlags.begin(), kForkMissingFlags.end(),
                                       [&](const ForkMissingFlag& m) { return m.flag == flag; });
    if (flag == "--moe-ffn-hidden-size" && moe && !denseDecoderShape(plan)) {
      // --ffn-hidden-size was the dense size; with no dense layers it is the experts'.
      const auto ffn = std::find(kept.begin(), kept.end(), "--ffn-hidden-size");
      if (ffn != kept.end() && ffn + 1 != kept.end()) *(ffn + 1) = std::to_string(moe->expertFfnOrDefault());
      i = end - 1;
      continue;
    }
    if (missing == kForkMissingFlags.end()) {
      kept.insert(kept.end(), f.args.begin() + static_cast<std::ptrdiff_t>(i),
                  f.args.begin() + static_cast<std::ptrdiff_t>(end));
    } else if (missing->refuse) {
      return Error{"the Zero Bubble fork (an older Megatron-LM) has no " + flag + ": " + std::string(missing->what) +
                   ", and this plan needs it (plan 1f1b or interleaved-1f1b for mainline Megatron-LM, or export "
                   "--format torchtitan)"};
    } else {
      omitted.push_back(flag + " (" + std::string(missing->what) + ")");
    }
    i = end - 1;
  }
  const auto dispatcher = std::find(kept.begin(), kept.end(), "--moe-token-dispatcher-type");
  if (dispatcher != kept.end() && dispatcher + 1 != kept.end() && *(dispatcher + 1) == "flex") {
    return Error{
        "the Zero Bubble fork has no flex token dispatcher (its --moe-token-dispatcher-type takes allgather "
        "or alltoall); re-plan without the flex dispatcher"};
  }
  f.args = std::move(kept);
  for (const std::string& o : omitted) f.notes.push_back("left out for the fork: " + o);
  return {};
}

// The Zero Bubble fork is an older Megatron-LM: no layout flag, decoder layers split evenly.
Status addZeroBubbleFlags(const Plan& plan, const std::vector<StageLayers>& stages, int decoders, bool even,
                          bool zbFork, MegatronFlags& f) {
  const PlanConfig& c = plan.config;
  const std::string& schedule = c.schedule;
  const int p = c.devices;
  const int v = static_cast<int>(plan.virtualStages.size()) / std::max(1, p);
  if (!even) return Error{forkUnevenReason(plan, stages, decoders, p * v)};
  if (tiedEmbedding(plan)) {
    return Error{
        "the Zero Bubble fork requires untied embeddings (zbpp_utils asserts "
        "--untie-embeddings-and-output-weights); this model ties its embedding and lm_head"};
  }
  if (c.parallel.zeroStage == 1 && c.parallel.overlapGradReduce) {
    return Error{
        "the Zero Bubble fork does not overlap gradient reduction with the distributed optimizer "
        "(zbpp_utils asserts not --overlap-grad-reduce); re-plan with --no-overlap-grad-reduce"};
  }
  // The fork's runtime (its examples pass it; without it validate_args turns p2p overlap off and
  // then refuses the pre-communication optimisation it defaults to).
  f.add("--enable-zb-runtime");
  if (zbFork) {
    if (v != 1 || !loopPlacement(plan)) {
      return Error{"the Zero Bubble fork's ZB schedules place one stage per pipeline rank; this " + schedule +
                   " plan has " + std::to_string(v) + " per device"};
    }
    if (schedule == "seq1f1b") {
      f.add("--num-seq-splits", std::to_string(c.seqSplits));
      if (c.seqSplits > 1 && c.seqSplit != "even") {
        f.notes.push_back("Seq1F1B: the fork splits each sequence into " + std::to_string(c.seqSplits) +
                          " chunks of equal tokens; this plan's chunks are balanced by compute (plan with "
                          "--seq-split even to time what the fork runs)");
      }
    } else {
      f.add("--enable-zero-bubble");
      f.add("--zero-bubble-max-pending-backward", std::to_string(maxPendingBackward(plan)));
      f.notes.push_back(
          "ZB schedule: the fork's scheduler orders F/B/W itself from profiled times under a memory limit "
          "of " +
          std::to_string(maxPendingBackward(plan)) +
          " microbatches' activations (the most this plan holds on one device)");
    }
  } else {
    if (!vPlacement(plan)) {
      return Error{
          "the Zero Bubble fork's V schedules place stage s < P on rank s and stage s >= P on rank 2P-1-s "
          "(two chunks per rank); this " +
          schedule + " plan places its stages otherwise"};
    }
    if (decoders % p != 0 || (decoders / p) % 2 != 0) {
      return Error{
          "the Zero Bubble fork's V schedules need an even number of decoder layers per pipeline rank "
          "(zbpp_utils asserts); " +
          std::to_string(decoders) + " layers over " + std::to_string(p) + " ranks"};
    }
    if (schedule == "v-1f1b") {
      f.add("--enable-1f1b-v");
    } else {
      f.add("--enable-zero-bubble");
      f.add("--zero-bubble-v-schedule");
    }
    if (schedule == "v-half") f.add("--zero-bubble-v-schedule-mem-setup", std::string("half"));
    if (schedule == "v-min") f.add("--zero-bubble-v-schedule-mem-setup", std::string("min"));
  }
  if (c.optimizerSync == "post-validation") {
    f.add("--enable-optimizer-post-validation");
    f.notes.emplace_back("optimizer post-validation: the fork requires --fp16 with it");
  }
  return {};
}

// Megatron-LM's own 1F1B and interleaved 1F1B: its placement, microbatch groups, and the
// layout of an uneven partition.
Status addInterleavingFlags(const Plan& plan, const std::vector<StageLayers>& stages, bool even, MegatronFlags& f) {
  const int p = plan.config.devices;
  const int v = static_cast<int>(plan.virtualStages.size()) / std::max(1, p);
  PS_RETURN_IF_ERROR(checkMegatronPlacement(plan));
  if (!even) {
    f.layout = layoutString(stages);
    f.add("--pipeline-model-parallel-layout", f.layout);
  } else if (v > 1) {
    f.add("--num-virtual-stages-per-pipeline-rank", std::to_string(v));
  }
  return {};
}

// What each form of the arguments targets, named in the file's first lines (docs/frameworks.md).
constexpr const char* kHybridTarget =
    "# HybridModel (pretrain_hybrid.py): Megatron-LM since 10cd30c0b2 (2026-07-27), checked against d98e8a64dd; "
    "--megatron-model gpt writes GPTModel's flags for older Megatron-LM";
constexpr const char* kGptTarget =
    "# GPTModel (pretrain_gpt.py): Megatron-LM before HybridModel replaced it (10cd30c0b2, 2026-07-27), checked "
    "against d98e8a64dd, where GPTModel is deprecated";
constexpr const char* kForkTarget =
    "# zero-bubble flags are those of the Zero Bubble fork (sail-sg/zero-bubble-pipeline-parallelism, checked "
    "against 39f2c186a2; pretrain_gpt.py)";

// The arguments file: what it is for, the notes, one flag (and its value) per line.
std::string megatronText(const PlanConfig& c, const MegatronFlags& f, bool zeroBubble, MegatronModel model) {
  const std::vector<std::string>& args = f.args;
  std::ostringstream text;
  text << "# Megatron-LM arguments for the " << comment(c.schedule)
       << " plan (pipestudio-cli export --format megatron)\n"
       << "# T=" << c.parallel.tensor << " C=" << c.parallel.context << " P=" << c.devices << " D=" << c.parallel.data
       << ": launch on " << c.totalGpus() << " GPUs (data parallelism is WORLD_SIZE / (T*C*P))\n";
  text << (zeroBubble ? kForkTarget : model == MegatronModel::Hybrid ? kHybridTarget : kGptTarget) << '\n';
  if (!f.layout.empty())
    text << "# uneven partition: stage layer counts as the plan's, index = virtual rank * P + pipeline rank\n";
  if (model == MegatronModel::Hybrid && !zeroBubble)
    text << "# each decoder layer is two pattern layers (attention, then MLP or MoE); segment index = virtual rank * "
            "P + pipeline rank\n";
  if (const std::string env = megatronEnvironment(c, zeroBubble); !env.empty())
    text << "# environment: " << comment(env) << '\n';
  for (const std::string& n : f.notes) text << "# " << comment(n) << '\n';
  // One shell command line: every word as the shell reads it back (a layout's `(`, `|`, `*`).
  for (std::size_t i = 0; i < args.size(); ++i) {
    text << literal(SourceContext::ShellWord, args[i]);
    // A flag's values: every word up to the next flag (--recompute-modules takes several).
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      text << ' ' << literal(SourceContext::ShellWord, args[++i]);
    }
    text << (i + 1 < args.size() ? " \\\n" : "\n");
  }
  return text.str();
}

}  // namespace

Expected<std::vector<std::string>> parseMegatronLayout(std::string_view layout) {
  // Commas are cosmetic; `(...)*n` then `x*n` unroll (one level, as Megatron's regexes do).
  std::string s;
  for (char c : layout) {
    if (c != ',') s += c;
  }
  const auto readCount = [](const std::string& text, std::size_t& k, std::size_t& n) -> bool {
    const std::size_t start = k;
    n = 0;
    while (k < text.size() && text[k] >= '0' && text[k] <= '9') {
      n = n * 10 + static_cast<std::size_t>(text[k] - '0');
      if (n > 100000) return false;
      ++k;
    }
    return k > start;
  };
  std::string groups;
  for (std::size_t i = 0; i < s.size();) {
    if (s[i] == '(') {
      const std::size_t close = s.find(')', i);
      if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != '*') {
        return Error{"layout '" + std::string(layout) + "': '(' at " + std::to_string(i) + " needs ')*n'"};
      }
      std::size_t k = close + 2, n = 0;
      if (!readCount(s, k, n)) return Error{"layout '" + std::string(layout) + "': repeat count expected after ')*'"};
      const std::string body = s.substr(i + 1, close - i - 1);
      if (body.size() * n > 1000000) return Error{"layout '" + std::string(layout) + "': expands too far"};
      for (std::size_t r = 0; r < n; ++r) groups += body;
      i = k;
    } else {
      groups += s[i++];
    }
  }
  std::string flat;
  for (std::size_t i = 0; i < groups.size();) {
    if (i + 1 < groups.size() && groups[i + 1] == '*') {
      std::size_t k = i + 2, n = 0;
      if (!readCount(groups, k, n))
        return Error{"layout '" + std::string(layout) + "': repeat count expected after '*'"};
      if (n > 1000000 || flat.size() + n > 10000000)
        return Error{"layout '" + std::string(layout) + "': expands too far"};
      flat.append(n, groups[i]);
      i = k;
    } else {
      flat += groups[i++];
    }
  }
  std::vector<std::string> stages(1);
  for (char c : flat) {
    if (c == '|') {
      stages.emplace_back();
    } else if (c == 'E' || c == 't' || c == 'L' || c == 'm') {
      stages.back() += c;
    } else {
      return Error{"layout '" + std::string(layout) + "': invalid layer character '" + std::string(1, c) +
                   "' (known: E embedding, t decoder layer, m MTP layer, L loss)"};
    }
  }
  return stages;
}

std::optional<MegatronModel> megatronModelFromName(std::string_view name) {
  if (name == "hybrid") return MegatronModel::Hybrid;
  if (name == "gpt") return MegatronModel::Gpt;
  return std::nullopt;
}

std::string_view megatronModelName(MegatronModel model) { return model == MegatronModel::Hybrid ? "hybrid" : "gpt"; }

namespace {

// Activation offloading and recomputation.
void addMegatronMemoryFlags(const Parallelism& par, MegatronFlags& f) {
  // Activation offloading as Megatron-Core spells it (TransformerConfig fields as flags).
  if (par.cpuOffloadingNumLayers > 0) {
    f.add("--cpu-offloading-num-layers", std::to_string(par.cpuOffloadingNumLayers));
  }
  if (par.offloadModules != 0) {
    f.add("--fine-grained-activation-offloading");
    f.add("--offload-modules");
    std::stringstream modules(offloadModulesName(par.offloadModules));
    for (std::string name; std::getline(modules, name, ',');) f.args.push_back(name);
    if (par.activationOffloadFraction < 1.0) {
      std::ostringstream fraction;
      fraction << par.activationOffloadFraction;
      f.add("--activation-offload-fraction", fraction.str());
    }
    if (par.deltaOffloadBytesAcrossPpRanks > 0) {
      f.add("--delta-offload-bytes-across-pp-ranks", std::to_string(par.deltaOffloadBytesAcrossPpRanks));
    }
  }
  if (par.recompute == Recompute::Selective) {
    f.add("--recompute-granularity", std::string("selective"));
    // Megatron's --recompute-modules takes the names as separate words (its default is core_attn).
    f.add("--recompute-modules");
    std::stringstream modules(recomputeModulesName(par.selectiveModules()));
    for (std::string name; std::getline(modules, name, ',');) f.args.push_back(name);
  }
  if (par.recompute == Recompute::Full) {
    f.add("--recompute-granularity", std::string("full"));
    f.add("--recompute-method", std::string("uniform"));
    f.add("--recompute-num-layers", std::string("1"));
  }
}

// The data-parallel side: the distributed optimizer or Megatron-FSDP, the overlaps and the
// gradients' format.
void addMegatronDataParallelFlags(const Plan& plan, bool fork, MegatronFlags& f) {
  const Parallelism& par = plan.config.parallel;
  if (par.zeroStage >= 2 && par.data > 1) {
    addMegatronFsdpFlags(plan, f);  // never the fork: megatronRuns refused it
  } else if (par.zeroStage >= 1) {
    f.add("--use-distributed-optimizer");
  }
  if (par.overlapGradReduce && par.data > 1 && !fork) f.add("--overlap-grad-reduce");
  // The recipe's other overlaps and the gradients' format (issue 25's settings). Megatron asserts
  // --overlap-param-gather only beside --overlap-grad-reduce.
  if (par.zeroStage >= 1 && par.overlapParamGather && par.overlapGradReduce && par.data > 1 && !fork) {
    f.add("--overlap-param-gather");
  }
  if (par.tpCommOverlap && par.tensor > 1 && par.sequenceParallel) f.add("--tp-comm-overlap");
  if (!par.gradReduceInFp32 && par.data > 1) f.add("--grad-reduce-in-bf16");
}

}  // namespace

Expected<MegatronExport> megatronExport(const Plan& plan, const MegatronOptions& options) {
  const PlanConfig& c = plan.config;
  const std::string& schedule = c.schedule;
  const int p = c.devices;
  const int v = static_cast<int>(plan.virtualStages.size()) / std::max(1, p);
  if (schedule == "pipeoffload" || c.offloadRatio > 0) {
    return Error{"the " + schedule +
                 " plan offloads activations, which the Zero Bubble fork runs with its own group-interleaved "
                 "order and offload pass (--enable-zb-runtime --interleave-group-size --cpu-offload "
                 "--offload-chunk-num): that order is not this plan's, so no arguments are written (plan "
                 "interleaved-1f1b without --offload-ratio for mainline Megatron-LM)"};
  }
  PS_RETURN_IF_ERROR(requireSingleBackbone(plan, "Megatron-LM"));
  PS_ASSIGN_OR_RETURN(auto stages, stageLayers(plan, "Megatron-LM"));
  const bool modelsEmbedding =
      std::any_of(stages.begin(), stages.end(), [](const StageLayers& s) { return s.embedding > 0; });
  MegatronFlags f;
  f.notes = placeFrameworkEnds(stages, "Megatron-LM");

  // The Zero Bubble fork's schedules: one stage per rank (its ZB schedules, and Seq1F1B with
  // --num-seq-splits, its seq1f1b.py) or one V per rank (ZB-V, and V-1F1B with --enable-1f1b-v,
  // its v1f1b.py).
  const bool zbFork = schedule == "zb-h1" || schedule == "zb-h2" || schedule == "zb-auto" || schedule == "seq1f1b";
  const bool zbV = schedule == "zb-v" || schedule == "v-half" || schedule == "v-min" || schedule == "v-1f1b";
  PS_RETURN_IF_ERROR(megatronRuns(c, zbFork, zbV));
  const int decoders = decoderCount(stages);
  const auto& front = stages.front();
  const auto& back = stages.back();
  const bool endsRight = front.embedding > 0 && back.head > 0;
  const bool even = endsRight && decoders % std::max(1, p * v) == 0 &&
                    std::all_of(stages.begin(), stages.end(),
                                [&](const StageLayers& s) { return s.decoder == decoders / std::max(1, p * v); });

  const bool fork = zbFork || zbV;
  const MegatronModel model = fork ? MegatronModel::Gpt : options.model;
  const bool hybrid = model == MegatronModel::Hybrid;
  if (!hybrid && hasBlockHalves(plan)) {
    return Error{"the plan splits its blocks into their attention and MLP halves (partition " + excerpt(c.partition) +
                 "), which only HybridModel's --hybrid-layer-pattern can place; GPTModel builds whole blocks " +
                 (fork ? std::string("(the Zero Bubble fork's too: plan a whole-block partition such as balanced)")
                       : std::string("(export with --megatron-model hybrid, or plan a whole-block partition such as "
                                     "balanced)"))};
  }
  addMegatronModelFlags(plan, decoders, hybrid, f);
  PS_RETURN_IF_ERROR(addMegatronArchitectureFlags(plan, f));
  if (!tiedEmbedding(plan) && (modelsEmbedding || fork)) f.add("--untie-embeddings-and-output-weights");
  std::string pattern;
  PS_RETURN_IF_ERROR(fork     ? addZeroBubbleFlags(plan, stages, decoders, even, zbFork, f)
                     : hybrid ? addHybridLayoutFlags(plan, f, pattern)
                              : addInterleavingFlags(plan, stages, even, f));
  addMegatronPrecisionFlags(c.precision, f);
  // Low-precision weights only (Megatron asserts the distributed optimizer or FSDP for it).
  if (c.parallel.lowPrecisionParamsFor(c.precision) && c.parallel.zeroStage >= 1) {
    f.add(c.precision == Precision::Nvfp4 ? "--fp4-param-gather" : "--fp8-param-gather");
  }
  addMegatronMemoryFlags(c.parallel, f);
  addMegatronCudaGraphFlags(c.parallel, f);
  addMegatronDataParallelFlags(plan, fork, f);
  if (fork) {
    PS_RETURN_IF_ERROR(keepForkFlags(plan, f));
  }

  std::string text = megatronText(c, f, fork, model);
  MegatronExport out;
  out.arguments = std::move(f.args);
  out.layout = std::move(f.layout);
  out.hybridPattern = std::move(pattern);
  out.model = model;
  out.text = std::move(text);
  out.missingArguments = std::move(f.missing);
  return out;
}

namespace {

// --- torchtitan ---

// What both of torchtitan's configuration formats say about a plan.
struct TitanSettings {
  bool vStyle = false;  ///< ZBVZeroBubble's V placement, else looped
  std::int64_t microBatchSize = 1;
  std::int64_t seq = 0;  ///< 0: the model has measured times (no sequence length)
  int dataReplicate = 1;
  int dataShard = 1;
  std::string reshardAfterForward;  ///< empty: no FSDP
  int expertTensor = 1;             ///< TOML era: expert_tensor_parallel_degree
  std::vector<std::string> notes;
};

// Expert parallelism as torchtitan builds it: its ranks come out of the FSDP (dp_shard), CP
// and TP ranks, and what is left of them shards the experts (efsdp = dp_shard·cp·tp / (etp·ep),
// a whole number). Our costs run EP inside data parallelism and split every expert over TP
// (Megatron's expert TP = TP): the TOML era's expert_tensor_parallel_degree = tp builds that;
// torchtitan main has no expert TP (pytorch/torchtitan#3167, Apr 2026).
Status checkExperts(const Plan& plan, TorchtitanFormat format, TitanSettings& s) {
  const Parallelism& par = plan.config.parallel;
  const TransformerShape* moe = moeShape(plan);
  if (!moe) return {};
  const int T = par.tensor, C = par.context, E = par.expert;
  if (format == TorchtitanFormat::Python && T > 1) {
    return Error{
        "torchtitan main no longer splits experts over tensor parallelism (expert_tensor_parallel_degree was "
        "removed, pytorch/torchtitan#3167: expert parallelism borrows the TP ranks instead), while this plan's "
        "costs split each expert's MLP over TP = " +
        std::to_string(T) +
        " as Megatron-LM does; re-plan with --tp 1 (EP over the data-parallel ranks), or export "
        "--torchtitan-config toml for torchtitan v0.2.2 and earlier (expert_tensor_parallel_degree = " +
        std::to_string(T) + ")"};
  }
  if (E <= 1) return {};
  s.expertTensor = format == TorchtitanFormat::Toml ? T : 1;
  const auto expertFsdp = [&](int shard) {
    return std::to_string(shard) + "·" + std::to_string(C) + "·" + std::to_string(T) + " / (" +
           std::to_string(s.expertTensor) + "·" + std::to_string(E) + ")";
  };
  if ((s.dataShard * C * T) % (s.expertTensor * E) == 0) return {};
  std::string why =
      "torchtitan takes the expert-parallel ranks from FSDP, CP and TP: its expert FSDP degree "
      "data_parallel_shard_degree·cp·tp / (" +
      std::string(format == TorchtitanFormat::Toml ? "expert_tensor_parallel_degree·" : "") +
      "expert_parallel_degree) = " + expertFsdp(s.dataShard) + " is not a whole number";
  if (s.dataShard == 1 && par.data > 1 && (par.data * C * T) % (s.expertTensor * E) == 0) {
    why += "; this plan replicates its " + std::to_string(par.data) + " data-parallel ranks (ZeRO-" +
           std::to_string(par.zeroStage) + ": data_parallel_replicate_degree " + std::to_string(par.data) +
           "), so no FSDP ranks are left for EP " + std::to_string(E) +
           ". Re-plan with --zero 2 or --zero 3 (FSDP over the " + std::to_string(par.data) +
           " ranks: " + expertFsdp(par.data) + " = " + std::to_string(par.data * C * T / (s.expertTensor * E)) + ")";
  } else {
    why += " (expected --ep to divide the FSDP·CP·TP ranks)";
  }
  return Error{why};
}

Expected<TitanSettings> titanSettings(const Plan& plan, TorchtitanFormat format) {
  const PlanConfig& c = plan.config;
  const int p = c.devices;
  PS_RETURN_IF_ERROR(requireSingleBackbone(plan, "torchtitan"));
  TitanSettings s;
  s.vStyle = vPlacement(plan) && !loopPlacement(plan);
  if (!loopPlacement(plan) && !s.vStyle) {
    return Error{
        "torchtitan places stage s on rank s mod P (looped schedules) or in a V (ZBVZeroBubble, DualPipeV: "
        "two stages per rank); this plan places its stages otherwise"};
  }
  if (static_cast<int>(plan.virtualStages.size()) % std::max(1, p) != 0) {
    return Error{"torchtitan needs the same number of stages on every rank (" +
                 std::to_string(plan.virtualStages.size()) + " stages over " + std::to_string(p) + " ranks)"};
  }
  if (c.parallel.zeroStage == 1 && c.parallel.data > 1) {
    return Error{
        "ZeRO-1 is not expressible in torchtitan: its data parallelism is DDP (replicate) or FSDP2 (shard: "
        "ZeRO-3, or ZeRO-2 with fsdp_reshard_after_forward = \"never\"); re-plan with --zero 0, 2 or 3"};
  }
  if (c.parallel.tensor > 1 && !c.parallel.sequenceParallel) {
    return Error{
        "torchtitan's tensor parallelism always runs sequence parallelism; this plan has it off (re-plan "
        "with --sequence-parallel)"};
  }
  s.microBatchSize = microBatchSize(plan);
  if (const TransformerShape* shape = decoderShape(plan)) s.seq = shape->seq;
  if (c.parallel.zeroStage <= 1) {  // ZeRO-1 with one replica shards nothing
    s.dataReplicate = c.parallel.data;
  } else {
    s.dataShard = c.parallel.data;
    // ZeRO-3 gathers per pass: FSDP reshards after every forward. A plan costed with FSDP windows
    // keeps its parameters gathered between the runtime's UNSHARD and RESHARD ("default" under PP).
    s.reshardAfterForward = c.parallel.zeroStage == 2 ? "never" : c.fsdpWindows ? "default" : "always";
    s.notes.push_back(
        "torchtitan runs a CSV schedule with _PipelineScheduleRuntime, which unshards each stage up to three "
        "stages ahead and reshards it after its window; " +
        std::string(
            c.parallel.zeroStage == 2
                ? "this plan's ZeRO-2 costs keep the parameters gathered, torchtitan gathers them once per window"
            : c.fsdpWindows ? "this plan's gathers follow its own UNSHARD/RESHARD windows, torchtitan's follow "
                              "that lowering of the compute order"
                            : "with reshard_after_forward every pass gathers, as this plan's ZeRO-3 costs do"));
  }
  PS_RETURN_IF_ERROR(checkExperts(plan, format, s));
  return s;
}

std::vector<std::vector<std::string>> titanModuleNames(std::vector<StageLayers>& stages, const std::string& head) {
  std::vector<std::vector<std::string>> out;
  for (const StageLayers& s : stages) {
    std::vector<std::string> fqns;
    if (s.embedding > 0) fqns.emplace_back("tok_embeddings");
    for (int k : s.decoderIndex) fqns.push_back("layers." + std::to_string(k));
    if (s.head > 0) {
      fqns.emplace_back("norm");
      fqns.push_back(head);
    }
    out.push_back(std::move(fqns));
  }
  return out;
}

Expected<std::string> renderToml(const Plan& plan, const TitanSettings& s, const TorchtitanExport& out,
                                 const std::string& csvPath) {
  const PlanConfig& c = plan.config;
  const auto csv = sourceText(SourceContext::TomlString, csvPath);
  if (!csv) return csv.error().withPrefix("the schedule CSV's path ");
  std::ostringstream t;
  t << "# torchtitan settings for the " << comment(c.schedule) << " plan (pipestudio-cli export --format torchtitan "
    << "--torchtitan-config toml)\n"
    << "# TOML job config of torchtitan v0.2.2 and earlier (torchtitan main takes Python configurations)\n"
    << "# the schedule is the CSV beside this file; pipeline_parallel_schedule picks the stage placement ("
    << (s.vStyle ? "V" : "looped") << ")\n";
  for (const std::string& n : s.notes) t << "# " << comment(n) << '\n';
  t << "[parallelism]\n"
    << "pipeline_parallel_degree = " << c.devices << '\n'
    << "pipeline_parallel_schedule = " << tomlString(s.vStyle ? "ZBVZeroBubble" : "PipelineScheduleMulti") << '\n'
    << "pipeline_parallel_schedule_csv = " << *csv << '\n'
    << "pipeline_parallel_microbatch_size = " << s.microBatchSize << '\n'
    << "module_fqns_per_model_part = [\n";
  for (std::size_t i = 0; i < out.moduleFqnsPerModelPart.size(); ++i) {
    t << "  [";
    const auto& part = out.moduleFqnsPerModelPart[i];
    for (std::size_t k = 0; k < part.size(); ++k) t << (k ? ", " : "") << tomlString(part[k]);
    t << "],  # stage " << i << " on rank " << plan.virtualStages[i].device << '\n';
  }
  t << "]\n"
    << "tensor_parallel_degree = " << c.parallel.tensor << '\n'
    << "context_parallel_degree = " << c.parallel.context << '\n'
    << "expert_parallel_degree = " << c.parallel.expert << '\n';
  if (s.expertTensor > 1) t << "expert_tensor_parallel_degree = " << s.expertTensor << '\n';
  t << "data_parallel_replicate_degree = " << s.dataReplicate << '\n'
    << "data_parallel_shard_degree = " << s.dataShard << '\n';
  if (!s.reshardAfterForward.empty()) t << "fsdp_reshard_after_forward = " << tomlString(s.reshardAfterForward) << '\n';
  t << "\n[training]\n"
    << "local_batch_size = " << s.microBatchSize * c.microbatches << "  # " << c.microbatches << " microbatches of "
    << s.microBatchSize << '\n'
    << "global_batch_size = " << globalBatch(plan) << '\n';
  if (s.seq > 0) t << "seq_len = " << s.seq << '\n';
  t << "\n[activation_checkpoint]\n";
  switch (c.parallel.recompute) {
    case Recompute::None:
      t << "mode = \"none\"\n";
      break;
    case Recompute::Selective:
      t << "mode = \"selective\"\nselective_ac_option = \"op\"\n";
      break;
    case Recompute::Full:
      t << "mode = \"full\"\n";
      break;
  }
  return t.str();
}

// Configuration functions torchtitan ships for the models we ship (torchtitan/models/*/config_registry.py
// at pytorch/torchtitan b5bcd76c66, August 2026).
std::string shippedBase(const ModelSpec& model) {
  std::string key;
  for (char ch : model.name) {
    if (std::isalnum(static_cast<unsigned char>(ch)))
      key += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  static const std::map<std::string, std::string> kShipped = {
      {"llama38b", "torchtitan.models.llama3.config_registry:llama3_8b"},
      {"llama370b", "torchtitan.models.llama3.config_registry:llama3_70b"},
      {"llama3405b", "torchtitan.models.llama3.config_registry:llama3_405b"},
      {"qwen314b", "torchtitan.models.qwen3.config_registry:qwen3_14b"},
      {"qwen332b", "torchtitan.models.qwen3.config_registry:qwen3_32b"},
      {"qwen330ba3b", "torchtitan.models.qwen3.config_registry:qwen3_30b_a3b"},
      {"gptoss20b", "torchtitan.models.gpt_oss.config_registry:gpt_oss_20b"},
      {"gptoss120b", "torchtitan.models.gpt_oss.config_registry:gpt_oss_120b"},
      {"deepseekv3", "torchtitan.models.deepseek_v3.config_registry:deepseek_v3_671b"},
  };
  const auto it = kShipped.find(key);
  return it == kShipped.end() ? std::string() : it->second;
}

// The Python file's docstring: what the file is and how to run it (names and paths escaped as a
// whole by the caller).
std::string pythonDocText(const Plan& plan, const TitanSettings& s, const std::string& module,
                          const std::string& csvName) {
  const PlanConfig& c = plan.config;
  const Parallelism& par = c.parallel;
  const std::int64_t gpus = c.totalGpus();
  std::ostringstream doc;
  doc << "torchtitan configuration for the " << c.schedule << " plan of " << plan.model.name
      << " (pipestudio-cli export --format torchtitan).\n\n"
      << "torchtitan selects a run with --module and --config (Python configurations, since pytorch/torchtitan\n"
      << "9810191b, Feb 2026). From the torchtitan repository root, with this file's folder on PYTHONPATH:\n\n"
      << "    PYTHONPATH=/path/to/this/folder NGPU=" << gpus << " MODULE=" << module
      << " CONFIG=pipestudio_plan ./run_train.sh\n\n"
      << "(T=" << par.tensor << " x C=" << par.context << " x P=" << c.devices << " x D=" << par.data << " = " << gpus
      << " GPUs; over several nodes,\ntorchrun -m torchtitan.train with the same --module and --config.)\n\n"
      << "The plan starts from BASE, a configuration function (\"module:function\") that gives the model,\n"
      << "tokenizer, data and optimizer; it sets the pipeline and its schedule (" << csvName
      << " beside this\nfile), the parallel degrees, the batch and activation checkpointing.\n";
  if (!s.notes.empty()) doc << '\n';
  for (const std::string& n : s.notes) doc << n << ".\n";
  return doc.str();
}

// The configuration function's training section (context length, tokens per step) and its
// activation checkpointing.
void writePythonTraining(std::ostream& t, const Plan& plan, const TitanSettings& s) {
  const PlanConfig& c = plan.config;
  const Parallelism& par = c.parallel;
  const std::int64_t accumulation = std::max<std::int64_t>(
      1, globalBatch(plan) / std::max<std::int64_t>(1, s.microBatchSize * c.microbatches * par.data));
  t << "\n    training = config.training\n";
  if (c.devices > 1) {
    // torchtitan main captures CUDA graphs by default (since f84224af0, #3559) and refuses them
    // under pipeline parallelism (Trainer.Config._validate_cuda_graphs).
    t << "    training.disable_cuda_graphs = True  # torchtitan's CUDA graphs do not run pipeline parallelism\n";
  }
  if (s.seq > 0) {
    t << "    training.max_context_length = " << s.seq << '\n'
      << "    training.num_tokens_per_microbatch_per_dp_rank = " << s.microBatchSize * s.seq << "  # "
      << s.microBatchSize << " sequence(s) of " << s.seq << " tokens\n";
  } else {
    t << "    # the model has measured times: the sequence length is the base configuration's\n"
      << "    training.num_tokens_per_microbatch_per_dp_rank = " << s.microBatchSize
      << " * training.max_context_length\n";
  }
  t << "    # global batch " << globalBatch(plan) << " sequences: " << c.microbatches << " microbatches x " << par.data
    << " data-parallel rank(s)"
    << (accumulation > 1 ? " x " + std::to_string(accumulation) + " accumulation steps" : "") << '\n'
    << "    training.num_tokens_per_train_step = training.num_tokens_per_microbatch_per_dp_rank * "
    << static_cast<std::int64_t>(c.microbatches) * par.data * accumulation << "\n\n";
  switch (par.recompute) {
    case Recompute::None:
      t << "    config.activation_checkpoint = None\n";
      break;
    case Recompute::Selective:
      t << "    config.activation_checkpoint = SelectiveAC.Config()\n";
      break;
    case Recompute::Full:
      t << "    config.activation_checkpoint = FullAC.Config()\n";
      break;
  }
}

std::string renderPython(const Plan& plan, const TitanSettings& s, const TorchtitanExport& out,
                         const TorchtitanOptions& options) {
  const PlanConfig& c = plan.config;
  const Parallelism& par = c.parallel;
  const std::string base = options.base.empty() ? shippedBase(plan.model) : options.base;
  const std::string csvName = std::filesystem::path(options.csvPath).filename().string();
  const std::string module = options.moduleName.empty() ? "plan" : options.moduleName;
  std::ostringstream t;
  t << R"(""")" << docstring(pythonDocText(plan, s, module, csvName)) << R"(""")" << '\n'
    << "import importlib\n"
    << "import os\n\n"
    << "from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC\n"
    << "from torchtitan.trainer import Trainer\n\n"
    << "BASE = os.environ.get(\"PIPESTUDIO_TORCHTITAN_BASE\", " << pyString(base) << ")\n"
    << "SCHEDULE_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), " << pyString(csvName) << ")\n\n\n"
    << "def pipestudio_plan() -> Trainer.Config:\n"
    << "    module, _, function = BASE.partition(\":\")\n"
    << "    if not module or not function:\n"
    << "        raise ValueError(\n"
    << "            "
    << pyString("set PIPESTUDIO_TORCHTITAN_BASE to the configuration of " + plan.model.name + " as module:function ")
    << "\n"
    << "            \"(e.g. torchtitan.models.llama3.config_registry:llama3_8b); its layers must be the plan's\"\n"
    << "        )\n"
    << "    config = getattr(importlib.import_module(module), function)()\n\n"
    << "    parallelism = config.parallelism\n"
    << "    parallelism.pipeline_parallel_degree = " << c.devices << '\n'
    << "    # the stage placement (" << (s.vStyle ? "V" : "looped") << "); the order is the CSV\n"
    << "    parallelism.pipeline_parallel_schedule = " << pyString(s.vStyle ? "ZBVZeroBubble" : "PipelineScheduleMulti")
    << '\n'
    << "    parallelism.pipeline_parallel_schedule_csv = SCHEDULE_CSV\n"
    << "    parallelism.num_pp_microbatches = " << c.microbatches << '\n'
    << "    parallelism.module_fqns_per_model_part = [\n";
  for (std::size_t i = 0; i < out.moduleFqnsPerModelPart.size(); ++i) {
    t << "        [";
    const auto& part = out.moduleFqnsPerModelPart[i];
    for (std::size_t k = 0; k < part.size(); ++k) t << (k ? ", " : "") << pyString(part[k]);
    t << "],  # stage " << i << " on rank " << plan.virtualStages[i].device << '\n';
  }
  t << "    ]\n"
    << "    parallelism.tensor_parallel_degree = " << par.tensor << '\n'
    << "    parallelism.enable_sequence_parallel = " << (par.tensor > 1 ? "True" : "False") << '\n'
    << "    parallelism.context_parallel_degree = " << par.context << '\n'
    << "    parallelism.expert_parallel_degree = " << par.expert << '\n'
    << "    parallelism.data_parallel_replicate_degree = " << s.dataReplicate << '\n'
    << "    parallelism.data_parallel_shard_degree = " << s.dataShard << '\n';
  if (!s.reshardAfterForward.empty()) {
    t << "    parallelism.fsdp_reshard_after_forward = " << pyString(s.reshardAfterForward) << '\n';
  }
  writePythonTraining(t, plan, s);
  t << "    return config\n";
  return t.str();
}

}  // namespace

std::optional<TorchtitanFormat> torchtitanFormatFromName(std::string_view name) {
  if (name == "python") return TorchtitanFormat::Python;
  if (name == "toml") return TorchtitanFormat::Toml;
  return std::nullopt;
}

Expected<TorchtitanExport> torchtitanExport(const Plan& plan, const TorchtitanOptions& options) {
  if (hasBlockHalves(plan)) {
    return Error{"the plan splits its blocks into their attention and MLP halves (partition " +
                 excerpt(plan.config.partition) +
                 "), which torchtitan cannot place (a model part names whole layers.k); plan a whole-block partition "
                 "such as balanced, or export --format megatron (HybridModel)"};
  }
  // The model before its layout: torchtitan's models build no multi-token-prediction module.
  const auto& backbone = plan.model.components.front().layers;
  if (std::any_of(backbone.begin(), backbone.end(), [](const Layer& l) { return roleOf(l) == LayerRole::Mtp; })) {
    return Error{
        "the model has multi-token-prediction layers (mtp_layers), which torchtitan's models do not build; "
        "export it with --format megatron (--mtp-num-layers), or plan it without them"};
  }
  if (plan.config.parallel.offloadsActivations()) {
    return Error{
        "the plan offloads activations as Megatron-Core does (--cpu-offloading-num-layers / "
        "--offload-modules), which torchtitan's configuration cannot say; export it with --format megatron, "
        "or plan it without offloading"};
  }
  PS_ASSIGN_OR_RETURN(auto settings, titanSettings(plan, options.format));
  PS_ASSIGN_OR_RETURN(auto stages, stageLayers(plan, "torchtitan"));
  PS_ASSIGN_OR_RETURN(auto csv, scheduleCsv(plan, CsvFormat::ComputeOnly));
  for (std::string& n : placeFrameworkEnds(stages, "torchtitan")) settings.notes.push_back(std::move(n));

  TorchtitanExport out;
  out.format = options.format;
  out.csv = std::move(csv);
  // torchtitan main names the output projection lm_head (since Apr 2026), v0.2.2 output.
  out.moduleFqnsPerModelPart =
      titanModuleNames(stages, options.format == TorchtitanFormat::Python ? "lm_head" : "output");
  if (options.format == TorchtitanFormat::Toml) {
    PS_ASSIGN_OR_RETURN(auto toml, renderToml(plan, settings, out, options.csvPath));
    out.config = std::move(toml);
  } else {
    out.config = renderPython(plan, settings, out, options);
    if (options.base.empty() && shippedBase(plan.model).empty()) {
      out.notes.push_back("torchtitan ships no configuration for " + excerpt(plan.model.name) +
                          ": name the one of your model with --torchtitan-base MODULE:FUNCTION or "
                          "$PIPESTUDIO_TORCHTITAN_BASE");
    }
  }
  out.toml = options.format == TorchtitanFormat::Toml ? out.config : std::string();
  return out;
}

Expected<TorchtitanExport> torchtitanExport(const Plan& plan, const std::string& csvPath) {
  TorchtitanOptions options;
  options.format = TorchtitanFormat::Toml;
  options.csvPath = csvPath;
  return torchtitanExport(plan, options);
}

bool isPythonIdentifier(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::optional<FrameworkSpace> frameworkSpace(std::string_view framework) {
  // The same rules megatronExport and torchtitanExport check (the Zero Bubble fork's schedules
  // export to Megatron-LM too, but NVIDIA's recipes run upstream).
  if (framework == "megatron")
    return FrameworkSpace{{"1f1b", "interleaved-1f1b"}, {0, 1, 2, 3}};  // 2, 3: Megatron-FSDP
  if (framework == "torchtitan") {
    return FrameworkSpace{
        {"gpipe", "1f1b", "interleaved-1f1b", "breadth-first", "interleaved-zb", "zb-v", "dualpipe-v"}, {0, 2, 3}};
  }
  return std::nullopt;
}

}  // namespace pipestudio
