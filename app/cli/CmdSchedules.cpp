#include "Commands.hpp"

namespace pipestudio::cli {

void addSchedulesCommand(CLI::App& root, int& exitCode) {
  auto* cmd = root.add_subcommand("schedules", "not implemented yet");
  cmd->allow_extras();
  cmd->callback([&exitCode] { exitCode = notImplemented("schedules"); });
}

}  // namespace pipestudio::cli
