// Discrete-event, dependency-driven simulator (docs/architecture.md). Every device runs its ops in
// the given order; an op starts when the device is free and all its inputs have arrived.
// Host copies (D2H/H2D, activation offloading) run on a second lane of their device, its host
// link: a copy is issued when the compute op before it in the device's order has ended, and
// the device's copies run one at a time in their order; the backward of an offloaded
// (stage, microbatch) waits for its H2D. Lanes are devices when a plan has no copies. GPUs
// that share a PCIe switch (ClusterSpec::hostSwitchGpus) share its uplink: a copy's speed
// changes whenever another rank's copy on its switch starts or ends (Simulation::rerateCopy).
// Cross-device inputs travel on the directed link (from, to): bytes / bandwidth + latency,
// transfers on one link served first-come first-served (they serialise). Everything is flat
// arrays indexed by op number; the only structure in the hot loop is a winner tree over devices.
#include "pipestudio/planner/Simulator.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "sim/DeviceWinnerTree.hpp"

namespace pipestudio {
namespace {

constexpr std::int32_t kNone = -1;

std::string opName(OpKind kind, int stage, int microbatch) {
  return std::string(opKindName(kind)) + "(stage " + std::to_string(stage) + ", microbatch " +
         std::to_string(microbatch) + ")";
}

// An op's duration for a whole microbatch (partial batches scale it by their share). The
// vocabulary passes split the shards' work by the plan's barrier count (PlanConfig::
// vocabBarriers): with one barrier S also computes the input-gradient partial sums.
double baseDurationMs(OpKind kind, const StageCosts& c, int vocabBarriers) {
  switch (kind) {
    case OpKind::F:
    case OpKind::N:
      return c.forwardMs;
    case OpKind::S:
      return vocabBarriers == 1 ? c.forwardMs + c.backwardInputMs : c.forwardMs;
    case OpKind::B:
      return c.backwardInputMs;
    case OpKind::W:
      return c.backwardWeightMs;
    case OpKind::T:
      return vocabBarriers == 1 ? c.backwardWeightMs : c.backwardInputMs + c.backwardWeightMs;
    case OpKind::BW:
      return c.backwardInputMs + c.backwardWeightMs;
    case OpKind::OPT:
    case OpKind::D2H:
    case OpKind::H2D:
      return 0;  // copies: their bytes over the host link (Simulation::prepareTiming)
  }
  return 0;
}

// The collective share of an op's duration (TP/CP/EP/ZeRO-3 inside the pass): what an
// overlapped F&B group can hide under the other op's computation.
double baseCommMs(OpKind kind, const StageCosts& c) {
  switch (kind) {
    case OpKind::F:
      return c.forwardCommMs;
    case OpKind::B:
      return c.backwardInputCommMs;
    case OpKind::W:
      return c.backwardWeightCommMs;
    case OpKind::BW:
      return c.backwardInputCommMs + c.backwardWeightCommMs;
    default:
      return 0;
  }
}

// Blockwise ZeRO-3 (PlanConfig::unitMicrobatches): per op, how much of its gather (or W's
// gradient reduce-scatter) it skips because it continues a run of its stage's passes in the
// same direction on its device: F after F, B/BW after B/BW of the same stage (W, N, S, T in
// between neither need nor drop the gathered parameters), W after W of the same stage
// (gradients accumulate over the run, one reduce-scatter). Empty when the plan has no runs.
IdVector<double> blockwiseGatherSavingsMs(const Plan& shell, const ScheduleSkeleton& skeleton,
                                          const IdVector<StageCosts>& costs) {
  IdVector<double> out;
  if (shell.config.unitMicrobatches <= 0 || shell.config.parallel.zeroStage < 3) return out;
  for (const auto& lane : skeleton.devices) {
    int lastF = -1, lastB = -1, lastW = -1;
    OpKind lastParamKind = OpKind::OPT;
    for (const OrderedOp& o : lane) {
      double saved = 0;
      const StageCosts* c = costs.contains(o.virtualStage) ? &costs[o.virtualStage] : nullptr;
      switch (o.kind) {
        case OpKind::F:
          if (c && lastParamKind == OpKind::F && lastF == o.virtualStage) saved = c->zeroGatherForwardMs;
          lastParamKind = OpKind::F;
          lastF = o.virtualStage;
          break;
        case OpKind::B:
        case OpKind::BW:
          if (c && lastParamKind == OpKind::B && lastB == o.virtualStage) {
            saved = c->zeroGatherBackwardMs;
            if (o.kind == OpKind::BW) saved += c->zeroScatterWeightMs;
          }
          lastParamKind = OpKind::B;
          lastB = o.virtualStage;
          break;
        case OpKind::W:
          if (c && lastW == o.virtualStage) saved = c->zeroScatterWeightMs;
          lastW = o.virtualStage;
          break;
        default:
          break;
      }
      if (o.samples > 0) saved = 0;  // partial batches are frozen work, never ZeRO-3-sharded passes
      out.push_back(saved);
    }
  }
  return out;
}

// FSDP windows (Plan::fsdpActions, PyTorch's UNSHARD / RESHARD / REDUCE_GRAD): per op, how much
// of its ZeRO-3 gather or gradient reduce-scatter it skips. Inside an UNSHARD…RESHARD window of
// its stage the parameters stay gathered: the window's first F, B or BW pays its gather, the
// later ones none. A stage with a REDUCE_GRAD accumulates its gradients and reduce-scatters them
// once: its last W or BW before the REDUCE_GRAD pays the scatter, the others none. Passes outside
// a window (which PyTorch's runtime refuses under FSDP) pay as without windows.
IdVector<double> fsdpWindowSavingsMs(const Plan& shell, const ScheduleSkeleton& skeleton,
                                     const IdVector<StageCosts>& costs) {
  IdVector<double> out;
  const int devices = static_cast<int>(skeleton.devices.size());
  std::vector<std::vector<const FsdpAction*>> perDevice(static_cast<std::size_t>(devices));
  for (const FsdpAction& a : skeleton.fsdpActions) {
    if (a.device >= 0 && a.device < devices) perDevice[static_cast<std::size_t>(a.device)].push_back(&a);
  }
  const auto isPass = [](OpKind k) { return k == OpKind::F || k == OpKind::B || k == OpKind::W || k == OpKind::BW; };
  const auto stages = static_cast<int>(shell.virtualStages.size());
  for (int d = 0; d < devices; ++d) {
    const auto& lane = skeleton.devices[static_cast<std::size_t>(d)];
    const auto& actions = perDevice[static_cast<std::size_t>(d)];
    // Per stage: the lane index of the W/BW that pays the scatter (the last one before the
    // stage's first REDUCE_GRAD), -1 without a REDUCE_GRAD.
    std::vector<std::int64_t> reducer(static_cast<std::size_t>(stages), -1);
    std::vector<char> reduced(static_cast<std::size_t>(stages), 0);
    {
      std::size_t next = 0;
      std::int64_t pass = 0;
      std::vector<std::int64_t> lastBackward(static_cast<std::size_t>(stages), -1);
      const auto apply = [&](std::int64_t upTo) {
        for (; next < actions.size() && actions[next]->beforePass <= upTo; ++next) {
          const FsdpAction& a = *actions[next];
          if (a.kind != FsdpActionKind::ReduceGrad || a.virtualStage < 0 || a.virtualStage >= stages) continue;
          const auto s = static_cast<std::size_t>(a.virtualStage);
          if (!reduced[s]) reducer[s] = lastBackward[s];
          reduced[s] = 1;
        }
      };
      for (std::size_t i = 0; i < lane.size(); ++i) {
        const OrderedOp& o = lane[i];
        if (!isPass(o.kind)) continue;
        apply(pass++);
        if ((o.kind == OpKind::W || o.kind == OpKind::BW) && o.virtualStage >= 0 && o.virtualStage < stages) {
          lastBackward[static_cast<std::size_t>(o.virtualStage)] = static_cast<std::int64_t>(i);
        }
      }
      apply(pass);
    }
    std::vector<char> open(static_cast<std::size_t>(stages), 0), paid(static_cast<std::size_t>(stages), 0);
    std::size_t next = 0;
    std::int64_t pass = 0;
    for (std::size_t i = 0; i < lane.size(); ++i) {
      const OrderedOp& o = lane[i];
      double saved = 0;
      if (isPass(o.kind) && o.virtualStage >= 0 && o.virtualStage < stages) {
        for (; next < actions.size() && actions[next]->beforePass <= pass; ++next) {
          const FsdpAction& a = *actions[next];
          if (a.virtualStage < 0 || a.virtualStage >= stages) continue;
          const auto s = static_cast<std::size_t>(a.virtualStage);
          if (a.kind == FsdpActionKind::Unshard) {
            open[s] = 1;
            paid[s] = 0;
          }
          if (a.kind == FsdpActionKind::Reshard) open[s] = 0;
        }
        ++pass;
        const auto s = static_cast<std::size_t>(o.virtualStage);
        const StageCosts& c = costs[o.virtualStage];
        if (o.samples > 0) {  // partial batches are frozen work, never ZeRO-3-sharded passes
          out.push_back(0);
          continue;
        }
        if (o.kind != OpKind::W && open[s]) {
          if (paid[s]) saved += o.kind == OpKind::F ? c.zeroGatherForwardMs : c.zeroGatherBackwardMs;
          paid[s] = 1;
        }
        if ((o.kind == OpKind::W || o.kind == OpKind::BW) && reduced[s] && reducer[s] != static_cast<std::int64_t>(i)) {
          saved += c.zeroScatterWeightMs;
        }
      }
      out.push_back(saved);
    }
  }
  return out;
}

// Error messages name an op by its place in its device's order; built only on error.
std::string where(int d, std::size_t i) { return "device " + std::to_string(d) + " op " + std::to_string(i); }

// A data-flow producer of an op: its op index and its stage (kNone where there is none).
struct Pred {
  std::int32_t from;
  std::int32_t fromStage;
};

// Per op: producers not yet completed and the latest arrival of an input, side by side
// (the hot loop touches both for a consumer).
struct OpState {
  double readyMs = 0;
  std::int32_t pending = 0;
};

// An entry of the consumer CSR: the consumer and its edge class (see buildConsumers).
struct Out {
  std::int32_t to;
  std::int32_t edgeClass;
};

// What the hot loop needs of an edge: consumer device, transfer time, bytes.
struct EdgeClass {
  std::int32_t toDevice = kNone;
  double transferMs = 0;
  std::int64_t bytes = 0;
};

// A producer earlier in the consumer's own lane has always completed by the time the consumer
// is next on that lane (a lane runs its order one op at a time), and brings no transfer: such
// an edge is neither counted nor listed. A producer later in the same lane (a deadlock) still
// is; one on the other lane of the same device (compute and host link) is, without transfer.
bool implied(std::int32_t from, std::int32_t to, bool sameLane) { return sameLane && from < to; }

// One run of simulateSkeleton, its phases in the order it calls them: validateShape and
// flatten (ops in device order, the (stage, microbatch) tables), buildConsumerGraph
// (pending counts, consumer lists, edge classes), prepareTiming (durations, ZeRO-3 run
// savings, overlapped groups), run (the event loop) and, when ops are left, explainDeadlock.
class Simulation {
 public:
  Simulation(Plan& shell, const ScheduleSkeleton& skeleton, const SimulationOptions& options)
      : m_shell(shell),
        m_skeleton(skeleton),
        m_options(options),
        m_p(shell.config.devices),
        m_m(shell.config.microbatches),
        m_nStages(static_cast<std::int32_t>(shell.virtualStages.size())),
        m_samplesPerMb(static_cast<double>(std::max<std::int64_t>(1, shell.model.samplesPerMicrobatch))),
        m_splits(std::max(1, shell.config.seqSplits)),
        m_copies(hasHostCopies(skeleton)),
        m_lanes(m_copies ? 2 * m_p : m_p),
        m_running(m_lanes) {}

