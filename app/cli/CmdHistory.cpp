#include "Commands.hpp"

namespace pipestudio::cli {

void addHistoryCommand(CLI::App& root, int& exitCode) {
  auto* cmd = root.add_subcommand("history", "not implemented yet");
  cmd->allow_extras();
  cmd->callback([&exitCode] { exitCode = notImplemented("history"); });
}

}  // namespace pipestudio::cli
