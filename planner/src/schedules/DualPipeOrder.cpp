// DualPipe's own order (DeepSeek-V3 technical report §3.2.1, Figure 5; the schedule of the
// public deepseek-ai/DualPipe repository, rebuilt here from its published description).
//
// Every rank r of p (p even) holds two chunks: its stage of the direction in which it sits in
// the first half (phase 0, stage h = min(r, p−1−r)) and its stage of the other direction
// (phase 1, stage p−1−h). Half of the m microbatches flow in each direction. A rank walks
// eight steps (h as above, p/2 = half):
//   1. 2(half−h−1) forwards of phase 0            5. half−h−1 × (backward phase 1, F1&B0)
//   2. h+1 × (F0, F1)                             6. h+1 × (B1, B0), the second half of them
//   3. half−h−1 × (B1 split, W, F1)                  split (W deferred)
//   4. m/2−p+h+1 × (F0&B1, F1&B0) — the steady    7. half−h−1 × (W, B0 split)
//      state, each forward paired with the other  8. h+1 × W (the deferred ones, in order)
//      direction's backward
// "X&Y" pairs a forward with a full backward of the other phase: the simulator overlaps them
// when the plan says so (PlanConfig::overlapForwardBackward, overlappedGroups), which is what
// hides the expert all-to-all of one under the computation of the other. On the middle ranks
// (h = half−1) the first pair of step 4 runs its forward and backward one after the other in
// the reference; here it is emitted the same way as the others (a forward followed by the other
// phase's backward), so the simulator overlaps it too. A "full" backward is B followed at
// once by its W; a split one defers its W to a FIFO that steps 3, 7 and 8 drain.
#include <array>
#include <deque>
#include <utility>

#include "schedules/Generators.hpp"

namespace pipestudio::schedules {

std::optional<std::vector<std::vector<OrderedOp>>> dualPipeOrder(const ScheduleInput& input) {
  const int p = input.shape.devices;
  const int m = input.shape.microbatches;
  if (p < 2 || p % 2 != 0 || m % 2 != 0 || m / 2 + 1 < p || input.shape.chunksPerDevice != 2) return std::nullopt;
  // Per device, its stage of each pipeline (exactly one each).
  IdVector<std::array<int, 2>> stageOf(p, {-1, -1});
  for (const VirtualStage& vs : input.virtualStages) {
    if (vs.device < 0 || vs.device >= p || vs.pipeline < 0 || vs.pipeline > 1) return std::nullopt;
    int& slot = stageOf[vs.device][vs.pipeline];
    if (slot >= 0) return std::nullopt;
    slot = vs.id;
  }
  const int half = p / 2;
  IdVector<std::vector<OrderedOp>> out(p);
  for (int r = 0; r < p; ++r) {
    const auto& stages = stageOf[r];
    if (stages[0] < 0 || stages[1] < 0) return std::nullopt;
    const int h = r < half ? r : p - 1 - r;
    // Phase 0 is pipeline 0 on the first half of the ranks, pipeline 1 on the second half.
    const std::array<int, 2> pipelineOf = r < half ? std::array<int, 2>{0, 1} : std::array<int, 2>{1, 0};
    std::array<int, 2> nextF{0, 0}, nextB{0, 0};
    std::deque<OrderedOp> deferred;
    auto& lane = out[r];
    lane.reserve(3 * static_cast<std::size_t>(m));
    // Microbatch k of pipeline q is 2k + q (the two directions alternate microbatch ids).
    auto emit = [&](OpKind kind, int phase, int k) {
      OrderedOp o;
      const int pipeline = pipelineOf[phase];
      o.virtualStage = stages[pipeline];
      o.kind = kind;
      o.microbatch = 2 * k + pipeline;
      lane.push_back(o);
      return o;
    };
    auto forward = [&](int phase) { emit(OpKind::F, phase, nextF[phase]++); };
    auto backward = [&](int phase, bool split) {
      const int k = nextB[phase]++;
      OrderedOp b = emit(OpKind::B, phase, k);
      b.kind = OpKind::W;
      if (split) {
        deferred.push_back(b);
      } else {
        lane.push_back(b);
      }
    };
    auto weight = [&] {
      if (deferred.empty()) return;
      lane.push_back(deferred.front());
      deferred.pop_front();
    };
    for (int i = 0; i < 2 * (half - h - 1); ++i) forward(0);  // 1
    for (int i = 0; i < h + 1; ++i) {                         // 2
      forward(0);
      forward(1);
    }
    for (int i = 0; i < half - h - 1; ++i) {  // 3
      backward(1, true);
      weight();
      forward(1);
    }
    for (int i = 0; i < m / 2 - p + h + 1; ++i) {  // 4
      forward(0);
      backward(1, false);
      forward(1);
      backward(0, false);
    }
    for (int i = 0; i < half - h - 1; ++i) {  // 5
      backward(1, false);
      forward(1);
      backward(0, false);
    }
    const int step6 = h + 1;  // 6
    bool split = false;
    for (int i = 0; i < step6; ++i) {
      if (i == step6 / 2 && h % 2 == 1) split = true;
      backward(1, split);
      if (i == step6 / 2 && h % 2 == 0) split = true;
      backward(0, split);
    }
    for (int i = 0; i < half - h - 1; ++i) {  // 7
      weight();
      backward(0, true);
    }
    while (!deferred.empty()) weight();  // 8
    if (nextF[0] != m / 2 || nextF[1] != m / 2 || nextB[0] != m / 2 || nextB[1] != m / 2) return std::nullopt;
  }
  return std::move(out.values());
}

}  // namespace pipestudio::schedules
