// Placements and validation helpers shared by the generators.
#include <algorithm>
#include <utility>

#include "schedules/Generators.hpp"

namespace pipestudio::schedules {

std::vector<VirtualStage> linearPlacement(int devices, int chunks, int pipeline, int firstId, bool reversed) {
  std::vector<VirtualStage> out;
  out.reserve(static_cast<std::size_t>(devices) * static_cast<std::size_t>(chunks));
  for (int s = 0; s < devices * chunks; ++s) {
    VirtualStage vs;
    vs.id = firstId + s;
    const int lane = s % devices;
    vs.device = reversed ? devices - 1 - lane : lane;
    vs.chunk = s / devices;
    vs.pipeline = pipeline;
    out.push_back(vs);
  }
  return out;
}

std::vector<VirtualStage> wavePlacement(int devices, int chunks, int pipeline, int firstId, bool mirrored) {
  std::vector<VirtualStage> out;
  out.reserve(static_cast<std::size_t>(devices) * static_cast<std::size_t>(chunks));
  for (int s = 0; s < devices * chunks; ++s) {
    VirtualStage vs;
    vs.id = firstId + s;
    const int c = s / devices;
    const int lane = (c % 2 == 0) ? s % devices : devices - 1 - s % devices;
    vs.device = mirrored ? devices - 1 - lane : lane;
    vs.chunk = c;
    vs.pipeline = pipeline;
    out.push_back(vs);
  }
  return out;
}

Status requireMicrobatchesAtLeast(std::string_view schedule, const ScheduleShape& shape, int minimum,
                                  std::string_view why) {
  if (shape.microbatches >= minimum) return {};
  return Error{std::string(schedule) + " needs at least " + std::to_string(minimum) + " microbatches " +
               std::string(why) + ", got " + std::to_string(shape.microbatches)};
}

Status requireChunks(std::string_view schedule, const ScheduleShape& shape, bool ok, std::string_view what) {
  if (ok) return {};
  return Error{std::string(schedule) + " needs " + std::string(what) + ", got --chunks " +
               std::to_string(shape.chunksPerDevice)};
}

std::vector<std::vector<int>> pipelineChains(const std::vector<VirtualStage>& stages) {
  int pipelines = 1;
  for (const auto& vs : stages) pipelines = std::max(pipelines, vs.pipeline + 1);
  IdVector<std::vector<int>> chains(pipelines);
  for (const auto& vs : stages) chains[vs.pipeline].push_back(vs.id);
  return std::move(chains.values());
}

std::int64_t deviceMemoryLimit(const ScheduleInput& input, int device) {
  if (input.memoryLimitBytes) return *input.memoryLimitBytes;
  if (input.request != nullptr && input.request->cluster.gpu.memoryGib > 0) {
    return input.request->cluster.gpuOfDevice(device).memoryBytes();
  }
  return 0;
}

IdVector<std::int64_t> activationPerMicrobatch(const ScheduleInput& input, int pipeline) {
  IdVector<std::int64_t> out(input.shape.devices, 0);
  for (std::size_t i = 0; i < input.virtualStages.size(); ++i) {
    const auto& vs = input.virtualStages[i];
    if (vs.pipeline != pipeline) continue;
    out[vs.device] += input.stages[i].activationBytes;
  }
  return out;
}

}  // namespace pipestudio::schedules
