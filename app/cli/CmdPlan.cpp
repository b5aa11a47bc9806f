#include "Commands.hpp"

namespace pipestudio::cli {

void addPlanCommand(CLI::App& root, int& exitCode) {
  auto* cmd = root.add_subcommand("plan", "not implemented yet");
  cmd->allow_extras();
  cmd->callback([&exitCode] { exitCode = notImplemented("plan"); });
}

}  // namespace pipestudio::cli
