#pragma once
/// \file ModelSpec: `pipestudio.model/1` (docs/formats.md).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipestudio {

inline constexpr const char* kModelSchema = "pipestudio.model/1";

enum class MlpKind : std::uint8_t { Gelu, SwiGlu };
enum class AttentionKind : std::uint8_t { Flash, Standard };
enum class NormKind : std::uint8_t { LayerNorm, RmsNorm };
enum class PositionKind : std::uint8_t { Learned, Rope, Yarn, None };

/// What a framework needs to build a transformer block that the cost model does not read: the
/// norm, the position embedding, the linear layers' biases, query/key norms, attention sinks.
/// Exports write them (Megatron's --normalization, --position-embedding-type, --disable-bias-linear,
/// --qk-layernorm, --softmax-type learnable); a field the model leaves out is inferred from the MLP
/// by the export that needs it (SwiGLU: Llama's RMSNorm, RoPE, no biases; GELU: GPT's LayerNorm,
/// learned positions, biases) and said to be inferred.
struct BlockArchitecture {
  std::optional<NormKind> norm;
  std::optional<PositionKind> position;
  std::optional<std::int64_t> rotaryBase;  ///< RoPE's base (theta); nullopt: the framework's default
  std::optional<bool> bias;                ///< every linear layer has a bias
  bool qkvBias = false;                    ///< biases on the query/key/value projections only (Qwen2)
  bool qkNorm = false;                     ///< norms on queries and keys (Qwen3)
  bool attentionSinks = false;             ///< a learned sink logit per head (GPT-OSS)
  friend bool operator==(const BlockArchitecture&, const BlockArchitecture&) = default;
};

/// Shape of a transformer block (or of the embedding / LM head when `vocab` is set).
/// Sources of each formula are cited in CostModel.cpp.
struct TransformerShape {
  std::int64_t hidden = 0;
  std::int64_t seq = 0;
  std::int64_t heads = 0;
  std::int64_t ffn = 0;  ///< 0 means 4·hidden (dense MLP intermediate size)
  std::optional<std::int64_t> vocab;
  std::int64_t kvHeads = 0;                        ///< grouped-query attention; 0 means = heads (multi-head attention)
  MlpKind mlp = MlpKind::Gelu;                     ///< gelu: two weight matrices of ffn; swiglu: three (gate, up, down)
  AttentionKind attention = AttentionKind::Flash;  ///< flash: no s² score matrix held for backward
  bool causal = true;   ///< decoder masks: a causal flash kernel skips half of the score FLOPs
  bool dropout = true;  ///< dropout masks held for backward (GPT-3/Megatron); Llama trains without
  // Mixture of experts (Mixtral, DeepSeek-V3): the MLP is `experts` experts of `expertFfn`, each
  // token routed to `topK` of them, plus `sharedExperts` always-on experts of the same size.
  std::int64_t experts = 0;  ///< 0: a dense MLP
  std::int64_t topK = 0;
  std::int64_t expertFfn = 0;  ///< 0 means ffn
  std::int64_t sharedExperts = 0;
  /// Token dropping (Megatron --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity):
  /// every expert processes capacity × its balanced share of the routed tokens, the rest are
  /// dropped. nullopt: dropless (the busiest expert processes loadImbalance × its share).
  std::optional<double> capacityFactor;
  /// Tokens the busiest expert-parallel rank receives relative to a balanced router (1: balanced,
  /// as Megatron-Bridge's benchmarks force it). The others wait for it at the combine.
  double loadImbalance = 1.0;
  /// Group-limited (node-limited) routing (DeepSeek-V3 §2.1.2; Megatron --moe-router-num-groups,
  /// --moe-router-group-topk; Hugging Face n_group, topk_group): the experts form `routerGroups`
  /// equal groups of consecutive experts and a token's top_k come from its best
  /// `routerGroupTopK` groups. 0: every expert is a candidate.
  std::int64_t routerGroups = 0;
  std::int64_t routerGroupTopK = 0;
  /// Size of one attention head; 0 means hidden / heads (Qwen3 and GPT-OSS set it apart).
  std::int64_t headDim = 0;
  /// Multi-head latent attention (DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1): queries and keys/values
  /// through low-rank latents; the attention core runs on qkNope + qkRope query/key dims and vHead
  /// value dims per head.
  struct Mla {
    std::int64_t qLoraRank = 0;  ///< 0: queries projected directly from the hidden state
    std::int64_t kvLoraRank = 0;
    std::int64_t qkNopeHeadDim = 0;
    std::int64_t qkRopeHeadDim = 0;
    std::int64_t vHeadDim = 0;
    friend bool operator==(const Mla&, const Mla&) = default;
  };
  std::optional<Mla> mla;
  /// Sliding-window attention: each query attends to the last `window` keys (GPT-OSS's banded
  /// layers); 0: the whole (causal) sequence.
  std::int64_t window = 0;
  /// Multi-token prediction (DeepSeek-V3 §2.2): this layer is `mtpLayers` sequential MTP modules,
  /// each a projection of [hidden; next-token embedding], one block of this shape and the shared
  /// output head with its loss. 0: an ordinary block.
  std::int64_t mtpLayers = 0;
  BlockArchitecture architecture;

