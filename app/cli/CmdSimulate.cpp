#include "Commands.hpp"

namespace pipestudio::cli {

void addSimulateCommand(CLI::App& root, int& exitCode) {
  auto* cmd = root.add_subcommand("simulate", "not implemented yet");
  cmd->allow_extras();
  cmd->callback([&exitCode] { exitCode = notImplemented("simulate"); });
}

}  // namespace pipestudio::cli
