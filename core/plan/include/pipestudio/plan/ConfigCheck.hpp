#pragma once
/// \file What a plan's settings may ask of its model and cluster: the one check that the planner
/// applies to every request (resolveRequest) and that every plan read back from a file passes
/// (validatePlanStructure, so `validate`, `simulate`, `run`, `export`, the GUI and pipestudio-exec
/// refuse exactly what `plan` refuses). Messages name the setting by its flag (`--tp 3 …`).
///
///     PS_RETURN_IF_ERROR(checkPlanSettings(model, cluster, config));

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Model.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio {

/// Refuses settings the model or the cluster cannot take (Megatron-LM's own start-up checks):
/// degrees of at least 1 and a ZeRO stage 0..3; a precision every GPU type of the cluster has a
/// peak for; recomputation settings of modules the model has; T dividing every transformer
/// layer's heads, key/value heads and MLP, E its experts, ETP its expert MLP, 2·C its sequence
/// (T·C with sequence parallelism, the heads per rank with all-to-all CP); expert settings (EP,
/// ETP, capacity factor, the flex dispatcher, the expert overlaps and SMs) only on a
/// mixture-of-experts model, with ETP × EP dividing the T·C·D GPUs of a pipeline rank; a
/// micro-batch size of at least 1 and, where the config names a global batch, microbatches =
/// G / (B·D) (× sequence splits).
Status checkPlanSettings(const ModelSpec& model, const ClusterSpec& cluster, const PlanConfig& config);

}  // namespace pipestudio
