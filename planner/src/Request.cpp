// resolveRequest: a request's global batch turned into microbatches and its settings checked
// against the model and cluster, before any solver runs (Request.hpp).
#include "pipestudio/planner/Request.hpp"

#include <string>

#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/ConfigCheck.hpp"

namespace pipestudio {
namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

}  // namespace

Expected<PlanRequest> resolveRequest(PlanRequest request) {
  PlanConfig& cfg = request.config;
  Parallelism& par = cfg.parallel;
  if (par.tensor == 1) par.sequenceParallel = false;
  if (cfg.microBatchSize && *cfg.microBatchSize >= 1) request.model.samplesPerMicrobatch = *cfg.microBatchSize;
  const std::int64_t perMicrobatch = request.model.samplesPerMicrobatch * par.data;
  if (cfg.globalBatch && *cfg.globalBatch >= 1 && perMicrobatch >= 1 && *cfg.globalBatch % perMicrobatch == 0) {
    const std::int64_t m = *cfg.globalBatch / perMicrobatch;
    if (m > 1'000'000) {
      return Error{"--global-batch " + str(*cfg.globalBatch) + " gives " + str(m) +
                   " microbatches per pipeline (expected at most 1000000)"};
    }
    // Sequence-split plans count units: K per training microbatch.
    const std::int64_t units = m * std::max(1, cfg.seqSplits);
    if (units > 1'000'000) {
      return Error{"--global-batch " + str(*cfg.globalBatch) + " gives " + str(units) +
                   " microbatches (sequence chunks) per pipeline (expected at most 1000000)"};
    }
    cfg.microbatches = static_cast<int>(units);
    if (!cfg.microBatchSize) cfg.microBatchSize = request.model.samplesPerMicrobatch;
  }
  // The settings against the model and cluster: the same check every saved plan passes.
  PS_RETURN_IF_ERROR(checkPlanSettings(request.model, request.cluster, cfg));
  const std::int64_t gpus = cfg.totalGpus();
  if (request.cluster.totalGpus() > 0 && gpus > request.cluster.totalGpus() && gpus == cfg.devices) {
    return Error{"--devices " + str(cfg.devices) + " exceeds the " + str(request.cluster.totalGpus()) +
                 " GPUs of cluster '" + excerpt(request.cluster.name) + "'"};
  }
  if (request.cluster.totalGpus() > 0 && gpus > request.cluster.totalGpus()) {
    return Error{"--tp " + str(par.tensor) + " × --cp " + str(par.context) + " × --devices " + str(cfg.devices) +
                 " × --dp " + str(par.data) + " = " + str(gpus) + " GPUs, but cluster '" +
                 excerpt(request.cluster.name) + "' has " + str(request.cluster.totalGpus())};
  }
  return request;
}

}  // namespace pipestudio
