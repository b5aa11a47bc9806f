#pragma once
// A recorded run as the window shows it (issue 29): its first iteration's op ranges drawn like a
// plan, its GPU activity (kernels, memcpy, memset, NCCL per device and stream, iterations from
// ProfilerStep#N) when it has no op ranges, a label saying what measured it, on how many
// devices and when, and against its plan the run-vs-plan tables pipestudio-cli history compare
// prints (per device per iteration, per op kind, the ops that started latest and drifted most).
// Read on a worker thread with the worker's own connection.

#include <memory>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/viz/CompareView.hpp"

namespace pipestudio::gui {

struct MeasuredRunView {
  history::RunId id = 0;
  std::shared_ptr<const Plan> plan;      ///< the plan it ran (null when none is linked)
  std::shared_ptr<const Plan> measured;  ///< op ranges of its first iteration, as a plan
  viz::MeasuredRun run;
};

/// Reads run `id`: summary, op ranges, activity and (with a linked plan) the comparison.
Expected<MeasuredRunView> readMeasuredRun(history::HistoryStore& store, history::RunId id);

/// The GPU activity of a run's events, times in ms from the start of its first iteration (or
/// its first event): kernels, memcpy, memset and NCCL kernels on devices, iterations from the
/// devices' ProfilerStep#N ranges, else from the host's (each step from the earliest start to
/// the latest end of the ranges of that name).
viz::ActivityTrace activityOf(const std::vector<history::MeasuredEvent>& events);

}  // namespace pipestudio::gui
