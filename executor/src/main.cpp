// pipestudio-exec: the headless executor (DESIGN.md §4).
#include "pipestudio/executor/Executor.hpp"

int main(int argc, char** argv) { return pipestudio::exec::execMain(argc, argv); }
