#pragma once
/// \file pipestudio-exec as a library: options, fault injection and the entry point shared by
/// the binary and the tests. Qt-, SQLite- and libssh-free (docs/architecture.md).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/model/Launch.hpp"

namespace pipestudio::exec {

/// Test hook, from PIPESTUDIO_EXEC_FAULT=<mode>:rank=<r>:after_ops=<n>. After device/rank `r`
/// has finished `n` ops of the measured iterations: `crash` kills the whole process
/// (SIGKILL), `die` ends only that device's lane silently (in-process backends), `hang` stops
/// it making progress, `error` makes it report an error.
struct FaultSpec {
  enum class Mode { None, Crash, Die, Hang, Error };
  Mode mode = Mode::None;
  int rank = 0;
  std::int64_t afterOps = 0;
};
Expected<FaultSpec> parseFault(const std::string& text);

struct ExecOptions {
  std::string planPath;
  pipestudio::Backend backend = pipestudio::Backend::Cpu;
  int iterations = 1;
  int warmup = 0;
  int rank = 0;  ///< cuda: this process's device; cpu/cuda-single run every device
  int world = 1;
  std::string ncclIdHex;  ///< cuda, ranks > 0: rank 0's NCCL unique id (hex of 128 bytes)
  std::string runId;
  double timeScale = 1.0;                                      ///< planned durations × timeScale
  std::optional<double> maxOpMs;                               ///< scale so the longest op lasts this long
  double watchdogTimeoutS = 60.0;                              ///< no progress for this long → the run fails
  std::optional<std::string> profileOut;                       ///< --profile FILE: write a measured pipestudio.model/1
  bool baseline = false;                                       ///< cuda: run every op's kernels back to back, report ms
  std::int64_t cpuMemoryBudgetBytes = std::int64_t{64} << 20;  ///< per device; larger plans scale down
  std::optional<std::int64_t> deviceMemoryBytes;               ///< override the capacity checked before running
  FaultSpec fault;
};

/// Parses the command line (argv[0] excluded) plus the environment: PIPESTUDIO_EXEC_FAULT and,
/// when --rank/--world are absent, OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE or
/// SLURM_PROCID/SLURM_NTASKS. `--help` comes back as Error{"usage"} with the text in usage().
Expected<ExecOptions> parseExecArgs(const std::vector<std::string>& args);
std::string execUsage();

/// Runs the executor writing the trace stream to `outFd` (stdout in the binary) and logs to
/// stderr. Returns the process exit status: 0 ok, 1 refused plan or failed run, 2 usage.
int runExecutor(const ExecOptions& options, int outFd);

/// main() of pipestudio-exec.
int execMain(int argc, char** argv);

}  // namespace pipestudio::exec
