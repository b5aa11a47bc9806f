// Seq1F1B (Sun et al. 2024, "Seq1F1B: Efficient Sequence-Level Pipeline Parallelism for Large
// Language Model Training", §3.2 and Figure 1): each microbatch runs as K sequence chunks
// (PlanConfig::seqSplits), each a unit of a 1F1B schedule on the linear placement. Forwards
// take a microbatch's chunks in sequence order, backwards in reverse order (causal attention: a
// chunk's forward needs the earlier chunks' keys and values, its backward produces their
// gradients; sequenceDependencies in Dependencies.hpp). Device d warms up with p − d − 2 + K
// chunk forwards (1F1B's p − d − 1 plus the K − 1 further chunks its first microbatch needs
// before the last device can start that microbatch's backward), then alternates one forward and
// one backward, then drains; the order of the authors' implementation
// (sail-sg/zero-bubble-pipeline-parallelism @ 39f2c18, zerobubble/scheduler/seq1f1b.py).
// Each unit is costed as its chunk (layerChunkCosts): with the "balanced" split the chunks take
// equal time, with "even" later chunks are slower.
#include <algorithm>
#include <string>

#include "pipestudio/common/Try.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio::schedules {
namespace {

class Seq1F1B final : public ScheduleGenerator {
 public:
  std::string_view name() const override { return "seq1f1b"; }
  int defaultChunksPerDevice() const override { return 1; }
  bool splitsBackward() const override { return false; }
  bool splitsSequence() const override { return true; }
  Status validate(const ScheduleShape& shape) const override {
    PS_RETURN_IF_ERROR(requireChunks(name(), shape, shape.chunksPerDevice == 1, "one chunk per device"));
    if (shape.seqSplits > 1 && shape.microbatches % shape.seqSplits != 0) {
      return Error{"seq1f1b: " + std::to_string(shape.microbatches) + " units are not whole microbatches of " +
                   std::to_string(shape.seqSplits) + " sequence chunks"};
    }
    return {};
  }
  std::vector<VirtualStage> placement(const ScheduleShape& shape) const override {
    return linearPlacement(shape.devices, 1);
  }
  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    const int p = input.shape.devices;
    const int units = input.shape.microbatches;
    const int k = std::max(1, input.shape.seqSplits);
    // The i-th backward of a device is chunk K − 1 − (i mod K) of microbatch ⌊i / K⌋.
    const auto backwardUnit = [k](int i) { return i / k * k + (k - 1 - i % k); };
    ScheduleSkeleton out;
    out.virtualStages = input.virtualStages;
    out.devices.resize(static_cast<std::size_t>(p));
    for (int d = 0; d < p; ++d) {
      auto& lane = out.devices[static_cast<std::size_t>(d)];
      lane.reserve(2 * static_cast<std::size_t>(units));
      const int warmup = std::min(p - d - 2 + k, units);
      int nextForward = 0;
      for (; nextForward < warmup; ++nextForward) lane.push_back({d, OpKind::F, nextForward, 0});
      for (int b = 0; b < units; ++b) {
        if (nextForward < units) lane.push_back({d, OpKind::F, nextForward++, 0});
        lane.push_back({d, OpKind::BW, backwardUnit(b), 0});
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<ScheduleGenerator> makeSeq1F1B() { return std::make_unique<Seq1F1B>(); }

}  // namespace pipestudio::schedules
