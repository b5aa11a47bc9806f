#include "pipestudio/model/ModelIO.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <span>
#include <string_view>
#include <utility>

#include "GpuIO.hpp"
#include "HostsIO.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/model/Limits.hpp"

namespace pipestudio {
namespace {

// Bounds that separate "large" from "absurd" (model/Limits.hpp, shared with the GUI editors).
using limits::kMaxBytes;
using limits::kMaxDim;
using limits::kMaxGpus;
using limits::kMaxLayers;

// A string field restricted to a few names ("gelu" | "swiglu"), with the choices in the message.
template <typename E>
std::optional<E> readChoice(JsonReader& r, const JsonNode& node, const char* key,
                            std::initializer_list<std::pair<const char*, E>> choices) {
  const auto text = r.string(node, key, Presence::Optional);
  if (!text) return std::nullopt;
  std::string names;
  for (const auto& [name, value] : choices) {
    if (*text == name) return value;
    names += (names.empty() ? "" : " or ") + std::string(name);
  }
  r.error(node.child(key), "'" + *text + "' is not one of " + names);
  return std::nullopt;
}

// The attention fields of a transformer shape (issue 26): head_dim, multi-head latent attention's
// ranks (only with "attention": "mla", then all but q_lora_rank required), the sliding window and
// multi-token prediction.
void readAttentionShape(JsonReader& r, const JsonNode& node, bool mla, TransformerShape& s) {
  s.headDim = r.integer(node, "head_dim", Presence::Optional, 1, kMaxDim).value_or(0);
  s.window = r.integer(node, "window", Presence::Optional, 1, kMaxDim).value_or(0);
  s.mtpLayers = r.integer(node, "mtp_layers", Presence::Optional, 1, 1000).value_or(0);
  static constexpr std::array<const char*, 5> kMlaKeys{"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                                       "qk_rope_head_dim", "v_head_dim"};
  if (!mla) {
    for (const char* key : kMlaKeys) {
      if (node.value->contains(key)) r.error(node.child(key), R"(is only meaningful with "attention": "mla")");
    }
    return;
  }
  const auto q = r.integer(node, "q_lora_rank", Presence::Optional, 1, kMaxDim);
  const auto kv = r.integer(node, "kv_lora_rank", Presence::Required, 1, kMaxDim);
  const auto nope = r.integer(node, "qk_nope_head_dim", Presence::Required, 1, kMaxDim);
  const auto rope = r.integer(node, "qk_rope_head_dim", Presence::Required, 0, kMaxDim);
  const auto v = r.integer(node, "v_head_dim", Presence::Required, 1, kMaxDim);
  if (node.value->contains("kv_heads")) {
    r.error(node.child("kv_heads"), "multi-head latent attention has one key and value per head (no kv_heads)");
  }
  if (node.value->contains("head_dim")) {
    r.error(node.child("head_dim"),
            "multi-head latent attention sizes its heads with qk_nope_head_dim, "
            "qk_rope_head_dim and v_head_dim (no head_dim)");
  }
  if (!kv || !nope || !rope || !v) return;
  s.mla = TransformerShape::Mla{q.value_or(0), *kv, *nope, *rope, *v};
}

// Group-limited routing (issue 26): both fields or neither; the groups divide the experts, the
// chosen groups are at most all of them and hold at least top_k experts (Megatron-Core's
// group_limited_topk asserts the same).
void readRouterGroups(JsonReader& r, const JsonNode& node, std::optional<std::int64_t> groups,
                      std::optional<std::int64_t> groupTopK, TransformerShape& s) {
  if (!groups && !groupTopK) return;
  if (!groups || !groupTopK) {
    const char* given = groups ? "router_groups" : "router_group_topk";
    const char* missing = groups ? "router_group_topk" : "router_groups";
    r.error(node.child(given), std::string("group-limited routing needs both 'router_groups' and "
                                           "'router_group_topk' (expected '") +
                                   missing + "' beside it)");
    return;
  }
  const auto n = std::to_string(*groups);
  if (s.experts % *groups != 0) {
    r.error(node.child("router_groups"), "router_groups " + n + " does not divide experts " +
                                             std::to_string(s.experts) + " (expected equal groups of experts)");
    return;
  }
  if (*groupTopK > *groups) {
    r.error(node.child("router_group_topk"), "router_group_topk " + std::to_string(*groupTopK) +
                                                 " exceeds router_groups " + n +
                                                 " (expected at most the number of groups)");
    return;
  }
  if (*groupTopK * (s.experts / *groups) < s.topK) {
    r.error(node.child("router_group_topk"),
            "router_group_topk " + std::to_string(*groupTopK) + " groups of " + std::to_string(s.experts / *groups) +
                " experts hold fewer than top_k " + std::to_string(s.topK) + " (expected enough experts to route to)");
    return;
  }
  s.routerGroups = *groups;
  s.routerGroupTopK = *groupTopK;
}

// The block's architecture as frameworks build it (norm, position embedding, biases, query/key
// norms, attention sinks); the cost model does not read it.
void readArchitecture(JsonReader& r, const JsonNode& node, TransformerShape& s) {
  BlockArchitecture& a = s.architecture;
  a.norm = readChoice<NormKind>(r, node, "norm", {{"layernorm", NormKind::LayerNorm}, {"rmsnorm", NormKind::RmsNorm}});
  a.position = readChoice<PositionKind>(r, node, "position_embedding",
                                        {{"learned", PositionKind::Learned},
                                         {"rope", PositionKind::Rope},
                                         {"yarn", PositionKind::Yarn},
                                         {"none", PositionKind::None}});
  a.rotaryBase = r.integer(node, "rotary_base", Presence::Optional, 1, 1'000'000'000'000);
  a.bias = r.boolean(node, "bias", Presence::Optional);
  a.qkvBias = r.boolean(node, "qkv_bias", Presence::Optional).value_or(false);
  a.qkNorm = r.boolean(node, "qk_norm", Presence::Optional).value_or(false);
  a.attentionSinks = r.boolean(node, "attention_sinks", Presence::Optional).value_or(false);
  if (a.rotaryBase && a.position && *a.position != PositionKind::Rope && *a.position != PositionKind::Yarn) {
    r.error(node.child("rotary_base"),
            R"(is only meaningful with rotary positions ("position_embedding": "rope" or "yarn"))");
  }
}

// The fields of a transformer shape.
constexpr std::array<std::string_view, 33> kShapeKeys{"hidden",
                                                      "seq",
                                                      "heads",
                                                      "ffn",
                                                      "vocab",
                                                      "kv_heads",
                                                      "mlp",
                                                      "attention",
                                                      "causal",
                                                      "dropout",
                                                      "experts",
                                                      "top_k",
                                                      "expert_ffn",
                                                      "shared_experts",
                                                      "capacity_factor",
                                                      "load_imbalance",
                                                      "router_groups",
                                                      "router_group_topk",
                                                      "head_dim",
                                                      "q_lora_rank",
                                                      "kv_lora_rank",
                                                      "qk_nope_head_dim",
                                                      "qk_rope_head_dim",
                                                      "v_head_dim",
                                                      "window",
                                                      "mtp_layers",
                                                      "norm",
                                                      "position_embedding",
                                                      "rotary_base",
                                                      "bias",
                                                      "qkv_bias",
                                                      "qk_norm",
                                                      "attention_sinks"};

// A mixture of experts names its experts and top_k (at most that many); the other expert
// fields come only with experts.
void checkExperts(JsonReader& r, const JsonNode& node, std::optional<std::int64_t> experts,
                  std::optional<std::int64_t> topK) {
  if (experts && !topK) {
    r.error(node.child("experts"), "a mixture of experts needs 'top_k' (expected the experts each token is routed to)");
  }
  if (topK && !experts) r.error(node.child("top_k"), "is only meaningful with 'experts'");
  if (topK && experts && *topK > *experts) {
    r.error(node.child("top_k"), "top_k " + std::to_string(*topK) + " exceeds experts " + std::to_string(*experts) +
                                     " (expected at most the number of experts)");
  }
  for (const char* key :
       {"expert_ffn", "shared_experts", "capacity_factor", "load_imbalance", "router_groups", "router_group_topk"}) {
    if (node.value->contains(key) && !experts) r.error(node.child(key), "is only meaningful with 'experts'");
  }
}

std::optional<TransformerShape> readShape(JsonReader& r, const JsonNode& node, const std::string& kind) {
  if (!r.isObject(node)) return std::nullopt;
  r.rejectUnknown(node, kShapeKeys);
  TransformerShape s;
  const auto hidden = r.integer(node, "hidden", Presence::Required, 1, kMaxDim);
  const auto seq = r.integer(node, "seq", Presence::Required, 1, kMaxDim);
  const auto heads = r.integer(node, "heads", Presence::Required, 1, 100000);
  const auto ffn = r.integer(node, "ffn", Presence::Optional, 1, kMaxDim);
  const auto vocab = r.integer(node, "vocab", Presence::Optional, 1, 100'000'000);
  const auto kvHeads = r.integer(node, "kv_heads", Presence::Optional, 1, 100000);
  const auto experts = r.integer(node, "experts", Presence::Optional, 1, 100000);
  const auto topK = r.integer(node, "top_k", Presence::Optional, 1, 100000);
  const auto expertFfn = r.integer(node, "expert_ffn", Presence::Optional, 1, kMaxDim);
  const auto shared = r.integer(node, "shared_experts", Presence::Optional, 0, 100000);
  const auto capacity = r.number(node, "capacity_factor", Presence::Optional, 0.01, 1000.0);
  s.mlp = readChoice<MlpKind>(r, node, "mlp", {{"gelu", MlpKind::Gelu}, {"swiglu", MlpKind::SwiGlu}})
              .value_or(MlpKind::Gelu);
  // "mla" is FlashAttention over multi-head latent attention's projections.
  const auto attention = readChoice<int>(r, node, "attention", {{"flash", 0}, {"standard", 1}, {"mla", 2}});
  s.attention = attention == 1 ? AttentionKind::Standard : AttentionKind::Flash;
  s.causal = r.boolean(node, "causal", Presence::Optional).value_or(true);
  s.dropout = r.boolean(node, "dropout", Presence::Optional).value_or(true);
  if (!hidden || !seq || !heads) return std::nullopt;
  s.hidden = *hidden;
  s.seq = *seq;
  s.heads = *heads;
  s.ffn = ffn.value_or(0);
  s.vocab = vocab;
  s.kvHeads = kvHeads.value_or(0);
  s.experts = experts.value_or(0);
  s.topK = topK.value_or(0);
  s.expertFfn = expertFfn.value_or(0);
  s.sharedExperts = shared.value_or(0);
  s.capacityFactor = capacity;
  readAttentionShape(r, node, attention == 2, s);
  readArchitecture(r, node, s);
  if (experts) s.loadImbalance = r.number(node, "load_imbalance", Presence::Optional, 1.0, 1.0e4).value_or(1.0);
  const auto groups = r.integer(node, "router_groups", Presence::Optional, 1, 100000);
  const auto groupTopK = r.integer(node, "router_group_topk", Presence::Optional, 1, 100000);
  if (s.headDim == 0 && !s.mla && s.hidden % s.heads != 0) {
    r.error(node.child("heads"), "hidden " + std::to_string(s.hidden) + " is not divisible by heads " +
                                     std::to_string(s.heads) +
                                     " (expected hidden = heads × head_dim, or give head_dim)");
  }
  if (kvHeads && (*kvHeads > s.heads || s.heads % *kvHeads != 0)) {
    r.error(node.child("kv_heads"), "kv_heads " + std::to_string(*kvHeads) + " does not divide heads " +
                                        std::to_string(s.heads) + " (expected a divisor: grouped-query attention)");
  }
  checkExperts(r, node, experts, topK);
  if (experts && topK) readRouterGroups(r, node, groups, groupTopK, s);
  if (s.mtpLayers > 0 && !s.vocab) {
    r.error(node.child("mtp_layers"),
            "multi-token prediction needs 'vocab' (each module ends in the shared output head and its loss)");
  }
  if ((kind == "lm_head" || kind == "embedding") && !s.vocab) {
    r.error(node, "a " + kind + " layer's transformer shape has no 'vocab' (expected the vocabulary size)");
  }
  return s;
}

// Reads one layer entry; `repeat` expands it into several identical layers. `layersLeft` is the
// model-wide budget (kMaxLayers in all), so `repeat` in many components cannot multiply up.
void readLayer(JsonReader& r, const JsonNode& node, bool trainable, std::vector<Layer>& out, std::int64_t& layersLeft) {
  if (!r.isObject(node)) return;
  const std::size_t errorsBefore = r.errors().size();
  r.rejectUnknown(
      node, {"name", "kind", "repeat", "forward_ms", "backward_input_ms", "backward_weight_ms", "activation_bytes",
             "weight_grad_bytes", "parameter_bytes", "output_bytes", "transformer", "flops_forward", "params", "tied"});
  Layer layer;
  const auto name = r.string(node, "name", Presence::Required);
  layer.name = name.value_or("");
  layer.kind = r.string(node, "kind", Presence::Optional).value_or("generic");
  // Measured costs: times and byte counts within the limits of one layer.
  const auto measuredMs = [&](const char* key) {
    return r.number(node, key, Presence::Optional, limits::kLayerMs.min, limits::kLayerMs.max);
  };
  const auto measuredBytes = [&](const char* key) {
    return r.integer(node, key, Presence::Optional, limits::kLayerBytes.min, limits::kLayerBytes.max);
  };
  layer.forwardMs = measuredMs("forward_ms");
  layer.backwardInputMs = measuredMs("backward_input_ms");
  layer.backwardWeightMs = measuredMs("backward_weight_ms");
  layer.activationBytes = measuredBytes("activation_bytes");
  layer.weightGradBytes = measuredBytes("weight_grad_bytes");
  layer.parameterBytes = measuredBytes("parameter_bytes");
  layer.outputBytes = measuredBytes("output_bytes");
  layer.flopsForward = r.number(node, "flops_forward", Presence::Optional, 0, 1.0e21);
  layer.params = r.integer(node, "params", Presence::Optional, 0, kMaxBytes);
  layer.tied = r.boolean(node, "tied", Presence::Optional).value_or(false);
  if (layer.tied && layer.kind != "embedding" && layer.kind != "lm_head") {
    r.error(node.child("tied"),
            "only an embedding or lm_head layer can be tied (this layer's kind is '" + layer.kind + "')");
  }
  if (auto shape = r.field(node, "transformer", Presence::Optional)) {
    layer.transformer = readShape(r, *shape, layer.kind);
  }
  // Judged on the keys present, so a bad value (reported above) does not also count as missing.
  const Json& v = *node.value;
  // Reported only when nothing else was wrong with the layer: a typo such as forward_msec
  // (already reported as unknown) would otherwise be reported twice.
  if (!v.contains("forward_ms") && !v.contains("transformer") && !v.contains("flops_forward") &&
      r.errors().size() == errorsBefore) {
    r.error(node, "layer '" + excerpt(layer.name) +
                      "' has neither measured costs nor a shape (expected forward_ms, transformer or flops_forward)");
  }
  // A layer's costs are measured or derived from its shape, never half and half (a measured
  // forward beside a backward derived from the shape): a transformer shape gives every time and
  // size; FLOPs give the times, sizes may be measured beside them.
  if (v.contains("transformer") || v.contains("flops_forward")) {
    const char* shape = v.contains("transformer") ? "transformer" : "flops_forward";
    for (const char* key : {"forward_ms", "backward_input_ms", "backward_weight_ms", "activation_bytes",
                            "weight_grad_bytes", "parameter_bytes", "output_bytes"}) {
      const bool size = std::string_view(key).ends_with("_bytes");
      if (!v.contains(key) || (size && !v.contains("transformer"))) continue;
      r.error(node.child(key), std::string("is measured, but the layer's ") + (size ? "sizes" : "times") +
                                   " come from its '" + shape + "' (expected measured costs or a shape, not both)");
    }
  }
  if (!trainable) {
    for (const char* key : {"backward_input_ms", "backward_weight_ms", "weight_grad_bytes"}) {
      if (node.value->contains(key)) {
        r.error(node.child(key), std::string("a non-trainable component's layer has no backward (expected no '") + key +
                                     "', or \"trainable\": true on the component)");
      }
    }
  }
  if (layer.activationBytes && layer.weightGradBytes && *layer.weightGradBytes > *layer.activationBytes) {
    r.error(node.child("weight_grad_bytes"), "exceeds activation_bytes (expected a part of the activations)");
  }
  const auto repeat = r.integer(node, "repeat", Presence::Optional, 1, kMaxLayers);
  const std::int64_t count = repeat.value_or(1);
  if (count > layersLeft) {
    // A refusal, never a truncation: the caller stops reading (layersLeft < 0) and the model
    // is not returned.
    r.error(repeat ? node.child("repeat") : node, "would make more than " + std::to_string(kMaxLayers) +
                                                      " layers in the model (expected at most " +
                                                      std::to_string(kMaxLayers) + ")");
    layersLeft = -1;
    return;
  }
  layersLeft -= count;
  if (!repeat) {
    out.push_back(std::move(layer));
    return;
  }
  for (std::int64_t i = 0; i < *repeat; ++i) {
    Layer copy = layer;
    copy.name = layer.name + "." + std::to_string(i);
    out.push_back(std::move(copy));
  }
}

std::optional<Component> readComponent(JsonReader& r, const JsonNode& node, bool defaultTrainable,
                                       std::string defaultName, std::int64_t& layersLeft) {
  Component c;
  c.trainable = defaultTrainable;
  c.name = std::move(defaultName);
  if (!r.isObject(node)) return std::nullopt;
  if (c.name.empty()) {
    r.rejectUnknown(node, {"name", "trainable", "feeds", "layers"});
    c.name = r.string(node, "name", Presence::Required).value_or("");
    c.trainable = r.boolean(node, "trainable", Presence::Required).value_or(true);
    if (auto feeds = r.array(node, "feeds", Presence::Optional)) {
      for (std::size_t i = 0; i < feeds->value->size(); ++i) {
        if (auto f = r.stringValue(feeds->child(i))) c.feeds.push_back(*f);
      }
    }
  }
  auto layers = r.array(node, "layers", Presence::Required);
  if (!layers) return c;
  if (layers->value->empty()) {
    r.error(*layers, "component '" + excerpt(c.name) + "' has no layers (expected at least one)");
  }
  const std::size_t entries = layers->value->size();
  if (layersLeft < 0) return c;  // an earlier component already passed the limit
  if (entries > static_cast<std::size_t>(std::max<std::int64_t>(0, layersLeft))) {
    // Counted before reading: 10⁶ entries are refused with their number, not read and cut.
    r.error(*layers, "component '" + excerpt(c.name) + "' lists " + std::to_string(entries) +
                         " layers; the model may have at most " + std::to_string(kMaxLayers) + " layers in all");
    layersLeft = -1;
    return c;
  }
  for (std::size_t i = 0; i < entries; ++i) {
    readLayer(r, layers->child(i), c.trainable, c.layers, layersLeft);
    if (layersLeft < 0) break;
  }
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    auto [it, fresh] = seen.emplace(c.layers[i].name, i);
    if (!fresh && !c.layers[i].name.empty()) {
      r.error(*layers, "duplicate layer name '" + excerpt(c.layers[i].name) + "' in component '" + excerpt(c.name) +
                           "' (expected unique names)");
    }
  }
  return c;
}

void checkFeeds(JsonReader& r, const JsonNode& componentsNode, const ModelSpec& m) {
  std::map<std::string, int> index;
  for (std::size_t i = 0; i < m.components.size(); ++i) index[m.components[i].name] = static_cast<int>(i);
  std::vector<std::vector<int>> edges(m.components.size());
  for (std::size_t i = 0; i < m.components.size(); ++i) {
    const auto& c = m.components[i];
    for (std::size_t k = 0; k < c.feeds.size(); ++k) {
      const std::string ptr = componentsNode.pointer + "/" + std::to_string(i) + "/feeds/" + std::to_string(k);
      auto it = index.find(c.feeds[k]);
      if (it == index.end()) {
        std::string known;
        for (const auto& other : m.components) known += (known.empty() ? "" : ", ") + other.name;
        r.error(ptr, "'" + excerpt(c.feeds[k]) + "' is not a component of this model (expected one of: " + known + ")");
      } else if (it->second == static_cast<int>(i)) {
        r.error(ptr, "component '" + excerpt(c.name) + "' feeds itself (expected an acyclic data flow)");
      } else {
        edges[i].push_back(it->second);
      }
    }
  }
  // Cycle detection (iterative DFS with colours); reports the cycle's names.
  std::vector<int> colour(m.components.size(), 0), parent(m.components.size(), -1);
  for (std::size_t s = 0; s < m.components.size(); ++s) {
    if (colour[s]) continue;
    std::vector<std::pair<int, std::size_t>> stack{{static_cast<int>(s), 0}};
    colour[s] = 1;
    while (!stack.empty()) {
      auto& [u, next] = stack.back();
      if (next < edges[static_cast<std::size_t>(u)].size()) {
        const int v = edges[static_cast<std::size_t>(u)][next++];
        if (colour[static_cast<std::size_t>(v)] == 0) {
          colour[static_cast<std::size_t>(v)] = 1;
          parent[static_cast<std::size_t>(v)] = u;
          stack.emplace_back(v, 0);
        } else if (colour[static_cast<std::size_t>(v)] == 1) {
          std::string cycle = m.component(v).name;
          for (int w = u; w != v && w >= 0; w = parent[static_cast<std::size_t>(w)]) {
            cycle.insert(0, " → ").insert(0, m.component(w).name);
          }
          cycle.insert(0, " → ").insert(0, m.component(v).name);
          r.error(componentsNode.pointer + "/" + std::to_string(u) + "/feeds",
                  "feeds form a cycle: " + cycle + " (expected an acyclic data flow)");
          return;
        }
      } else {
        colour[static_cast<std::size_t>(u)] = 2;
        stack.pop_back();
      }
    }
  }
}

std::optional<LinkSpec> readLink(JsonReader& r, const JsonNode& node) {
  if (!r.isObject(node)) return std::nullopt;
  r.rejectUnknown(node, {"bandwidth_gbps", "latency_us"});
  const auto bw = r.number(node, "bandwidth_gbps", Presence::Required, limits::kLinkBandwidthGBps.min,
                           limits::kLinkBandwidthGBps.max);
  const auto lat =
      r.number(node, "latency_us", Presence::Optional, limits::kLinkLatencyUs.min, limits::kLinkLatencyUs.max);
  if (!bw) return std::nullopt;
  return LinkSpec{*bw, lat.value_or(0)};
}

std::optional<SshSpec> readSsh(JsonReader& r, const JsonNode& node) {
  if (!r.isObject(node)) return std::nullopt;
  r.rejectUnknown(node, {"user", "port", "identity_file", "password"});  // password: reported below
  if (node.value->contains("password"))
    r.error(node.child("password"), "passwords are never stored (expected key or agent authentication: identity_file)");
  SshSpec s;
  s.user = r.string(node, "user", Presence::Optional).value_or("");
  s.port = static_cast<int>(r.integer(node, "port", Presence::Optional, 1, 65535).value_or(22));
  s.identityFile = r.string(node, "identity_file", Presence::Optional).value_or("");
  return s;
}

template <typename T>
Expected<T> loadWith(const std::string& path, std::optional<T> (*read)(JsonReader&, const JsonNode&)) {
  PS_ASSIGN_OR_RETURN(auto doc, loadJsonFile(path));
  JsonReader reader(doc);
  auto value = read(reader, reader.root());
  if (!reader.ok() || !value) {
    if (reader.ok()) return Error{path + ": invalid document"};
    return reader.toError();
  }
  return std::move(*value);
}

// The fields each document may have.
constexpr std::array<std::string_view, 8> kModelKeys{
    "schema", "name", "samples_per_microbatch", "global_batch", "components", "layers", "optimizer", "description"};
constexpr std::array<std::string_view, 10> kClusterKeys{
    "schema",     "name", "gpu", "nodes", "gpus_per_node", "links", "nvlink_domain", "nvls", "bandwidth_matrix_gbps",
    "description"};
constexpr std::array<std::string_view, 8> kHostsKeys{"schema",
                                                     "hosts",
                                                     "launcher",
                                                     "description",
                                                     "slurm",
                                                     "mpirun",
                                                     "server_alive_interval_s",
                                                     "server_alive_count_max"};

// The start of reading a document: an object of the `schema` kind, checked first (a file of
// another kind is named as such, not listed as unknown fields), with no fields but `known`.
// False when there is nothing more to read.
bool startDocument(JsonReader& r, const JsonNode& at, std::string_view schema,
                   std::span<const std::string_view> known) {
  if (!r.isObject(at)) return false;
  if (!r.checkSchema(at, schema)) return false;
  r.rejectUnknown(at, known);
  return true;
}

}  // namespace

std::optional<ModelSpec> readModel(JsonReader& r, const JsonNode& at) {
  if (!startDocument(r, at, kModelSchema, kModelKeys)) return std::nullopt;
  ModelSpec m;
  m.name = r.string(at, "name", Presence::Required).value_or("");
  m.samplesPerMicrobatch = r.integer(at, "samples_per_microbatch", Presence::Optional, 1, 1'000'000).value_or(1);
  m.globalBatch = r.integer(at, "global_batch", Presence::Optional, 1, std::int64_t{1} << 40);
  if (auto opt = r.object(at, "optimizer", Presence::Optional)) {
    r.rejectUnknown(*opt, {"distributed"});
    m.optimizer.distributed = r.boolean(*opt, "distributed", Presence::Optional).value_or(false);
  }
  std::int64_t layersLeft = kMaxLayers;
  const bool hasComponents = at.value->contains("components");
  const bool hasLayers = at.value->contains("layers");
  if (hasComponents && hasLayers) {
    r.error(at,
            "has both 'components' and 'layers' (expected one: 'layers' is shorthand for one trainable "
            "component 'backbone')");
    return std::nullopt;
  }
  if (hasLayers) {
    if (auto c = readComponent(r, at, true, "backbone", layersLeft)) m.components.push_back(std::move(*c));
  } else {
    auto comps = r.array(at, "components", Presence::Required);
    if (!comps) return std::nullopt;
    if (comps->value->empty()) {
      r.error(*comps, "no components (expected at least one)");
      return std::nullopt;
    }
    if (comps->value->size() > 1000) {
      r.error(*comps, "has " + std::to_string(comps->value->size()) + " components (expected at most 1000)");
      return std::nullopt;
    }
    std::map<std::string, std::size_t> seen;
    for (std::size_t i = 0; i < comps->value->size(); ++i) {
      auto c = readComponent(r, comps->child(i), true, "", layersLeft);
      if (!c) continue;
      if (!c->name.empty() && !seen.emplace(c->name, i).second) {
        r.error(comps->child(i).child("name"),
                "duplicate component name '" + excerpt(c->name) + "' (expected unique names)");
      }
      m.components.push_back(std::move(*c));
    }
    if (r.ok()) checkFeeds(r, *comps, m);
  }
  std::size_t total = 0;
  for (const auto& c : m.components) total += c.layers.size();
  if (static_cast<std::int64_t>(total) > kMaxLayers) {
    r.error(at, "has " + std::to_string(total) + " layers (expected at most " + std::to_string(kMaxLayers) + ")");
  }
  if (r.ok() && m.trainableComponents().empty()) {
    r.error(at, "no trainable component (expected at least one backbone to pipeline)");
  }
  return m;
}

namespace {

// The cluster's nodes: an array of node objects, or a count with gpus_per_node. False when
// there are too many to read.
bool readNodes(JsonReader& r, const JsonNode& at, ClusterSpec& c) {
  auto nodesNode = r.field(at, "nodes", Presence::Required);
  if (nodesNode && nodesNode->value->is_array()) {
    if (at.value->contains("gpus_per_node")) {
      r.error(at.child("gpus_per_node"),
              "is only allowed with an integer 'nodes' (expected 'gpus' in each entry of the nodes array)");
    }
    if (nodesNode->value->empty()) r.error(*nodesNode, "no nodes (expected at least one)");
    if (nodesNode->value->size() > 100000) {
      r.error(*nodesNode, "has " + std::to_string(nodesNode->value->size()) + " nodes (expected at most 100000)");
      return false;
    }
    for (std::size_t i = 0; i < nodesNode->value->size(); ++i) {
      const JsonNode n = nodesNode->child(i);
      if (!r.isObject(n)) continue;
      r.rejectUnknown(n, {"host", "gpus", "ssh", "gpu"});
      NodeSpec node;
      node.host = r.string(n, "host", Presence::Required).value_or("");
      node.gpus = static_cast<int>(
          r.integer(n, "gpus", Presence::Required, limits::kGpusPerNode.min, limits::kGpusPerNode.max).value_or(0));
      if (auto s = r.field(n, "ssh", Presence::Optional)) node.ssh = readSsh(r, *s);
      if (auto g = r.field(n, "gpu", Presence::Optional)) node.gpu = readGpu(r, *g);
      c.nodes.push_back(std::move(node));
    }
  } else if (nodesNode) {
    const auto count = r.integerValue(*nodesNode, 1, 100000);
    const auto perNode =
        r.integer(at, "gpus_per_node", Presence::Required, limits::kGpusPerNode.min, limits::kGpusPerNode.max);
    if (count && perNode) {
      for (std::int64_t i = 0; i < *count; ++i) {
        c.nodes.push_back(NodeSpec{"node" + std::to_string(i), static_cast<int>(*perNode), std::nullopt, std::nullopt});
      }
    }
  }
  return true;
}

// The links between the cluster's GPUs: NVLink inside a node, the network between nodes, the
// NICs and a host switch.
void readLinks(JsonReader& r, const JsonNode& links, ClusterSpec& c) {
  r.rejectUnknown(links, {"intra_node", "inter_node", "nics_per_node", "host_switch"});
  c.nicsPerNode = static_cast<int>(r.integer(links, "nics_per_node", Presence::Optional, 1, 1024).value_or(0));
  if (auto sw = r.object(links, "host_switch", Presence::Optional)) {
    r.rejectUnknown(*sw, {"gpus", "bandwidth_gbps"});
    c.hostSwitchGpus = static_cast<int>(r.integer(*sw, "gpus", Presence::Required, 1, 1024).value_or(0));
    c.hostSwitchGBps = r.number(*sw, "bandwidth_gbps", Presence::Required, limits::kLinkBandwidthGBps.min,
                                limits::kLinkBandwidthGBps.max)
                           .value_or(0);
  }
  if (auto intra = r.field(links, "intra_node", Presence::Required)) {
    if (auto l = readLink(r, *intra)) c.intraNode = *l;
  }
  const bool multiNode = c.nodes.size() > 1;
  if (auto inter = r.field(links, "inter_node", multiNode ? Presence::Required : Presence::Optional)) {
    if (auto l = readLink(r, *inter)) c.interNode = *l;
  } else {
    c.interNode = c.intraNode;
  }
}

// A measured GPU-to-GPU bandwidth matrix, one row per GPU, when the file has one.
void readBandwidthMatrix(JsonReader& r, const JsonNode& at, ClusterSpec& c) {
  if (auto matrix = r.array(at, "bandwidth_matrix_gbps", Presence::Optional)) {
    const auto n = static_cast<std::size_t>(c.totalGpus());
    if (matrix->value->size() != n) {
      r.error(*matrix, "has " + std::to_string(matrix->value->size()) + " rows (expected " + std::to_string(n) +
                           ", one per GPU)");
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        const JsonNode row = matrix->child(i);
        if (!r.isArray(row)) continue;
        if (row.value->size() != n) {
          r.error(row, "has " + std::to_string(row.value->size()) + " entries (expected " + std::to_string(n) + ")");
          continue;
        }
        std::vector<double> values;
        for (std::size_t k = 0; k < n; ++k) values.push_back(r.numberValue(row.child(k), 0, 1e6).value_or(0));
        c.bandwidthMatrixGBps.push_back(std::move(values));
      }
    }
  }
}

}  // namespace

