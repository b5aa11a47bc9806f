#pragma once
// The zb-auto and custom schedule generators (registered in schedules/Registry.cpp), and the
// per-thread context through which makeAutoPlan and makeCustomPlan (AutoPlan.cpp) hand them what
// a ScheduleShape cannot carry.
#include <memory>
#include <string>

#include "pipestudio/planner/AutoSchedule.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio::autosched {

std::unique_ptr<ScheduleGenerator> makeZbAutoGenerator();
std::unique_ptr<ScheduleGenerator> makeCustomGenerator();

/// What the generators read beside the shape: zb-auto's options and report, custom's CSV.
struct Context {
  const AutoScheduleOptions* options = nullptr;
  AutoScheduleReport* report = nullptr;
  const std::string* csv = nullptr;
  const std::string* source = nullptr;
};

/// Sets this thread's context for the generators while it lives (solver threads do not interfere).
class ContextScope {
 public:
  explicit ContextScope(const Context& context);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  Context m_saved;
};

}  // namespace pipestudio::autosched
