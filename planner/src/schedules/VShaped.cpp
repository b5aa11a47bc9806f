// V-shaped and bidirectional schedules, built by the greedy list construction of
// Greedy.cpp under a per-device activation budget that gives each schedule its published
// memory profile:
//   zb-v       (Qi et al. 2023 §6): V placement, 1F1B memory (p microbatches' activations).
//   dualpipe-v (DeepSeek-V3 report §3.2.1, "cut-in-half" DualPipe): V placement, (p+1) chunks.
//   dualpipe   (DeepSeek-V3 report §3.2.1): two directions, model held twice, (p+1) stages.
//   bitpipe    (Wu et al. 2024): two V-shaped pipelines in opposite directions.
// Bidirectional schedules alternate microbatches between the two pipelines so both
// directions fill the pipeline from their own end at once.
// Not modelled: DualPipe's overlap of a forward chunk of one direction with a backward
// chunk of the other on one device (DeepSeek-V3 §3.2.1 hides the all-to-all and PP
// communication of one behind the computation of the other). The simulator runs one
// compute op at a time per device and a transfer beside computation, so dualpipe and
// dualpipe-v are timed with their F and B back to back: their makespan is an upper bound,
// pessimistic by at most the overlapped time.
#include <algorithm>
#include <cmath>

#include "schedules/Generators.hpp"

namespace pipestudio::schedules {
namespace {

struct Spec {
  const char* name;
  int defaultChunks;
  int pipelines;           // 1 or 2
  bool wave;               // V placement per pipeline (else linear)
  int chunkMultiple;       // chunksPerDevice must be a positive multiple of this
  const char* chunkWhat;   // message when it is not
  bool evenDevices;        // dualpipe
  int minMicrobatchesPerDevice;  // 0: none; 1: m ≥ p
  // Activation budget in units of "one microbatch's activation on this device":
  // budget = ceil(numerator · p / denominator) + extra.
  int numerator;
  int denominator;
  int extra;
  bool preferContinuing;
  bool reserveWholeMicrobatch;
  bool boundEveryForward;  // GreedyOptions::boundEveryForward
};

class GreedyGenerator final : public ScheduleGenerator {
 public:
  explicit GreedyGenerator(Spec spec) : m_spec(spec) {}
  std::string_view name() const override { return m_spec.name; }
  int defaultChunksPerDevice() const override { return m_spec.defaultChunks; }
  bool splitsBackward() const override { return true; }
  int pipelines() const override { return m_spec.pipelines; }

  Status validate(const ScheduleShape& shape) const override {
    const int v = shape.chunksPerDevice;
    if (auto st = requireChunks(name(), shape, v >= m_spec.chunkMultiple && v % m_spec.chunkMultiple == 0,
                                m_spec.chunkWhat);
        !st) {
      return st;
    }
    if (m_spec.evenDevices && shape.devices % 2 != 0) {
      return Error{std::string(name()) + " needs an even number of devices (the two directions pair devices d and p-1-d), got " +
                   std::to_string(shape.devices)};
    }
    if (m_spec.pipelines == 2 && shape.microbatches % 2 != 0) {
      return Error{std::string(name()) + " needs an even number of microbatches (half flow in each direction), got " +
                   std::to_string(shape.microbatches)};
    }
    if (m_spec.minMicrobatchesPerDevice > 0) {
      return requireMicrobatchesAtLeast(name(), shape, shape.devices * m_spec.minMicrobatchesPerDevice,
                                        "(one per device, so both directions fill the pipeline)");
    }
    return {};
  }

