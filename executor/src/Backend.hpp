#pragma once
// How pipestudio-exec picks and drives a backend. Every backend runs lanes through
// walkDevice (Runtime.hpp); this is the seam between the shared driver and the backends.

#include <memory>
#include <string>
#include <vector>

#include "Runtime.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::exec {

/// Everything a backend needs to build its lanes.
struct BackendContext {
  const Plan& plan;
  const Program& program;
  const ExecOptions& options;
  const Clock& clock;
  FrameSink& sink;
  RunControl& control;
  double timeScale = 1.0;  ///< planned ms × timeScale = executed ms
};

/// A prepared backend: lanes for the devices this process runs, or an error that refuses the
/// plan before the first kernel (memory, shapes, devices).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::vector<Lane*> lanes() = 0;
  virtual std::string deviceName() const = 0;
  /// Right after the header: rank 0 sends its NCCL id, every rank joins the communicator.
  virtual Status afterHeader() { return {}; }
  /// Runs on the watchdog thread after a failure (NCCL abort).
  virtual void abortTransport() {}
  /// Flushes activity records and reports how many were dropped.
  virtual std::uint64_t finish() { return 0; }
};

Expected<std::unique_ptr<Backend>> makeCpuBackend(const BackendContext& ctx);
/// `cuda` (one process per GPU, NCCL) and `cuda-single` (every device on one GPU). Return an
/// error when built without CUDA or when no GPU is usable.
Expected<std::unique_ptr<Backend>> makeCudaBackend(const BackendContext& ctx, bool single);
/// --profile: measures every layer's F/B/W on this GPU and writes a pipestudio.model/1.
Status profileModel(const Plan& plan, const ExecOptions& options);
/// --baseline: the ops' kernels of every device back to back on one stream, milliseconds.
Expected<double> runBaseline(const Plan& plan, const ExecOptions& options, double timeScale);

}  // namespace pipestudio::exec
