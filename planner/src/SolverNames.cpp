#include "pipestudio/planner/SolverNames.hpp"

#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio {

SolverNames solverNames() { return SolverNames{scheduleNames(), partitionNames(), fillModeNames()}; }

}  // namespace pipestudio
