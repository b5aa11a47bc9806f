#include <iostream>
#include <string>

#include "Commands.hpp"
#include "PlanSummary.hpp"
#include "pipestudio/planner/Planner.hpp"

namespace pipestudio::cli {

void addSimulateCommand(CLI::App& root, int& exitCode) {
  static std::string path;
  static bool json = false;
  auto* cmd = root.add_subcommand("simulate", "Re-time a (possibly edited) plan and print its metrics");
  cmd->add_option("plan", path, "Plan file (pipestudio.plan/1)")->required();
  cmd->add_flag("--json", json, "Print config and metrics as one JSON document");
  cmd->callback([&exitCode] {
    auto plan = loadPlan(path);
    if (!plan) {
      std::cerr << plan.message() << '\n';
      exitCode = kExitFailure;
      return;
    }
    auto timed = resimulate(*plan);
    if (!timed) {
      std::cerr << path << ": " << timed.message() << '\n';
      exitCode = kExitFailure;
      return;
    }
    if (json) {
      std::cout << planSummaryJson(*timed).dump(2) << '\n';
    } else {
      printPlanSummary(*timed, std::cout);
    }
    exitCode = kExitOk;
  });
}

}  // namespace pipestudio::cli
