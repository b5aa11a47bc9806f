#include "pipestudio/plan/Plan.hpp"

#include <array>

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

}  // namespace pipestudio
