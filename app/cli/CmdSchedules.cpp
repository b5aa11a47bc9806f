#include <iostream>

#include "Commands.hpp"
#include "pipestudio/planner/Planner.hpp"

namespace pipestudio::cli {

void addSchedulesCommand(CLI::App& root, int& exitCode) {
  auto* cmd = root.add_subcommand("schedules", "List the pipeline schedules, one name per line");
  cmd->callback([&exitCode] {
    for (const auto& name : scheduleNames()) std::cout << name << '\n';
    exitCode = kExitOk;
  });
}

}  // namespace pipestudio::cli
