#pragma once
/// \file The planner's names for the workspace reader (core/workspace checks a workspace's
/// solver settings against them; core itself knows no schedule):
///
///     auto ws = loadWorkspace(path, solverNames());

#include "pipestudio/workspace/Workspace.hpp"

namespace pipestudio {

/// Every schedule, partitioner and fill mode the planner solves (scheduleNames(),
/// partitionNames(), fillModeNames()).
SolverNames solverNames();

}  // namespace pipestudio
