#include "Commands.hpp"

namespace pipestudio::cli {

void addRunCommand(CLI::App& root, int& exitCode) {
  auto* cmd = root.add_subcommand("run", "not implemented yet");
  cmd->allow_extras();
  cmd->callback([&exitCode] { exitCode = notImplemented("run"); });
}

}  // namespace pipestudio::cli
