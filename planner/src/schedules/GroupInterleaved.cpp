// pipeoffload (Wan et al. 2025, "PipeOffload: Improving Scalability of Pipeline Parallelism with
// Memory Optimization", §4): the group-interleaved 1F1B schedule built for activation
// offloading, with the activations of the first chunks offloaded to host memory between their
// forward and backward (PlanConfig::offloadRatio; Offload.cpp). Interleaving over v chunks
// in groups of g microbatches (1 ≤ g ≤ p) spreads a device's activation memory evenly over
// time instead of the build-up of 1F1B-I's warm-up, so offloading the long-lived chunk-0
// activations cuts the peak better than linearly (the paper's selective offload).
//
// Candidates, for each group size g from 1 to p (three sizes on more than 16 devices: ⌈p/2⌉,
// the authors' minimum, p):
//   - the authors' group building block (sail-sg/zero-bubble-pipeline-parallelism @ 39f2c18,
//     zerobubble/scheduler/group_interleaved_1f1b.py, GroupBuildingBlockScheduler without
//     recomputation): per device, within a block of 3·g·v slots, the forward of chunk c and
//     group member i at 3·k·g·c + 3·i + d (k = ⌈g_min / g⌉, g_min the authors' minimum group
//     size: the least ⌈p/2⌉ or more with max(F+B+W)·g_min ≥ max(ΣF, ΣB) over the devices;
//     plus 3·g per full cycle of v / gcd(v, k) chunks), the backwards of the chunks in reverse
//     order from 3 slots per device below the last chunk's first forward, each W right after its
//     B; the block repeated per group, shifted so chunk c + 1 starts after chunk c reached the
//     last device, squeezed (g > 1) to the first slot after each pass's input;
//   - Megatron-LM's interleaved order with groups of g ≥ ⌈p/2⌉ (interleavedOrder), each backward split
//     into B and its W right after it;
// each with the offload pass, timed by the simulator. The fastest wins (then the smaller peak);
// under a memory limit (or the GPU's memory) the fastest that fits, else the smallest peak.
#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Simulator.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio::schedules {
namespace {

// One pass of the building block: kind (F, B or W), chunk, member of the group (microbatch
// within the group) and its slot in the unrolled block; kind N marks an empty slot.
struct Pass {
  OpKind kind = OpKind::N;
  int chunk = -1;
  int micro = -1;
  int offset = -1;
  bool empty() const { return kind == OpKind::N; }
};
using Rows = std::vector<std::vector<Pass>>;  // per device, per slot

// The authors' minimum group size: ⌈p/2⌉, grown while the longest pass triple of a device
// times the group is shorter than the forwards (or backwards) of all devices.
int minimumGroupSize(const ScheduleInput& input) {
  const int p = input.shape.devices;
  std::vector<double> f(static_cast<std::size_t>(p), 0.0), b(f), w(f);
  std::vector<int> n(static_cast<std::size_t>(p), 0);
  for (std::size_t s = 0; s < input.stages.size(); ++s) {
    const auto d = static_cast<std::size_t>(input.virtualStages[s].device);
    f[d] += input.stages[s].forwardMs;
    b[d] += input.stages[s].backwardInputMs;
    w[d] += input.stages[s].backwardWeightMs;
    ++n[d];
  }
  double maxFbw = 0, sumF = 0, sumB = 0;
  for (std::size_t d = 0; d < f.size(); ++d) {
    const double k = std::max(1, n[d]);
    maxFbw = std::max(maxFbw, (f[d] + b[d] + w[d]) / k);
    sumF += f[d] / k;
    sumB += b[d] / k;
  }
  int g = (p + 1) / 2;
  while (g < p && maxFbw * g < std::max(sumF, sumB)) ++g;
  return g;
}

// The building block of groups of g over v chunks, unrolled (each pass at its own slot).
std::optional<Rows> buildingBlock(int p, int v, int g, int minGroup) {
  const int fOffset = 1, bOffset = 2;
  const int k = (minGroup + g - 1) / g;
  const int cycle = v / std::gcd(v, k);  // chunks per cycle of the forwards through the block
  const int length = 3 * g * v;
  Rows block(static_cast<std::size_t>(p), std::vector<Pass>(static_cast<std::size_t>(length)));
  std::vector<int> lastForward(static_cast<std::size_t>(p), 0);
  auto put = [&](int d, int index, Pass pass) {
    Pass& slot = block[static_cast<std::size_t>(d)][static_cast<std::size_t>(index % length)];
    if (!slot.empty()) return false;
    pass.offset = index;
    slot = pass;
    return true;
  };
  for (int c = 0; c < v; ++c) {
    for (int i = 0; i < g; ++i) {
      for (int d = 0; d < p; ++d) {
        const int index = 3 * k * g * c + 3 * i + d * fOffset + 3 * g * (c / cycle);
        if (!put(d, index, {OpKind::F, c, i, -1})) return std::nullopt;
        if (c == v - 1 && i == 0) lastForward[static_cast<std::size_t>(d)] = index;
      }
    }
  }
  for (int c = 0; c < v; ++c) {
    for (int i = 0; i < g; ++i) {
      for (int d = 0; d < p; ++d) {
        const int first = lastForward[static_cast<std::size_t>(d)] + (p - 1 - d) * (fOffset + bOffset) + 1;
        const int index = first + 3 * k * g * c + 3 * i + 3 * g * (c / cycle);
        if (!put(d, index, {OpKind::B, v - 1 - c, i, -1})) return std::nullopt;
        if (!put(d, index + 1, {OpKind::W, v - 1 - c, i, -1})) return std::nullopt;
      }
    }
  }
  int maxOffset = 0;
  for (const auto& row : block) {
    for (const Pass& pass : row) maxOffset = std::max(maxOffset, pass.offset);
  }
  Rows unrolled(static_cast<std::size_t>(p), std::vector<Pass>(static_cast<std::size_t>(maxOffset) + 1));
  for (int d = 0; d < p; ++d) {
    for (const Pass& pass : block[static_cast<std::size_t>(d)]) {
      unrolled[static_cast<std::size_t>(d)][static_cast<std::size_t>(pass.offset)] = pass;
    }
  }
  return unrolled;
}

// The block once per group (each `length` passes later, members renumbered), microbatches
// beyond m dropped.
Rows repeatBlock(const Rows& unrolled, int groups, int g, int m) {
  const auto passes = static_cast<int>(
      std::count_if(unrolled.front().begin(), unrolled.front().end(), [](const Pass& x) { return !x.empty(); }));
  const int length = static_cast<int>(unrolled.front().size()) + passes * (groups - 1);
  Rows out(unrolled.size(), std::vector<Pass>(static_cast<std::size_t>(length)));
  for (std::size_t d = 0; d < unrolled.size(); ++d) {
    for (std::size_t i = 0; i < unrolled[d].size(); ++i) {
      const Pass& pass = unrolled[d][i];
      if (pass.empty()) continue;
      for (int r = 0; r < groups; ++r) {
        Pass copy = pass;
        copy.micro = pass.micro + r * g;
        if (copy.micro >= m) continue;
        out[d][i + static_cast<std::size_t>(passes * r)] = copy;
      }
    }
  }
  return out;
}

// Device i starts min(i, s) slots late, s the largest shift that keeps every chunk-c pass of
// device 0 after the chunk-(c − 1) forward of the same microbatch on the last device.
Rows shiftForDependencies(const Rows& rows) {
  const int p = static_cast<int>(rows.size());
  std::map<std::pair<int, int>, int> lastDeviceForward;  // (micro, chunk) → slot
  for (std::size_t j = 0; j < rows.back().size(); ++j) {
    const Pass& pass = rows.back()[j];
    if (pass.kind == OpKind::F) lastDeviceForward[{pass.micro, pass.chunk}] = static_cast<int>(j);
  }
  int shift = p - 1;
  for (std::size_t j = 0; j < rows.front().size(); ++j) {
    const Pass& pass = rows.front()[j];
    if (pass.empty() || pass.chunk <= 0) continue;
    const auto it = lastDeviceForward.find({pass.micro, pass.chunk - 1});
    if (it != lastDeviceForward.end()) shift = std::min(shift, static_cast<int>(j) - 1 - it->second);
  }
  shift = std::max(0, shift);
  Rows out(rows.size());
  for (int i = 0; i < p; ++i) {
    const int own = std::min(i, shift);
    auto& row = out[static_cast<std::size_t>(i)];
    row.assign(static_cast<std::size_t>(own), Pass{});
    row.insert(row.end(), rows[static_cast<std::size_t>(i)].begin(), rows[static_cast<std::size_t>(i)].end());
    row.resize(row.size() + static_cast<std::size_t>(shift - own));
  }
  return out;
}

// Slot by slot, every device takes its next pass when the pass it depends on (the previous
// layer's forward, the next layer's backward, its own B for a W) is in an earlier slot.
Rows squeeze(const Rows& rows, int v) {
  const int p = static_cast<int>(rows.size());
  const std::size_t length = rows.front().size();
  const int layers = v * p;
  std::set<std::tuple<int, int, int>> done;  // (micro, kind, layer)
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  Rows out(rows.size());
  std::size_t used = 0;
  for (std::size_t i = 0; i < length; ++i) {
    for (int d = 0; d < p; ++d) {
      const auto& row = rows[static_cast<std::size_t>(d)];
      auto& at = next[static_cast<std::size_t>(d)];
      while (at < length && row[at].empty()) ++at;
      if (at >= length) {
        out[static_cast<std::size_t>(d)].push_back(Pass{});
        continue;
      }
      const Pass& pass = row[at];
      const int layer = pass.chunk * p + d;
      int needs = layer;
      if (pass.kind == OpKind::F) needs = layer - 1;
      if (pass.kind == OpKind::B) needs = layer + 1;
      needs = std::clamp(needs, 0, layers - 1);
      if (needs == layer || done.count({pass.micro, static_cast<int>(pass.kind), needs}) != 0) {
        out[static_cast<std::size_t>(d)].push_back(pass);
        ++at;
      } else {
        out[static_cast<std::size_t>(d)].push_back(Pass{});
      }
    }
    for (int d = 0; d < p; ++d) {
      const Pass& pass = out[static_cast<std::size_t>(d)][i];
      if (pass.empty()) continue;
      done.insert({pass.micro, static_cast<int>(pass.kind), pass.chunk * p + d});
      used = i + 1;
    }
  }
  for (auto& row : out) row.resize(used);
  return out;
}

}  // namespace

