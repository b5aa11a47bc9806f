#pragma once
// Loading the model and cluster, or the plan, a sub-command is given, with the loaders' messages
// on stderr.
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/PlanIO.hpp"

namespace pipestudio::cli {

/// Both documents, or nullopt after printing every loader error (the caller exits 1).
inline std::optional<std::pair<ModelSpec, ClusterSpec>> loadModelAndCluster(const std::string& modelPath,
                                                                            const std::string& clusterPath) {
  auto model = loadModel(modelPath);
  auto cluster = loadCluster(clusterPath);
  if (!model) std::cerr << model.message() << '\n';
  if (!cluster) std::cerr << cluster.message() << '\n';
  if (!model || !cluster) return std::nullopt;
  return std::pair{std::move(*model), std::move(*cluster)};
}

/// The plan file at `path`, loaded and checked as every plan is (validatePlanStructure), or
/// nullopt after printing why (the caller exits 1).
inline std::optional<Plan> loadValidPlan(const std::string& path) {
  auto plan = loadPlan(path);
  if (!plan) {
    std::cerr << plan.message() << '\n';
    return std::nullopt;
  }
  if (auto st = validatePlanStructure(*plan); !st) {
    std::cerr << path << ": " << st.message() << '\n';
    return std::nullopt;
  }
  return std::move(*plan);
}

}  // namespace pipestudio::cli
