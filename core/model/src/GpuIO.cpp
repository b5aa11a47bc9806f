#include "GpuIO.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "pipestudio/common/Text.hpp"
#include "pipestudio/model/Limits.hpp"

namespace pipestudio {
namespace {

// `peak_tflops` / `efficiency`: a number (bf16) or an object with one value per precision.
// `scalar` receives the bf16 value, `perPrecision` the others.
bool readPerPrecision(JsonReader& r, const JsonNode& obj, std::string_view key, limits::NumberRange range,
                      double& scalar, std::array<double, kPrecisionCount>& perPrecision) {
  if (!obj.value->contains(key)) return false;
  const JsonNode node = obj.child(key);
  if (node.value->is_number()) {
    if (auto v = r.numberValue(node, range.min, range.max)) scalar = *v;
    return true;
  }
  if (!r.isObject(node)) return true;
  for (auto it = node.value->begin(); it != node.value->end(); ++it) {
    const std::string& name = it.key();
    const auto precision = precisionFromName(name);
    if (!precision) {
      r.error(node.child(name),
              "'" + excerpt(name) + "' is not a precision (expected " + std::string(precisionChoices()) + ")");
      continue;
    }
    const auto v = r.numberValue(node.child(name), range.min, range.max);
    if (!v) continue;
    // bf16 is the scalar field (what files before per-precision values wrote); the array
    // holds the other formats.
    if (*precision == Precision::Bf16) {
      scalar = *v;
    } else {
      perPrecision[static_cast<std::size_t>(*precision)] = *v;
    }
  }
  return true;
}

// The fields readGpuFields reads besides `name`: a cluster's GPU object and a catalogue entry
// both take them, each with its own fields around them (gpuFieldsWith).
constexpr std::array<std::string_view, 12> kSharedGpuFields{
    "peak_tflops",           "memory_gib", "efficiency",     "attention_efficiency",  "gemm_fill_k",
    "memory_bandwidth_gbps", "sm_count",   "host_link_gbps", "ep_overlap_efficiency", "compute_capability",
    "expert_gemm_curve",     "nvls"};

// `before`, the shared GPU fields, then `after`: the known fields of one kind of GPU object.
template <std::size_t Before, std::size_t After>
constexpr auto gpuFieldsWith(const std::array<std::string_view, Before>& before,
                             const std::array<std::string_view, After>& after) {
  std::array<std::string_view, Before + kSharedGpuFields.size() + After> all{};
  auto at = std::copy(before.begin(), before.end(), all.begin());
  at = std::copy(kSharedGpuFields.begin(), kSharedGpuFields.end(), at);
  std::copy(after.begin(), after.end(), at);
  return all;
}

constexpr auto kClusterGpuFields =
    gpuFieldsWith(std::array<std::string_view, 2>{"model", "name"}, std::array<std::string_view, 0>{});
constexpr auto kCatalogGpuFields =
    gpuFieldsWith(std::array<std::string_view, 2>{"name", "aliases"},
                  std::array<std::string_view, 4>{"nvlink_gbps", "nvlink_domain", "calibration_from", "source"});

}  // namespace

// "expert_gemm_curve": [{"precision", "tokens", "hidden", "expert_ffn", "efficiency"}, …], the
// points tests/gpu/expert_gemm_curve.py measures (GpuSpec::ExpertGemmPoint).
void readExpertGemmCurve(JsonReader& r, const JsonNode& node, GpuSpec& g) {
  auto curve = r.array(node, "expert_gemm_curve", Presence::Optional);
  if (!curve) return;
  const std::size_t n = curve->value->size();
  if (n > static_cast<std::size_t>(limits::kMaxExpertGemmPoints)) {
    r.error(*curve, "has " + std::to_string(n) + " points (expected at most " +
                        std::to_string(limits::kMaxExpertGemmPoints) + ")");
    return;
  }
  g.expertGemmCurve.clear();
  for (std::size_t i = 0; i < n; ++i) {
    const JsonNode p = curve->child(i);
    if (!r.isObject(p)) continue;
    r.rejectUnknown(p, {"precision", "tokens", "hidden", "expert_ffn", "efficiency"});
    GpuSpec::ExpertGemmPoint point;
    if (auto name = r.string(p, "precision", Presence::Required)) {
      if (auto precision = precisionFromName(*name)) {
        point.precision = *precision;
      } else {
        r.error(p.child("precision"),
                "'" + *name + "' is not a precision (expected " + std::string(precisionChoices()) + ")");
      }
    }
    const auto dim = static_cast<double>(limits::kMaxDim);
    point.tokens = r.number(p, "tokens", Presence::Required, 1, dim).value_or(0);
    point.hidden = r.number(p, "hidden", Presence::Required, 1, dim).value_or(0);
    point.expertFfn = r.number(p, "expert_ffn", Presence::Required, 1, dim).value_or(0);
    point.efficiency = r.number(p, "efficiency", Presence::Required, limits::kExpertGemmEfficiency.min,
                                limits::kExpertGemmEfficiency.max)
                           .value_or(0);
    if (point.tokens > 0 && point.hidden > 0 && point.expertFfn > 0 && point.efficiency > 0) {
      g.expertGemmCurve.push_back(point);
    }
  }
}

namespace {

// The fields a cluster's GPU object and a catalogue entry share, onto `g`.
void readGpuFields(JsonReader& r, const JsonNode& node, GpuSpec& g) {
  if (auto name = r.string(node, "name", Presence::Optional)) g.name = *name;
  readPerPrecision(r, node, "peak_tflops", limits::kPeakTflops, g.peakTflops, g.peakTflopsByPrecision);
  readPerPrecision(r, node, "efficiency", limits::kEfficiency, g.efficiency, g.efficiencyByPrecision);
  if (auto v = r.number(node, "memory_gib", Presence::Optional, limits::kMemoryGib.min, limits::kMemoryGib.max))
    g.memoryGib = *v;
  // "attention_efficiency": {"fused": {"forward", "backward"}, "flash": {...}}
  if (auto attention = r.object(node, "attention_efficiency", Presence::Optional)) {
    r.rejectUnknown(*attention, {"fused", "flash"});
    for (AttentionBackend b : {AttentionBackend::Fused, AttentionBackend::Flash}) {
      const std::string key(attentionBackendName(b));
      auto kernel = r.object(*attention, key.c_str(), Presence::Optional);
      if (!kernel) continue;
      r.rejectUnknown(*kernel, {"forward", "backward"});
      GpuSpec::AttentionEfficiency& e = g.attentionEfficiency[static_cast<std::size_t>(b)];
      e.forward = r.number(*kernel, "forward", Presence::Required, limits::kEfficiency.min, limits::kEfficiency.max)
                      .value_or(0);
      e.backward = r.number(*kernel, "backward", Presence::Required, limits::kEfficiency.min, limits::kEfficiency.max)
                       .value_or(0);
    }
  }
  // "gemm_fill_k": {"bf16": 71, "fp8": 341} (a number: bf16's)
  readPerPrecision(r, node, "gemm_fill_k", limits::kGemmFillK, g.gemmFillK[static_cast<std::size_t>(Precision::Bf16)],
                   g.gemmFillK);
  if (auto v = r.number(node, "memory_bandwidth_gbps", Presence::Optional, limits::kMemoryBandwidthGBps.min,
                        limits::kMemoryBandwidthGBps.max))
    g.memoryBandwidthGBps = *v;
  if (auto v = r.integer(node, "sm_count", Presence::Optional, limits::kSmCount.min, limits::kSmCount.max))
    g.smCount = static_cast<int>(*v);
  if (auto v = r.number(node, "host_link_gbps", Presence::Optional, limits::kLinkBandwidthGBps.min,
                        limits::kLinkBandwidthGBps.max))
    g.hostLinkGBps = *v;
  if (auto v =
          r.number(node, "ep_overlap_efficiency", Presence::Optional, limits::kEfficiency.min, limits::kEfficiency.max))
    g.epOverlapEfficiency = *v;
  if (auto v = r.number(node, "compute_capability", Presence::Optional, limits::kComputeCapability.min,
                        limits::kComputeCapability.max))
    g.computeCapability = *v;
  readExpertGemmCurve(r, node, g);
  // "nvls": {"efficiency": 0.85, "channels": 16} — NCCL's NVLS figures for this GPU's switches.
  if (auto nvls = r.object(node, "nvls", Presence::Optional)) {
    r.rejectUnknown(*nvls, {"efficiency", "channels"});
    g.nvlsEfficiency =
        r.number(*nvls, "efficiency", Presence::Required, limits::kEfficiency.min, limits::kEfficiency.max).value_or(0);
    g.nvlsChannels = static_cast<int>(
        r.integer(*nvls, "channels", Presence::Required, limits::kNvlsChannels.min, limits::kNvlsChannels.max)
            .value_or(0));
  }
}

// A GPU must say its name, bf16 peak and memory, from the catalogue or its own fields (a field
// present with a bad value has its own message already).
bool complete(JsonReader& r, const JsonNode& node, const GpuSpec& g) {
  bool ok = true;
  auto need = [&](bool present, const char* field) {
    if (present) return;
    ok = false;
    if (node.value->contains(field)) return;
    r.error(node.child(field),
            std::string("missing required field '") + field + R"(' (or name a GPU of the catalogue: "model": "H100"))");
  };
  need(!g.name.empty(), "name");
  // A per-precision object without bf16 reads without a bad value, yet gives no base peak.
  const auto peak = node.value->find("peak_tflops");
  if (g.peakTflops <= 0 && peak != node.value->end() && peak->is_object() && !peak->contains("bf16")) {
    r.error(node.child("peak_tflops"),
            "has no bf16 peak (expected \"bf16\": the peak of the default precision, beside any other format's)");
  }
  need(g.peakTflops > 0, "peak_tflops");
  need(g.memoryGib > 0, "memory_gib");
  return ok;
}

}  // namespace

std::optional<GpuSpec> readGpu(JsonReader& r, const JsonNode& node, int* nvlinkDomain) {
  if (node.value && node.value->is_string()) {
    const auto name = r.stringValue(node);
    if (!name) return std::nullopt;
    const CatalogGpu* entry = findCatalogGpu(*name);
    if (!entry) {
      r.error(node, "'" + *name + "' is not a GPU of the catalogue (expected one of " + catalogGpuNames() +
                        ", or an object with name, peak_tflops and memory_gib)");
      return std::nullopt;
    }
    if (nvlinkDomain) *nvlinkDomain = entry->nvlinkDomain;
    return entry->gpu;
  }
  if (!r.isObject(node)) return std::nullopt;
  r.rejectUnknown(node, kClusterGpuFields);
  GpuSpec g;
  if (auto model = r.string(node, "model", Presence::Optional)) {
    const CatalogGpu* entry = findCatalogGpu(*model);
    if (!entry) {
      r.error(node.child("model"),
              "'" + *model + "' is not a GPU of the catalogue (expected one of " + catalogGpuNames() + ")");
      return std::nullopt;
    }
    g = entry->gpu;
    if (nvlinkDomain) *nvlinkDomain = entry->nvlinkDomain;
  }
  readGpuFields(r, node, g);
  if (!complete(r, node, g)) return std::nullopt;
  return g;
}

std::optional<CatalogGpu> readCatalogGpu(JsonReader& r, const JsonNode& node) {
  if (!r.isObject(node)) return std::nullopt;
  r.rejectUnknown(node, kCatalogGpuFields);
  CatalogGpu c;
  readGpuFields(r, node, c.gpu);
  if (!complete(r, node, c.gpu)) return std::nullopt;
  if (auto aliases = r.array(node, "aliases", Presence::Optional)) {
    for (std::size_t i = 0; i < aliases->value->size(); ++i) {
      if (auto a = r.stringValue(aliases->child(i))) c.aliases.push_back(*a);
    }
  }
  c.nvlinkGBps =
      r.number(node, "nvlink_gbps", Presence::Optional, limits::kLinkBandwidthGBps.min, limits::kLinkBandwidthGBps.max)
          .value_or(0);
  c.nvlinkDomain = static_cast<int>(r.integer(node, "nvlink_domain", Presence::Optional, 1, 100000).value_or(0));
  if (auto from = r.string(node, "calibration_from", Presence::Optional)) {
    // The calibrated values come whole from the named entry: none of them may be stated beside it.
    for (const char* own : {"efficiency", "attention_efficiency", "gemm_fill_k", "ep_overlap_efficiency"}) {
      if (node.value->contains(own)) {
        r.error(node.child(own),
                std::string("'") + own +
                    "' and 'calibration_from' exclude each other (expected the calibrated values of one GPU)");
      }
    }
    c.calibrationFrom = *from;
  }
  c.source = r.string(node, "source", Presence::Required).value_or("");
  return c;
}

}  // namespace pipestudio
