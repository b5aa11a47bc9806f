// `--megatron-layout`: the split a Megatron-LM layout names, taken as given (issue 46). Two forms:
// GPTModel's --pipeline-model-parallel-layout (E embedding, t decoder layer, m MTP layer, L loss;
// megatron/core/transformer/pipeline_parallel_layer_layout.py) and HybridModel's
// --hybrid-layer-pattern (a decoder layer is an attention symbol and an MLP symbol, `|` between
// segments, `/` before each MTP depth; hybrid_layer_allocation.py). Both index stages as virtual
// rank · P + pipeline rank, which is our virtual stage id.
#include <algorithm>
#include <string>

#include "Uniform.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/model/BlockHalves.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Partition.hpp"

namespace pipestudio {
namespace {

// What a model layer is to Megatron.
enum class Role { Embedding, Decoder, AttentionHalf, MlpHalf, Mtp, Head, Other };

Role roleOf(const Layer& l) {
  if (l.kind == "embedding") return Role::Embedding;
  if (const auto half = blockHalfOf(l)) return *half == BlockHalf::Attention ? Role::AttentionHalf : Role::MlpHalf;
  if (l.kind == "lm_head") return Role::Head;
  if (l.kind == "transformer" && l.transformer && l.transformer->mtpLayers > 0) return Role::Mtp;
  if (l.kind == "transformer") return Role::Decoder;
  return Role::Other;
}

bool isHybridPattern(std::string_view text) {
  // The layout grammar has t, m, L, parentheses, commas and repeat counts; the pattern none of them.
  return text.find_first_of("tmL(),0123456789") == std::string_view::npos;
}

// Walks the model's layers as a layout's stages name them; each stage records its layer range.
class LayerCursor {
 public:
  explicit LayerCursor(const std::vector<Layer>& layers) : m_layers(layers) {}

  bool atRole(Role role) const { return m_next < m_layers.size() && roleOf(m_layers[m_next]) == role; }
  bool hasRole(Role role) const {
    return std::any_of(m_layers.begin(), m_layers.end(), [&](const Layer& l) { return roleOf(l) == role; });
  }
  const Layer& current() const { return m_layers[m_next]; }
  std::size_t next() const { return m_next; }
  void take() { ++m_next; }
  bool done() const { return m_next == m_layers.size(); }

