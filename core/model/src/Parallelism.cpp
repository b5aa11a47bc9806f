#include "pipestudio/model/Parallelism.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace pipestudio {

std::string_view recomputeName(Recompute recompute) {
  switch (recompute) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  return "none";
}

std::optional<Recompute> recomputeFromName(std::string_view name) {
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    if (recomputeName(r) == name) return r;
  }
  return std::nullopt;
}

std::string_view frameworkName(Framework framework) {
  return framework == Framework::Torchtitan ? "torchtitan" : "megatron";
}

std::optional<Framework> frameworkFromName(std::string_view name) {
  for (Framework f : {Framework::Megatron, Framework::Torchtitan}) {
    if (frameworkName(f) == name) return f;
  }
  return std::nullopt;
}

std::string_view frameworkChoices() { return "megatron|torchtitan"; }

namespace {

// Megatron-Core's spelling of each module (--recompute-modules), in bit order.
constexpr std::array<std::pair<std::uint32_t, std::string_view>, 7> kModules{{
    {kRecomputeCoreAttn, "core_attn"},
    {kRecomputeLayerNorm, "layernorm"},
    {kRecomputeMlp, "mlp"},
    {kRecomputeMoeAct, "moe_act"},
    {kRecomputeMoe, "moe"},
    {kRecomputeSharedExperts, "shared_experts"},
    {kRecomputeMlaUpProj, "mla_up_proj"},
}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A list of named bits: the names of `bits` in table order, comma-separated; and a
// comma-separated list read back (nullopt, with the first unknown name in `unknown`).
template <std::size_t N>
std::string bitsName(const std::array<std::pair<std::uint32_t, std::string_view>, N>& table, std::uint32_t bits) {
  std::string out;
  for (const auto& [bit, name] : table) {
    if (bits & bit) out += (out.empty() ? "" : ",") + std::string(name);
  }
  return out;
}

template <std::size_t N>
std::optional<std::uint32_t> bitsFromNames(const std::array<std::pair<std::uint32_t, std::string_view>, N>& table,
                                           std::string_view names, std::string* unknown) {
  std::uint32_t bits = 0;
  while (!names.empty()) {
    const auto comma = names.find(',');
    const std::string_view item = trim(names.substr(0, comma));
    names = comma == std::string_view::npos ? std::string_view{} : names.substr(comma + 1);
    if (item.empty()) continue;
    bool found = false;
    for (const auto& [bit, name] : table) {
      if (item == name) {
        bits |= bit;
        found = true;
      }
    }
    if (!found) {
      if (unknown) *unknown = std::string(item);
      return std::nullopt;
    }
  }
  return bits;
}

}  // namespace

std::string_view recomputeMethodName(RecomputeMethod method) {
  return method == RecomputeMethod::Block ? "block" : "uniform";
}

std::optional<RecomputeMethod> recomputeMethodFromName(std::string_view name) {
  if (name == "uniform") return RecomputeMethod::Uniform;
  if (name == "block") return RecomputeMethod::Block;
  return std::nullopt;
}

std::string recomputeModulesName(std::uint32_t bits) { return bitsName(kModules, bits); }

std::optional<std::uint32_t> recomputeModulesFromNames(std::string_view names, std::string* unknown) {
  return bitsFromNames(kModules, names, unknown);
}

namespace {

// Megatron-Core's spelling of each offload module (--offload-modules), in bit order.
constexpr std::array<std::pair<std::uint32_t, std::string_view>, kOffloadModuleCount> kOffloadModules{{
    {kOffloadAttnNorm, "attn_norm"},
    {kOffloadQkvLinear, "qkv_linear"},
    {kOffloadCoreAttn, "core_attn"},
    {kOffloadAttnProj, "attn_proj"},
    {kOffloadMlpNorm, "mlp_norm"},
    {kOffloadExpertFc1, "expert_fc1"},
    {kOffloadMoeAct, "moe_act"},
}};

}  // namespace

std::string offloadModulesName(std::uint32_t bits) { return bitsName(kOffloadModules, bits); }

std::optional<std::uint32_t> offloadModulesFromNames(std::string_view names, std::string* unknown) {
  return bitsFromNames(kOffloadModules, names, unknown);
}

std::string_view offloadModuleChoices() {
  return "attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act";
}

std::string_view recomputeModuleChoices() {
  return "core_attn, layernorm, mlp, moe_act, moe, shared_experts, mla_up_proj";
}

namespace {

// Megatron-Core's spelling of each CUDA graph module (--cuda-graph-modules), in bit order.
constexpr std::array<std::pair<std::uint32_t, std::string_view>, 6> kGraphModules{{
    {kGraphAttn, "attn"},
    {kGraphMlp, "mlp"},
    {kGraphMoe, "moe"},
    {kGraphMoeRouter, "moe_router"},
    {kGraphMoePreprocess, "moe_preprocess"},
    {kGraphMamba, "mamba"},
}};

constexpr std::array<std::pair<CudaGraphImpl, std::string_view>, 4> kGraphImpls{{
    {CudaGraphImpl::None, "none"},
    {CudaGraphImpl::Local, "local"},
    {CudaGraphImpl::TransformerEngine, "transformer_engine"},
    {CudaGraphImpl::FullIteration, "full_iteration"},
}};

}  // namespace

std::string_view cudaGraphImplName(CudaGraphImpl impl) {
  for (const auto& [value, name] : kGraphImpls) {
    if (value == impl) return name;
  }
  return "none";
}

std::optional<CudaGraphImpl> cudaGraphImplFromName(std::string_view name) {
  for (const auto& [value, spelled] : kGraphImpls) {
    if (spelled == name) return value;
  }
  return std::nullopt;
}

std::string_view cudaGraphImplChoices() { return "none|local|transformer_engine|full_iteration"; }

std::string cudaGraphModulesName(std::uint32_t bits) { return bitsName(kGraphModules, bits); }

std::optional<std::uint32_t> cudaGraphModulesFromNames(std::string_view names, std::string* unknown) {
  return bitsFromNames(kGraphModules, names, unknown);
}

std::string_view cudaGraphModuleChoices() { return "attn, mlp, moe, moe_router, moe_preprocess, mamba"; }

std::optional<std::string> cudaGraphProblem(const Parallelism& par) {
  const std::uint32_t m = par.cudaGraphModules;
  if (par.cudaGraphImpl == CudaGraphImpl::None) return std::nullopt;
  if (par.cudaGraphImpl == CudaGraphImpl::FullIteration && m != 0) {
    return "full_iteration graphs capture the whole forward-backward: name no --cuda-graph-modules with them";
  }
  if ((m & kGraphMoe) && (m & kGraphMoeRouter)) return "the CUDA graph modules moe and moe_router exclude each other";
  if ((m & kGraphMoePreprocess) && !(m & kGraphMoeRouter)) {
    return "the CUDA graph module moe_preprocess needs moe_router";
  }
  if (par.cudaGraphImpl != CudaGraphImpl::FullIteration && par.recompute == Recompute::Full) {
    return "full recomputation runs only with full_iteration CUDA graphs (Megatron-Core refuses per-layer graphs "
           "with it)";
  }
  if (par.cudaGraphImpl == CudaGraphImpl::TransformerEngine && (m & kGraphMoeRouter) &&
      (par.selectiveModules() & kRecomputeMoe)) {
    return "recomputing the moe module is not supported with a transformer_engine graph of moe_router";
  }
  return std::nullopt;
}

}  // namespace pipestudio