  std::optional<Error> validateShape() const;
  std::optional<Error> flatten();
  void loadCosts();
  void sizeTables(std::size_t totalOps);
  std::optional<Error> flattenOp(int d, std::size_t i, std::int32_t idx, std::int32_t& lastCompute);
  std::optional<Error> indexOp(int d, std::size_t i, std::int32_t idx);
  std::optional<Error> buildConsumerGraph();
  void prepareTiming();
  void run();
  bool finished() const { return m_completed == m_nOps; }
  Error explainDeadlock() const;
  void restorePlanOrder();

 private:
  static bool hasHostCopies(const ScheduleSkeleton& skeleton) {
    return std::any_of(skeleton.devices.begin(), skeleton.devices.end(), [](const auto& lane) {
      return std::any_of(lane.begin(), lane.end(), [](const OrderedOp& o) { return isHostCopy(o.kind); });
    });
  }
  std::int32_t stageDevice(std::int32_t stage) const { return m_shell.stage(stage).device; }
  // Lanes: device d's compute is lane d, or 2d with host copies on lane 2d + 1.
  int laneOf(int device, bool copy) const { return m_copies ? 2 * device + (copy ? 1 : 0) : device; }
  /// The op at place `index` of device `device`'s skeleton order (OpRef), kNone outside it.
  /// Without host copies a device's ops are m_offset[d] …; with them the ops were flattened by
  /// lane (compute, then copies, per device), and m_skeletonOrder maps each place to its op.
  std::int32_t opAt(std::int32_t device, std::int32_t index) const {
    if (device < 0 || device >= m_p) return kNone;
    if (index < 0 || index >= m_skeletonStart[device + 1] - m_skeletonStart[device]) return kNone;
    if (m_copies) {
      return m_skeletonOrder[static_cast<std::size_t>(m_skeletonStart[device]) + static_cast<std::size_t>(index)];
    }
    return m_offset[device] + index;
  }
  int deviceOfLane(int lane) const { return m_copies ? lane / 2 : lane; }
  int laneOfOp(std::int32_t i) const {
    const Op& op = m_shell.op(i);
    return laneOf(op.device, isHostCopy(op.kind));
  }
  // Whether producer `from` (of stage fromStage) runs on consumer `to`'s lane.
  bool sameLane(std::int32_t from, std::int32_t fromStage, std::int32_t to) const {
    if (!m_copies) return stageDevice(fromStage) == m_shell.op(to).device;
    return laneOfOp(from) == laneOfOp(to);
  }
  // Row of (stage, sequence chunk of unit mb) in the per-unit tables.
  int unitRow(int stage, int microbatch) const { return stage * m_splits + seqChunkOf(m_shell.config, microbatch); }
  const StageCosts& unitCosts(const Op& op) const { return m_unitCosts[unitRow(op.virtualStage, op.microbatch)]; }
  Error missing(std::int32_t consumer, OpKind kind, std::int32_t stage, std::int32_t mb) const;
  std::optional<Error> producers(std::int32_t i, std::array<Pred, 3>& slot) const;
  std::optional<Error> countDataFlowEdges();
  std::optional<Error> resolveExtraDependencies();
  void buildConsumers();
  std::int64_t edgeBytes(std::int32_t fromStage, std::int32_t toStage, int chunk) const;
  std::int32_t dataFlowClass(std::int32_t fromStage, std::int32_t toStage, int chunk);
  double durationMs(const Op& op, std::int32_t idx) const;
  double commMs(const Op& op) const { return baseCommMs(op.kind, unitCosts(op)); }
  double startGroup(std::int32_t lead, std::int32_t size, double readyMs);
  void prepareSwitches();
  void switchCopy(int device, double timeMs, bool starts);
  void rerateCopy(int device, double timeMs);
  bool tryStart(int lane);
  void completeOp(int lane, std::int32_t code, double timeMs);

