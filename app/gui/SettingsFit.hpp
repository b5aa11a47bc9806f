#pragma once
// Solver settings that fit a newly opened model (issue 47): opening a model keeps the panel's
// settings where they still apply and changes, and names, those that do not, so the first thing
// shown is a plan rather than a failed solve left over from the previous model.
//
//   FittedSettings fit = fitSettingsToModel(panel->config(), model, cluster);
//   panel->setConfig(fit.config);
//   status(fit.changes.join("; "));   // "EP 8 → 1 (a dense model)", "TP 8 → 4 (…)"

#include <QString>
#include <QStringList>

#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Model.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::gui {

struct FittedSettings {
  PlanConfig config;
  QStringList changes;  ///< what was changed and why, in the panel's field names
  QString kept;         ///< when the settings still do not fit: the planner's reason (first line)
};

/// `config` for `model` on `cluster`: MoE settings (EP, ETP, dispatcher, capacity factor,
/// overlaps) back to their defaults for a dense model; TP, CP and EP lowered, each as little as
/// possible, to degrees every layer divides (resolveRequest's rules); the diffusionpipe
/// partition and greedy fill dropped for a model without frozen components; the chunk count set
/// to the schedule's default when the schedule refuses it; the global batch taken from the
/// model's recipe when the panel gives one and the model states its own.
FittedSettings fitSettingsToModel(const PlanConfig& config, const ModelSpec& model, const ClusterSpec& cluster);

/// The MoE settings of `config` at their defaults (EP 1, ETP as TP, the all-to-all
/// dispatcher, each layer's capacity factor, no A2A or shared-expert overlap).
void resetMoeSettings(PlanConfig& config);
/// Whether `model` has a mixture-of-experts layer.
bool hasExperts(const ModelSpec& model);

/// `config` with `schedule` chosen in place of `previous`: the chunk count becomes the new
/// schedule's default when it was the previous schedule's default or the new schedule refuses
/// it (1f1b with 2 chunks; interleaved-1f1b with 1, which would be 1F1B in more memory).
/// Returns the note to show, empty when nothing changed.
QString fitChunksToSchedule(PlanConfig& config, const std::string& previous);

}  // namespace pipestudio::gui