namespace pipestudio {

std::string_view flexBackendName(FlexBackend backend) {
  return backend == FlexBackend::HybridEp ? "hybridep" : "deepep";
}

std::optional<FlexBackend> flexBackendFromName(std::string_view name) {
  for (FlexBackend b : {FlexBackend::DeepEp, FlexBackend::HybridEp}) {
    if (flexBackendName(b) == name) return b;
  }
  return std::nullopt;
}

std::string_view cpCommTypeName(CpCommType type) {
  switch (type) {
    case CpCommType::P2p:
      return "p2p";
    case CpCommType::A2a:
      return "a2a";
    case CpCommType::A2aP2p:
      return "a2a+p2p";
  }
  return "p2p";
}

std::optional<CpCommType> cpCommTypeFromName(std::string_view name) {
  for (CpCommType t : {CpCommType::P2p, CpCommType::A2a, CpCommType::A2aP2p}) {
    if (cpCommTypeName(t) == name) return t;
  }
  return std::nullopt;
}

std::string_view cpCommTypeChoices() { return "p2p|a2a|a2a+p2p"; }

}  // namespace pipestudio

namespace pipestudio {

std::string_view attentionBackendName(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::Fused:
      return "fused";
    case AttentionBackend::Flash:
      return "flash";
    case AttentionBackend::Unfused:
      return "unfused";
  }
  return "fused";
}

std::optional<AttentionBackend> attentionBackendFromName(std::string_view name) {
  for (AttentionBackend b : {AttentionBackend::Fused, AttentionBackend::Flash, AttentionBackend::Unfused}) {
    if (attentionBackendName(b) == name) return b;
  }
  return std::nullopt;
}

std::string_view attentionBackendChoices() { return "fused|flash|unfused"; }

}  // namespace pipestudio
