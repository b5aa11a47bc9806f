#pragma once
// The example models and clusters that come with PipeStudio (resources/models, resources/clusters),
// compiled into the window's resources, and how a workspace's embedded copy differs from the file
// of the same name (issue 47: a workspace carrying an old copy of a bundled cluster plans 35 %
// slower with nothing on screen to say so).
//
//   if (auto file = bundledCluster(spec.name)) {
//     const QStringList diff = jsonDifferences(file->json, clusterToJson(spec), 4);
//     if (!diff.isEmpty()) say(file->fileName + " differs: " + diff.join("; "));
//   }

#include <QString>
#include <QStringList>
#include <optional>
#include <string>

#include "pipestudio/common/Json.hpp"
#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Model.hpp"

namespace pipestudio::gui {

/// A bundled document as the window would write it (loaded, then modelToJson / clusterToJson),
/// so it compares with an embedded copy field by field whatever the file's spelling (a catalogue
/// GPU name stands for the catalogue's figures).
struct BundledDocument {
  QString fileName;  ///< "a100-1x8-nvlink.json"
  Json json;
  std::optional<ModelSpec> model;      ///< bundledModel's
  std::optional<ClusterSpec> cluster;  ///< bundledCluster's
};

/// The bundled cluster or model whose `name` is `name`, or nullopt.
std::optional<BundledDocument> bundledCluster(const std::string& name);
std::optional<BundledDocument> bundledModel(const std::string& name);

/// What differs between a bundled document and a copy of it, one entry per field ("gpu/efficiency:
/// 0.5, the file 0.71"), at most `max` entries and a count of the rest; empty when they match.
QStringList jsonDifferences(const Json& file, const Json& copy, int max);

}  // namespace pipestudio::gui