std::optional<ClusterSpec> readCluster(JsonReader& r, const JsonNode& at) {
  if (!startDocument(r, at, kClusterSchema, kClusterKeys)) return std::nullopt;
  ClusterSpec c;
  c.name = r.string(at, "name", Presence::Required).value_or("");
  int catalogDomain = 0;  // the NVLink domain of a GPU named from the catalogue
  if (auto g = r.field(at, "gpu", Presence::Required)) {
    if (auto gpu = readGpu(r, *g, &catalogDomain)) c.gpu = *gpu;
  }
  if (!readNodes(r, at, c)) return std::nullopt;
  if (r.ok() && c.totalGpus() == 0) r.error(at, "zero GPUs (expected at least one)");
  // An NVLink domain wider than a node (GB200/GB300 NVL72: 18 trays of 4 GPUs on one fabric):
  // the file's own value, else the catalogue GPU's.
  c.nvlinkDomain =
      static_cast<int>(r.integer(at, "nvlink_domain", Presence::Optional, 1, limits::kMaxGpus).value_or(catalogDomain));
  // NVLink SHARP: on where the GPU ships with NVLS switches (its catalogue figures), unless the
  // file says its switches lack it. A file cannot turn on what its GPU has no figures for.
  if (auto nvls = r.boolean(at, "nvls", Presence::Optional)) {
    c.nvls = *nvls;
    if (*nvls && c.gpu.nvlsEfficiency <= 0 && r.ok()) {
      r.error(at.child("nvls"), "is true but GPU '" + excerpt(c.gpu.name) +
                                    "' has no NVLS figures (expected false, or a gpu object with \"nvls\": "
                                    "{\"efficiency\", \"channels\"})");
    }
  }
  if (r.ok() && c.totalGpus() > kMaxGpus)
    r.error(at, "has " + std::to_string(c.totalGpus()) + " GPUs (expected at most " + std::to_string(kMaxGpus) + ")");
  if (auto links = r.object(at, "links", Presence::Required)) readLinks(r, *links, c);
  readBandwidthMatrix(r, at, c);
  return c;
}

