// Built when the CUDA toolkit is absent: the CUDA backends say so instead of running.
#include "../Backend.hpp"

namespace pipestudio::exec {

Expected<std::unique_ptr<Backend>> makeCudaBackend(const BackendContext& /*ctx*/, bool single) {
  return Error{"backend " + std::string(name(single ? pipestudio::Backend::CudaSingle : pipestudio::Backend::Cuda)) +
               ": this pipestudio-exec was built without the CUDA toolkit (rebuild where nvcc is installed)"};
}

Status profileModel(const Plan& /*plan*/, const ExecOptions& /*options*/) {
  return Error{"--profile needs a CUDA build of pipestudio-exec"};
}

Expected<double> runBaseline(const Plan& /*plan*/, const ExecOptions& /*options*/, double /*timeScale*/) {
  return Error{"--baseline needs a CUDA build of pipestudio-exec"};
}

}  // namespace pipestudio::exec
