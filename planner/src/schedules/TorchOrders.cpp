// Two orders of torch.distributed.pipelining's built-in schedules, rebuilt from their published
// step rules (torch/distributed/pipelining/schedules.py) so that our dualpipe-v and interleaved-zb
// can take them as candidates and never lose to them:
//
// DualPipeV (ScheduleDualPipeV, after DeepSeek's DualPipeV): V placement, device d holds stage
// s0 = d and s1 = 2p−1−d; with r = d it walks eight steps:
//   1. 2(p−r−1) × F(s0)                           5. p−r−1 × [B(s1), F(s1)&B(s0)]
//   2. r+1 × [F(s0), F(s1)]                       6. r+1 × [X(s1), X(s0)]: X full backward until
//   3. p−r−1 × [I(s1), pending W, F(s1)]             the middle pair, then I (W deferred)
//   4. m−2p+r+1 × [F(s0)&B(s1), F(s1)&B(s0)]      7. p−r−1 × [pending W, X(s0)]
//      (the last device runs its first pair       8. r+1 × pending W
//      one after the other)
// where "&" pairs a forward with another stage's full backward (PyTorch's OVERLAP_F_B; here the
// two ops back to back), a full backward is B then its W, and I is B with its W queued.
//
// InterleavedZeroBubble (ScheduleInterleavedZeroBubble, ZB1P on the looped placement): rounds =
// max(1, m / p) of m / rounds microbatches; device r warms up with (v−1)·(m/rounds) + p−1−r
// forwards, then pairs each forward with an input backward, and from its (r+1)-th backward on
// follows each with the oldest deferred W; forwards walk the chunks round by round, backwards
// the chunks in reverse.
#include <deque>

#include "schedules/Generators.hpp"

namespace pipestudio::schedules {
namespace {

// Per device: the stage of each chunk (−1: none), from the placement.
IdVector<std::vector<int>> stagesByChunk(const ScheduleInput& input, int chunks) {
  IdVector<std::vector<int>> out(input.shape.devices, std::vector<int>(static_cast<std::size_t>(chunks), -1));
  for (const VirtualStage& vs : input.virtualStages) {
    if (vs.device < 0 || vs.device >= input.shape.devices || vs.chunk < 0 || vs.chunk >= chunks) continue;
    out[vs.device][static_cast<std::size_t>(vs.chunk)] = vs.id;
  }
  return out;
}

// One device's lane with per-stage microbatch counters and a FIFO of deferred W.
class Lane {
 public:
  Lane(std::vector<OrderedOp>& ops, int stages) : m_ops(ops), m_nextF(stages, 0), m_nextB(stages, 0) {}
  void forward(int s) { m_ops.push_back(orderedOp(s, OpKind::F, m_nextF[s]++)); }
  void fullBackward(int s) {
    const int mb = m_nextB[s]++;
    m_ops.push_back(orderedOp(s, OpKind::B, mb));
    m_ops.push_back(orderedOp(s, OpKind::W, mb));
  }
  void inputBackward(int s) {
    const int mb = m_nextB[s]++;
    m_ops.push_back(orderedOp(s, OpKind::B, mb));
    m_deferred.push_back(orderedOp(s, OpKind::W, mb));
  }
  void pendingWeight() {
    if (m_deferred.empty()) return;
    m_ops.push_back(m_deferred.front());
    m_deferred.pop_front();
  }
  bool drained() const { return m_deferred.empty(); }