namespace {
// Host and user names reach ssh, scp and srun command lines: one that starts with '-' would be
// read as an option (-oProxyCommand=… runs a command), whitespace or a control character would
// split or forge a line. Refused, not quoted.
void checkSshName(JsonReader& r, const JsonNode& at, const std::string& value, const char* what) {
  if (value.empty()) return;
  if (value.front() == '-') {
    r.error(at, "'" + excerpt(value) + "' begins with '-' (expected a " + what +
                    "; a leading '-' would be read as an ssh option)");
    return;
  }
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F || c == ' ') {
      r.error(at, "'" + excerpt(value) + "' contains whitespace or a control character (expected a " + what + ")");
      return;
    }
  }
}
}  // namespace

std::optional<HostsSpec> readHosts(JsonReader& r, const JsonNode& at) {
  if (!startDocument(r, at, kHostsSchema, kHostsKeys)) return std::nullopt;
  HostsSpec h;
  if (auto launcher = r.string(at, "launcher", Presence::Optional)) {
    if (auto parsed = parseLauncher(*launcher)) {
      h.launcher = *parsed;
    } else {
      r.error(at.child("launcher"),
              "'" + excerpt(*launcher) + "' is not a launcher (expected " + launcherChoices() + ")");
    }
  }
  readLauncherSections(r, at, h);
  auto hosts = r.array(at, "hosts", Presence::Required);
  if (!hosts) return std::nullopt;
  if (hosts->value->empty()) r.error(*hosts, "no hosts (expected at least one)");
  if (hosts->value->size() > 100000) {
    r.error(*hosts, "has " + std::to_string(hosts->value->size()) + " hosts (expected at most 100000)");
    return std::nullopt;
  }
  for (std::size_t i = 0; i < hosts->value->size(); ++i) {
    const JsonNode n = hosts->child(i);
    if (!r.isObject(n)) continue;
    // password is reported on its own below, not as an unknown field.
    r.rejectUnknown(n, {"host", "port", "user", "identity_file", "known_hosts_file", "gpus", "remote_dir", "password"});
    if (n.value->contains("password"))
      r.error(n.child("password"), "passwords are never stored (expected key or agent authentication: identity_file)");
    HostEntry e;
    e.host = r.string(n, "host", Presence::Required).value_or("");
    e.port = static_cast<int>(r.integer(n, "port", Presence::Optional, 1, 65535).value_or(22));
    e.user = r.string(n, "user", Presence::Optional).value_or("");
    checkSshName(r, n.child("host"), e.host, "host name");
    checkSshName(r, n.child("user"), e.user, "user name");
    e.identityFile = r.string(n, "identity_file", Presence::Optional).value_or("");
    e.knownHostsFile = r.string(n, "known_hosts_file", Presence::Optional).value_or("");
    e.gpus = static_cast<int>(
        r.integer(n, "gpus", Presence::Required, limits::kGpusPerNode.min, limits::kGpusPerNode.max).value_or(1));
    e.remoteDir = r.string(n, "remote_dir", Presence::Optional).value_or("~/.pipestudio");
    h.hosts.push_back(std::move(e));
  }
  return h;
}

