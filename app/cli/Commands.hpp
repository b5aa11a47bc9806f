#pragma once
// pipestudio-cli sub-commands (docs/cli.md). Each file registers one sub-command on the
// root CLI11 app; its callback stores the process exit status in `exitCode`:
// 0 success, 1 bad input or a failed run (reason on stderr), 2 wrong usage.

#include <CLI/CLI.hpp>

namespace pipestudio::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

void addValidateCommand(CLI::App& root, int& exitCode);
void addSchedulesCommand(CLI::App& root, int& exitCode);
void addPlanCommand(CLI::App& root, int& exitCode);
void addSimulateCommand(CLI::App& root, int& exitCode);
void addExportCommand(CLI::App& root, int& exitCode);
void addConfigureCommand(CLI::App& root, int& exitCode);
void addRunCommand(CLI::App& root, int& exitCode);
void addDeployCommand(CLI::App& root, int& exitCode);
void addHistoryCommand(CLI::App& root, int& exitCode);

}  // namespace pipestudio::cli