  std::int64_t kvHeadsOrHeads() const { return kvHeads > 0 ? kvHeads : heads; }
  std::int64_t ffnOrDefault() const { return ffn > 0 ? ffn : 4 * hidden; }
  std::int64_t expertFfnOrDefault() const { return expertFfn > 0 ? expertFfn : ffnOrDefault(); }
  std::int64_t headDimOrDefault() const { return headDim > 0 ? headDim : hidden / std::max<std::int64_t>(1, heads); }
  /// Query/key and value sizes of one head in the attention core.
  std::int64_t qkHeadDim() const { return mla ? mla->qkNopeHeadDim + mla->qkRopeHeadDim : headDimOrDefault(); }
  std::int64_t vHeadDim() const { return mla ? mla->vHeadDim : headDimOrDefault(); }
  bool isMoe() const { return experts > 0; }
  friend bool operator==(const TransformerShape&, const TransformerShape&) = default;
};

/// A layer: measured costs (any subset) and/or a shape the cost model turns into costs.
/// Measured fields always win over shape-derived ones (CostModel.hpp).
struct Layer {
  std::string name;
  std::string kind = "generic";  ///< transformer, embedding, lm_head, conv, attention, generic, ...

  // Measured costs, per microbatch (optional each).
  std::optional<double> forwardMs;
  std::optional<double> backwardInputMs;
  std::optional<double> backwardWeightMs;
  std::optional<std::int64_t> activationBytes;  ///< live from F start to B end
  std::optional<std::int64_t> weightGradBytes;  ///< part of activationBytes kept until W ends
  std::optional<std::int64_t> parameterBytes;   ///< weights as stored (bf16: 2 bytes/param)
  std::optional<std::int64_t> outputBytes;      ///< sent to the next virtual stage

  // Shapes.
  std::optional<TransformerShape> transformer;
  std::optional<double> flopsForward;  ///< per sample (the cost model scales by samples_per_microbatch)
  std::optional<std::int64_t> params;  ///< parameter count
  /// Embedding / LM head sharing one weight (GPT-2/3 style). The LM head then holds no
  /// parameters of its own when it sits on the embedding's device, and both halves of the
  /// gradient are all-reduced between the first and last pipeline ranks otherwise.
  bool tied = false;
};

struct Component {
  std::string name;
  bool trainable = true;
  std::vector<std::string> feeds;  ///< names of components consuming this one's output
  std::vector<Layer> layers;

  /// Layer `i` (0 <= i < layers.size(); indices are ints throughout the planner).
  const Layer& layer(int i) const { return layers[static_cast<std::size_t>(i)]; }
  Layer& layer(int i) { return layers[static_cast<std::size_t>(i)]; }
};

/// Static memory of the optimizer (mixed-precision Adam, Megatron-LM accounting).
struct OptimizerSpec {
  /// false: 18 bytes/parameter; true: distributed optimizer, 6 + 12/d bytes/parameter
  /// where d is the data-parallel degree (Korthikanti et al. 2022; Megatron-LM docs).
  bool distributed = false;
};

struct ModelSpec {
  std::string name;
  std::int64_t samplesPerMicrobatch = 1;
  /// The training recipe's global batch in samples, when the file states it (configure holds
  /// it fixed unless --global-batch says otherwise).
  std::optional<std::int64_t> globalBatch;
  std::vector<Component> components;  ///< in data-flow order
  OptimizerSpec optimizer;

  /// Component `i` (0 <= i < components.size()).
  const Component& component(int i) const { return components[static_cast<std::size_t>(i)]; }
  Component& component(int i) { return components[static_cast<std::size_t>(i)]; }

  /// Index of the component named `name`, or -1.
  int componentIndex(const std::string& name) const;
  /// Trainable components, in order.
  std::vector<int> trainableComponents() const;
  std::vector<int> frozenComponents() const;
};

}  // namespace pipestudio