Expected<ModelSpec> loadModel(const std::string& path) { return loadWith<ModelSpec>(path, &readModel); }
Expected<ClusterSpec> loadCluster(const std::string& path) { return loadWith<ClusterSpec>(path, &readCluster); }
Expected<HostsSpec> loadHosts(const std::string& path) { return loadWith<HostsSpec>(path, &readHosts); }

Expected<std::vector<GpuSpec::ExpertGemmPoint>> loadExpertGemmCurve(const std::string& path) {
  PS_ASSIGN_OR_RETURN(auto doc, loadJsonFile(path));
  JsonReader r(doc);
  const JsonNode root = r.root();
  if (!r.isObject(root)) return r.toError();
  r.checkSchema(root, kExpertGemmCurveSchema);
  r.rejectUnknown(root, {"schema", "gpu", "expert_gemm_curve", "measurements"});
  GpuSpec g;
  if (r.array(root, "expert_gemm_curve", Presence::Required)) readExpertGemmCurve(r, root, g);
  if (r.ok() && g.expertGemmCurve.empty()) r.error(root.child("expert_gemm_curve"), "has no points (expected some)");
  if (!r.ok()) return r.toError();
  return g.expertGemmCurve;
}

namespace {
Json layerToJson(const Layer& l) {
  Json j;
  j["name"] = l.name;
  j["kind"] = l.kind;
  if (l.forwardMs) j["forward_ms"] = *l.forwardMs;
  if (l.backwardInputMs) j["backward_input_ms"] = *l.backwardInputMs;
  if (l.backwardWeightMs) j["backward_weight_ms"] = *l.backwardWeightMs;
  if (l.activationBytes) j["activation_bytes"] = *l.activationBytes;
  if (l.weightGradBytes) j["weight_grad_bytes"] = *l.weightGradBytes;
  if (l.parameterBytes) j["parameter_bytes"] = *l.parameterBytes;
  if (l.outputBytes) j["output_bytes"] = *l.outputBytes;
  if (l.transformer) {
    Json t{{"hidden", l.transformer->hidden}, {"seq", l.transformer->seq}, {"heads", l.transformer->heads}};
    if (l.transformer->ffn > 0) t["ffn"] = l.transformer->ffn;
    const TransformerShape& ts = *l.transformer;
    if (ts.vocab) t["vocab"] = *ts.vocab;
    if (ts.kvHeads > 0) t["kv_heads"] = ts.kvHeads;
    if (ts.mlp == MlpKind::SwiGlu) t["mlp"] = "swiglu";
    if (ts.attention == AttentionKind::Standard) t["attention"] = "standard";
    if (ts.headDim > 0) t["head_dim"] = ts.headDim;
    if (ts.mla) {
      t["attention"] = "mla";
      if (ts.mla->qLoraRank > 0) t["q_lora_rank"] = ts.mla->qLoraRank;
      t["kv_lora_rank"] = ts.mla->kvLoraRank;
      t["qk_nope_head_dim"] = ts.mla->qkNopeHeadDim;
      t["qk_rope_head_dim"] = ts.mla->qkRopeHeadDim;
      t["v_head_dim"] = ts.mla->vHeadDim;
    }
    if (ts.window > 0) t["window"] = ts.window;
    if (ts.mtpLayers > 0) t["mtp_layers"] = ts.mtpLayers;
    if (!ts.causal) t["causal"] = false;
    if (!ts.dropout) t["dropout"] = false;
    const BlockArchitecture& a = ts.architecture;
    if (a.norm) t["norm"] = *a.norm == NormKind::RmsNorm ? "rmsnorm" : "layernorm";
    if (a.position) {
      static constexpr std::array<const char*, 4> kPositions{"learned", "rope", "yarn", "none"};
      t["position_embedding"] = kPositions[static_cast<std::size_t>(*a.position)];
    }
    if (a.rotaryBase) t["rotary_base"] = *a.rotaryBase;
    if (a.bias) t["bias"] = *a.bias;
    if (a.qkvBias) t["qkv_bias"] = true;
    if (a.qkNorm) t["qk_norm"] = true;
    if (a.attentionSinks) t["attention_sinks"] = true;
    if (ts.experts > 0) {
      t["experts"] = ts.experts;
      t["top_k"] = ts.topK;
      if (ts.expertFfn > 0) t["expert_ffn"] = ts.expertFfn;
      if (ts.sharedExperts > 0) t["shared_experts"] = ts.sharedExperts;
      if (ts.capacityFactor) t["capacity_factor"] = *ts.capacityFactor;
      if (ts.loadImbalance != 1.0) t["load_imbalance"] = ts.loadImbalance;
      if (ts.routerGroups > 0) {
        t["router_groups"] = ts.routerGroups;
        t["router_group_topk"] = ts.routerGroupTopK;
      }
    }
    j["transformer"] = t;
  }
  if (l.flopsForward) j["flops_forward"] = *l.flopsForward;
  if (l.params) j["params"] = *l.params;
  if (l.tied) j["tied"] = true;
  return j;
}

// A per-precision field: the bf16 number when nothing else is set (files written before
// issue 25 read back unchanged), else an object of every precision with a value.
Json perPrecisionToJson(double bf16, const std::array<double, kPrecisionCount>& values) {
  Json o = Json::object();
  for (Precision p : kPrecisions) {
    const double v = p == Precision::Bf16 ? bf16 : values[static_cast<std::size_t>(p)];
    if (v > 0 && !(p == Precision::Fp16 && v == bf16)) o[std::string(precisionName(p))] = v;
  }
  if (o.size() <= 1) return bf16;
  return o;
}

Json gpuToJson(const GpuSpec& g) {
  Json j{{"name", g.name},
         {"peak_tflops", perPrecisionToJson(g.peakTflops, g.peakTflopsByPrecision)},
         {"memory_gib", g.memoryGib},
         {"efficiency", perPrecisionToJson(g.efficiency, g.efficiencyByPrecision)}};
  Json attention = Json::object();
  for (AttentionBackend b : {AttentionBackend::Fused, AttentionBackend::Flash}) {
    const GpuSpec::AttentionEfficiency& e = g.attentionEfficiency[static_cast<std::size_t>(b)];
    if (e.forward > 0 && e.backward > 0) {
      attention[std::string(attentionBackendName(b))] = Json{{"forward", e.forward}, {"backward", e.backward}};
    }
  }
  if (!attention.empty()) j["attention_efficiency"] = std::move(attention);
  Json fill = Json::object();
  for (Precision p : kPrecisions) {
    if (const double v = g.gemmFillK[static_cast<std::size_t>(p)]; v > 0) fill[std::string(precisionName(p))] = v;
  }
  if (!fill.empty()) j["gemm_fill_k"] = std::move(fill);
  if (g.memoryBandwidthGBps > 0) j["memory_bandwidth_gbps"] = g.memoryBandwidthGBps;
  if (g.smCount > 0) j["sm_count"] = g.smCount;
  if (g.hostLinkGBps > 0) j["host_link_gbps"] = g.hostLinkGBps;
  if (g.epOverlapEfficiency > 0) j["ep_overlap_efficiency"] = g.epOverlapEfficiency;
  if (g.computeCapability > 0) j["compute_capability"] = g.computeCapability;
  if (!g.expertGemmCurve.empty()) {
    Json curve = Json::array();
    for (const GpuSpec::ExpertGemmPoint& p : g.expertGemmCurve) {
      curve.push_back(Json{{"precision", std::string(precisionName(p.precision))},
                           {"tokens", p.tokens},
                           {"hidden", p.hidden},
                           {"expert_ffn", p.expertFfn},
                           {"efficiency", p.efficiency}});
    }
    j["expert_gemm_curve"] = std::move(curve);
  }
  if (g.nvlsEfficiency > 0) j["nvls"] = Json{{"efficiency", g.nvlsEfficiency}, {"channels", g.nvlsChannels}};
  return j;
}
}  // namespace

