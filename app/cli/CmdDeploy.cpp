#include "Commands.hpp"

namespace pipestudio::cli {

void addDeployCommand(CLI::App& root, int& exitCode) {
  auto* cmd = root.add_subcommand("deploy", "not implemented yet");
  cmd->allow_extras();
  cmd->callback([&exitCode] { exitCode = notImplemented("deploy"); });
}

}  // namespace pipestudio::cli