  Plan& m_shell;
  const ScheduleSkeleton& m_skeleton;
  const SimulationOptions& m_options;
  const int m_p;
  const int m_m;
  const std::int32_t m_nStages;
  const double m_samplesPerMb;
  const int m_splits;   // sequence chunks per training microbatch (1: none)
  const bool m_copies;  // host copies present: two lanes per device
  const int m_lanes;

  // validate/flatten
  IdVector<StageCosts> m_costs;
  IdVector<StageCosts> m_unitCosts;  // per (stage, sequence chunk): unitRow
  // Host copies: per op, the compute op of its device issued before it (kNone: none), and the
  // plan's order (skeleton order) of the ops, whose lanes are flattened apart.
  IdVector<std::int32_t> m_issueAfter;
  std::vector<std::int32_t> m_skeletonOrder;
  IdVector<std::int32_t> m_skeletonStart;  // first skeleton place of each device, then the op count
  IdVector<std::int32_t> m_prevStage, m_nextStage;
  IdVector<std::int32_t> m_offset;  // first op index of each lane, then the op count
  std::int32_t m_nOps = 0;
  // Op index per (stage, microbatch) and kind; bIsFused: whether bIdx names a fused BW (a W
  // needs a B), a small table instead of a random read of the op.
  Grid<std::int32_t> m_fIdx, m_bIdx, m_wIdx, m_nIdx, m_offIdx, m_reloadIdx;
  Grid<char> m_bIsFused;

  // consumer graph (per op)
  IdVector<OpState> m_state;
  IdVector<std::int32_t> m_firstOut;
  std::size_t m_crossEdges = 0;
  struct Edge {
    std::int32_t from;
    std::int32_t to;
    std::int64_t bytes;
  };
  std::vector<Edge> m_extra;
  IdVector<EdgeClass> m_classes;
  // NOLINTNEXTLINE(modernize-avoid-c-arrays): filled slot by slot, never value-initialised (large)
  std::unique_ptr<Out[]> m_outs;

  // timing
  Grid<double> m_kindDurationMs;      // per (stage, sequence chunk) row (unitRow) and op kind
  IdVector<double> m_gatherSavedMs;   // per op
  IdVector<std::int8_t> m_groupSize;  // per op

  // event loop (per lane; links per (from, to) device)
  IdVector<std::int32_t> m_position;
  IdVector<char> m_busy;
  IdVector<double> m_deviceFreeMs;
  Grid<double> m_linkFreeMs;
  DeviceWinnerTree m_running;
  std::int32_t m_completed = 0;