 private:
  const std::vector<Layer>& m_layers;
  std::size_t m_next = 0;
};

std::string layerName(const LayerCursor& cursor) {
  if (cursor.done()) return "the end of the model";
  return "layer " + std::to_string(cursor.next()) + " '" + excerpt(cursor.current().name) + "' (" +
         excerpt(cursor.current().kind) + ")";
}

// GPTModel's layout: per stage, E, t, m, L in order.
Expected<std::vector<int>> layoutSplit(const std::vector<Layer>& layers, std::string_view text) {
  PS_ASSIGN_OR_RETURN(auto stages, parseMegatronLayout(text));
  LayerCursor cursor(layers);
  std::vector<int> counts;
  int mtpDepthsLeft = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::size_t first = cursor.next();
    if (mtpDepthsLeft > 0) {
      return Error{"layout '" + excerpt(text) + "': stage " + std::to_string(s) + " continues the MTP layer " +
                   std::to_string(first - 1) + " of the previous stage (expected all its " +
                   std::to_string(layers[first - 1].transformer->mtpLayers) + " depths in one stage)"};
    }
    for (char symbol : stages[s]) {
      const auto where = "layout '" + excerpt(text) + "', stage " + std::to_string(s) + ": ";
      if (symbol == 'E' || symbol == 'L') {
        const Role role = symbol == 'E' ? Role::Embedding : Role::Head;
        if (cursor.atRole(role)) {
          cursor.take();
        } else if (cursor.hasRole(role)) {
          return Error{where + "'" + std::string(1, symbol) + "' where the model has " + layerName(cursor)};
        }
        continue;  // a model without that layer: Megatron's own, which the plan does not cost
      }
      if (symbol == 't') {
        if (!cursor.atRole(Role::Decoder))
          return Error{where + "a decoder layer 't' where the model has " + layerName(cursor)};
        cursor.take();
        continue;
      }
      // 'm': one depth of the model's MTP layer.
      if (mtpDepthsLeft == 0) {
        if (!cursor.atRole(Role::Mtp))
          return Error{where + "an MTP layer 'm' where the model has " + layerName(cursor)};
        mtpDepthsLeft = static_cast<int>(cursor.current().transformer->mtpLayers);
        cursor.take();
      }
      --mtpDepthsLeft;
    }
    if (cursor.next() == first) {
      return Error{"layout '" + excerpt(text) + "': stage " + std::to_string(s) +
                   " holds no layer the model costs (the planner gives every virtual stage at least one layer)"};
    }
    counts.push_back(static_cast<int>(cursor.next() - first));
  }
  if (mtpDepthsLeft > 0) return Error{"layout '" + excerpt(text) + "': the MTP layer's depths are not all placed"};
  if (!cursor.done()) {
    return Error{"layout '" + excerpt(text) + "' places the model's layers up to layer " +
                 std::to_string(cursor.next()) + " of " + std::to_string(layers.size()) + "; " + layerName(cursor) +
                 " and the rest have no stage (expected a layout of the whole model)"};
  }
  return counts;
}

// A decoder layer's two symbols as HybridModel names them: its attention (* or + for MLA) and its
// MLP (- or E for MoE); a layer of measured times is a dense block, *-.
std::string blockSymbols(const Layer& layer) {
  if (!layer.transformer) return "*-";
  return std::string(1, layer.transformer->mla ? '+' : '*') + (layer.transformer->isMoe() ? 'E' : '-');
}

// HybridModel's pattern: a decoder layer is its attention symbol then its MLP symbol, and they
// must be the model's (* or + for MLA; - or E for MoE; a layer of measured times is *-); a block
// split into halves (BlockHalves.hpp) takes one symbol per half, so a segment may end between
// them. The embedding goes with the first segment, MTP and the output layer with the last.
Expected<std::vector<int>> hybridSplit(const std::vector<Layer>& layers, std::string_view text) {
  PS_ASSIGN_OR_RETURN(auto pattern, parseHybridPattern(text));
  LayerCursor cursor(layers);
  std::vector<int> counts;
  const auto where = [&](std::size_t s) {
    return "hybrid layer pattern '" + excerpt(text) + "', segment " + std::to_string(s) + ": ";
  };
  for (std::size_t s = 0; s < pattern.segments.size(); ++s) {
    const std::string& segment = pattern.segments[s];
    const std::size_t first = cursor.next();
    if (s == 0 && cursor.atRole(Role::Embedding)) cursor.take();
    for (std::size_t k = 0; k < segment.size();) {
      if (cursor.atRole(Role::AttentionHalf) || cursor.atRole(Role::MlpHalf)) {
        const std::string both = blockSymbols(cursor.current());
        const char expected = cursor.atRole(Role::AttentionHalf) ? both.front() : both.back();
        if (segment[k] != expected) {
          return Error{where(s) + "'" + segment.substr(k, 1) + "' at " + std::to_string(k) + " is not " +
                       layerName(cursor) + ", which is '" + std::string(1, expected) + "'"};
        }
        cursor.take();
        ++k;
        continue;
      }
      if (!cursor.atRole(Role::Decoder)) {
        return Error{where(s) + "'" + segment.substr(k, 2) + "' where the model has " + layerName(cursor)};
      }
      if (k + 1 == segment.size()) {
        return Error{where(s) + "'" + excerpt(segment) + "' ends between " + layerName(cursor) +
                     "'s attention and its MLP (plan --megatron-layout plans such a pattern over the blocks' "
                     "halves; a block of measured costs cannot be halved)"};
      }
      const std::string expected = blockSymbols(cursor.current());
      if (segment.substr(k, 2) != expected) {
        return Error{where(s) + "'" + segment.substr(k, 2) + "' at " + std::to_string(k) + " is not " +
                     layerName(cursor) + ", which is '" + expected +
                     "' (expected * or + for its attention, - or E for its MLP)"};
      }
      cursor.take();
      k += 2;
    }
    if (s + 1 == pattern.segments.size()) {
      int depths = 0;
      while (cursor.atRole(Role::Mtp)) {
        depths += static_cast<int>(cursor.current().transformer->mtpLayers);
        cursor.take();
      }
      if (depths != pattern.mtpDepths) {
        return Error{"hybrid layer pattern '" + excerpt(text) + "' has " + std::to_string(pattern.mtpDepths) +
                     " MTP depths; the model has " + std::to_string(depths) + " after its last decoder layer"};
      }
      if (cursor.atRole(Role::Head)) cursor.take();
    }
    if (cursor.next() == first) {
      return Error{where(s) +
                   "holds no layer the model costs (the planner gives every virtual stage at least one layer)"};
    }
    counts.push_back(static_cast<int>(cursor.next() - first));
  }
  if (!cursor.done()) {
    return Error{"hybrid layer pattern '" + excerpt(text) + "' places the model's layers up to layer " +
                 std::to_string(cursor.next()) + " of " + std::to_string(layers.size()) + "; " + layerName(cursor) +
                 " and the rest have no segment (expected a pattern of the whole model)"};
  }
  return counts;
}

}  // namespace

Expected<std::vector<int>> megatronLayoutSplit(const ModelSpec& model, std::string_view text) {
  const std::vector<int> trainable = model.trainableComponents();
  if (trainable.size() != 1 || model.components.size() != 1) {
    return Error{"a Megatron-LM layout splits one decoder; model '" + excerpt(model.name) + "' has " +
                 std::to_string(model.components.size()) + " components (expected one trainable component)"};
  }
  const auto& layers = model.component(trainable.front()).layers;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (roleOf(layers[i]) == Role::Other) {
      return Error{"layer " + std::to_string(i) + " '" + excerpt(layers[i].name) + "' is of kind '" +
                   excerpt(layers[i].kind) +
                   "', which a Megatron-LM layout has no symbol for (expected embedding, transformer or lm_head)"};
    }
  }
  return isHybridPattern(text) ? hybridSplit(layers, text) : layoutSplit(layers, text);
}

namespace partition {

Expected<std::vector<VirtualStage>> partitionLayout(const ModelSpec& model, std::vector<VirtualStage> placement,
                                                    const std::string& layout) {
  PS_ASSIGN_OR_RETURN(auto counts, megatronLayoutSplit(model, layout));
  if (std::any_of(placement.begin(), placement.end(), [](const VirtualStage& vs) { return vs.pipeline != 0; })) {
    return Error{"a Megatron-LM layout places each stage once; this schedule holds the model twice"};
  }
  if (counts.size() != placement.size()) {
    return Error{"the layout has " + std::to_string(counts.size()) + " stages and the schedule " +
                 std::to_string(placement.size()) +
                 " virtual stages (expected devices × chunks = the layout's stages)"};
  }
  std::sort(placement.begin(), placement.end(),
            [](const VirtualStage& a, const VirtualStage& b) { return a.id < b.id; });
  const int component = model.trainableComponents().front();
  int first = 0;
  for (std::size_t s = 0; s < placement.size(); ++s) {
    placement[s].component = component;
    placement[s].firstLayer = first;
    placement[s].lastLayer = first + counts[s] - 1;
    first += counts[s];
  }
  return placement;
}

}  // namespace partition
}  // namespace pipestudio
