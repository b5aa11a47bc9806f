// V-shaped and bidirectional schedules under a per-device activation budget that gives each
// schedule its published memory profile:
//   zb-v       (Qi et al. 2023 §6): V placement, 1F1B memory (p microbatches' activations).
//   dualpipe-v (DeepSeek-V3 report §3.2.1, "cut-in-half" DualPipe): V placement, (p+1) chunks.
//   dualpipe   (DeepSeek-V3 report §3.2.1): two directions, model held twice, (p+1) stages.
//   bitpipe    (Wu et al. 2024): two V-shaped pipelines in opposite directions.
//   interleaved-zb (PyTorch's ScheduleInterleavedZeroBubble, ZB1P on the looped placement of
//              Megatron-LM's interleaving): linear placement, split backward, 1F1B-I's memory.
// Candidate orders: the authors' ZB-V construction (VConstruction.cpp) where the placement is
// one V per device (zb-v, dualpipe-v), and the greedy list construction of Greedy.cpp; each
// built with the transfers and as if they were free (then the simulator shifts the pattern by
// the transfers instead of a small transfer changing its decisions). The fastest candidate
// that keeps the budget wins; zb-v and dualpipe-v never keep an order over it (no candidate
// left is an Error that says so). With unequal stages the V construction is also built on one
// representative F/B/W time (the authors' runtime feeds zbv.py each device's mean, then the
// median over devices) and timed with the stages' own costs; zb-v's winner then takes zb-auto's
// critical-path moves within its budget on small instances. Bidirectional schedules alternate
// microbatches between the two pipelines so both directions fill the pipeline from their own
// end at once.
// dualpipe-v and interleaved-zb also take PyTorch's own orders of those schedules
// (TorchOrders.cpp; interleaved-zb also 1F1B-I's) as candidates, so they never lose to them on
// the stage estimates: dualpipe-v's budget is its own or PyTorch's DualPipeV peak, whichever is
// larger on the device; interleaved-zb's is the peak of interleaved-1f1b's order.
// dualpipe also builds DualPipe's own eight-step order (DualPipeOrder.cpp) and plans with
// PlanConfig::overlapForwardBackward: a forward followed by the other direction's backward on
// a device runs overlapped with it, the collectives (expert all-to-all, TP) of one under the
// computation of the other (DeepSeek-V3 §3.2.1). That order and the greedy winner are both
// timed by the simulator with the overlap, and the faster is the plan. dualpipe-v is timed
// with its F and B back to back (an upper bound, pessimistic by at most the overlapped time).
#include <algorithm>
#include <cmath>
#include <optional>

#include "pipestudio/common/Try.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "pipestudio/planner/Simulator.hpp"
#include "schedules/Generators.hpp"
#include "schedules/OrderTiming.hpp"

namespace pipestudio::schedules {
namespace {

// Up to this many ops every candidate is built in full and timed (OrderTiming.hpp); above,
// candidates are compared on a short run and only the winner is built in full.
constexpr double kExactChoiceOps = 1 << 17;
constexpr double kFullRefineShare = 1e-3;
// zb-v's critical-path moves (Spec::improve) on instances up to kImproveMaxOps ops, with
// kImproveSteps / ops order timings (at most 2000), as v-half and v-min do.
constexpr double kImproveMaxOps = 1 << 16;
constexpr double kImproveSteps = 4e6;

struct Spec {
  const char* name;
  int defaultChunks;
  int pipelines;                 // 1 or 2
  bool wave;                     // V placement per pipeline (else linear)
  int chunkMultiple;             // chunksPerDevice must be a positive multiple of this
  const char* chunkWhat;         // message when it is not
  bool evenDevices;              // dualpipe
  int minMicrobatchesPerDevice;  // 0: none; 1: m ≥ p
  // Activation budget in units of "one microbatch's activation on this device":
  // budget = ceil(numerator · p / denominator) + extra.
  int numerator;
  int denominator;
  int extra;
  bool preferContinuing;
  bool reserveWholeMicrobatch;
  bool boundEveryForward;  // GreedyOptions::boundEveryForward
  bool strictBudget;       // every order kept must hold the budget on every device
  bool vConstruction;      // also the authors' ZB-V construction (one V per device)
  bool dualPipe;           // also DualPipe's own order, timed with overlapped F&B
  // Orders of other schedulers taken as candidates, and what the activation budget is.
  enum class Fixed : std::uint8_t {
    None,
    TorchDualPipeV,         // PyTorch's ScheduleDualPipeV; the budget covers its peak too
    InterleavedZeroBubble,  // PyTorch's ScheduleInterleavedZeroBubble and 1F1B-I split;
                            // the budget is 1F1B-I's peak (interleaved-1f1b's own order)
  } fixed = Fixed::None;
  // The winner improved by zb-auto's critical-path moves within the budget (small instances,
  // SolveControl::refine).
  bool improve = false;
};

class GreedyGenerator final : public ScheduleGenerator {
 public:
  explicit GreedyGenerator(Spec spec) : m_spec(spec) {}
  std::string_view name() const override { return m_spec.name; }
  int defaultChunksPerDevice() const override { return m_spec.defaultChunks; }
  bool splitsBackward() const override { return true; }
  int pipelines() const override { return m_spec.pipelines; }
  void configure(PlanConfig& config) const override {
    if (m_spec.dualPipe) config.overlapForwardBackward = true;
  }

