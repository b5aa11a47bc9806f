#include "pipestudio/model/Parallelism.hpp"

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

}  // namespace pipestudio
