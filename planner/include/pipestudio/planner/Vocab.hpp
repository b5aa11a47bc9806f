#pragma once
/// \file Vocabulary parallelism (Yeung et al. 2024, "Balancing Pipeline Parallelism with
/// Vocabulary Parallelism"): the output layer (LM head + softmax) and the input embedding
/// are split evenly over all pipeline devices instead of sitting on the first and last stage.
/// Each device runs an S pass (its vocabulary shard's forward: logits and partial softmax
/// statistics) after the last stage's F of a microbatch, and a T pass (the shard's backward)
/// once every device's S is done. With two barriers (config.vocabBarriers = 2, the paper's
/// Algorithm 1, "Vocab-2") T computes the input gradient and the last stage's B waits for
/// every T; with one (Algorithm 2, "Vocab-1", the default) S already computes the local
/// input-gradient partial sums and the last stage's B waits for every S. As in the paper's
/// schedules, every device runs one extra warm-up forward per barrier and S and T sit in the
/// steady state between transformer passes, so the barriers overlap computation instead of
/// stalling the pipeline: activation memory p + 1 (one barrier) or p + 2 (two) microbatches
/// under 1F1B. Works on the order of any base schedule (1f1b, v-half, …).

#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/planner/Request.hpp"

namespace pipestudio {

/// Solves `request` with vocabulary parallelism. The plan's model is the request's with its
/// `embedding` and `lm_head` layers replaced by a trainable component `vocabulary` of one
/// shard per device (vocab / p rows each); the backbone is partitioned without them.
/// Error when the model has no embedding or lm_head layer with a vocabulary.
Expected<Plan> makeVocabParallelPlan(const PlanRequest& request, const SolveControl& control = {});

/// Per-device busy time and peak memory with and without vocabulary parallelism.
struct VocabComparison {
  Plan baseline;
  Plan vocabParallel;
  double baselineImbalance = 0;  ///< max busy / mean busy over devices
  double vocabImbalance = 0;
};
Expected<VocabComparison> compareVocabParallel(const PlanRequest& request, const SolveControl& control = {});

}  // namespace pipestudio
