// Every description shipped in resources/ validates, and the examples give believable costs
// on every example cluster (resources/README.md says where the numbers come from).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;
using ::testing::HasSubstr;

namespace pipestudio {
namespace {

const std::filesystem::path kResources(PIPESTUDIO_RESOURCES);

std::vector<std::string> filesIn(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(kResources / dir)) {
    if (entry.is_regular_file()) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Each file in resources/<dir> loads with `load`; returns how many there are.
template <typename Load>
std::size_t expectEachLoads(const std::string& dir, Load load) {
  std::size_t n = 0;
  for (const auto& path : filesIn(dir)) {
    EXPECT_THAT(load(path), HasValue()) << path;
    ++n;
  }
  return n;
}

// The bundled 4×8 H100 cluster that the round trips edit.
Expected<ClusterSpec> bundledH100Cluster() { return loadCluster((kResources / "clusters/h100-4x8-ib.json").string()); }

// The cluster a JSON text describes, read as a cluster file is; a text that does not parse or
// read fails the test with the reader's message.
std::optional<ClusterSpec> clusterFromText(const std::string& text) {
  auto doc = parseJson(text, "<text>");
  if (!doc) {
    ADD_FAILURE() << doc.message();
    return std::nullopt;
  }
  JsonReader r(*doc);
  auto cluster = readCluster(r, r.root());
  if (!cluster || !r.ok()) {
    ADD_FAILURE() << r.toError().message;
    return std::nullopt;
  }
  return cluster;
}

TEST(Examples, EveryResourceFileValidates) {
  std::size_t checked = 0;
  checked += expectEachLoads("models", [](const std::string& path) { return loadModel(path); });
  checked += expectEachLoads("clusters", [](const std::string& path) { return loadCluster(path); });
  checked += expectEachLoads("hosts", [](const std::string& path) { return loadHosts(path); });
  for (const auto& path : filesIn("workspaces")) {
    auto doc = loadJsonFile(path);
    ASSERT_THAT(doc, HasValue());
    auto kind = documentKind(*doc);
    ASSERT_THAT(kind, HasValue());
    EXPECT_EQ(*kind, "workspace");
    JsonReader r(*doc);
    auto model = r.field(r.root(), "model", Presence::Required);
    auto cluster = r.field(r.root(), "cluster", Presence::Required);
    ASSERT_TRUE(model && cluster);
    EXPECT_TRUE(readModel(r, *model));
    EXPECT_TRUE(readCluster(r, *cluster));
    EXPECT_TRUE(r.ok()) << r.toError().message;
    ++checked;
  }
  EXPECT_GE(checked, 11U);
}

TEST(Examples, SavedCopiesLoadBackUnchanged) {
  for (const auto& path : filesIn("models")) {
    auto m = loadModel(path);
    ASSERT_THAT(m, HasValue());
    auto doc = parseJson(modelToJson(*m).dump(), "<copy>");
    ASSERT_TRUE(doc);
    JsonReader r(*doc);
    auto again = readModel(r, r.root());
    ASSERT_TRUE(again && r.ok()) << r.toError().message;
    EXPECT_EQ(modelToJson(*again), modelToJson(*m)) << path;
  }
}

// A cluster's shared PCIe switches (links.host_switch) are written and read back.
TEST(Examples, HostSwitchesRoundTrip) {
  auto c = bundledH100Cluster();
  ASSERT_THAT(c, HasValue());
  c->hostSwitchGpus = 2;
  c->hostSwitchGBps = 55.5;
  auto again = clusterFromText(clusterToJson(*c).dump());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->hostSwitchGpus, 2);
  EXPECT_DOUBLE_EQ(again->hostSwitchGBps, 55.5);
  EXPECT_EQ(clusterToJson(*again), clusterToJson(*c));
}

// A GPU's GEMM fill (gemm_fill_k) is written with the cluster and read back; a cluster's own GPU
// may state it, per precision or as bf16's number.
TEST(Examples, GemmFillRoundTrips) {
  auto c = bundledH100Cluster();
  ASSERT_THAT(c, HasValue());
  c->gpu.gemmFillK[static_cast<std::size_t>(Precision::Bf16)] = 71;
  c->gpu.gemmFillK[static_cast<std::size_t>(Precision::Fp8)] = 341;
  auto again = clusterFromText(clusterToJson(*c).dump());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->gpu.gemmFillK, c->gpu.gemmFillK);
  EXPECT_EQ(clusterToJson(*again), clusterToJson(*c));

