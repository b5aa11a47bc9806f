#pragma once
// The Zero Bubble authors' own greedy heuristics, ported for zb-auto's portfolio and for the
// "published greedy" figure of its report (PublishedGreedy.cpp).

#include <functional>
#include <vector>

#include "autosched/Instance.hpp"

namespace pipestudio::autosched {

struct PublishedRun {
  bool ok = false;  ///< false: the variant cannot keep the memory budget
  Orders orders;
  double criterionMs = 0;  ///< the reference's own measure of the result (see below)
};

/// zb.py (one stage per device): Graph.manual_order for each of initial_solution's eight flag
/// combinations, in its order. criterionMs = its best_time, the longest device span on its
/// own timeline; initial_solution keeps the first variant with the least.
/// Empty when the placement is not one stage per device in order.
/// `each` (optional) sees every run as soon as it is built.
using PublishedSink = std::function<void(const PublishedRun&)>;
std::vector<PublishedRun> zbGreedyRuns(const Instance& inst, const PublishedSink& each = {});

/// zbv.py (one V per device): the four fill policies of PipelineGraph.create_schedule with
/// the device budgets as its max_mem. criterionMs = the worst device bubble on its own
/// timeline; create_schedule keeps the first policy with the least. Empty when the placement
/// is not one V per device.
/// `first` (optional) sees the very first order, before its policy's refinements.
std::vector<PublishedRun> zbvRuns(const Instance& inst, const ScheduleInput& input, const PublishedSink& each = {},
                                  const PublishedSink& first = {});

/// Index of the run the reference itself would return (least criterion, first on a tie), or
/// -1 when none finished.
int publishedChoice(const std::vector<PublishedRun>& runs);

}  // namespace pipestudio::autosched
