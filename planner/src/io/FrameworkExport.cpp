// Plans as the training frameworks take them: Megatron-LM command-line arguments (with the
// Zero Bubble fork's flags for zero-bubble schedules) and torchtitan's `[parallelism]` TOML.
// Facts used (argument names, rules) are those of megatron/training/arguments.py,
// megatron/core/transformer/pipeline_parallel_layer_layout.py and transformer_config.py
// (NVIDIA/Megatron-LM), megatron/core/zbpp_utils.py (sail-sg/zero-bubble-pipeline-parallelism),
// torchtitan/config/job_config.py and torchtitan/distributed/pipeline_parallel.py (pytorch/
// torchtitan, TOML configuration era). Each refusal names the rule the framework would apply.
#include <algorithm>
#include <map>
#include <sstream>

#include "TorchSchedule.hpp"
#include "pipestudio/planner/Export.hpp"

namespace pipestudio {
namespace {

// What Megatron and torchtitan call the layers of a decoder-only language model.
enum class LayerRole { Embedding, Decoder, Head, Other };

LayerRole roleOf(const Layer& layer) {
  if (layer.kind == "embedding") return LayerRole::Embedding;
  if (layer.kind == "transformer") return LayerRole::Decoder;
  if (layer.kind == "lm_head") return LayerRole::Head;
  return LayerRole::Other;
}

// One trainable component, no frozen ones, no fill: what both frameworks train.
Status requireSingleBackbone(const Plan& plan, const char* framework) {
  if (plan.model.components.size() != 1 || !plan.model.components.front().trainable) {
    return Error{std::string(framework) + " trains one decoder stack; this model has " +
                 std::to_string(plan.model.components.size()) +
                 " components (frozen components and their bubble fill cannot be expressed; expected one trainable "
                 "component)"};
  }
  if (plan.config.fill != "none") {
    return Error{std::string(framework) + " cannot run a frozen-component fill (plan fill '" + plan.config.fill +
                 "'; expected fill none)"};
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
  return {};
}

// Per virtual stage (by id): counts of embedding, decoder and head layers.
struct StageLayers {
  int embedding = 0;
  int decoder = 0;
  int head = 0;
  std::vector<int> decoderIndex;  ///< index of each decoder layer among all decoder layers
};

Expected<std::vector<StageLayers>> stageLayers(const Plan& plan, const char* framework) {
  const auto& layers = plan.model.components.front().layers;
  std::vector<int> decoderIndex(layers.size(), -1);
  int decoders = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerRole role = roleOf(layers[i]);
    if (role == LayerRole::Other) {
      return Error{"layer " + std::to_string(i) + " '" + layers[i].name + "' is of kind '" + layers[i].kind +
                   "', which " + framework + " has no name for (expected embedding, transformer or lm_head layers)"};
    }
    if (role == LayerRole::Embedding && i != 0) {
      return Error{"layer " + std::to_string(i) + " '" + layers[i].name + "': " + framework +
                   " puts the embedding first (expected it as layer 0)"};
    }
    if (role == LayerRole::Head && i + 1 != layers.size()) {
      return Error{"layer " + std::to_string(i) + " '" + layers[i].name + "': " + framework +
                   " puts the output layer last (expected the lm_head as the last layer)"};
    }
    if (role == LayerRole::Decoder) decoderIndex[i] = decoders++;
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
        case LayerRole::Decoder:
          ++s.decoder;
          s.decoderIndex.push_back(decoderIndex[static_cast<std::size_t>(l)]);
          break;
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
  if (s.head > 0) out += 'L';
  return out;
}

// Layout string with runs of equal stages folded as `(s|)*n`.
std::string layoutString(const std::vector<StageLayers>& stages) {
  std::vector<std::string> symbols;
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
  return plan.config.globalBatch.value_or(microBatchSize(plan) * plan.config.microbatches * plan.config.parallel.data);
}

const TransformerShape* decoderShape(const Plan& plan) {
  for (const Layer& l : plan.model.components.front().layers) {
    if (roleOf(l) == LayerRole::Decoder && l.transformer) return &*l.transformer;
  }
  return nullptr;
}

bool tiedEmbedding(const Plan& plan) {
  for (const Layer& l : plan.model.components.front().layers) {
    if (roleOf(l) != LayerRole::Decoder && l.tied) return true;
  }
  return false;
}

std::string tomlString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
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

Expected<MegatronExport> megatronExport(const Plan& plan) {
  const PlanConfig& c = plan.config;
  const std::string& schedule = c.schedule;
  const int p = c.devices;
  const int v = static_cast<int>(plan.virtualStages.size()) / std::max(1, p);
  if (auto st = requireSingleBackbone(plan, "Megatron-LM"); !st) return st.error();
  auto stages = stageLayers(plan, "Megatron-LM");
  if (!stages) return stages.error();
  const bool modelsEmbedding =
      std::any_of(stages->begin(), stages->end(), [](const StageLayers& s) { return s.embedding > 0; });
  std::vector<std::string> notes = placeFrameworkEnds(*stages, "Megatron-LM");

  const bool zbFork = schedule == "zb-h1" || schedule == "zb-h2" || schedule == "zb-auto";
  const bool zbV = schedule == "zb-v" || schedule == "v-half" || schedule == "v-min";
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
  if (c.parallel.zeroStage >= 2 && c.parallel.data > 1) {
    return Error{"ZeRO-" + std::to_string(c.parallel.zeroStage) +
                 " is not expressible in Megatron-LM: its distributed optimizer (--use-distributed-optimizer) "
                 "shards the optimizer state only (ZeRO-1); re-plan with --zero 1 or 0"};
  }
  const int decoders = decoderCount(*stages);
  const auto& front = (*stages).front();
  const auto& back = (*stages).back();
  const bool endsRight = front.embedding > 0 && back.head > 0;
  const bool even = endsRight && decoders % std::max(1, p * v) == 0 &&
                    std::all_of(stages->begin(), stages->end(),
                                [&](const StageLayers& s) { return s.decoder == decoders / std::max(1, p * v); });

  std::vector<std::string> args;
  const auto add = [&](std::string flag, std::optional<std::string> value = std::nullopt) {
    args.push_back(std::move(flag));
    if (value) args.push_back(std::move(*value));
  };
  add("--tensor-model-parallel-size", std::to_string(c.parallel.tensor));
  add("--pipeline-model-parallel-size", std::to_string(p));
  if (c.parallel.context > 1) add("--context-parallel-size", std::to_string(c.parallel.context));
  if (c.parallel.expert > 1) add("--expert-model-parallel-size", std::to_string(c.parallel.expert));
  if (c.parallel.sequenceParallel && c.parallel.tensor > 1) add("--sequence-parallel");
  add("--micro-batch-size", std::to_string(microBatchSize(plan)));
  add("--global-batch-size", std::to_string(globalBatch(plan)));
  add("--num-layers", std::to_string(decoders));
  if (const TransformerShape* t = decoderShape(plan)) {
    add("--hidden-size", std::to_string(t->hidden));
    add("--ffn-hidden-size", std::to_string(t->isMoe() ? t->expertFfnOrDefault() : t->ffnOrDefault()));
    add("--num-attention-heads", std::to_string(t->heads));
    if (t->kvHeadsOrHeads() != t->heads) {
      add("--group-query-attention");
      add("--num-query-groups", std::to_string(t->kvHeadsOrHeads()));
    }
    add("--seq-length", std::to_string(t->seq));
    add("--max-position-embeddings", std::to_string(t->seq));
    if (t->mlp == MlpKind::SwiGlu) add("--swiglu");
    if (t->isMoe()) {
      add("--num-experts", std::to_string(t->experts));
      add("--moe-router-topk", std::to_string(t->topK));
    }
  }
  if (!tiedEmbedding(plan) && (modelsEmbedding || zbFork || zbV)) add("--untie-embeddings-and-output-weights");

  std::string layout;
  if (zbFork || zbV) {
    // The fork is an older Megatron-LM: no layout flag, decoder layers split evenly.
    if (!even) {
      return Error{
          "the Zero Bubble fork splits decoder layers evenly over the pipeline (it has no "
          "--pipeline-model-parallel-layout); this plan's partition is uneven (stage layer counts " +
          [&] {
            std::string s;
            for (const auto& st : *stages) s += (s.empty() ? "" : ",") + std::to_string(st.decoder);
            return s;
          }() +
          "); re-plan with --partition uniform"};
    }
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
    if (zbFork) {
      if (v != 1 || !loopPlacement(plan)) {
        return Error{"the Zero Bubble fork's ZB schedules place one stage per pipeline rank; this " + schedule +
                     " plan has " + std::to_string(v) + " per device"};
      }
      add("--enable-zero-bubble");
      add("--zero-bubble-max-pending-backward", std::to_string(maxPendingBackward(plan)));
      notes.push_back(
          "ZB schedule: the fork's scheduler orders F/B/W itself from profiled times under a memory limit "
          "of " +
          std::to_string(maxPendingBackward(plan)) +
          " microbatches' activations (the most this plan holds on one device)");
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
      add("--enable-zero-bubble");
      add("--zero-bubble-v-schedule");
      if (schedule == "v-half") add("--zero-bubble-v-schedule-mem-setup", std::string("half"));
      if (schedule == "v-min") add("--zero-bubble-v-schedule-mem-setup", std::string("min"));
    }
    if (c.optimizerSync == "post-validation") {
      add("--enable-optimizer-post-validation");
      notes.push_back("optimizer post-validation: the fork requires --fp16 with it");
    }
  } else {
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
    if (!even) {
      layout = layoutString(*stages);
      add("--pipeline-model-parallel-layout", layout);
    } else if (v > 1) {
      add("--num-virtual-stages-per-pipeline-rank", std::to_string(v));
    }
  }
  if (c.parallel.recompute == Recompute::Selective) add("--recompute-granularity", std::string("selective"));
  if (c.parallel.recompute == Recompute::Full) {
    add("--recompute-granularity", std::string("full"));
    add("--recompute-method", std::string("uniform"));
    add("--recompute-num-layers", std::string("1"));
  }
  if (c.parallel.zeroStage >= 1) add("--use-distributed-optimizer");  // ZeRO-2/3 only reach here with D = 1
  if (c.parallel.overlapGradReduce && c.parallel.data > 1 && !(zbFork || zbV)) add("--overlap-grad-reduce");

  std::ostringstream text;
  text << "# Megatron-LM arguments for the " << schedule << " plan (pipestudio-cli export --format megatron)\n"
       << "# T=" << c.parallel.tensor << " C=" << c.parallel.context << " P=" << p << " D=" << c.parallel.data
       << ": launch on " << c.totalGpus() << " GPUs (data parallelism is WORLD_SIZE / (T*C*P))\n";
  if (!layout.empty())
    text << "# uneven partition: stage layer counts as the plan's, index = virtual rank * P + pipeline rank\n";
  if (zbFork || zbV)
    text << "# zero-bubble flags are those of the Zero Bubble fork (sail-sg/zero-bubble-pipeline-parallelism)\n";
  for (const std::string& n : notes) text << "# " << n << '\n';
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool value = i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0;
    text << args[i];
    if (value) {
      const std::string& val = args[++i];
      const bool quote = val.find_first_of("|*()") != std::string::npos;
      text << ' ' << (quote ? "\"" + val + "\"" : val);
    }
    text << (i + 1 < args.size() ? " \\\n" : "\n");
  }
  return MegatronExport{std::move(args), std::move(layout), text.str()};
}

Expected<TorchtitanExport> torchtitanExport(const Plan& plan, const std::string& csvPath) {
  const PlanConfig& c = plan.config;
  const int p = c.devices;
  if (auto st = requireSingleBackbone(plan, "torchtitan"); !st) return st.error();
  auto stages = stageLayers(plan, "torchtitan");
  if (!stages) return stages.error();
  const bool v = vPlacement(plan) && !loopPlacement(plan);
  if (!loopPlacement(plan) && !v) {
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
  auto csv = scheduleCsv(plan, CsvFormat::ComputeOnly);
  if (!csv) return csv.error();

  const std::vector<std::string> notes = placeFrameworkEnds(*stages, "torchtitan");

  TorchtitanExport out;
  out.csv = std::move(*csv);
  for (const StageLayers& s : *stages) {
    std::vector<std::string> fqns;
    if (s.embedding > 0) fqns.push_back("tok_embeddings");
    for (int k : s.decoderIndex) fqns.push_back("layers." + std::to_string(k));
    if (s.head > 0) {
      fqns.push_back("norm");
      fqns.push_back("output");
    }
    out.moduleFqnsPerModelPart.push_back(std::move(fqns));
  }
  const std::int64_t mbs = microBatchSize(plan);
  std::ostringstream t;
  t << "# torchtitan settings for the " << c.schedule << " plan (pipestudio-cli export --format torchtitan)\n"
    << "# the schedule is the CSV beside this file; pipeline_parallel_schedule picks the stage placement ("
    << (v ? "V" : "looped") << ")\n";
  for (const std::string& n : notes) t << "# " << n << '\n';
  t << "[parallelism]\n"
    << "pipeline_parallel_degree = " << p << '\n'
    << "pipeline_parallel_schedule = " << tomlString(v ? "ZBVZeroBubble" : "PipelineScheduleMulti") << '\n'
    << "pipeline_parallel_schedule_csv = " << tomlString(csvPath) << '\n'
    << "pipeline_parallel_microbatch_size = " << mbs << '\n'
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
  if (c.parallel.zeroStage <= 1) {  // ZeRO-1 with one replica shards nothing
    t << "data_parallel_replicate_degree = " << c.parallel.data << '\n' << "data_parallel_shard_degree = 1\n";
  } else {
    t << "data_parallel_replicate_degree = 1\n"
      << "data_parallel_shard_degree = " << c.parallel.data << '\n'
      << "fsdp_reshard_after_forward = " << tomlString(c.parallel.zeroStage == 3 ? "always" : "never") << '\n';
  }
  t << "\n[training]\n"
    << "local_batch_size = " << mbs * c.microbatches << "  # " << c.microbatches << " microbatches of " << mbs << '\n'
    << "global_batch_size = " << globalBatch(plan) << '\n';
  if (const TransformerShape* shape = decoderShape(plan)) t << "seq_len = " << shape->seq << '\n';
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
  out.toml = t.str();
  return out;
}

std::optional<FrameworkSpace> frameworkSpace(std::string_view framework) {
  // The same rules megatronExport and torchtitanExport check (the Zero Bubble fork's schedules
  // export to Megatron-LM too, but NVIDIA's recipes run upstream).
  if (framework == "megatron") return FrameworkSpace{{"1f1b", "interleaved-1f1b"}, {0, 1}};
  if (framework == "torchtitan") {
    return FrameworkSpace{
        {"gpipe", "1f1b", "interleaved-1f1b", "breadth-first", "interleaved-zb", "zb-v", "dualpipe-v"}, {0, 2, 3}};
  }
  return std::nullopt;
}

}  // namespace pipestudio
