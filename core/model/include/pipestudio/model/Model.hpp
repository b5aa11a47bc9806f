#pragma once
/// \file ModelSpec: `pipestudio.model/1` (DESIGN.md §2).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipestudio {

inline constexpr const char* kModelSchema = "pipestudio.model/1";

enum class MlpKind : std::uint8_t { Gelu, SwiGlu };
enum class AttentionKind : std::uint8_t { Flash, Standard };

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
  double capacityFactor = 1.0;  ///< tokens an expert processes relative to a perfectly balanced load

  std::int64_t kvHeadsOrHeads() const { return kvHeads > 0 ? kvHeads : heads; }
  std::int64_t ffnOrDefault() const { return ffn > 0 ? ffn : 4 * hidden; }
  std::int64_t expertFfnOrDefault() const { return expertFfn > 0 ? expertFfn : ffnOrDefault(); }
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