  auto c2 = clusterFromText(R"({"schema": "pipestudio.cluster/1", "name": "c",
    "gpu": {"name": "g", "peak_tflops": 100, "memory_gib": 40, "gemm_fill_k": 64},
    "nodes": [{"host": "localhost", "gpus": 1}], "links": {"intra_node": {"bandwidth_gbps": 300}}})");
  ASSERT_TRUE(c2);
  EXPECT_DOUBLE_EQ(c2->gpu.gemmFillKFor(Precision::Bf16), 64);
  EXPECT_DOUBLE_EQ(c2->gpu.gemmFillKFor(Precision::Fp16), 64);
  EXPECT_DOUBLE_EQ(c2->gpu.gemmFillKFor(Precision::Fp8), 0);
}

// A GPU's ep_overlap_efficiency is read from its own fields and written back with the cluster;
// a catalogue GPU has none (it uses the H100 measurement, CostModel.hpp).
TEST(Examples, EpOverlapEfficiencyRoundTrips) {
  auto c = clusterFromText(R"({"schema": "pipestudio.cluster/1", "name": "c",
    "gpu": {"model": "H100", "ep_overlap_efficiency": 0.75},
    "nodes": [{"host": "localhost", "gpus": 1}], "links": {"intra_node": {"bandwidth_gbps": 300}}})");
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->gpu.epOverlapEfficiency, 0.75);
  EXPECT_DOUBLE_EQ(epOverlapEfficiency(c->gpu), 0.75);
  auto again = clusterFromText(clusterToJson(*c).dump());
  ASSERT_TRUE(again);
  EXPECT_DOUBLE_EQ(again->gpu.epOverlapEfficiency, 0.75);

  auto catalogue = bundledH100Cluster();
  ASSERT_THAT(catalogue, HasValue());
  EXPECT_DOUBLE_EQ(epOverlapEfficiency(catalogue->gpu), kMeasuredEpOverlapEfficiency);
}

// A GPU's compute capability comes from the catalogue (GB300: 10.3) or its own fields, is
// written back with the cluster, and a value outside CUDA's range is refused with its pointer.
TEST(Examples, ComputeCapabilityRoundTrips) {
  auto c = clusterFromText(R"({"schema": "pipestudio.cluster/1", "name": "c",
    "gpu": {"model": "H100", "compute_capability": 10.0},
    "nodes": [{"host": "localhost", "gpus": 1}], "links": {"intra_node": {"bandwidth_gbps": 300}}})");
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->gpu.computeCapability, 10.0);
  auto again = clusterFromText(clusterToJson(*c).dump());
  ASSERT_TRUE(again);
  EXPECT_DOUBLE_EQ(again->gpu.computeCapability, 10.0);
  auto named = clusterFromText(R"({"schema": "pipestudio.cluster/1", "name": "c", "gpu": "GB300",
    "nodes": [{"host": "localhost", "gpus": 1}], "links": {"intra_node": {"bandwidth_gbps": 300}}})");
  ASSERT_TRUE(named);
  EXPECT_DOUBLE_EQ(named->gpu.computeCapability, 10.3);
  auto bad = parseJson(R"({"schema": "pipestudio.cluster/1", "name": "c",
    "gpu": {"model": "H100", "compute_capability": 0},
    "nodes": [{"host": "localhost", "gpus": 1}], "links": {"intra_node": {"bandwidth_gbps": 300}}})",
                       "<text>");
  ASSERT_TRUE(bad);
  JsonReader r(*bad);
  (void)readCluster(r, r.root());
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.toError().message, HasSubstr("/gpu/compute_capability"));
}

