#include "Commands.hpp"

namespace pipestudio::cli {

void addExportCommand(CLI::App& root, int& exitCode) {
  auto* cmd = root.add_subcommand("export", "not implemented yet");
  cmd->allow_extras();
  cmd->callback([&exitCode] { exitCode = notImplemented("export"); });
}

}  // namespace pipestudio::cli
