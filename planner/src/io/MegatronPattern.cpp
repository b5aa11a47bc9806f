// Megatron-Core's hybrid layer pattern, read and written in one place (the export writes it, `plan
// --megatron-layout` reads it). The grammar and its rules are those of
// megatron/core/models/hybrid/hybrid_layer_allocation.py (parse_hybrid_pattern,
// _validate_pattern, validate_segment_layers) at NVIDIA/Megatron-LM d98e8a64dd.
#include <string>

#include "pipestudio/common/Text.hpp"
#include "pipestudio/planner/Export.hpp"

namespace pipestudio {
namespace {

constexpr std::string_view kLayerSymbols = "*+D-EMG";
constexpr std::size_t kMaxPatternBytes = 1'000'000;

bool isLayerSymbol(char c) { return kLayerSymbols.find(c) != std::string_view::npos; }

// Megatron refuses standard attention beside multi-head latent or DeepSeek sparse attention.
bool mixesAttention(std::string_view text) {
  const bool standard = text.find('*') != std::string_view::npos;
  return standard && text.find_first_of("+D") != std::string_view::npos;
}

std::string quoted(std::string_view pattern) { return "hybrid layer pattern '" + excerpt(pattern) + "'"; }

}  // namespace

Expected<HybridPattern> parseHybridPattern(std::string_view pattern) {
  if (pattern.size() > kMaxPatternBytes) {
    return Error{quoted(pattern) + ": " + std::to_string(pattern.size()) + " bytes (expected at most " +
                 std::to_string(kMaxPatternBytes) + ")"};
  }
  HybridPattern out;
  out.segments.emplace_back();
  std::size_t at = 0;
  for (; at < pattern.size() && pattern[at] != '/'; ++at) {
    const char c = pattern[at];
    if (c == '|') {
      out.segments.emplace_back();
    } else if (isLayerSymbol(c)) {
      out.segments.back() += c;
    } else {
      return Error{quoted(pattern) + ": '" + escapeControl(std::string(1, c)) + "' at " + std::to_string(at) +
                   " is not a layer symbol (expected * attention, + MLA, D sparse attention, - MLP, E MoE, M Mamba, "
                   "G gated delta net, | between pipeline segments, / before each MTP depth)"};
    }
  }
  std::string main;
  for (const std::string& s : out.segments) main += s;
  if (mixesAttention(main)) {
    return Error{
        quoted(pattern) +
        ": Megatron does not build standard attention (*) beside MLA (+) or sparse attention (D) in one model"};
  }
  // Each `/` starts one MTP depth; every depth must be the same pattern (empty depths are none).
  std::vector<std::string> depths;
  while (at < pattern.size()) {
    const std::size_t next = pattern.find('/', at + 1);
    depths.emplace_back(
        pattern.substr(at + 1, next == std::string_view::npos ? std::string_view::npos : next - at - 1));
    at = next == std::string_view::npos ? pattern.size() : next;
  }
  bool allEmpty = true;
  for (const std::string& d : depths) allEmpty = allEmpty && d.empty();
  if (depths.empty() || allEmpty) return out;
  for (std::size_t i = 1; i < depths.size(); ++i) {
    if (depths[i] != depths[0]) {
      return Error{quoted(pattern) + ": MTP depth " + std::to_string(i + 1) + " is '" + excerpt(depths[i]) +
                   "' (expected every depth to repeat the first, '" + excerpt(depths[0]) + "')"};
    }
  }
  for (char c : depths[0]) {
    if (!isLayerSymbol(c)) {
      return Error{quoted(pattern) + ": '" + escapeControl(std::string(1, c)) +
                   "' in the MTP pattern is not a layer symbol (expected *, +, D, -, E, M or G; no | after /)"};
    }
  }
  if (mixesAttention(depths[0])) {
    return Error{quoted(pattern) +
                 ": the MTP pattern mixes standard attention (*) with MLA (+) or sparse attention (D)"};
  }
  out.mtp = depths[0];
  out.mtpDepths = static_cast<int>(depths.size());
  return out;
}

std::string renderHybridPattern(const HybridPattern& pattern) {
  std::string out;
  for (std::size_t i = 0; i < pattern.segments.size(); ++i) out += (i ? "|" : "") + pattern.segments[i];
  for (int d = 0; d < pattern.mtpDepths; ++d) out += "/" + pattern.mtp;
  return out;
}

}  // namespace pipestudio
