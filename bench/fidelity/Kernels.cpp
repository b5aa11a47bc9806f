// The kernel check of `make fidelity` (Kernels.hpp). The GEMM tables time the GEMM kernel model
// with the long-k rate and the fill fitted here (one regression per precision over the GEMMs
// that fill every SM: the model's other terms, waves and roofline, are then predictions), and
// without the fill for comparison. The attention table fits nothing: the kernel model's rates
// are FlashAttention-3's published ones (the catalogue's attention_efficiency).
#include "Kernels.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "CostParts.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/model/GpuCatalog.hpp"

namespace pipestudio::fidelity {
namespace {

// The attention kernel model's target per kernel, head dimension and mask over 1k–128k tokens:
// issue 26's long-context target (15 %), at the kernel.
constexpr double kAttentionMapeTarget = 15.0;

struct Fit {
  double rateTflops = 0;  // long-k rate: 1 / intercept
  double fillK = 0;       // slope / intercept
  int points = 0;
  double medianTflops = 0;  // of the fitted GEMMs: the one rate a model without the fill gets
};

// Least squares of 1 / throughput against 1 / k: 1/T = (1 + fill / k) / rate.
Fit fitFill(const std::vector<std::pair<double, double>>& kAndTflops) {
  Fit f;
  f.points = static_cast<int>(kAndTflops.size());
  if (f.points < 2) return f;
  double mx = 0, my = 0;
  for (const auto& [k, t] : kAndTflops) {
    mx += 1.0 / k;
    my += 1.0 / t;
  }
  mx /= f.points;
  my /= f.points;
  double sxy = 0, sxx = 0;
  for (const auto& [k, t] : kAndTflops) {
    sxy += (1.0 / k - mx) * (1.0 / t - my);
    sxx += (1.0 / k - mx) * (1.0 / k - mx);
  }
  const double slope = sxx > 0 ? sxy / sxx : 0.0;
  const double intercept = my - slope * mx;
  if (intercept <= 0) return f;
  f.rateTflops = 1.0 / intercept;
  f.fillK = slope / intercept;
  return f;
}

// The GEMMs the fill is fitted on: every SM busy (m ≥ 4096, n ≥ 2880), so only k varies the rate.
bool fitShape(const Json& r) { return r.value("m", 0.0) >= 4096 && r.value("n", 0.0) >= 2880; }

// The fit of `precision`'s GEMMs, with the median of their throughputs.
Fit fitFor(const std::vector<Json>& gemms, Precision p) {
  const std::string name(precisionName(p));
  std::vector<std::pair<double, double>> points;
  std::vector<double> plateau;
  for (const Json& r : gemms) {
    if (r["prec"] != name || !fitShape(r)) continue;
    points.emplace_back(r["k"].get<double>(), r["tflops"].get<double>());
    plateau.push_back(r["tflops"].get<double>());
  }
  Fit f = fitFill(points);
  if (!plateau.empty()) {
    std::sort(plateau.begin(), plateau.end());
    f.medianTflops = plateau[plateau.size() / 2];
  }
  return f;
}

// The precisions the tables show, each with its fit (computed once for both GEMM tables).
using Fits = std::map<Precision, Fit>;
Fits fitsFor(const std::vector<Json>& gemms) {
  Fits fits;
  for (Precision p : {Precision::Bf16, Precision::Fp8}) fits[p] = fitFor(gemms, p);
  return fits;
}

struct Band {
  double sum = 0;
  int n = 0;
  void add(double predicted, double measured) {
    if (measured <= 0) return;
    sum += std::abs(predicted - measured) / measured;
    ++n;
  }
  double mape() const { return n > 0 ? 100.0 * sum / n : 0.0; }
};

// The GPU with `precision`'s long-k rate and fill as fitted.
GpuSpec atRate(GpuSpec g, Precision p, double rateTflops, double fillK) {
  const double e = rateTflops / g.peakTflopsFor(p);
  if (p == Precision::Bf16) {
    g.efficiency = e;
  } else {
    g.efficiencyByPrecision[static_cast<std::size_t>(p)] = e;
  }
  g.gemmFillK = {};
  g.gemmFillK[static_cast<std::size_t>(p)] = fillK;
  return g;
}

void row(bool markdown, const std::string& cells) {
  if (markdown) {
    std::printf("| %s |\n", cells.c_str());
  } else {
    std::printf("  %s\n", cells.c_str());
  }
}

std::string fmt(const char* format, double a, double b = 0, double c = 0, double d = 0) {
  std::array<char, 160> buf{};
  std::snprintf(buf.data(), buf.size(), format, a, b, c, d);
  return buf.data();
}

void gemmTables(const std::vector<Json>& gemms, const Fits& fits, const GpuSpec& gpu, bool markdown) {
  std::printf("\n### GEMMs: cuBLAS against the GEMM kernel model\n\n");
  if (markdown) {
    std::printf(
        "| precision | shapes | long-k rate TFLOP/s | fill (k steps) | MAPE with fill | without | m = 512–1024 | "
        "m = 2048–4096 | m ≥ 8192 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (const auto& [p, fit] : fits) {
    const std::string name(precisionName(p));
    if (fit.points < 2 || fit.rateTflops <= 0) continue;
    const GpuSpec with = atRate(gpu, p, fit.rateTflops, fit.fillK);
    const GpuSpec without = atRate(gpu, p, fit.medianTflops, 0.0);
    Band all, allWithout, small, mid, large;
    int shapes = 0;
    for (const Json& r : gemms) {
      if (r["prec"] != name) continue;
      const double m = r["m"].get<double>(), n = r["n"].get<double>(), k = r["k"].get<double>();
      const double measured = r["ms"].get<double>();
      const double predicted = costparts::gemmMs(with, p, m, n, k);
      all.add(predicted, measured);
      allWithout.add(costparts::gemmMs(without, p, m, n, k), measured);
      (m <= 1024 ? small : m <= 4096 ? mid : large).add(predicted, measured);
      ++shapes;
    }
    row(markdown, name + (markdown ? " | " : "  ") + std::to_string(shapes) +
                      fmt(markdown ? " | %.0f | %.1f" : "  rate %.0f  fill %.1f", fit.rateTflops, fit.fillK) +
                      fmt(markdown ? " | %.1f%% | %.1f%%" : "  MAPE %.1f%% (without fill %.1f%%)", all.mape(),
                          allWithout.mape()) +
                      fmt(markdown ? " | %.1f%% | %.1f%% | %.1f%%" : "  by m: %.1f%% %.1f%% %.1f%%", small.mape(),
                          mid.mape(), large.mape()));
  }
}

// The expert GEMMs against the grouped kernel model: the per-expert latency (kExpertGemmLatencyMs)
// is refitted here from these timings, as the fill is (the one value that minimises the MAPE over
// both precisions, in 0.1 µs steps); the table shows the model with the constant it uses, per
// tokens per expert, and without any latency for comparison. False when the refit moves the
// constant by more than 0.3 µs (the constant no longer matches its data).
bool expertTable(const std::vector<Json>& experts, const Fits& fits, const GpuSpec& gpu, bool markdown) {
  std::printf("\n### Expert GEMMs: one cuBLAS GEMM per expert (4 streams) against the grouped GEMM model\n\n");
  struct Case {
    GpuSpec gpu;
    Precision precision;
    double groups, m, n, k, measured;
  };
  std::vector<Case> cases;
  for (const auto& [p, fit] : fits) {
    if (fit.rateTflops <= 0) continue;
    const GpuSpec g = atRate(gpu, p, fit.rateTflops, fit.fillK);
    const char* key = p == Precision::Bf16 ? "loop4_graph_ms" : "fp8_loop4_graph_ms";
    for (const Json& r : experts) {
      if (!r.contains(key)) continue;
      cases.push_back({g, p, r["groups"].get<double>(), r["m"].get<double>(), r["n"].get<double>(),
                       r["k"].get<double>(), r[key].get<double>()});
    }
  }
  if (cases.empty()) {
    std::printf("no expert GEMM timings\n");
    return true;
  }
  auto mapeAt = [&](double latencyMs) {
    Band all;
    for (const Case& c : cases) {
      all.add(costparts::groupedGemmMs(c.gpu, c.precision, c.groups, c.m, c.n, c.k, 2.0) + c.groups * latencyMs,
              c.measured);
    }
    return all.mape();
  };
  double bestUs = 0;
  for (int tenths = 0; tenths <= 60; ++tenths) {
    if (mapeAt(tenths / 10.0 / 1000.0) < mapeAt(bestUs / 1000.0)) bestUs = tenths / 10.0;
  }
  const double usedUs = costparts::kExpertGemmLatencyMs * 1000.0;
  const bool agrees = std::abs(bestUs - usedUs) <= 0.3 + 1e-9;
  std::printf(
      "per-expert GEMM latency: %.1f µs fits these timings best (MAPE %.1f %%); the cost model uses %.1f µs%s\n\n",
      bestUs, mapeAt(bestUs / 1000.0), usedUs, agrees ? "" : " (DIFFERS: refit kExpertGemmLatencyMs)");
  if (markdown) {
    std::printf("| precision | tokens per expert | cases | MAPE | without the latency |\n|---|---:|---:|---:|---:|\n");
  }
  std::map<std::pair<Precision, double>, std::pair<Band, Band>> byM;
  for (const Case& c : cases) {
    const costparts::ExpertGemm g{c.groups, c.m, c.n, c.k, false, 0, 0};
    auto& [with, without] = byM[{c.precision, c.m}];
    with.add(costparts::expertGemmMs(c.gpu, c.precision, g, 2.0), c.measured);
    without.add(costparts::groupedGemmMs(c.gpu, c.precision, c.groups, c.m, c.n, c.k, 2.0), c.measured);
  }
  for (const auto& [key, bands] : byM) {
    row(markdown,
        std::string(precisionName(key.first)) +
            fmt(markdown ? " | %.0f | %.0f | %.1f%% | %.1f%%" : "  m %.0f  cases %.0f  MAPE %.1f%% (without %.1f%%)",
                key.second, bands.first.n, bands.first.mape(), bands.second.mape()));
  }
  return agrees;
}

bool attentionTable(const std::vector<Json>& attention, const GpuSpec& gpu, bool markdown) {
  std::printf("\n### Attention: cuDNN and FlashAttention-2 (PyTorch SDPA) against the FlashAttention kernel model\n\n");
  if (markdown) {
    std::printf(
        "| kernel | head dim | mask | sequences | forward MAPE | backward MAPE | worst (sequence, pass) |\n"
        "|---|---:|---|---|---:|---:|---|\n");
  }
  struct Group {
    Band fwd, bwd;
    double lo = 1e18, hi = 0, worst = 0, worstSeq = 0;
    const char* worstPass = "";
  };
  std::map<std::string, Group> groups;
  for (const Json& r : attention) {
    const std::string backend = r["backend"].get<std::string>();
    const AttentionBackend b = backend == "FLASH_ATTENTION" ? AttentionBackend::Flash : AttentionBackend::Fused;
    const double seq = r["seq"].get<double>(), d = r["d"].get<double>();
    const bool causal = r["causal"].get<bool>();
    const costparts::FlashTimes t = costparts::flashAttention(
        gpu, {r["batch"].get<double>() * r["heads"].get<double>(), seq, seq, d, d, causal, 0}, b);
    const char* sep = markdown ? " | " : " ";
    const std::string label = std::string(b == AttentionBackend::Flash ? "FlashAttention-2" : "cuDNN") + sep +
                              fmt("%.0f", d) + sep + (causal ? "causal" : "full");
    Group& g = groups[label];
    g.fwd.add(t.forwardMs, r["fwd_ms"].get<double>());
    g.bwd.add(t.backwardMs, r["bwd_ms"].get<double>());
    g.lo = std::min(g.lo, seq);
    g.hi = std::max(g.hi, seq);
    for (auto [pred, meas, pass] : {std::tuple{t.forwardMs, r["fwd_ms"].get<double>(), "forward"},
                                    std::tuple{t.backwardMs, r["bwd_ms"].get<double>(), "backward"}}) {
      const double e = (pred - meas) / meas;
      if (std::abs(e) > std::abs(g.worst)) {
        g.worst = e;
        g.worstSeq = seq;
        g.worstPass = pass;
      }
    }
  }
  if (groups.empty()) {
    std::printf("no attention timings\n");
    return true;
  }
  bool ok = true;
  for (const auto& [label, g] : groups) {
    const bool met = g.fwd.mape() <= kAttentionMapeTarget && g.bwd.mape() <= kAttentionMapeTarget;
    ok = ok && met;
    row(markdown, label +
                      fmt(markdown ? " | %.0f–%.0f | %.1f%% | %.1f%%" : "  seq %.0f-%.0f  fwd %.1f%%  bwd %.1f%%", g.lo,
                          g.hi, g.fwd.mape(), g.bwd.mape()) +
                      fmt(markdown ? " | %+.0f%% (%.0f, " : "  worst %+.0f%% (%.0f, ", 100.0 * g.worst, g.worstSeq) +
                      g.worstPass + ")" + (met ? "" : " MISSED"));
  }
  std::printf("\nattention target: forward and backward MAPE within %.0f %% per kernel, head dimension and mask%s\n",
              kAttentionMapeTarget, ok ? "" : ": MISSED");
  return ok;
}

// The catalogue's name for the device name CUDA reports ("NVIDIA H100 80GB HBM3" is the SXM5
// part; the PCIe and NVL parts say so).
std::string catalogName(const std::string& device) {
  const auto has = [&](const char* part) { return device.find(part) != std::string::npos; };
  if (has("H100")) return has("PCIe") ? "H100-PCIe" : has("NVL") ? "H100-NVL" : "H100";
  for (const char* gpu : {"H200", "B300", "B200", "A100"}) {
    if (has(gpu)) return gpu;
  }
  return device;
}

}  // namespace

bool printKernelChecks(const std::string& path, bool markdown) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "fidelity: cannot read the kernel measurements %s\n", path.c_str());
    return false;
  }
  std::vector<Json> gemms, experts, attention;
  std::string gpuName;
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    if (line.empty()) continue;
    Json r = Json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object()) {
      std::fprintf(stderr, "fidelity: %s:%d: expected one JSON object per line\n", path.c_str(), lineNo);
      return false;
    }
    const std::string section = r.value("section", "");
    if (section == "device") gpuName = r.value("name", "");
    if (r.contains("error")) continue;  // a timing that failed on the GPU
    const auto need = [&](std::initializer_list<const char*> keys, bool positive) {
      for (const char* key : keys) {
        if (!r.contains(key) || (positive && !(r[key].is_number() && r[key].get<double>() > 0))) {
          std::fprintf(stderr, "fidelity: %s:%d: a '%s' record needs '%s'%s\n", path.c_str(), lineNo, section.c_str(),
                       key, positive ? " (a positive number)" : "");
          return false;
        }
      }
      return true;
    };
    if (section == "gemm") {
      if (!need({"m", "n", "k", "ms", "tflops"}, true) || !need({"prec"}, false)) return false;
      gemms.push_back(std::move(r));
    } else if (section == "experts") {
      if (!need({"groups", "m", "n", "k"}, true)) return false;
      experts.push_back(std::move(r));
    } else if (section == "attention" && r.contains("fwd_ms")) {
      if (!need({"seq", "d", "batch", "heads", "fwd_ms", "bwd_ms"}, true) || !need({"backend", "causal"}, false))
        return false;
      attention.push_back(std::move(r));
    }
  }
  const CatalogGpu* entry = findCatalogGpu(catalogName(gpuName));
  if (!entry) {
    std::fprintf(stderr, "fidelity: %s: the measured GPU '%s' is not in the catalogue\n", path.c_str(),
                 gpuName.c_str());
    return false;
  }
  std::printf("\n## Kernels measured on one %s (%s)\n", entry->gpu.name.c_str(), path.c_str());
  const Fits fits = fitsFor(gemms);
  gemmTables(gemms, fits, entry->gpu, markdown);
  const bool expertsOk = expertTable(experts, fits, entry->gpu, markdown);
  return attentionTable(attention, entry->gpu, markdown) && expertsOk;
}

}  // namespace pipestudio::fidelity