// A GPU's measured expert GEMM curve (tests/gpu/expert_gemm_curve.py) is read from its fields and
// written back with the cluster; the script's file loads into the same points, and a file that is
// not one says so.
TEST(Examples, ExpertGemmCurveRoundTripsAndLoadsFromItsFile) {
  auto c = clusterFromText(R"({"schema": "pipestudio.cluster/1", "name": "c",
    "gpu": {"model": "H100", "expert_gemm_curve": [
      {"precision": "fp8", "tokens": 512, "hidden": 4096, "expert_ffn": 1536, "efficiency": 0.7}]},
    "nodes": [{"host": "localhost", "gpus": 1}], "links": {"intra_node": {"bandwidth_gbps": 300}}})");
  ASSERT_TRUE(c);
  ASSERT_EQ(c->gpu.expertGemmCurve.size(), 1U);
  EXPECT_EQ(c->gpu.expertGemmCurve[0].precision, Precision::Fp8);
  EXPECT_DOUBLE_EQ(c->gpu.expertGemmCurve[0].expertFfn, 1536);
  auto again = clusterFromText(clusterToJson(*c).dump());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->gpu.expertGemmCurve, c->gpu.expertGemmCurve);

  const std::string data = PIPESTUDIO_TEST_DATA;
  auto curve = loadExpertGemmCurve(data + "/good/expert-gemm-curve.json");
  ASSERT_THAT(curve, HasValue());
  ASSERT_EQ(curve->size(), 3U);
  EXPECT_DOUBLE_EQ((*curve)[1].tokens, 1024);
  EXPECT_DOUBLE_EQ((*curve)[1].efficiency, 0.8);
  auto notACurve = loadExpertGemmCurve(data + "/good/tiny-cluster.json");
  EXPECT_THAT(notACurve, HasError("/schema"));
  auto missing = loadExpertGemmCurve(data + "/good/no-such-curve.json");
  EXPECT_THAT(missing, HasError("no-such-curve.json"));
}

double parameterCount(const ModelSpec& m, const GpuSpec& gpu, const std::string& component) {
  double params = 0;
  for (const auto& c : m.components) {
    if (c.name != component) continue;
    for (const auto& l : c.layers) params += layerCosts(l, gpu, m.samplesPerMicrobatch, c.trainable).parameterCount();
  }
  return params;
}

TEST(Examples, ParameterCountsMatchThePublishedModels) {
  const GpuSpec gpu{"g", 312, 80, 0.5};
  struct Expect {
    const char* file;
    const char* component;
    double low;
    double high;
  };
  // Untied input and output embeddings are counted separately (GPT-3 files are untied);
  // published totals: Llama 2 70B 69.0B, Llama 3 8B 8.03B / 70B 70.6B / 405B 405.9B, Mixtral
  // 8x7B 46.7B, DeepSeek-V3 671B + 14B in its multi-token-prediction module, Qwen3-30B-A3B 30.5B,
  // Qwen3-235B-A22B 235B, GPT-OSS-120B 116.8B, DiT-XL/2
  // 675M, T5-XXL encoder 4.76B.
  const auto expects = std::to_array<Expect>({
      {"gpt3-1.3b.json", "backbone", 1.2e9, 1.5e9},
      {"gpt3-175b.json", "backbone", 1.70e11, 1.80e11},
      {"llama2-70b.json", "backbone", 6.85e10, 6.95e10},
      {"llama3-8b.json", "backbone", 7.95e9, 8.1e9},
      {"llama3-70b.json", "backbone", 7.0e10, 7.1e10},
      {"llama3-405b.json", "backbone", 4.0e11, 4.1e11},
      {"mixtral-8x7b.json", "backbone", 4.6e10, 4.75e10},
      {"deepseek-v3-moe.json", "backbone", 6.8e11, 6.9e11},
      {"qwen3-30b-a3b.json", "backbone", 3.0e10, 3.1e10},
      {"qwen3-235b-a22b.json", "backbone", 2.33e11, 2.37e11},
      {"gpt-oss-120b.json", "backbone", 1.15e11, 1.18e11},
      {"dit-xl-t5.json", "dit", 6.5e8, 7.0e8},
      {"dit-xl-t5.json", "text_encoder", 4.6e9, 4.9e9},
      {"stable-diffusion-2.1.json", "unet", 8.5e8, 8.8e8},          // 865M released
      {"stable-diffusion-2.1.json", "vae_encoder", 3.3e7, 3.6e7},   // 34M
      {"stable-diffusion-2.1.json", "text_encoder", 3.3e8, 3.7e8},  // OpenCLIP ViT-H text, 23 of 24 layers
      {"controlnet.json", "controlnet", 3.4e8, 3.9e8},              // ~361M released
  });
  ;
  for (const auto& e : expects) {
    auto m = loadModel((kResources / "models" / e.file).string());
    ASSERT_THAT(m, HasValue());
    const double p = parameterCount(*m, gpu, e.component);
    EXPECT_GE(p, e.low) << e.file << " " << e.component;
    EXPECT_LE(p, e.high) << e.file << " " << e.component;
  }
}