  // Shared PCIe switches (only with host copies and ClusterSpec::hostSwitchGpus): per device,
  // the switches its GPUs hang off (compact ids) with its GPU count on each; per switch, the
  // devices on it and the GPUs copying through it now; per device, its running copy's work
  // left (ms at its solo speed), when that was last updated, and its speed (share of solo).
  bool m_sharedSwitches = false;
  std::vector<std::vector<std::pair<int, int>>> m_switchesOf;
  std::vector<std::vector<int>> m_devicesOn;
  std::vector<int> m_copyingGpus;
  std::vector<double> m_switchGpuGBps;  // per device: the per-GPU rate its solo time assumes
  // Per device, the share of its SMs that collectives overlapped with compute hold (startGroup;
  // moeCommSmShare), found once where the plan has F&B groups (a device's GPU scans the nodes).
  std::vector<double> m_commSmShare;
  std::vector<double> m_copyLeftMs, m_copyAtMs, m_copySpeed;
  std::vector<char> m_copyRunning;
};

// --- validate and flatten ---

std::optional<Error> Simulation::validateShape() const {
  if (static_cast<int>(m_skeleton.devices.size()) != m_p) {
    return Error{"schedule has " + std::to_string(m_skeleton.devices.size()) + " device lanes, the plan " +
                 std::to_string(m_p) + " devices"};
  }
  if (m_m <= 0) return Error{"the plan needs at least one microbatch"};
  for (std::int32_t s = 0; s < m_nStages; ++s) {
    const VirtualStage& vs = m_shell.stage(s);
    if (vs.id != s)
      return Error{"virtual stage " + std::to_string(s) + " has id " + std::to_string(vs.id) +
                   " (expected ids in order)"};
    if (vs.device < 0 || vs.device >= m_p) {
      return Error{"virtual stage " + std::to_string(s) + " is on device " + std::to_string(vs.device) +
                   ", not a device of the plan (0.." + std::to_string(m_p - 1) + ")"};
    }
  }
  return std::nullopt;
}

// The time of a host copy when no other rank copies through its switch: its bytes over the
// device's host link (hostCopyGBps, GB/s); infinite when the GPU names none.
double copyMs(const Plan& shell, const Op& op, const StageCosts& unit) {
  const double gbps = hostCopyGBps(shell.cluster, shell.config, op.device);
  const auto bytes = static_cast<double>(offloadBytes(shell.config, shell.stage(op.virtualStage), unit));
  if (bytes <= 0) return 0.0;
  return gbps > 0 ? bytes / (gbps * 1e6) : std::numeric_limits<double>::infinity();
}

// Flatten ops by lane: a device's compute ops, then (with host copies) its copies, each in
// the device's order. Without copies this is the plan's order; with them restorePlanOrder
// puts the ops back in the skeleton's order at the end.
std::optional<Error> Simulation::flatten() {
  loadCosts();
  // Chains of data flow: plan/Dependencies.hpp's stageNeighbours, shared with the executor.
  StageNeighbours chains = stageNeighbours(m_shell);
  m_prevStage = IdVector<std::int32_t>(std::move(chains.previous));
  m_nextStage = IdVector<std::int32_t>(std::move(chains.next));
  std::size_t totalOps = 0;
  for (const auto& lane : m_skeleton.devices) totalOps += lane.size();
  // Op indices are int32.
  if (totalOps > (std::size_t{1} << 30))
    return Error{"schedule has " + std::to_string(totalOps) + " ops, more than the simulator handles"};
  sizeTables(totalOps);
  IdVector<std::int32_t> cursor(m_lanes, 0);
  for (int d = 0; const auto& lane : m_skeleton.devices) {
    std::int32_t lastCompute = kNone;
    for (std::size_t i = 0; i < lane.size(); ++i) {
      const int l = laneOf(d, isHostCopy(lane[i].kind));
      const std::int32_t idx = m_offset[l] + cursor[l]++;
      if (m_copies) m_skeletonOrder.push_back(idx);
      if (auto error = flattenOp(d, i, idx, lastCompute)) return error;
      if (auto error = indexOp(d, i, idx)) return error;
    }
    ++d;
  }
  return std::nullopt;
}

// Per stage its costs, and per (stage, sequence chunk) its unit costs (unitRow).
void Simulation::loadCosts() {
  std::optional<CostedModel> own;
  const CostedModel* costed = m_options.costs;
  if (costed == nullptr) costed = &own.emplace(m_shell);
  m_costs = IdVector<StageCosts>(costed->stages(m_shell.virtualStages));
  const auto units = costed->unitStages(m_shell.virtualStages);
  m_unitCosts.assign(m_nStages * m_splits, StageCosts{});
  for (std::int32_t st = 0; st < m_nStages; ++st) {
    const auto& perChunk = units[static_cast<std::size_t>(st)];
    for (int k = 0; k < m_splits && !perChunk.empty(); ++k) {
      m_unitCosts[st * m_splits + k] =
          perChunk[std::min<std::size_t>(static_cast<std::size_t>(k), perChunk.size() - 1)];
    }
  }
}

// The lanes' offsets and the per-op and per-(stage, microbatch) tables flatten fills.
void Simulation::sizeTables(std::size_t totalOps) {
  // validateShape: one skeleton lane per device.
  m_offset.assign(m_lanes + 1, 0);
  for (int d = 0; const auto& lane : m_skeleton.devices) {
    for (const OrderedOp& o : lane) ++m_offset[laneOf(d, isHostCopy(o.kind)) + 1];
    ++d;
  }
  for (int l = 0; l < m_lanes; ++l) m_offset[l + 1] += m_offset[l];
  m_skeletonStart.assign(m_p + 1, 0);
  for (int d = 0; d < m_p; ++d) {
    m_skeletonStart[d + 1] =
        m_skeletonStart[d] + static_cast<std::int32_t>(m_skeleton.devices[static_cast<std::size_t>(d)].size());
  }
  m_nOps = m_offset[m_lanes];
  m_shell.ops.resize(totalOps);  // written by index below
  m_fIdx.assign(m_nStages, m_m, kNone);
  m_bIdx.assign(m_nStages, m_m, kNone);
  m_wIdx.assign(m_nStages, m_m, kNone);
  m_nIdx.assign(m_nStages, m_m, kNone);
  m_bIsFused.assign(m_nStages, m_m, 0);
  if (m_copies) {
    m_offIdx.assign(m_nStages, m_m, kNone);
    m_reloadIdx.assign(m_nStages, m_m, kNone);
    m_issueAfter.assign(m_nOps, kNone);
    m_skeletonOrder.reserve(totalOps);
  }
}

// Op i of device d's order, checked and written to its flat index idx with its duration; a
// host copy is issued after the device's last compute op before it.
std::optional<Error> Simulation::flattenOp(int d, std::size_t i, std::int32_t idx, std::int32_t& lastCompute) {
  const OrderedOp& o = m_skeleton.devices[static_cast<std::size_t>(d)][i];
  const bool copy = isHostCopy(o.kind);
  if (o.virtualStage < 0 || o.virtualStage >= m_nStages) {
    return Error{where(d, i) + ": virtual stage " + std::to_string(o.virtualStage) + " does not exist"};
  }
  if (o.microbatch < 0 || o.microbatch >= m_m) {
    return Error{where(d, i) + ": microbatch " + std::to_string(o.microbatch) + " is outside 0.." +
                 std::to_string(m_m - 1)};
  }
  if (stageDevice(o.virtualStage) != d) {
    return Error{where(d, i) + ": " + opName(o.kind, o.virtualStage, o.microbatch) + " belongs to device " +
                 std::to_string(stageDevice(o.virtualStage))};
  }
  Op& op = m_shell.op(idx);
  op.device = d;
  op.virtualStage = o.virtualStage;
  op.kind = o.kind;
  op.microbatch = o.microbatch;
  op.samples = o.samples;
  const StageCosts& unit = unitCosts(op);
  double dur = copy ? copyMs(m_shell, op, unit) : baseDurationMs(o.kind, unit, m_shell.config.vocabBarriers);
  if (o.samples > 0) dur *= static_cast<double>(o.samples) / m_samplesPerMb;
  if (!std::isfinite(dur)) {
    const std::string why =
        copy ? " has no finite duration (its GPU names no host_link_gbps: give it in the cluster file)"
             : " has no finite duration";
    return Error{where(d, i) + ": " + opName(o.kind, o.virtualStage, o.microbatch) + why};
  }
  if (copy) {
    m_issueAfter[idx] = lastCompute;
  } else {
    lastCompute = idx;
  }
  return std::nullopt;
}

// The (stage, microbatch) table of op idx's kind names it; an op there twice is an error.
std::optional<Error> Simulation::indexOp(int d, std::size_t i, std::int32_t idx) {
  const OrderedOp& o = m_skeleton.devices[static_cast<std::size_t>(d)][i];
  const int st = o.virtualStage;
  const int mb = o.microbatch;
  std::int32_t* slot = nullptr;
  switch (o.kind) {
    case OpKind::F:
      slot = &m_fIdx(st, mb);
      break;
    case OpKind::B:
      slot = &m_bIdx(st, mb);
      break;
    case OpKind::BW:
      slot = &m_bIdx(st, mb);
      m_bIsFused(st, mb) = 1;
      break;
    case OpKind::W:
      slot = &m_wIdx(st, mb);
      break;
    case OpKind::N:
      m_nIdx(st, mb) = idx;
      break;  // partial batches: several N per key
    case OpKind::D2H:
      slot = &m_offIdx(st, mb);
      break;
    case OpKind::H2D:
      slot = &m_reloadIdx(st, mb);
      break;
    default:
      break;
  }
  if (!slot) return std::nullopt;
  if (*slot != kNone) {
    return Error{where(d, i) + ": " + opName(o.kind, o.virtualStage, o.microbatch) + " appears twice (also op " +
                 std::to_string(*slot - m_offset[laneOfOp(*slot)]) + " of device " + std::to_string(d) + ")"};
  }
  *slot = idx;
  return std::nullopt;
}

// With host copies the ops were flattened by lane: back to the skeleton's (issue) order.
void Simulation::restorePlanOrder() {
  if (!m_copies) return;
  std::vector<Op> ordered;
  ordered.reserve(m_shell.ops.size());
  for (const std::int32_t idx : m_skeletonOrder) ordered.push_back(m_shell.op(idx));
  m_shell.ops = std::move(ordered);
}

// --- consumer graph ---

Error Simulation::missing(std::int32_t consumer, OpKind kind, std::int32_t stage, std::int32_t mb) const {
  const Op& c = m_shell.op(consumer);
  return Error{"device " + std::to_string(c.device) + ": " + opName(c.kind, c.virtualStage, c.microbatch) + " needs " +
               opName(kind, stage, mb) + ", which no device runs"};
}

// Data-flow dependencies: each op has at most three producers (F: the previous stage's F;
// B/BW: its own F, then the next stage's B, then its H2D when offloaded; W: its B; N: the
// previous stage's N; D2H: its F, then the compute op it is issued after; H2D: its D2H, then
// that compute op), found from the (stage, microbatch) tables in that order. They are looked
// up again when the consumer lists are filled (and for a deadlock message) instead of being
// stored: the lookups are cheap, an array of them is 24 bytes per op. Extra dependencies
// follow, in skeleton order.
// Fills slot[0..2] with op i's producers (kNone where there is none); an error when one
// that must exist does not.
std::optional<Error> Simulation::producers(std::int32_t i, std::array<Pred, 3>& slot) const {
  slot[0] = slot[1] = slot[2] = Pred{kNone, kNone};
  const Op& op = m_shell.op(i);
  const int s = op.virtualStage;
  switch (op.kind) {
    case OpKind::F:
      if (m_prevStage[s] != kNone) {
        const std::int32_t src = m_fIdx(m_prevStage[s], op.microbatch);
        if (src == kNone) return missing(i, OpKind::F, m_prevStage[s], op.microbatch);
        slot[0] = {src, m_prevStage[s]};
      }
      break;
    case OpKind::B:
    case OpKind::BW: {
      const std::int32_t forward = m_fIdx(s, op.microbatch);
      if (forward == kNone) return missing(i, OpKind::F, op.virtualStage, op.microbatch);
      slot[0] = {forward, op.virtualStage};
      if (m_nextStage[s] != kNone) {
        const std::int32_t src = m_bIdx(m_nextStage[s], op.microbatch);
        if (src == kNone)
          return missing(i, op.kind == OpKind::BW ? OpKind::BW : OpKind::B, m_nextStage[s], op.microbatch);
        slot[1] = {src, m_nextStage[s]};
      }
      if (m_copies && m_offIdx(s, op.microbatch) != kNone) {
        const std::int32_t reload = m_reloadIdx(s, op.microbatch);
        if (reload == kNone) return missing(i, OpKind::H2D, op.virtualStage, op.microbatch);
        slot[2] = {reload, op.virtualStage};
      }
      break;
    }
    case OpKind::W: {
      const std::int32_t src = m_bIdx(s, op.microbatch);
      if (src == kNone || m_bIsFused(s, op.microbatch)) {
        return missing(i, OpKind::B, op.virtualStage, op.microbatch);
      }
      slot[0] = {src, op.virtualStage};
      break;
    }
    case OpKind::N:
      if (m_prevStage[s] != kNone) {
        const std::int32_t src = m_nIdx(m_prevStage[s], op.microbatch);
        if (src != kNone) slot[0] = {src, m_prevStage[s]};
      }
      break;
    case OpKind::D2H:
    case OpKind::H2D: {
      const bool offload = op.kind == OpKind::D2H;
      const std::int32_t src = offload ? m_fIdx(s, op.microbatch) : m_offIdx(s, op.microbatch);
      if (src == kNone) return missing(i, offload ? OpKind::F : OpKind::D2H, op.virtualStage, op.microbatch);
      slot[0] = {src, op.virtualStage};
      // Issued when the compute op before it in the device's order has ended (no transfer:
      // the edge is classed as one within the stage).
      if (m_issueAfter[i] != kNone) slot[1] = {m_issueAfter[i], op.virtualStage};
      break;
    }
    default:
      break;
  }
  return std::nullopt;
}

std::optional<Error> Simulation::buildConsumerGraph() {
  m_state.assign(m_nOps, OpState{});
  m_firstOut.assign(m_nOps + 1, 0);
  if (auto err = countDataFlowEdges()) return err;
  if (auto err = resolveExtraDependencies()) return err;
  buildConsumers();
  return std::nullopt;
}

// Out-degree per producer goes into firstOut (CSR offsets, buildConsumers); the number of
// transfers is counted while the producers are found.
std::optional<Error> Simulation::countDataFlowEdges() {
  for (std::int32_t i = 0; i < m_nOps; ++i) {
    std::array<Pred, 3> slot;
    if (auto err = producers(i, slot)) return err;
    const int device = m_shell.op(i).device;
    for (const Pred& pr : slot) {
      if (pr.from == kNone) continue;
      if (stageDevice(pr.fromStage) != device) ++m_crossEdges;
      if (implied(pr.from, i, sameLane(pr.from, pr.fromStage, i))) continue;
      ++m_firstOut[pr.from];
      ++m_state[i].pending;
    }
  }
  return std::nullopt;
}

std::optional<Error> Simulation::resolveExtraDependencies() {
  m_extra.reserve(m_skeleton.extraDependencies.size());
  auto resolve = [&](const OpRef& r) { return opAt(r.device, r.index); };
  for (const OpDependency& dep : m_skeleton.extraDependencies) {
    const std::int32_t a = resolve(dep.from);
    const std::int32_t b = resolve(dep.to);
    if (a == kNone || b == kNone) return Error{"extra dependency names an op that is not in the schedule"};
    m_extra.push_back({a, b, dep.bytes});
  }
  for (const OpDependency& wait : m_skeleton.offloadWaits) {
    const std::int32_t a = resolve(wait.from);
    const std::int32_t b = resolve(wait.to);
    if (a == kNone || b == kNone || m_shell.op(a).kind != OpKind::D2H || m_shell.op(b).kind != OpKind::F ||
        m_shell.op(a).device != m_shell.op(b).device) {
      return Error{"an offload wait names ops that are not a forward and an offload of one device"};
    }
    m_extra.push_back({a, b, 0});
  }
  return std::nullopt;
}

// Bytes on a data-flow edge: activations forward (the producing stage's output) or
// gradients backward (the consuming stage's output), of the unit's sequence chunk; nothing
// within one stage.
std::int64_t Simulation::edgeBytes(std::int32_t fromStage, std::int32_t toStage, int chunk) const {
  if (fromStage == toStage) return 0;
  return m_unitCosts[std::min(fromStage, toStage) * m_splits + chunk].outputBytes;
}

// The class of a data-flow edge (see buildConsumers), made on first use.
std::int32_t Simulation::dataFlowClass(std::int32_t fromStage, std::int32_t toStage, int chunk) {
  int relation = -1;
  if (toStage == fromStage)
    relation = 0;
  else if (toStage == m_nextStage[fromStage])
    relation = 1;
  else if (toStage == m_prevStage[fromStage])
    relation = 2;
  std::int32_t c = 0;
  if (relation >= 0) {
    c = (fromStage * m_splits + chunk) * 3 + relation;
    if (m_classes[c].toDevice != kNone) return c;
  } else {
    c = m_classes.size();  // not a chain neighbour (not produced by stageNeighbours): its own class
    m_classes.emplace_back();
  }
  const int fromDevice = stageDevice(fromStage);
  const int toDevice = stageDevice(toStage);
  EdgeClass& e = m_classes[c];
  e.toDevice = toDevice;
  e.bytes = edgeBytes(fromStage, toStage, chunk);
  e.transferMs = stageSendMs(m_shell.cluster, m_shell.config, fromDevice, toDevice, static_cast<double>(e.bytes));
  return c;
}

// CSR of consumers per producer, in the order the edges were listed above: per producer,
// consumers by op index, extra dependencies last. That order fixes the order in which one
// producer's transfers queue on a link. An entry is the consumer and its edge class: what
// the hot loop needs of an edge (consumer device, transfer time, bytes) depends only on
// the producing stage and whether the consumer is that stage, its chain successor or its
// chain predecessor, so data-flow edges share 3 classes per stage (ClusterSpec::transferMs
// is pure); every extra dependency gets a class of its own.
void Simulation::buildConsumers() {
  m_classes.assign(m_nStages * m_splits * 3, EdgeClass{});
  for (const Edge& e : m_extra) {
    const bool sameDevice = m_shell.op(e.from).device == m_shell.op(e.to).device;
    if (!sameDevice) ++m_crossEdges;
    if (implied(e.from, e.to, sameDevice && laneOfOp(e.from) == laneOfOp(e.to))) continue;
    ++m_firstOut[e.from];
    ++m_state[e.to].pending;
  }
  // Inclusive prefix sums: firstOut[x] is the end of x's consumers; filling backwards with
  // --firstOut[x] leaves it at their start, so firstOut[x + 1] is their end.
  for (std::int32_t i = 1; i < m_nOps; ++i) m_firstOut[i] += m_firstOut[i - 1];
  if (m_nOps > 0) m_firstOut[m_nOps] = m_firstOut[m_nOps - 1];
  // Every slot is written below: no value-initialisation of this (large) array.
  m_outs = std::make_unique_for_overwrite<Out[]>(  // NOLINT(modernize-avoid-c-arrays): see m_outs
      static_cast<std::size_t>(m_firstOut[m_nOps]));
  Out* outs = m_outs.get();
  for (std::size_t k = m_extra.size(); k-- > 0;) {
    const Edge& e = m_extra[k];
    const int fromDevice = m_shell.op(e.from).device;
    const int toDevice = m_shell.op(e.to).device;
    if (implied(e.from, e.to, fromDevice == toDevice && laneOfOp(e.from) == laneOfOp(e.to))) continue;
    EdgeClass c;
    c.toDevice = toDevice;
    c.bytes = e.bytes;
    c.transferMs =
        deviceTransferMs(m_shell.cluster, m_shell.config, fromDevice, toDevice, static_cast<double>(e.bytes));
    m_classes.push_back(c);
    outs[--m_firstOut[e.from]] = {e.to, m_classes.size() - 1};
  }
  for (std::int32_t i = m_nOps - 1; i >= 0; --i) {
    std::array<Pred, 3> slot;
    (void)producers(i, slot);  // cannot fail: the same lookups succeeded in countDataFlowEdges
    const Op& op = m_shell.op(i);
    const int chunk = seqChunkOf(m_shell.config, op.microbatch);
    for (int k = 2; k >= 0; --k) {
      const Pred& pr = slot[k];
      if (pr.from == kNone || implied(pr.from, i, sameLane(pr.from, pr.fromStage, i))) continue;
      outs[--m_firstOut[pr.from]] = {i, dataFlowClass(pr.fromStage, op.virtualStage, chunk)};
    }
  }
}

// --- timing inputs ---

void Simulation::prepareTiming() {
  // Duration of each op kind per stage (the expressions of flatten, so the values are the
  // same bits); a partial batch scales it by its share of the samples (durationMs).
  m_kindDurationMs.assign(m_nStages * m_splits, kOpKindCount, 0.0);
  for (int row = 0; row < m_nStages * m_splits; ++row) {
    for (int k = 0; k < kOpKindCount; ++k) {
      const auto kind = static_cast<OpKind>(k);
      if (isHostCopy(kind)) continue;
      m_kindDurationMs(row, k) = baseDurationMs(kind, m_unitCosts[row], m_shell.config.vocabBarriers);
    }
  }
  if (m_copies) {
    for (int row = 0; row < m_nStages * m_splits; ++row) {
      Op probe;
      probe.virtualStage = row / m_splits;
      probe.device = stageDevice(probe.virtualStage);
      const double ms = copyMs(m_shell, probe, m_unitCosts[row]);
      m_kindDurationMs(row, static_cast<int>(OpKind::D2H)) = ms;
      m_kindDurationMs(row, static_cast<int>(OpKind::H2D)) = ms;
    }
  }
  m_gatherSavedMs = !m_skeleton.fsdpActions.empty() && m_shell.config.parallel.zeroStage >= 3
                        ? fsdpWindowSavingsMs(m_shell, m_skeleton, m_costs)
                        : blockwiseGatherSavingsMs(m_shell, m_skeleton, m_costs);
  if (m_copies && !m_gatherSavedMs.empty()) {
    // Computed in skeleton order: by lane, as the ops are.
    IdVector<double> byLane(m_nOps, 0.0);
    for (std::int32_t j = 0; j < m_nOps; ++j) byLane[m_skeletonOrder[static_cast<std::size_t>(j)]] = m_gatherSavedMs[j];
    m_gatherSavedMs = std::move(byLane);
  }

  // Overlapped F&B groups (DualPipe): per op, the size of the group it leads (1: an op on its
  // own; 0: a later member of a group). A group starts when its device is free and every
  // member's inputs have arrived, and lasts besideSpanMs(Σ collectives, Σ computation) of its
  // members at efficiency 1: the collectives of one hide under the computation of the other,
  // which runs on the SMs the collectives leave it (a share f, Parallelism::moeCommSmsOrDefault
  // of the GPU's SMs; DeepSeek-V3 §3.2.1 gives its all-to-alls 20 of 132 and reports the rest of
  // the overlap complete). The contention measured for Megatron-Core's overlap
  // (epOverlapEfficiency) is that implementation's, charged where the cost model times it. The
  // plan shows the members back to back, each with its share of that time in proportion to
  // its own duration (so a device's ops never overlap and busy/span keep their meaning); every
  // member's output leaves when the group ends.
  if (!m_shell.config.overlapForwardBackward) return;
  const auto groups = overlappedGroups(m_shell, m_skeleton.devices);
  if (groups.empty()) return;
  m_groupSize.assign(m_nOps, 1);
  for (const OverlapGroup& g : groups) {
    const std::int32_t lead = opAt(g.device, g.first);
    if (lead == kNone) continue;
    m_groupSize[lead] = static_cast<std::int8_t>(g.size);
    for (std::int32_t k = 1; k < g.size; ++k) m_groupSize[lead + k] = 0;
  }
  m_commSmShare.resize(static_cast<std::size_t>(m_p));
  for (int d = 0; d < m_p; ++d) {
    m_commSmShare[static_cast<std::size_t>(d)] =
        moeCommSmShare(deviceGpu(m_shell.cluster, m_shell.config, d), m_shell.config.parallel);
  }
}

double Simulation::durationMs(const Op& op, std::int32_t idx) const {
  double dur = m_kindDurationMs(unitRow(op.virtualStage, op.microbatch), static_cast<int>(op.kind));
  if (op.samples > 0) dur *= static_cast<double>(op.samples) / m_samplesPerMb;
  if (!m_gatherSavedMs.empty()) dur = std::max(0.0, dur - m_gatherSavedMs[idx]);
  return dur;
}

// --- event loop ---

// A group's members, timed together (see prepareTiming); returns the group's end.
double Simulation::startGroup(std::int32_t lead, std::int32_t size, double readyMs) {
  double computeMs = 0, collectiveMs = 0, ownMs = 0;
  for (std::int32_t k = 0; k < size; ++k) {
    const Op& member = m_shell.op(lead + k);
    const double dur = durationMs(member, lead + k);
    const double comm = std::min(dur, commMs(member));
    ownMs += dur;
    computeMs += dur - comm;
    collectiveMs += comm;
  }
  const auto d = static_cast<std::size_t>(m_shell.op(lead).device);
  const double spanMs = besideSpanMs(collectiveMs, computeMs, m_commSmShare[d], 1.0);
  double at = readyMs;
  for (std::int32_t k = 0; k < size; ++k) {
    Op& member = m_shell.op(lead + k);
    member.startMs = at;
    at += ownMs > 0 ? spanMs * durationMs(member, lead + k) / ownMs : 0.0;
    member.endMs = k + 1 == size ? readyMs + spanMs : at;
  }
  return readyMs + spanMs;
}

// Starts lane d's next op if it is idle and every producer of that op has completed;
// returns whether it did.
bool Simulation::tryStart(int d) {
  if (m_busy[d]) return false;
  const std::int32_t idx = m_offset[d] + m_position[d];
  if (idx >= m_offset[d + 1]) return false;
  const OpState& st = m_state[idx];
  if (st.pending != 0) return false;
  Op& op = m_shell.op(idx);
  const std::int32_t size = m_groupSize.empty() ? 1 : m_groupSize[idx];
  if (size > 1) {
    double readyMs = std::max(m_deviceFreeMs[d], st.readyMs);
    for (std::int32_t k = 1; k < size; ++k) {
      const OpState& member = m_state[idx + k];
      if (member.pending != 0) return false;
      readyMs = std::max(readyMs, member.readyMs);
    }
    m_busy[d] = 1;
    m_running.set(d, startGroup(idx, size, readyMs));
    return true;
  }
  op.startMs = std::max(m_deviceFreeMs[d], st.readyMs);
  op.endMs = op.startMs + durationMs(op, idx);
  m_busy[d] = 1;
  m_running.set(d, op.endMs);
  if (m_sharedSwitches && d % 2 == 1) {
    const int device = d / 2;
    m_copyLeftMs[device] = op.endMs - op.startMs;
    m_copyAtMs[device] = op.startMs;
    m_copySpeed[device] = 1.0;
    m_copyRunning[device] = 1;
    switchCopy(device, op.startMs, true);
  }
  // Sixty-odd devices walk their orders side by side, too many streams for the hardware
  // prefetcher: fetch what this op's end and this device's next start will read.
  if (idx + 1 < m_offset[d + 1]) {
    const Op* next = &op + 1;
    __builtin_prefetch(next);
    __builtin_prefetch(reinterpret_cast<const char*>(next) + sizeof(Op) - 1);  // an Op may straddle two lines
    __builtin_prefetch(&st + 1);
  }
  const Out* outs = m_outs.get();
  for (std::int32_t k = m_firstOut[idx]; k < m_firstOut[idx + 1]; ++k) __builtin_prefetch(&m_state[outs[k].to]);
  return true;
}

// Op `code` on lane `lane` has ended at timeMs: its outputs leave (transfers queue on their
// links) and every consumer whose last input this was may start.
void Simulation::completeOp(int lane, std::int32_t code, double timeMs) {
  const Op& op = m_shell.op(code);
  const int dev = deviceOfLane(lane);
  ++m_completed;
  ++m_position[lane];
  const Out* o = m_outs.get() + m_firstOut[code];
  const Out* oEnd = m_outs.get() + m_firstOut[code + 1];
  for (; o != oEnd; ++o) {
    OpState& consumer = m_state[o->to];
    const EdgeClass& edge = m_classes[o->edgeClass];
    if (edge.toDevice == dev) {
      const int toLane = m_copies ? laneOfOp(o->to) : lane;
      if (toLane != lane) {
        // The device's other lane (compute ↔ host link): no transfer.
        consumer.readyMs = std::max(consumer.readyMs, timeMs);
        if (--consumer.pending == 0) tryStart(toLane);
        continue;
      }
      // Same lane, consumer earlier in this order: never runs (deadlock, reported below).
      --consumer.pending;
      continue;
    }
    double& linkFreeMs = m_linkFreeMs(dev, edge.toDevice);
    const double startMs = std::max(timeMs, linkFreeMs);
    const double endMs = startMs + edge.transferMs;
    linkFreeMs = endMs;
    if (m_options.recordComms) {
      // Fields written in place: a Comm built on the stack and copied cost a store-forwarding stall.
      Comm& c = m_shell.comms.emplace_back();
      c.fromDevice = dev;
      c.toDevice = edge.toDevice;
      c.microbatch = op.microbatch;
      c.kind = (op.kind == OpKind::B || op.kind == OpKind::BW || op.kind == OpKind::T) ? OpKind::B : OpKind::F;
      c.virtualStage = op.virtualStage;
      c.startMs = startMs;
      c.endMs = endMs;
      c.bytes = edge.bytes;
    }
    consumer.readyMs = std::max(consumer.readyMs, endMs);
    if (--consumer.pending == 0) tryStart(m_copies ? laneOfOp(o->to) : edge.toDevice);
  }
}

// --- shared PCIe switches ---

// Which switches each device's GPUs hang off (hostSwitchesOf), by compact ids; only switches
// two devices share can slow a copy down, so without any the model stays off.
void Simulation::prepareSwitches() {
  const ClusterSpec& cluster = m_shell.cluster;
  if (!m_copies) return;
  std::map<std::int64_t, int> compact;
  m_switchesOf.assign(static_cast<std::size_t>(m_p), {});
  for (int d = 0; d < m_p; ++d) {
    for (const auto& [sw, own] : hostSwitchesOf(cluster, m_shell.config, d)) {
      const auto [it, fresh] = compact.emplace(sw, static_cast<int>(compact.size()));
      if (fresh) m_devicesOn.emplace_back();
      m_devicesOn[static_cast<std::size_t>(it->second)].push_back(d);
      m_switchesOf[static_cast<std::size_t>(d)].emplace_back(it->second, own);
    }
  }
  m_sharedSwitches =
      std::any_of(m_devicesOn.begin(), m_devicesOn.end(), [](const std::vector<int>& on) { return on.size() > 1; });
  if (!m_sharedSwitches) return;
  m_copyingGpus.assign(m_devicesOn.size(), 0);
  m_switchGpuGBps.assign(static_cast<std::size_t>(m_p), 0.0);
  for (int d = 0; d < m_p; ++d) m_switchGpuGBps[static_cast<std::size_t>(d)] = hostCopyGBps(cluster, m_shell.config, d);
  m_copyLeftMs.assign(static_cast<std::size_t>(m_p), 0.0);
  m_copyAtMs.assign(static_cast<std::size_t>(m_p), 0.0);
  m_copySpeed.assign(static_cast<std::size_t>(m_p), 1.0);
  m_copyRunning.assign(static_cast<std::size_t>(m_p), 0);
}

// Device `device`'s copy starts or ends at timeMs: its GPUs join or leave their switches, and
// every running copy on those switches changes speed from then on.
void Simulation::switchCopy(int device, double timeMs, bool starts) {
  const auto& mine = m_switchesOf[static_cast<std::size_t>(device)];
  for (const auto& [sw, own] : mine) m_copyingGpus[static_cast<std::size_t>(sw)] += starts ? own : -own;
  for (const auto& [sw, own] : mine) {
    for (const int other : m_devicesOn[static_cast<std::size_t>(sw)]) rerateCopy(other, timeMs);
  }
}

// A running copy's speed: each GPU on a switch gets its fair share of the uplink, at most its
// own link; the copy's solo time (durationMs) assumed the share its own GPUs leave it
// (hostCopyGBps). Its work left is brought up to timeMs at the old speed, and its end moves.
void Simulation::rerateCopy(int device, double timeMs) {
  const auto d = static_cast<std::size_t>(device);
  if (!m_copyRunning[d]) return;
  const ClusterSpec& cluster = m_shell.cluster;
  double gbps = deviceGpu(cluster, m_shell.config, device).hostLinkGBps;
  for (const auto& [sw, own] : m_switchesOf[d]) {
    gbps = std::min(gbps, cluster.hostSwitchGBps / std::max(1, m_copyingGpus[static_cast<std::size_t>(sw)]));
  }
  const double speed = m_switchGpuGBps[d] > 0 ? std::min(1.0, gbps / m_switchGpuGBps[d]) : 1.0;
  const double at = std::max(timeMs, m_copyAtMs[d]);
  m_copyLeftMs[d] = std::max(0.0, m_copyLeftMs[d] - (at - m_copyAtMs[d]) * m_copySpeed[d]);
  m_copyAtMs[d] = at;
  m_copySpeed[d] = speed;
  const int lane = laneOf(device, true);
  Op& op = m_shell.op(m_offset[lane] + m_position[lane]);
  op.endMs = at + (speed > 0 ? m_copyLeftMs[d] / speed : 0.0);
  m_running.set(lane, op.endMs);
}

// Event loop over op completions only. An op starts when its device is free and every
// input has arrived: start = max(device free, latest arrival). Arrival times are known as
// soon as the producer completes (its transfer queues on the link then), so no arrival
// events are needed: an op whose producers have all completed starts at that maximum,
// possibly later than the current event. Transfers on a link queue in the order their
// producers complete, which is the sending device's op order.
void Simulation::run() {
  m_position.assign(m_lanes, 0);
  m_busy.assign(m_lanes, 0);
  m_deviceFreeMs.assign(m_lanes, 0.0);
  m_linkFreeMs.assign(m_p, m_p, 0.0);
  prepareSwitches();
  if (m_options.recordComms) m_shell.comms.reserve(m_crossEdges);
  for (int d = 0; d < m_lanes; ++d) tryStart(d);
  for (int dev = m_running.top(); dev >= 0; dev = m_running.top()) {
    const double timeMs = m_running.keyMs(dev);
    m_busy[dev] = 0;
    m_deviceFreeMs[dev] = timeMs;
    if (m_sharedSwitches && dev % 2 == 1) {
      m_copyRunning[dev / 2] = 0;
      switchCopy(dev / 2, timeMs, false);
    }
    const std::int32_t lead = m_offset[dev] + m_position[dev];
    const std::int32_t members = m_groupSize.empty() ? 1 : std::max<std::int32_t>(1, m_groupSize[lead]);
    for (std::int32_t member = 0; member < members; ++member) completeOp(dev, lead + member, timeMs);
    if (!tryStart(dev)) m_running.clear(dev);
  }
}

// --- deadlock explanation ---

// Follows "waits for" from a stuck device until a device repeats.
Error Simulation::explainDeadlock() const {
  std::ostringstream msg;
  msg << "deadlock after " << m_completed << " of " << m_nOps << " ops:";
  auto isDone = [&](std::int32_t x) {
    const int l = laneOfOp(x);
    return x < m_offset[l] + m_position[l];
  };
  // A lane by name: its device, and "host link" for a device's copies.
  auto name = [&](int lane) {
    std::string out = std::to_string(deviceOfLane(lane));
    if (m_copies && lane % 2 == 1) out += " (host link)";
    return out;
  };
  IdVector<int> waitsOn(m_lanes, -1);
  for (int d = 0; d < m_lanes; ++d) {
    const std::int32_t idx = m_offset[d] + m_position[d];
    if (idx >= m_offset[d + 1]) continue;
    const Op& op = m_shell.op(idx);
    msg << "\n  device " << name(d) << " waits at " << opName(op.kind, op.virtualStage, op.microbatch);
    // The producers of the stuck op, in the order the simulator lists them.
    std::array<Pred, 3> slot;
    (void)producers(idx, slot);
    std::vector<Edge> waits{{slot[0].from, idx, 0}, {slot[1].from, idx, 0}, {slot[2].from, idx, 0}};
    for (const Edge& e : m_extra) {
      if (e.to == idx) waits.push_back(e);
    }
    for (const Edge& e : waits) {
      if (e.from == kNone || isDone(e.from)) continue;
      const Op& need = m_shell.op(e.from);
      const int needLane = laneOfOp(e.from);
      msg << " for " << opName(need.kind, need.virtualStage, need.microbatch) << " on device " << name(needLane);
      if (needLane == d) msg << " (later in its own order)";
      waitsOn[d] = needLane;
      break;
    }
  }
  for (int start = 0; start < m_lanes; ++start) {
    if (waitsOn[start] < 0) continue;
    IdVector<char> seen(m_lanes, 0);
    std::vector<int> path;
    int d = start;
    while (d >= 0) {
      if (seen[d]) break;
      seen[d] = 1;
      path.push_back(d);
      d = waitsOn[d];
    }
    if (d < 0) continue;
    // The cycle is the part of the path from d's first visit on.
    msg << "\n  cycle: device";
    for (auto it = std::find(path.begin(), path.end(), d); it != path.end(); ++it) msg << ' ' << name(*it) << " →";
    msg << ' ' << name(d);
    break;
  }
  return Error{msg.str()};
}

}  // namespace

double passDurationMs(OpKind kind, const StageCosts& costs, int vocabBarriers) {
  return baseDurationMs(kind, costs, vocabBarriers);
}

std::vector<StageEstimate> stageEstimates(const Plan& shell) { return stageEstimates(shell, CostedModel(shell)); }

std::vector<StageEstimate> stageEstimates(const Plan& shell, const CostedModel& costed) {
  const auto costs = costed.stages(shell.virtualStages);
  const StageNeighbours chains = stageNeighbours(shell);
  std::vector<StageEstimate> out(costs.size());
  for (std::size_t i = 0; i < costs.size(); ++i) {
    const StageCosts& c = costs[i];
    StageEstimate& e = out[i];
    e.forwardMs = c.forwardMs;
    e.backwardInputMs = c.backwardInputMs;
    e.backwardWeightMs = c.backwardWeightMs;
    e.activationBytes = c.activationBytes;
    e.weightGradBytes = c.weightGradBytes;
    if (chains.next[i] != kNone) {
      e.sendMs = stageSendMs(shell.cluster, shell.config, shell.virtualStages[i].device,
                             shell.stage(chains.next[i]).device, static_cast<double>(c.outputBytes));
    }
  }
  return out;
}

Expected<Plan> simulateSkeleton(Plan shell, const ScheduleSkeleton& skeleton, const SimulationOptions& options) {
  shell.virtualStages = skeleton.virtualStages;
  shell.ops.clear();
  shell.comms.clear();
  shell.fsdpActions = skeleton.fsdpActions;
  shell.config.fsdpWindows = !shell.fsdpActions.empty();
  shell.offloadWaits.clear();
  for (const OpDependency& wait : skeleton.offloadWaits) {
    auto named = [&](const OpRef& r) -> const OrderedOp* {
      if (r.device < 0 || static_cast<std::size_t>(r.device) >= skeleton.devices.size()) return nullptr;
      const auto& lane = skeleton.devices[static_cast<std::size_t>(r.device)];
      return r.index >= 0 && static_cast<std::size_t>(r.index) < lane.size() ? &lane[static_cast<std::size_t>(r.index)]
                                                                             : nullptr;
    };
    const OrderedOp* offload = named(wait.from);
    const OrderedOp* forward = named(wait.to);
    if (!offload || !forward) return Error{"an offload wait names an op that is not in the schedule"};
    shell.offloadWaits.push_back(
        {forward->virtualStage, forward->microbatch, offload->virtualStage, offload->microbatch});
  }
  Simulation sim(shell, skeleton, options);
  if (auto err = sim.validateShape()) return std::move(*err);
  if (auto err = sim.flatten()) return std::move(*err);
  if (auto err = sim.buildConsumerGraph()) return std::move(*err);
  sim.prepareTiming();
  sim.run();
  if (!sim.finished()) return sim.explainDeadlock();
  sim.restorePlanOrder();
  if (options.recordComms) appendFrozenTransfers(shell);  // part: frozen outputs to their consumers (Fill.hpp)
  if (options.computeMetrics)
    shell.metrics = options.costs ? computeMetrics(shell, *options.costs) : computeMetrics(shell);
  // Every plan the planner hands out passes the validator the loaders apply (validate, run,
  // pipestudio-exec): in-range inputs can still add up to times past what a plan document holds.
  if (options.recordComms && options.computeMetrics) {
    if (auto st = validatePlanStructure(shell); !st) {
      return Error{"the simulated plan is not one a plan file can hold, so it is not written: " + st.message()};
    }
  }
  return shell;
}

Expected<Plan> simulate(const PlanRequest& request, const ScheduleSkeleton& skeleton) {
  return simulateSkeleton(planShell(request), skeleton);
}

namespace {

// Plan::offloadWaits as places in the devices' orders.
Expected<std::vector<OpDependency>> offloadWaitsOf(const Plan& plan, const std::vector<std::vector<OrderedOp>>& lanes) {
  std::vector<OpDependency> out;
  if (plan.offloadWaits.empty()) return out;
  std::map<std::tuple<OpKind, std::int32_t, std::int32_t>, OpRef> where;
  for (std::size_t d = 0; d < lanes.size(); ++d) {
    for (std::size_t i = 0; i < lanes[d].size(); ++i) {
      const OrderedOp& o = lanes[d][i];
      if (o.kind == OpKind::F || o.kind == OpKind::D2H) {
        where[{o.kind, o.virtualStage, o.microbatch}] =
            OpRef{static_cast<std::int32_t>(d), static_cast<std::int32_t>(i)};
      }
    }
  }
  for (const OffloadWait& w : plan.offloadWaits) {
    const auto f = where.find({OpKind::F, w.forwardStage, w.forwardMicrobatch});
    const auto d = where.find({OpKind::D2H, w.offloadStage, w.offloadMicrobatch});
    if (f == where.end() || d == where.end() || f->second.device != d->second.device) {
      return Error{"an offload wait names ops that are not a forward and an offload of one device"};
    }
    out.push_back(OpDependency{d->second, f->second, 0});
  }
  return out;
}

}  // namespace

Expected<Plan> resimulate(const Plan& plan) {
  // The checks validate, run and pipestudio-exec apply (core/plan): an edited plan that passes
  // them is one the simulator can time.
  PS_RETURN_IF_ERROR(validatePlanStructure(plan));
  ScheduleSkeleton skeleton;
  skeleton.virtualStages = plan.virtualStages;
  IdVector<std::vector<OrderedOp>> lanes(std::max(0, plan.config.devices));
  for (const Op& op : plan.ops) {
    if (!lanes.contains(op.device)) {
      return Error{"op on device " + std::to_string(op.device) + ", not a device of the plan"};
    }
    OrderedOp o;
    o.virtualStage = op.virtualStage;
    o.kind = op.kind;
    o.microbatch = op.microbatch;
    o.samples = op.samples;
    lanes[op.device].push_back(o);
  }
  skeleton.devices = std::move(lanes.values());
  // part: dependencies the plan implies but does not store (frozen outputs, vocabulary S/T).
  skeleton.extraDependencies = derivedDependencies(plan, skeleton.devices);
  skeleton.fsdpActions = plan.fsdpActions;
  PS_ASSIGN_OR_RETURN(skeleton.offloadWaits, offloadWaitsOf(plan, skeleton.devices));
  Plan shell;
  shell.config = plan.config;
  shell.model = plan.model;
  shell.cluster = plan.cluster;
  return simulateSkeleton(std::move(shell), skeleton);
}

}  // namespace pipestudio
