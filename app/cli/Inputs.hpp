#pragma once
// Loading the model and cluster a sub-command is given, with the loaders' messages on stderr.
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "pipestudio/model/ModelIO.hpp"

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

}  // namespace pipestudio::cli
