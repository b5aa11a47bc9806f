#include <cstdio>
#include <exception>
#include <iostream>

#include "Commands.hpp"
#include "Output.hpp"

namespace {

int runCommand(int argc, char** argv) {
  using namespace pipestudio::cli;
  CLI::App app{"PipeStudio: plan, simulate, run and compare pipeline-parallel training", "pipestudio-cli"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pipestudio-cli 0.1.0");
  int exitCode = kExitOk;
  addValidateCommand(app, exitCode);
  addSchedulesCommand(app, exitCode);
  addPlanCommand(app, exitCode);
  addSimulateCommand(app, exitCode);
  addExportCommand(app, exitCode);
  addConfigureCommand(app, exitCode);
  addRunCommand(app, exitCode);
  addDeployCommand(app, exitCode);
  addHistoryCommand(app, exitCode);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;  // docs/cli.md: 2 = wrong usage
  } catch (const std::exception& e) {
    // Sub-commands return errors as values; this is the last line against a crash.
    std::cerr << "pipestudio-cli: internal error: " << e.what() << '\n';
    return kExitFailure;
  }
  return exitCode;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    pipestudio::cli::guardStandardDescriptors();
    pipestudio::cli::CheckedStdout out;
    const int exitCode = runCommand(argc, argv);
    return out.finish(exitCode);
  } catch (...) {
    // runCommand reports what a command throws; this catches setting up the app itself.
    return pipestudio::cli::kExitFailure;
  }
}
