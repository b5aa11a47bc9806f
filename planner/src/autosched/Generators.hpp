#pragma once
// The zb-auto and custom schedule generators (registered in schedules/Registry.cpp).
#include <memory>

#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio::autosched {

std::unique_ptr<ScheduleGenerator> makeZbAutoGenerator();
std::unique_ptr<ScheduleGenerator> makeCustomGenerator();

}  // namespace pipestudio::autosched
