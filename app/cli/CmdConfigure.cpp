#include "Commands.hpp"

namespace pipestudio::cli {

void addConfigureCommand(CLI::App& root, int& exitCode) {
  auto* cmd = root.add_subcommand("configure", "not implemented yet");
  cmd->allow_extras();
  cmd->callback([&exitCode] { exitCode = notImplemented("configure"); });
}

}  // namespace pipestudio::cli