  Status validate(const ScheduleShape& shape) const override {
    const int v = shape.chunksPerDevice;
    if (auto st =
            requireChunks(name(), shape, v >= m_spec.chunkMultiple && v % m_spec.chunkMultiple == 0, m_spec.chunkWhat);
        !st) {
      return st;
    }
    if (m_spec.evenDevices && shape.devices % 2 != 0) {
      return Error{std::string(name()) +
                   " needs an even number of devices (the two directions pair devices d and p-1-d), got " +
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
    const int m = input.shape.microbatches;
    const auto units = static_cast<std::int64_t>(
        std::ceil(static_cast<double>(m_spec.numerator * p) / static_cast<double>(m_spec.denominator)) + m_spec.extra);
    IdVector<std::int64_t> perMb(p, 0);
    for (int pl = 0; pl < m_spec.pipelines; ++pl) {
      const auto a = activationPerMicrobatch(input, pl);
      for (int d = 0; d < p; ++d) perMb[d] = std::max(perMb[d], a[d]);
    }
    std::vector<std::int64_t> caps;  // per device
    for (const std::int64_t bytes : perMb) caps.push_back(std::max<std::int64_t>(1, units) * bytes);
    budgetFromFixedOrders(input, caps);

    // Every candidate order is timed as the simulator times it and the fastest that keeps the
    // budget (where the schedule promises it) wins, the earlier one on a tie. On large
    // instances the candidates are compared on the first evalMicrobatches microbatches (past
    // warm-up into the periodic steady state), and only the winner is built in full.
    const double ops = 3.0 * static_cast<double>(input.virtualStages.size()) * m / m_spec.pipelines;
    Expected<ScheduleSkeleton> greedy = Error{""};
    if (ops <= kExactChoiceOps) {
      PS_ASSIGN_OR_RETURN(auto chosen, choose(input, caps, units, nullptr));
      greedy = skeleton(input, std::move(chosen.second));
    } else {
      ScheduleInput shortRun = input;
      int evalMicrobatches = std::max(2 * p, 16);
      evalMicrobatches += evalMicrobatches % m_spec.pipelines;
      shortRun.shape.microbatches = std::min(m, evalMicrobatches);
      PS_ASSIGN_OR_RETURN(auto chosen, choose(shortRun, caps, units, nullptr));
      const Recipe recipe = chosen.first;
      PS_ASSIGN_OR_RETURN(auto full, choose(input, caps, units, &recipe));
      greedy = skeleton(input, std::move(full.second));
    }
    if (m_spec.dualPipe) return withDualPipeOrder(input, std::move(*greedy));
    if (m_spec.improve && ops <= kImproveMaxOps && (!input.control || input.control->refine)) {
      const int evaluations = static_cast<int>(std::min(2000.0, kImproveSteps / ops));
      if (auto improved = improveOrder(input, *greedy, caps, evaluations)) {
        const OrderTiming before = timeOrder(input, greedy->devices);
        const OrderTiming after = timeOrder(input, improved->devices);
        if (fasterThan(after, before)) greedy = std::move(*improved);
      }
    }
    return greedy;
  }

 private:
  using Orders = std::vector<std::vector<OrderedOp>>;
  // How a candidate order is built: the authors' V construction (one fill policy) or the
  // greedy list construction (reservedAdmission: whole microbatches reserved, the budget's
  // last resort), with the transfers or as if they were free.
  struct Recipe {
    enum class Kind { V, Greedy, GreedyReserved, Fixed } kind = Kind::Greedy;
    bool withTransfers = true;
    int vPolicy = -1;         // V: the fill policy; Fixed: the index into fixedOrders
    int representative = -1;  // V: built on uniformInputs(in)[representative], not the stages' own costs
  };

  // The input with every stage given one representative F/B/W time and every transfer one
  // time, for each representative that differs from the stages' own costs: the authors'
  // runtime's (each device's mean over its passes, then the upper median over devices:
  // runtime.py avg_then_mid), the mean over all stages, and the busiest device's mean.
  // Activation bytes and budgets stay the stages' own. Empty when all stages are equal.
  static std::vector<ScheduleInput> uniformInputs(const ScheduleInput& in) {
    std::vector<ScheduleInput> out;
    if (in.stages.empty()) return out;
    const int p = in.shape.devices;
    std::vector<double> sends;
    for (const StageEstimate& e : in.stages) {
      if (e.sendMs > 0) sends.push_back(e.sendMs);
    }
    std::sort(sends.begin(), sends.end());
    const double send = sends.empty() ? 0.0 : sends[sends.size() / 2];
    std::vector<StageEstimate> perDevice(static_cast<std::size_t>(p));
    std::vector<int> count(static_cast<std::size_t>(p), 0);
    StageEstimate mean;
    for (std::size_t s = 0; s < in.stages.size(); ++s) {
      const auto d = static_cast<std::size_t>(in.virtualStages[s].device);
      const StageEstimate& e = in.stages[s];
      perDevice[d].forwardMs += e.forwardMs;
      perDevice[d].backwardInputMs += e.backwardInputMs;
      perDevice[d].backwardWeightMs += e.backwardWeightMs;
      ++count[d];
      mean.forwardMs += e.forwardMs / static_cast<double>(in.stages.size());
      mean.backwardInputMs += e.backwardInputMs / static_cast<double>(in.stages.size());
      mean.backwardWeightMs += e.backwardWeightMs / static_cast<double>(in.stages.size());
    }
    for (std::size_t d = 0; d < perDevice.size(); ++d) {
      const double n = std::max(1, count[d]);
      perDevice[d].forwardMs /= n;
      perDevice[d].backwardInputMs /= n;
      perDevice[d].backwardWeightMs /= n;
    }
    auto upperMedian = [&](double StageEstimate::*field) {
      std::vector<double> v;
      v.reserve(perDevice.size());
      for (const StageEstimate& e : perDevice) v.push_back(e.*field);
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    StageEstimate median;
    median.forwardMs = upperMedian(&StageEstimate::forwardMs);
    median.backwardInputMs = upperMedian(&StageEstimate::backwardInputMs);
    median.backwardWeightMs = upperMedian(&StageEstimate::backwardWeightMs);
    const StageEstimate busiest =
        *std::max_element(perDevice.begin(), perDevice.end(), [](const StageEstimate& a, const StageEstimate& b) {
          return a.forwardMs + a.backwardInputMs + a.backwardWeightMs <
                 b.forwardMs + b.backwardInputMs + b.backwardWeightMs;
        });
    auto same = [](const StageEstimate& a, const StageEstimate& b) {
      return a.forwardMs == b.forwardMs && a.backwardInputMs == b.backwardInputMs &&
             a.backwardWeightMs == b.backwardWeightMs && a.sendMs == b.sendMs;
    };
    auto uniform = [&](const StageEstimate& rep) {
      ScheduleInput u = in;
      for (StageEstimate& e : u.stages) {
        e.forwardMs = rep.forwardMs;
        e.backwardInputMs = rep.backwardInputMs;
        e.backwardWeightMs = rep.backwardWeightMs;
        if (e.sendMs > 0) e.sendMs = send;
      }
      return u;
    };
    for (StageEstimate rep : {median, mean, busiest}) {
      rep.sendMs = send;
      ScheduleInput u = uniform(rep);
      bool known = true;
      for (std::size_t s = 0; s < u.stages.size() && known; ++s) known = same(u.stages[s], in.stages[s]);
      for (const ScheduleInput& o : out) {
        bool equal = true;
        for (std::size_t s = 0; s < u.stages.size() && equal; ++s) equal = same(u.stages[s], o.stages[s]);
        known = known || equal;
      }
      if (!known) out.push_back(std::move(u));
    }
    return out;
  }

  // The orders of other schedulers this schedule must never lose to (Spec::fixed), in a fixed
  // order; empty for shapes they do not build.
  std::vector<Orders> fixedOrders(const ScheduleInput& in) const {
    std::vector<Orders> out;
    switch (m_spec.fixed) {
      case Spec::Fixed::None:
        break;
      case Spec::Fixed::TorchDualPipeV:
        if (auto o = torchDualPipeVOrder(in)) out.push_back(std::move(*o));
        break;
      case Spec::Fixed::InterleavedZeroBubble:
        out.push_back(splitFusedBackward(interleavedOrder(in, in.shape.devices)));
        if (auto o = torchInterleavedZeroBubbleOrder(in)) out.push_back(std::move(*o));
        break;
    }
    return out;
  }

  // Spec::fixed's budgets: dualpipe-v keeps its own budget or PyTorch's DualPipeV peak,
  // whichever is larger, so it never needs more memory than PyTorch's to match it;
  // interleaved-zb keeps 1F1B-I's peak (Megatron-LM's interleaved order, max over devices).
  void budgetFromFixedOrders(const ScheduleInput& input, std::vector<std::int64_t>& caps) const {
    if (m_spec.fixed == Spec::Fixed::TorchDualPipeV) {
      if (auto o = torchDualPipeVOrder(input)) {
        const auto peaks = orderPeakBytes(input, *o);
        for (std::size_t d = 0; d < caps.size() && d < peaks.size(); ++d) caps[d] = std::max(caps[d], peaks[d]);
      }
    } else if (m_spec.fixed == Spec::Fixed::InterleavedZeroBubble) {
      // 1F1B-I's memory is its peak over the devices (the first device's, with equal stages):
      // every device may hold that much.
      const auto peaks = orderPeakBytes(input, interleavedOrder(input, input.shape.devices));
      const std::int64_t peak = peaks.empty() ? 0 : *std::max_element(peaks.begin(), peaks.end());
      std::fill(caps.begin(), caps.end(), peak);
    }
  }

  GreedyOptions greedyOptions(const ScheduleInput& in, const std::vector<std::int64_t>& caps, bool reserved) const {
    GreedyOptions options;
    options.splitBackward = true;
    options.preferContinuing = m_spec.preferContinuing;
    options.reserveWholeMicrobatch = m_spec.reserveWholeMicrobatch || reserved;
    options.boundEveryForward = m_spec.boundEveryForward && !reserved;
    options.capBytes = IdVector<std::int64_t>(caps);
    if (m_spec.pipelines == 2) {
      for (int mb = 0; mb < in.shape.microbatches; ++mb) options.microbatchPipeline.push_back(mb % 2);
    }
    return options;
  }

  // The candidates of one choose(): each timed with the transfers (consider) and the best kept.
  // `only`: the one recipe to build (the short run's winner built in full).
  struct Candidates {
    const ScheduleInput& in;
    const std::vector<std::int64_t>& caps;
    const Recipe* only;
    bool strictBudget;
    bool smallerPeakOnTie;  // schedules that match another scheduler's orders
    ScheduleInput withoutTransfers;
    bool anyTransfer = false;
    std::optional<std::pair<Recipe, Orders>> best;
    OrderTiming bestTiming;

    Candidates(const ScheduleInput& input, const std::vector<std::int64_t>& budget, const Recipe* onlyRecipe,
               const Spec& spec)
        : in(input),
          caps(budget),
          only(onlyRecipe),
          strictBudget(spec.strictBudget),
          smallerPeakOnTie(spec.fixed != Spec::Fixed::None),
          withoutTransfers(input) {
      anyTransfer =
          std::any_of(input.stages.begin(), input.stages.end(), [](const StageEstimate& e) { return e.sendMs > 0; });
      for (StageEstimate& e : withoutTransfers.stages) e.sendMs = 0;
    }
    const ScheduleInput& source(bool withTransfers) const { return withTransfers ? in : withoutTransfers; }
    bool wanted(Recipe::Kind kind, bool withTransfers) const {
      if (only) return only->kind == kind && only->withTransfers == withTransfers;
      return withTransfers || anyTransfer;
    }
    void consider(const Recipe& recipe, Orders&& order) {
      // Always timed with the transfers: a pattern built without them is shifted by them. A
      // single candidate (the short run's winner built in full) needs no timing, only its
      // memory check.
      OrderTiming t;
      if (only) {
        t.ok = true;
        t.peakBytes = orderPeakBytes(in, order);
      } else {
        t = timeOrder(in, order);
      }
      if (!t.ok) return;
      if (strictBudget) {
        for (std::size_t d = 0; d < caps.size(); ++d) {
          if (t.peakBytes[d] > caps[d]) return;
        }
      }
      const auto peakOf = [](const OrderTiming& x) {
        return x.peakBytes.empty() ? 0 : *std::max_element(x.peakBytes.begin(), x.peakBytes.end());
      };
      const bool smallerOnTie =
          smallerPeakOnTie && best && !fasterThan(bestTiming, t) && peakOf(t) < peakOf(bestTiming);
      if (!best || fasterThan(t, bestTiming) || smallerOnTie) {
        best.emplace(recipe, std::move(order));
        bestTiming = std::move(t);
      }
    }
  };

  // The authors' ZB-V construction where the placement is one V per device (its reference's
  // pick, the least worst-device bubble, first).
  static Status considerVConstructions(Candidates& c) {
    const ScheduleInput& in = c.in;
    const Recipe* only = c.only;
    for (bool withTransfers : {true, false}) {
      if (!c.wanted(Recipe::Kind::V, withTransfers) || (only && only->representative >= 0)) continue;
      VConstructionOptions v;
      v.budgetBytes = IdVector<std::int64_t>(c.caps);
      v.withTransfers = withTransfers;
      if (only) {
        // The short run's winner built in full: its bubble refined only while it is more
        // than kFullRefineShare of the makespan (each refinement is a full construction).
        v.onlyPolicy = only->vPolicy;
        v.refineAboveShare = kFullRefineShare;
      }
      auto built = vShapeConstructions(c.source(withTransfers), v);
      std::stable_sort(built.begin(), built.end(),
                       [](const VConstruction& a, const VConstruction& b) { return a.maxBubbleMs < b.maxBubbleMs; });
      for (auto& b : built) c.consider({Recipe::Kind::V, withTransfers, b.policy}, std::move(b.order));
      if (in.control && in.control->cancelled()) return Error::cancelled();
    }
    // With unequal stages, the construction on one representative F/B/W time (what the
    // authors' runtime feeds zbv.py), timed with the stages' own costs.
    const auto uniform = uniformInputs(in);
    for (std::size_t r = 0; r < uniform.size(); ++r) {
      if (only && (only->kind != Recipe::Kind::V || only->representative != static_cast<int>(r))) continue;
      VConstructionOptions v;
      v.budgetBytes = IdVector<std::int64_t>(c.caps);
      if (only) {
        v.onlyPolicy = only->vPolicy;
        v.refineAboveShare = kFullRefineShare;
      }
      for (auto& b : vShapeConstructions(uniform[r], v)) {
        c.consider({Recipe::Kind::V, true, b.policy, static_cast<int>(r)}, std::move(b.order));
      }
      if (in.control && in.control->cancelled()) return Error::cancelled();
    }
    return {};
  }

  // Builds the candidates of `in` (only `only` when given) and returns the best with its
  // recipe; an Error when none keeps the budget.
  Expected<std::pair<Recipe, Orders>> choose(const ScheduleInput& in, const std::vector<std::int64_t>& caps,
                                             std::int64_t units, const Recipe* only) const {
    Candidates c(in, caps, only, m_spec);
    auto& best = c.best;
    if (in.control && in.control->cancelled()) return Error::cancelled();
    if (m_spec.vConstruction && isSingleV(in)) PS_RETURN_IF_ERROR(considerVConstructions(c));
    // The greedy list construction.
    for (bool withTransfers : {true, false}) {
      if (!c.wanted(Recipe::Kind::Greedy, withTransfers)) continue;
      PS_ASSIGN_OR_RETURN(auto order, greedyOrder(c.source(withTransfers), greedyOptions(in, caps, false)));
      c.consider({Recipe::Kind::Greedy, withTransfers, -1}, std::move(order.devices));
    }
    // Other schedulers' orders (Spec::fixed), timed like every candidate.
    if (!only || only->kind == Recipe::Kind::Fixed) {
      auto fixed = fixedOrders(in);
      for (std::size_t i = 0; i < fixed.size(); ++i) {
        if (only && static_cast<int>(i) != only->vPolicy) continue;
        c.consider({Recipe::Kind::Fixed, true, static_cast<int>(i)}, std::move(fixed[i]));
      }
    }
    if ((!best && m_spec.strictBudget && !only) || (only && only->kind == Recipe::Kind::GreedyReserved)) {
      PS_ASSIGN_OR_RETURN(auto order, greedyOrder(in, greedyOptions(in, caps, true)));
      c.consider({Recipe::Kind::GreedyReserved, true, -1}, std::move(order.devices));
    }
    if (!best && only && only->kind != Recipe::Kind::GreedyReserved && m_spec.strictBudget) {
      // The winner of the short run does not keep the budget in full: the last resort.
      const Recipe reserved{Recipe::Kind::GreedyReserved, true, -1};
      return choose(in, caps, units, &reserved);
    }
    if (!best) {
      return Error{std::string(name()) + ": no order keeps its activation budget (" + std::to_string(units) +
                   " microbatches per device, " + std::to_string(caps.empty() ? 0 : caps.front()) +
                   " bytes on device 0) for this input"};
    }
    return std::move(*best);
  }

  // DualPipe's own order against the greedy winner, both timed by the simulator with
  // overlapped F&B (what the plan will be timed with); the greedy one on a tie.
  ScheduleSkeleton withDualPipeOrder(const ScheduleInput& input, ScheduleSkeleton greedy) const {
    auto faithful = dualPipeOrder(input);
    if (!faithful || !input.request) return greedy;
    Plan shell;
    shell.config = input.request->config;
    configure(shell.config);
    shell.model = input.request->model;
    shell.cluster = input.request->cluster;
    shell.virtualStages = input.virtualStages;
    ScheduleSkeleton own = skeleton(input, std::move(*faithful));
    auto a = simulateSkeleton(shell, greedy);
    auto b = simulateSkeleton(shell, own);
    if (!b) return greedy;
    if (!a) return own;
    const double tolerance = 1e-9 * std::max(1.0, a->metrics.makespanMs);
    return b->metrics.makespanMs < a->metrics.makespanMs - tolerance ? std::move(own) : std::move(greedy);
  }

  static ScheduleSkeleton skeleton(const ScheduleInput& input, Orders&& devices) {
    ScheduleSkeleton out;
    out.virtualStages = input.virtualStages;
    out.devices = std::move(devices);
    return out;
  }

  Spec m_spec;
};

}  // namespace

std::unique_ptr<ScheduleGenerator> makeZbV() {
  return std::make_unique<GreedyGenerator>(Spec{"zb-v", 2, 1, true, 2, "an even number of chunks per device (V shape)",
                                                false, 0, 1, 1, 0, true, false, true, true, true, false,
                                                Spec::Fixed::None, true});
}
std::unique_ptr<ScheduleGenerator> makeDualPipeV() {
  return std::make_unique<GreedyGenerator>(Spec{"dualpipe-v", 2, 1, true, 2,
                                                "an even number of chunks per device (V shape)", false, 1, 1, 2, 1,
                                                false, true, false, true, true, false, Spec::Fixed::TorchDualPipeV});
}
std::unique_ptr<ScheduleGenerator> makeInterleavedZeroBubble() {
  return std::make_unique<GreedyGenerator>(Spec{"interleaved-zb", 2, 1, false, 1, "at least one chunk per device",
                                                false, 1, 1, 1, 0, true, false, true, true, false, false,
                                                Spec::Fixed::InterleavedZeroBubble});
}
std::unique_ptr<ScheduleGenerator> makeBitPipe() {
  return std::make_unique<GreedyGenerator>(Spec{"bitpipe", 4, 2, true, 4,
                                                "a multiple of four chunks per device (two V-shaped pipelines)", false,
                                                1, 1, 1, 0, true, false, false, false, false, false});
}
std::unique_ptr<ScheduleGenerator> makeDualPipe() {
  return std::make_unique<GreedyGenerator>(Spec{"dualpipe", 2, 2, false, 2,
                                                "an even number of chunks per device (one per direction)", true, 1, 1,
                                                1, 1, false, true, false, false, false, true});
}

}  // namespace pipestudio::schedules
