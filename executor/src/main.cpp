// pipestudio-exec: the headless executor (executor/README.md); `--task` first is one rank under a
// cluster launcher (srun, mpirun), which runs the executor itself (Launcher.hpp).
#include <string_view>

#include "pipestudio/executor/Executor.hpp"
#include "pipestudio/executor/Launcher.hpp"

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--task") return pipestudio::exec::taskMain(argc, argv);
  return pipestudio::exec::execMain(argc, argv);
}