std::optional<std::vector<std::vector<OrderedOp>>> groupInterleavedOrder(int p, int m, int v, int g, int minGroup) {
  if (p < 1 || m < 1 || v < 1 || g < 1) return std::nullopt;
  g = std::min(g, p);
  auto block = buildingBlock(p, v, g, minGroup);
  if (!block) return std::nullopt;
  const int groups = (m + g - 1) / g;
  Rows rows = shiftForDependencies(repeatBlock(*block, groups, g, m));
  if (g > 1) rows = squeeze(rows, v);
  std::vector<std::vector<OrderedOp>> out(static_cast<std::size_t>(p));
  for (int d = 0; d < p; ++d) {
    for (const Pass& pass : rows[static_cast<std::size_t>(d)]) {
      if (pass.empty()) continue;
      out[static_cast<std::size_t>(d)].push_back({pass.chunk * p + d, pass.kind, pass.micro, 0});
    }
    if (static_cast<int>(out[static_cast<std::size_t>(d)].size()) != 3 * v * m) return std::nullopt;
  }
  return out;
}

namespace {

// Orders that never hold more than 1F1B does on the same stages, whatever the host link carries:
// the greedy list construction on the stage estimates (Generators.hpp), a microbatch admitted on
// device d only while its whole activation there (a of the device's chunks) fits the device's
// budget, reserved until its last W. Budgets: 1F1B's warm-up, (p − d)·a (PipeDream-Flush holds
// p − d microbatches on device d, Narayanan et al. 2021), and what the peak cap
// (ScheduleInput::peakCapBytes) and the memory limit leave beside the device's static memory.
// A microbatch always admits the oldest microbatch first, and a device that holds nothing
// always admits, so the oldest unfinished microbatch can always go on: no order deadlocks.
std::vector<std::vector<std::vector<OrderedOp>>> boundedOrders(const ScheduleInput& input) {
  const int p = input.shape.devices;
  const IdVector<std::int64_t> need = activationPerMicrobatch(input, 0);
  IdVector<std::int64_t> warmup(p, 0), room(p, 0);
  bool roomBounded = false;
  for (int d = 0; d < p; ++d) {
    const std::int64_t staticBytes = inRange(input.staticBytes, d) ? input.staticBytes[static_cast<std::size_t>(d)] : 0;
    warmup[d] = need[d] * (p - d);
    std::int64_t left = std::numeric_limits<std::int64_t>::max();
    if (input.peakCapBytes) left = std::min(left, *input.peakCapBytes - staticBytes);
    if (input.memoryLimitBytes) left = std::min(left, *input.memoryLimitBytes - staticBytes);
    roomBounded = roomBounded || left != std::numeric_limits<std::int64_t>::max();
    room[d] = std::max(need[d], std::min(left, need[d] * input.shape.microbatches));
    warmup[d] = std::max(need[d], std::min(warmup[d], room[d]));
  }
  std::vector<std::vector<std::vector<OrderedOp>>> out;
  for (const IdVector<std::int64_t>* budget : {&warmup, &room}) {
    if (budget == &room && (!roomBounded || room == warmup)) continue;
    GreedyOptions options;
    options.splitBackward = true;
    options.capBytes = *budget;
    options.reserveWholeMicrobatch = true;
    auto order = greedyOrder(input, options);
    if (order) out.push_back(std::move(order->devices));
  }
  return out;
}

class PipeOffload final : public ScheduleGenerator {
 public:
  std::string_view name() const override { return "pipeoffload"; }
  int defaultChunksPerDevice() const override { return 2; }
  bool splitsBackward() const override { return true; }
  // The authors' quick start offloads one chunk of each device (--offload-chunk-num 1).
  void configure(PlanConfig& config) const override {
    if (config.offloadRatio <= 0) config.offloadRatio = 1.0 / std::max(1, config.chunksPerDevice);
  }
  // PipeOffload exists to hold less than 1F1B (Wan et al. 2025, §1: 1F1B's activation memory
  // grows with the number of in-flight microbatches; offloading takes it back).
  std::string_view savesMemoryAgainst() const override { return "1f1b"; }
  Status validate(const ScheduleShape& shape) const override {
    if (auto st = requireChunks(name(), shape, shape.chunksPerDevice >= 1, "at least one chunk per device"); !st) {
      return st;
    }
    return requireMicrobatchesAtLeast(name(), shape, shape.devices, "(a group of microbatches goes round the devices)");
  }
  std::vector<VirtualStage> placement(const ScheduleShape& shape) const override {
    return linearPlacement(shape.devices, shape.chunksPerDevice);
  }
  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override;
};

// The candidate orders: the authors' group-interleaved order and Megatron's interleaved one
// for every group size tried, and the memory-bounded orders.
std::vector<std::vector<std::vector<OrderedOp>>> candidateOrders(const ScheduleInput& input) {
  const int p = input.shape.devices;
  const int m = input.shape.microbatches;
  const int v = input.shape.chunksPerDevice;
  const int minGroup = minimumGroupSize(input);
  std::vector<int> sizes;
  // Every group size is a refinement search (each candidate order is offloaded and timed): a
  // solve that skips those (SolveControl::refine off, the configurator's screening) takes the
  // authors' sizes only, as for large p.
  const bool refine = input.control == nullptr || input.control->refine;
  if (p <= 16 && refine) {
    // Below ⌈p/2⌉ the authors' block still builds (their offloading search reaches its lowest
    // peaks with groups of 1–3): the smaller the group, the fewer activations in flight.
    for (int g = 1; g <= p; ++g) sizes.push_back(g);
  } else {
    sizes = {(p + 1) / 2, minGroup, p};
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::vector<std::vector<std::vector<OrderedOp>>> orders;
  for (const int g : sizes) {
    if (auto own = groupInterleavedOrder(p, m, v, g, minGroup)) orders.push_back(std::move(*own));
    if (m >= g && 2 * g >= p) {
      // Megatron's order fuses the backward; pipeoffload splits it (each W right after its B,
      // as in the building block), which times the same and frees the activations as early.
      orders.push_back(splitFusedBackward(interleavedOrder(input, g)));
    }
  }
  for (auto& bounded : boundedOrders(input)) orders.push_back(std::move(bounded));
  return orders;
}

// A candidate with its offloading, and its fit, makespan and highest peak as the simulator
// times it (what the plan will be).
struct Judged {
  ScheduleSkeleton skeleton;
  bool fits = false;
  double ms = 0;
  std::int64_t peak = 0;
};

// It fits when every device is within the memory limit (or its GPU's memory) and within the
// peak of the schedule pipeoffload saves against (ScheduleInput::peakCapBytes).
bool judge(const Plan& shell, const CostedModel* costs, const ScheduleInput& input, Judged& j) {
  SimulationOptions timing;
  timing.recordComms = false;
  timing.costs = costs;
  auto timed = simulateSkeleton(shell, j.skeleton, timing);
  if (!timed) return false;
  j.peak = 0;
  j.fits = true;
  for (int d = 0; d < static_cast<int>(timed->metrics.devices.size()); ++d) {
    const DeviceMetrics& dm = timed->metrics.devices[static_cast<std::size_t>(d)];
    j.peak = std::max(j.peak, dm.peakMemoryBytes);
    const std::int64_t limit = deviceMemoryLimit(input, d);
    if (limit > 0 && dm.peakMemoryBytes + (input.memoryLimitBytes ? 0 : dm.memory.marginBytes()) > limit)
      j.fits = false;
    if (input.peakCapBytes && dm.peakMemoryBytes > *input.peakCapBytes) j.fits = false;
  }
  j.ms = timed->metrics.makespanMs;
  return true;
}

// The fastest that fits (with its waits), its peak breaking ties; when none fits, the lowest peak.
Expected<std::size_t> chooseCandidate(const Plan& shell, const CostedModel& costs, const ScheduleInput& input,
                                      std::vector<Judged>& judged) {
  std::vector<std::size_t> byTime(judged.size());
  for (std::size_t i = 0; i < byTime.size(); ++i) byTime[i] = i;
  std::stable_sort(byTime.begin(), byTime.end(), [&](std::size_t x, std::size_t y) {
    const double tolerance = 1e-9 * std::max(1.0, judged[x].ms);
    if (judged[x].ms < judged[y].ms - tolerance) return true;
    if (judged[y].ms < judged[x].ms - tolerance) return false;
    return judged[x].peak < judged[y].peak;
  });
  std::optional<std::size_t> chosen;
  for (const std::size_t i : byTime) {
    if (input.control && input.control->cancelled()) return Error::cancelled();
    Judged& j = judged[i];
    if (chosen && judged[*chosen].ms < j.ms - 1e-9 * std::max(1.0, j.ms)) break;  // slower than a fitting one
    // Waits change when passes start, not their order: a caller that reads only the order
    // (SolveControl::orderOnly) takes each candidate as judged without them.
    const bool orderOnly = input.control && input.control->orderOnly;
    if (!orderOnly && (!addOffloadWaits(shell, costs, j.skeleton) || !judge(shell, &costs, input, j))) continue;
    if (j.fits && (!chosen || j.peak < judged[*chosen].peak)) chosen = i;
  }
  if (chosen) return *chosen;
  std::size_t lowest = 0;
  for (std::size_t i = 1; i < judged.size(); ++i) {
    if (judged[i].peak < judged[lowest].peak ||
        (judged[i].peak == judged[lowest].peak && judged[i].ms < judged[lowest].ms)) {
      lowest = i;
    }
  }
  return lowest;
}

Expected<ScheduleSkeleton> PipeOffload::order(const ScheduleInput& input) const {
  std::vector<std::vector<std::vector<OrderedOp>>> orders = candidateOrders(input);
  if (orders.empty()) return Error{"pipeoffload: no group size builds an order for this shape"};
  // Every candidate with its offloading, timed by the simulator (what the plan will be).
  Plan shell;
  std::optional<CostedModel> own;
  const CostedModel* costs = input.costs;
  if (input.request) {
    shell.config = input.request->config;
    configure(shell.config);
    shell.model = input.request->model;
    shell.cluster = input.request->cluster;
    if (!costs) costs = &own.emplace(shell.model, shell.cluster, shell.config);
  }
  shell.virtualStages = input.virtualStages;
  std::vector<Judged> judged;
  // GPUs sharing a PCIe switch: each order also with its copies placed at the solo rate (fast
  // while the neighbour does not copy, late where it does), beside the rate they can count on.
  const bool sharedSwitches = hostCopiesShareSwitches(shell);
  for (auto& order : orders) {
    if (input.control && input.control->cancelled()) return Error::cancelled();
    Judged j;
    j.skeleton.virtualStages = input.virtualStages;
    j.skeleton.devices = std::move(order);
    if (!costs) {  // no request: the order alone (tests of the construction)
      return std::move(j.skeleton);
    }
    // Copies first; the forwards' waits for them (addOffloadWaits) only where a candidate is
    // chosen below: they never lengthen an order's step nor raise a peak, so they can only make a
    // candidate fit that did not, and they take a simulation per wait tried.
    for (const bool solo : {false, true}) {
      if (solo && !sharedSwitches) break;
      Judged placed;
      placed.skeleton = j.skeleton;
      if (!addOffload(shell, *costs, placed.skeleton, false, solo)) continue;
      if (judge(shell, costs, input, placed)) judged.push_back(std::move(placed));
    }
  }
  if (judged.empty()) return Error{"pipeoffload: no candidate order could be timed"};
  PS_ASSIGN_OR_RETURN(const std::size_t chosen, chooseCandidate(shell, *costs, input, judged));
  return std::move(judged[chosen].skeleton);
}

}  // namespace

std::unique_ptr<ScheduleGenerator> makePipeOffload() { return std::make_unique<PipeOffload>(); }

}  // namespace pipestudio::schedules
