#pragma once
/// \file ModelSpec: `pipestudio.model/1` (DESIGN.md §2).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipestudio {

inline constexpr const char* kModelSchema = "pipestudio.model/1";

/// Shape of a transformer block (or of the embedding / LM head when `vocab` is set).
struct TransformerShape {
  std::int64_t hidden = 0;
  std::int64_t seq = 0;
  std::int64_t heads = 0;
  std::int64_t ffn = 0;  ///< 0 means 4·hidden
  std::optional<std::int64_t> vocab;
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
};

struct Component {
  std::string name;
  bool trainable = true;
  std::vector<std::string> feeds;  ///< names of components consuming this one's output
  std::vector<Layer> layers;
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
  std::vector<Component> components;  ///< in data-flow order
  OptimizerSpec optimizer;

  /// Index of the component named `name`, or -1.
  int componentIndex(const std::string& name) const;
  /// Trainable components, in order.
  std::vector<int> trainableComponents() const;
  std::vector<int> frozenComponents() const;
};

}  // namespace pipestudio