Json modelToJson(const ModelSpec& m) {
  Json j{{"schema", kModelSchema}, {"name", m.name}, {"samples_per_microbatch", m.samplesPerMicrobatch}};
  if (m.globalBatch) j["global_batch"] = *m.globalBatch;
  if (m.optimizer.distributed) j["optimizer"] = Json{{"distributed", true}};
  Json comps = Json::array();
  for (const auto& c : m.components) {
    Json cj{{"name", c.name}, {"trainable", c.trainable}};
    if (!c.feeds.empty()) cj["feeds"] = c.feeds;
    Json layers = Json::array();
    for (const auto& l : c.layers) layers.push_back(layerToJson(l));
    cj["layers"] = std::move(layers);
    comps.push_back(std::move(cj));
  }
  j["components"] = std::move(comps);
  return j;
}

Json clusterToJson(const ClusterSpec& c) {
  Json j{{"schema", kClusterSchema}, {"name", c.name}, {"gpu", gpuToJson(c.gpu)}};
  Json nodes = Json::array();
  for (const auto& n : c.nodes) {
    Json nj{{"host", n.host}, {"gpus", n.gpus}};
    if (n.ssh) {
      Json s{{"port", n.ssh->port}};
      if (!n.ssh->user.empty()) s["user"] = n.ssh->user;
      if (!n.ssh->identityFile.empty()) s["identity_file"] = n.ssh->identityFile;
      nj["ssh"] = s;
    }
    if (n.gpu) nj["gpu"] = gpuToJson(*n.gpu);
    nodes.push_back(std::move(nj));
  }
  j["nodes"] = std::move(nodes);
  j["links"] =
      Json{{"intra_node", {{"bandwidth_gbps", c.intraNode.bandwidthGBps}, {"latency_us", c.intraNode.latencyUs}}},
           {"inter_node", {{"bandwidth_gbps", c.interNode.bandwidthGBps}, {"latency_us", c.interNode.latencyUs}}}};
  if (c.nicsPerNode > 0) j["links"]["nics_per_node"] = c.nicsPerNode;
  if (c.hostSwitchGpus > 0) {
    j["links"]["host_switch"] = Json{{"gpus", c.hostSwitchGpus}, {"bandwidth_gbps", c.hostSwitchGBps}};
  }
  if (c.nvlinkDomain > c.gpusPerNode()) j["nvlink_domain"] = c.nvlinkDomain;
  if (!c.nvls) j["nvls"] = false;
  if (!c.bandwidthMatrixGBps.empty()) j["bandwidth_matrix_gbps"] = c.bandwidthMatrixGBps;
  return j;
}