 private:
  std::vector<OrderedOp>& m_ops;
  IdVector<int> m_nextF, m_nextB;
  std::deque<OrderedOp> m_deferred;
};

// Whether every stage has F, B and W of every microbatch exactly once (the rules above cover
// every shape they accept; this guards the ones they do not).
bool complete(const ScheduleInput& input, const std::vector<std::vector<OrderedOp>>& order) {
  const int stages = static_cast<int>(input.virtualStages.size());
  const int m = input.shape.microbatches;
  IdVector<int> count(stages * 3, 0);
  for (const auto& lane : order) {
    for (const OrderedOp& o : lane) {
      if (o.virtualStage < 0 || o.virtualStage >= stages || o.microbatch < 0 || o.microbatch >= m) return false;
      const int k = o.kind == OpKind::F ? 0 : o.kind == OpKind::B ? 1 : 2;
      ++count[o.virtualStage * 3 + k];
    }
  }
  for (const int c : count) {
    if (c != m) return false;
  }
  return true;
}

}  // namespace

std::optional<std::vector<std::vector<OrderedOp>>> torchDualPipeVOrder(const ScheduleInput& input) {
  const int p = input.shape.devices;
  const int m = input.shape.microbatches;
  if (p < 1 || m < 2 * p || input.shape.chunksPerDevice != 2 || !isSingleV(input)) return std::nullopt;
  const auto chunkStage = stagesByChunk(input, 2);
  const int stages = static_cast<int>(input.virtualStages.size());
  std::vector<std::vector<OrderedOp>> out(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    const int s0 = chunkStage[r][0];
    const int s1 = chunkStage[r][1];
    if (s0 < 0 || s1 < 0) return std::nullopt;
    Lane lane(out[static_cast<std::size_t>(r)], stages);
    for (int i = 0; i < 2 * (p - r - 1); ++i) lane.forward(s0);  // 1
    for (int i = 0; i < r + 1; ++i) {                            // 2
      lane.forward(s0);
      lane.forward(s1);
    }
    for (int i = 0; i < p - r - 1; ++i) {  // 3
      lane.inputBackward(s1);
      lane.pendingWeight();
      lane.forward(s1);
    }
    for (int i = 0; i < m - 2 * p + r + 1; ++i) {  // 4
      lane.forward(s0);
      lane.fullBackward(s1);
      lane.forward(s1);
      lane.fullBackward(s0);
    }
    for (int i = 0; i < p - r - 1; ++i) {  // 5
      lane.fullBackward(s1);
      lane.forward(s1);
      lane.fullBackward(s0);
    }
    bool split = false;  // 6
    const auto backward = [&](int s) { split ? lane.inputBackward(s) : lane.fullBackward(s); };
    for (int i = 0; i < r + 1; ++i) {
      if (i == (r + 1) / 2 && r % 2 == 1) split = true;
      backward(s1);
      if (i == (r + 1) / 2 && r % 2 == 0) split = true;
      backward(s0);
    }
    for (int i = 0; i < p - r - 1; ++i) {  // 7
      lane.pendingWeight();
      backward(s0);
    }
    for (int i = 0; i < r + 1; ++i) lane.pendingWeight();  // 8
    if (!lane.drained()) return std::nullopt;
  }
  if (!complete(input, out)) return std::nullopt;
  return out;
}

std::optional<std::vector<std::vector<OrderedOp>>> torchInterleavedZeroBubbleOrder(const ScheduleInput& input) {
  const int p = input.shape.devices;
  const int m = input.shape.microbatches;
  const int v = input.shape.chunksPerDevice;
  if (p < 1 || m < 1 || v < 1) return std::nullopt;
  const int rounds = std::max(1, m / p);
  if (m % rounds != 0) return std::nullopt;
  const int perRound = m / rounds;
  const auto chunkStage = stagesByChunk(input, v);
  const int stages = static_cast<int>(input.virtualStages.size());
  std::vector<std::vector<OrderedOp>> out(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    for (int c = 0; c < v; ++c) {
      if (chunkStage[r][static_cast<std::size_t>(c)] < 0) return std::nullopt;
    }
    const int warmup = std::min((v - 1) * perRound + (p - 1 - r), m * v);
    const int total = m * v + warmup;  // warm-up, steady (F and I) and cool-down steps
    const auto forwardStage = [&](int step) { return chunkStage[r][static_cast<std::size_t>((step / perRound) % v)]; };
    const auto backwardStage = [&](int step) {
      return chunkStage[r][static_cast<std::size_t>(v - 1 - ((step - warmup) / perRound) % v)];
    };
    auto& ops = out[static_cast<std::size_t>(r)];
    IdVector<int> nextF(stages, 0), nextB(stages, 0), nextW(stages, 0);
    std::vector<int> backwardSteps;
    std::size_t weights = 0;
    const auto weight = [&] {
      const int s = backwardStage(backwardSteps[weights++]);
      ops.push_back(orderedOp(s, OpKind::W, nextW[s]++));
    };
    for (int step = 0; step < total; ++step) {
      if (step < m * v) {
        const int s = forwardStage(step);
        ops.push_back(orderedOp(s, OpKind::F, nextF[s]++));
      }
      if (step < warmup) continue;
      const int s = backwardStage(step);
      ops.push_back(orderedOp(s, OpKind::B, nextB[s]++));
      backwardSteps.push_back(step);
      if (step - warmup >= r) weight();
    }
    while (weights < backwardSteps.size()) weight();
  }
  if (!complete(input, out)) return std::nullopt;
  return out;
}

}  // namespace pipestudio::schedules
