#pragma once
/// \file Workspace documents (`pipestudio.workspace/1`): model, cluster, solver settings and the
/// last plan in one file, plus opening any document the workstation accepts (workspace, model,
/// cluster, plan, trace stream). The one reader and writer of the format: the GUI opens and
/// saves, `pipestudio-cli validate` checks and `pipestudio-cli run` runs what it accepts.
///
///     // solverNames(): planner/SolverNames.hpp; an error names the file, JSON pointer, expectation
///     PS_ASSIGN_OR_RETURN(const Workspace ws, loadWorkspace(path, solverNames()));

#include <optional>
#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Model.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio {

inline constexpr const char* kWorkspaceSchema = "pipestudio.workspace/1";

struct Workspace {
  std::string name;
  std::string description;  ///< optional free text, kept as read
  /// The user named it (File > Rename Workspace…); otherwise the name follows the content:
  /// "model on cluster" whenever another model or cluster is opened.
  bool named = false;
  ModelSpec model;
  ClusterSpec cluster;
  PlanConfig solver;         ///< schedule, devices, microbatches, chunks, partition, fill, limit
  std::optional<Plan> plan;  ///< the last solved plan, if saved with one
};

/// The names a workspace's solver settings may take: the planner's schedules, partitioners and
/// fill modes. Core does not know them; the planner gives them (solverNames()).
struct SolverNames {
  std::vector<std::string> schedules;
  std::vector<std::string> partitions;
  std::vector<std::string> fillModes;
};

Expected<Workspace> readWorkspace(const JsonDocument& doc, const SolverNames& names);
Expected<Workspace> loadWorkspace(const std::string& path, const SolverNames& names);
Json workspaceToJson(const Workspace& workspace);
Status saveWorkspace(const std::string& path, const Workspace& workspace);

enum class DocumentKind { Workspace, Model, Cluster, Plan, Trace };

struct OpenedDocument {
  DocumentKind kind = DocumentKind::Workspace;
  std::optional<Workspace> workspace;
  std::optional<ModelSpec> model;
  std::optional<ClusterSpec> cluster;
  std::optional<Plan> plan;  ///< plans and traces (a trace becomes a plan of measured op ranges)
};

/// Opens a workspace, model, cluster, plan (JSON by `schema`) or trace stream (binary, by magic).
Expected<OpenedDocument> openDocument(const std::string& path, const SolverNames& names);

/// A trace stream's op ranges as a timed plan (one iteration: the first), so the timeline can
/// draw measured runs like plans.
Expected<Plan> planFromTraceStream(const std::string& bytes, const std::string& path);

}  // namespace pipestudio
