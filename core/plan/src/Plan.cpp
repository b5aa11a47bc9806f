#include "pipestudio/plan/Plan.hpp"

#include <algorithm>
#include <array>
#include <limits>

namespace pipestudio {
namespace {
constexpr std::array<std::string_view, kOpKindCount> kNames = {"F", "B", "W", "BW", "N", "S", "T", "OPT", "D2H", "H2D"};
constexpr std::array<std::string_view, 3> kFsdpNames = {"UNSHARD", "RESHARD", "REDUCE_GRAD"};
}  // namespace

std::string_view opKindChoices() { return "F, B, W, BW, N, S, T, OPT, D2H, H2D"; }

std::string_view opKindName(OpKind kind) { return kNames[static_cast<std::size_t>(kind)]; }

std::string_view commPayloadName(OpKind kind) {
  switch (kind) {
    case OpKind::F:
      return "activation";
    case OpKind::N:
      return "frozen output";
    case OpKind::S:
    case OpKind::T:
      return "vocabulary";
    case OpKind::D2H:
    case OpKind::H2D:
      return "offloaded activation";
    default:
      return "gradient";
  }
}

std::optional<OpKind> opKindFromName(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<OpKind>(i);
  }
  return std::nullopt;
}

std::string_view fsdpActionName(FsdpActionKind kind) { return kFsdpNames[static_cast<std::size_t>(kind)]; }

std::optional<FsdpActionKind> fsdpActionFromName(std::string_view name) {
  for (std::size_t i = 0; i < kFsdpNames.size(); ++i) {
    if (kFsdpNames[i] == name) return static_cast<FsdpActionKind>(i);
  }
  return std::nullopt;
}

namespace {

// The parts of a hostile plan may be near the int64 range: sums saturate.
std::int64_t saturatingSum(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return b > 0 ? std::numeric_limits<std::int64_t>::max() : 0;
  return out;
}

std::int64_t sumParts(const MemoryBreakdown& m, bool keptBack) {
  std::int64_t total = 0;
  for (const MemoryPart& part : memoryParts()) {
    if (part.keptBack == keptBack) total = saturatingSum(total, m.*part.bytes);
  }
  return total;
}

}  // namespace

const std::array<MemoryPart, kMemoryPartCount>& memoryParts() {
  static const std::array<MemoryPart, kMemoryPartCount> kParts{{
      {"parameters", "params", "parameter_bytes", &MemoryBreakdown::parameterBytes, false},
      {"gradients", "grads", "gradient_bytes", &MemoryBreakdown::gradientBytes, false},
      {"optimizer state", "optimizer", "optimizer_bytes", &MemoryBreakdown::optimizerBytes, false},
      {"low-precision weights", "lp weights", "low_precision_weight_bytes", &MemoryBreakdown::lowPrecisionWeightBytes,
       false},
      {"activations", "activations", "activation_bytes", &MemoryBreakdown::activationBytes, false},
      {"recomputed activations", "recompute", "recompute_bytes", &MemoryBreakdown::recomputeBytes, false},
      {"collective buffers", "buffers", "communication_bytes", &MemoryBreakdown::communicationBytes, false},
      {"userbuffers", "userbuffers", "userbuffer_bytes", &MemoryBreakdown::userbufferBytes, false},
      {"GEMM workspaces", "workspaces", "workspace_bytes", &MemoryBreakdown::workspaceBytes, false},
      {"CUDA graph pools", "graphs", "cuda_graph_bytes", &MemoryBreakdown::cudaGraphBytes, false},
      {"CUDA context and NCCL", "context", "context_bytes", &MemoryBreakdown::contextBytes, true},
      {"allocator fragmentation", "fragmentation", "fragmentation_bytes", &MemoryBreakdown::fragmentationBytes, true},
  }};
  return kParts;
}

const MemoryPart& largestMemoryPart(const MemoryBreakdown& memory) {
  const auto& parts = memoryParts();
  const MemoryPart* largest = parts.data();
  for (const MemoryPart& part : parts) {
    if (!part.keptBack && memory.*part.bytes > memory.*largest->bytes) largest = &part;
  }
  return *largest;
}

std::int64_t MemoryBreakdown::allocatedBytes() const { return sumParts(*this, false); }
std::int64_t MemoryBreakdown::marginBytes() const { return sumParts(*this, true); }
std::int64_t MemoryBreakdown::totalBytes() const { return saturatingSum(allocatedBytes(), marginBytes()); }

}  // namespace pipestudio