Json hostsToJson(const HostsSpec& h) {
  Json hosts = Json::array();
  for (const auto& e : h.hosts) {
    Json j{{"host", e.host}, {"port", e.port}, {"gpus", e.gpus}, {"remote_dir", e.remoteDir}};
    if (!e.user.empty()) j["user"] = e.user;
    if (!e.identityFile.empty()) j["identity_file"] = e.identityFile;
    if (!e.knownHostsFile.empty()) j["known_hosts_file"] = e.knownHostsFile;
    hosts.push_back(std::move(j));
  }
  Json j{{"schema", kHostsSchema}, {"launcher", name(h.launcher)}, {"hosts", std::move(hosts)}};
  writeLauncherSections(h, j);
  return j;
}

Expected<std::string> documentKind(const JsonDocument& doc) {
  if (!doc.root.is_object()) {
    return Error{doc.where("") + ": is " + jsonTypeWithArticle(doc.root) +
                 " (expected an object with a 'schema' field)"};
  }
  const auto it = doc.root.find("schema");
  if (it == doc.root.end()) {
    return Error{doc.where("") + ": missing required field 'schema' (expected e.g. \"pipestudio.model/1\")"};
  }
  if (!it->is_string()) {
    return Error{doc.where("/schema") + ": is " + jsonTypeWithArticle(*it) +
                 " (expected a string such as \"pipestudio.model/1\")"};
  }
  const std::string schema = it->get<std::string>();
  for (const char* kind : {"model", "cluster", "plan", "hosts", "workspace"}) {
    if (schema.rfind(std::string("pipestudio.") + kind + "/", 0) == 0) return std::string(kind);
  }
  return Error{doc.where("/schema") + ": schema '" + excerpt(schema) +
               "' is not a PipeStudio document (expected pipestudio.model/1, pipestudio.cluster/1, "
               "pipestudio.plan/1, pipestudio.hosts/1 or pipestudio.workspace/1)"};
}

}  // namespace pipestudio
