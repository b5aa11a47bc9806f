#pragma once
/// \file Vocabulary parallelism (Yeung et al. 2024, "Balancing Pipeline Parallelism with
/// Vocabulary Parallelism"): the output layer (LM head + softmax) and the input embedding
/// are split evenly over all pipeline devices instead of sitting on the first and last stage.
/// Each device runs an S pass (its vocabulary shard's forward: logits and partial softmax
/// statistics) after the last stage's F of a microbatch, and a T pass (the shard's backward)
/// once every device's S is done; the last stage's B waits for all T passes. S and T are
/// inserted into the timed order of the base schedule (1f1b, v-half, …).

#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/planner/Planner.hpp"

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
