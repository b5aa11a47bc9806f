#pragma once
/// \file Loading, validating and saving model, cluster and hosts documents.
/// Every problem is reported as `file:line:col: /json/pointer: what (expected …)`.

#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Hosts.hpp"
#include "pipestudio/model/Model.hpp"

namespace pipestudio {

Expected<ModelSpec> loadModel(const std::string& path);
Expected<ClusterSpec> loadCluster(const std::string& path);
Expected<HostsSpec> loadHosts(const std::string& path);

inline constexpr const char* kExpertGemmCurveSchema = "pipestudio.expert_gemm_curve/1";
/// The grouped expert GEMM efficiencies tests/gpu/expert_gemm_curve.py measured on a GPU
/// (`pipestudio.expert_gemm_curve/1`: its `expert_gemm_curve` points, as a cluster's GPU states
/// them; docs/formats.md).
Expected<std::vector<GpuSpec::ExpertGemmPoint>> loadExpertGemmCurve(const std::string& path);

/// Parse from an already-parsed document (used for copies embedded in plans and workspaces:
/// `reader` carries the document and collects errors; `at` is where the object sits).
std::optional<ModelSpec> readModel(JsonReader& reader, const JsonNode& at);
std::optional<ClusterSpec> readCluster(JsonReader& reader, const JsonNode& at);
std::optional<HostsSpec> readHosts(JsonReader& reader, const JsonNode& at);

Json modelToJson(const ModelSpec& model);
Json clusterToJson(const ClusterSpec& cluster);
Json hostsToJson(const HostsSpec& hosts);

/// Which kind of document a file is, by its `schema` ("model", "cluster", "plan", "hosts",
/// "workspace"), or an error naming the file.
Expected<std::string> documentKind(const JsonDocument& doc);

}  // namespace pipestudio