TEST(Examples, PerLayerCostsAreBelievableOnEveryCluster) {
  for (const auto& clusterPath : filesIn("clusters")) {
    auto cluster = loadCluster(clusterPath);
    ASSERT_THAT(cluster, HasValue());
    for (const auto& modelPath : filesIn("models")) {
      auto m = loadModel(modelPath);
      ASSERT_THAT(m, HasValue());
      double trainableForwardMs = 0;
      for (const auto& c : m->components) {
        for (const auto& l : c.layers) {
          const LayerCosts k = layerCosts(l, cluster->gpu, m->samplesPerMicrobatch, c.trainable);
          const std::string where = modelPath + " " + c.name + "/" + l.name + " on " + cluster->name;
          EXPECT_TRUE(std::isfinite(k.forwardMs) && k.forwardMs >= 0) << where;
          // No single layer pass of these models takes a second on these GPUs.
          EXPECT_LT(k.forwardMs, 1000.0) << where;
          EXPECT_LT(k.backwardMs(), 2000.0) << where;
          EXPECT_GE(k.activationBytes, 0) << where;
          EXPECT_LE(k.weightGradBytes, k.activationBytes) << where;
          if (c.trainable) {
            trainableForwardMs += k.forwardMs;
          } else {
            EXPECT_EQ(k.backwardMs(), 0.0) << where;
          }
        }
      }
      // A whole microbatch's forward through the trainable part: between 1 ms and 100 s.
      EXPECT_GT(trainableForwardMs, 1.0) << modelPath << " on " << cluster->name;
      EXPECT_LT(trainableForwardMs, 1.0e5) << modelPath << " on " << cluster->name;
    }
  }
}

TEST(Examples, DiffusionModelsHaveFrozenEncodersFeedingTheBackbones) {
  auto sd = loadModel((kResources / "models" / "stable-diffusion-2.1.json").string());
  ASSERT_THAT(sd, HasValue());
  ASSERT_EQ(sd->components.size(), 3U);
  EXPECT_EQ(sd->frozenComponents().size(), 2U);
  ASSERT_EQ(sd->trainableComponents().size(), 1U);
  for (const int i : sd->frozenComponents()) {
    EXPECT_EQ(sd->component(i).feeds, std::vector<std::string>{"unet"});
  }
  EXPECT_EQ(sd->components[0].layers.size(), 24U);  // token embedding + 23 transformer layers

  auto cn = loadModel((kResources / "models" / "controlnet.json").string());
  ASSERT_THAT(cn, HasValue());
  EXPECT_EQ(cn->trainableComponents().size(), 2U);
  EXPECT_EQ(cn->frozenComponents().size(), 2U);

  auto syn = loadModel((kResources / "models" / "synthetic-measured.json").string());
  ASSERT_THAT(syn, HasValue());
  ASSERT_EQ(syn->components.size(), 1U);
  const auto& layers = syn->components[0].layers;
  EXPECT_EQ(layers.size(), 12U);
  double minMs = 1e9;
  double maxMs = 0;
  for (const auto& l : layers) {
    ASSERT_TRUE(l.forwardMs && l.backwardInputMs && l.backwardWeightMs && l.activationBytes && l.parameterBytes &&
                l.outputBytes)
        << l.name;
    minMs = std::min(minMs, *l.forwardMs);
    maxMs = std::max(maxMs, *l.forwardMs);
  }
  EXPECT_GT(maxMs, 2.0 * minMs);  // deliberately unequal
}

}  // namespace
}  // namespace pipestudio