  std::vector<VirtualStage> placement(const ScheduleShape& shape) const override {
    const int p = shape.devices;
    const int perPipeline = shape.chunksPerDevice / m_spec.pipelines;
    auto one = [&](int pipeline, bool reverse) {
      const int firstId = pipeline * p * perPipeline;
      return m_spec.wave ? wavePlacement(p, perPipeline, pipeline, firstId, reverse)
                         : linearPlacement(p, perPipeline, pipeline, firstId, reverse);
    };
    auto stages = one(0, false);
    if (m_spec.pipelines == 2) {
      auto second = one(1, true);
      for (auto& vs : second) vs.chunk += perPipeline;  // chunks of a device count over both pipelines
      stages.insert(stages.end(), second.begin(), second.end());
    }
    return stages;
  }

  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    const int p = input.shape.devices;
    GreedyOptions options;
    options.splitBackward = true;
    options.preferContinuing = m_spec.preferContinuing;
    options.reserveWholeMicrobatch = m_spec.reserveWholeMicrobatch;
    options.boundEveryForward = m_spec.boundEveryForward;
    if (m_spec.pipelines == 2) {
      options.microbatchPipeline.resize(static_cast<std::size_t>(input.shape.microbatches));
      for (int mb = 0; mb < input.shape.microbatches; ++mb) options.microbatchPipeline[static_cast<std::size_t>(mb)] = mb % 2;
    }
    const auto units = static_cast<std::int64_t>(
        std::ceil(static_cast<double>(m_spec.numerator * p) / static_cast<double>(m_spec.denominator)) + m_spec.extra);
    std::vector<std::int64_t> perMb(static_cast<std::size_t>(p), 0);
    for (int pl = 0; pl < m_spec.pipelines; ++pl) {
      const auto a = activationPerMicrobatch(input, pl);
      for (int d = 0; d < p; ++d) perMb[static_cast<std::size_t>(d)] = std::max(perMb[static_cast<std::size_t>(d)], a[static_cast<std::size_t>(d)]);
    }
    options.capBytes.resize(static_cast<std::size_t>(p));
    for (int d = 0; d < p; ++d) {
      options.capBytes[static_cast<std::size_t>(d)] = std::max<std::int64_t>(1, units) * perMb[static_cast<std::size_t>(d)];
    }
    if (!options.boundEveryForward) return greedyOrder(input, options);
    // zb-v: the budget on every forward keeps 1F1B's peak; on very short pipelines (p = 2)
    // it can leave the drain one W short of filling a gap. Keep it unless the unbounded
    // order (the budget on admissions only) has a smaller device bubble, like the authors'
    // ZB-V construction, which tries several fill policies and keeps the one with least
    // bubble. The gap is at most about one W per device, negligible against a long
    // iteration, so large instances (where a second construction costs tens of ms) skip it.
    constexpr double kSecondTryMaxOps = 1 << 16;
    GreedyEstimate bounded;
    auto order = greedyOrder(input, options, &bounded);
    const double ops = 6.0 * input.shape.devices * static_cast<double>(input.shape.microbatches);
    if (!order || ops > kSecondTryMaxOps || bounded.maxDeviceBubbleMs <= 1e-9 * std::max(1.0, bounded.makespanMs)) {
      return order;
    }
    options.boundEveryForward = false;
    GreedyEstimate unbounded;
    auto alternative = greedyOrder(input, options, &unbounded);
    if (alternative && unbounded.maxDeviceBubbleMs + 1e-9 * std::max(1.0, unbounded.makespanMs) < bounded.maxDeviceBubbleMs) {
      return alternative;
    }
    return order;
  }

 private:
  Spec m_spec;
};

}  // namespace

std::unique_ptr<ScheduleGenerator> makeZbV() {
  return std::make_unique<GreedyGenerator>(
      Spec{"zb-v", 2, 1, true, 2, "an even number of chunks per device (V shape)", false, 0, 1, 1, 0, true, false, true});
}
std::unique_ptr<ScheduleGenerator> makeDualPipeV() {
  return std::make_unique<GreedyGenerator>(
      Spec{"dualpipe-v", 2, 1, true, 2, "an even number of chunks per device (V shape)", false, 1, 1, 2, 1, false, true, false});
}
std::unique_ptr<ScheduleGenerator> makeBitPipe() {
  return std::make_unique<GreedyGenerator>(Spec{"bitpipe", 4, 2, true, 4,
                                                "a multiple of four chunks per device (two V-shaped pipelines)",
                                                false, 1, 1, 1, 0, true, false, false});
}
std::unique_ptr<ScheduleGenerator> makeDualPipe() {
  return std::make_unique<GreedyGenerator>(
      Spec{"dualpipe", 2, 2, false, 2, "an even number of chunks per device (one per direction)", true, 1, 1, 1, 1,
           false, true, false});
}

}  // namespace pipestudio::schedules
