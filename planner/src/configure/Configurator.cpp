// Configurator search (issues 4 and 13). Enumerate → bound → simulate best bound first.
//
// Every configuration (T, C, P, D, E, micro-batch size, schedule, chunks, recompute, ZeRO) of
// the cluster's GPUs for a fixed global batch gets
//  - a static-memory lower bound (average parameters, gradients and optimizer state per GPU:
//    the fullest GPU holds at least that): pruned when it exceeds the GPU;
//  - a uniform-stage profile of its schedule (the schedule's own placement, order and timing on
//    identical stages with this model's F:B:W proportions, cached per schedule, depth, chunks,
//    microbatches and proportions): the in-flight microbatches of the fullest device and the
//    idle time beyond the busiest device's work (fill and drain);
//  - from those, an activation estimate (pruned when it exceeds the GPU by 25 %) and an
//    iteration estimate: the average device's compute over all microbatches, the schedule's
//    idle, un-overlapped gradient reduction and the optimizer step of the average shard.
// Candidates are simulated (makePlan: exact partition, order, timing and memory) best estimate
// first, until the next estimate falls 1 % below the `keep`-th simulated throughput (or the
// simulation budget is spent): uneven stages and transfers only lengthen a uniform schedule, so
// the estimates are optimistic and the top of the list is what the simulator ranks first.
// Profiles are made lazily: a candidate whose profile is not cached yet is first ranked without
// its idle time (more optimistic still) and profiled only when it reaches the top of the queue,
// so the screening order, and the candidates screened, are those of profiling every candidate
// first; most candidates of a large search never reach the top and are never profiled.
#include "pipestudio/planner/Configurator.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

#include "configure/LayoutChoices.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/BlockHalves.hpp"
#include "pipestudio/plan/ConfigCheck.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio {
namespace {

// How far below the last ranked throughput an estimate may be and still be simulated.
constexpr double kEstimateMargin = 0.01;

// The recipe's fixed settings onto a candidate whose recomputation mode is `rc`.
void applyRecipe(const PlanConfig& recipe, Recompute rc, PlanConfig& cfg) {
  const Parallelism& from = recipe.parallel;
  Parallelism& to = cfg.parallel;
  cfg.precision = recipe.precision;
  to.overlapGradReduce = from.overlapGradReduce;
  to.overlapParamGather = from.overlapParamGather;
  to.tpCommOverlap = from.tpCommOverlap;
  to.gradReduceInFp32 = from.gradReduceInFp32;
  if (rc == Recompute::Full) {
    to.recomputeNumLayers = from.recomputeNumLayers;
    to.recomputeMethod = from.recomputeMethod;
  }
  if (rc == Recompute::Selective) to.recomputeModules = from.recomputeModules;
  // Issue 26: the MoE recipe's overlaps, dispatcher and attention kernels (the layouts the search
  // varies are set by the enumeration).
  to.moeA2aOverlap = from.moeA2aOverlap;
  to.moeSharedExpertOverlap = from.moeSharedExpertOverlap;
  to.moeFlexDispatcher = from.moeFlexDispatcher;
  to.moeFlexBackend = from.moeFlexBackend;
  to.moeCommSms = from.moeCommSms;
  to.moePermuteFusion = from.moePermuteFusion;
  to.moePermuteFusionIntoDispatcher = from.moePermuteFusionIntoDispatcher;
  to.moeCombineChunkTokens = from.moeCombineChunkTokens;
  to.moeRankCapacityFactor = from.moeRankCapacityFactor;
  to.moePagedStash = from.moePagedStash;
  to.moePagedStashBufferFactor = from.moePagedStashBufferFactor;
  to.cudaGraphImpl = from.cudaGraphImpl;
  to.cudaGraphModules = from.cudaGraphModules;
  to.attentionBackend = from.attentionBackend;
  to.lowPrecisionParams = from.lowPrecisionParams;
}

std::vector<int> divisorsOf(std::int64_t n, std::int64_t limit) {
  std::vector<int> out;
  for (std::int64_t d = 1; d <= n && d <= limit; ++d) {
    if (n % d == 0) out.push_back(static_cast<int>(d));
  }
  return out;
}

// Virtual stages per device an interleaved schedule may use on P devices: every divisor v ≥ 2
// of the blocks each device holds, as Megatron-LM requires without a layout string (NVIDIA's
// Llama-3-70B recipes: VP 5 at PP 8, VP 20 at PP 4); with blocks that do not divide evenly over
// the devices, 2 and 4 (the balanced partitioner splits unevenly).
std::vector<int> interleavingChoices(int blocks, int P) {
  std::vector<int> out;
  if (P > 0 && blocks % P == 0) {
    for (const int v : divisorsOf(blocks / P, blocks / P)) {
      if (v >= 2) out.push_back(v);
    }
  }
  if (out.empty()) out = {2, 4};
  return out;
}

// What a configuration's bounds need from its layers, per microbatch, summed over the model.
struct CostSummary {
  double forwardMs = 0, backwardInputMs = 0, backwardWeightMs = 0;  // trainable layers, one microbatch
  double trainableWorkMs = 0;  // F + B + W of every trainable layer (one microbatch)
  double trainableCommMs = 0;  // the exposed collective time inside trainableWorkMs
  double frozenWorkMs = 0;     // F of every frozen layer
  double denseParams = 0;      // per GPU (TP/EP shards), trainable
  double expertParams = 0;
  double frozenParams = 0;
  double quantizedDense = 0;  // trainable weights kept only in low precision (no bf16 copy)
  double quantizedExpert = 0;
  double activationBytes = 0;    // trainable layers, one microbatch, per GPU
  double lowPrecisionBytes = 0;  // cached low-precision weight copies, per GPU (all layers)
  double outputBytes = 0;        // the largest hidden state a trainable layer sends on (per GPU)
};

// A configuration before simulation.
struct Candidate {
  PlanConfig config;
  std::int64_t samplesPerMicrobatch = 1;
  double throughputEstimate = 0;  // samples/s from the uniform-stage profile (optimistic)
  bool profiled = true;           // false: the estimate leaves out the schedule's idle time
  std::size_t index = 0;          // its place in the enumeration (which family reason came first)
  // Deterministic order among equal bounds: the config's degrees and names.
  std::tuple<int, int, int, int, int, std::int64_t, const std::string&, int, int, int> key() const {
    const Parallelism& p = config.parallel;
    return {config.devices,
            p.tensor,
            p.context,
            p.data,
            p.expert,
            samplesPerMicrobatch,
            config.schedule,
            config.chunksPerDevice,
            static_cast<int>(p.recompute),
            p.zeroStage};
  }
};

struct Family {
  int p = 0, d = 0;
  std::string schedule;
  bool anyFeasible = false;
  bool anyUndecided = false;  // bounded out: never simulated, so not known to fail
  std::string reason;
  std::pair<int, std::size_t> reasonRank{0, 0};  // (phase, sequence) of the reason kept
};

class Search {
 public:
  Search(const ModelSpec& model, const ClusterSpec& cluster, const ConfigureOptions& options,
         const SolveControl& control)
      : m_model(model), m_cluster(cluster), m_options(options), m_control(control) {}

  Expected<Configuration> run();

 private:
  Status checkRecipe() const;
  const CostSummary& summary(const Parallelism& par, std::int64_t mbs);
  struct Profile {
    double inflightMicrobatches = 0;  // on the fullest device
    double idleStagePasses = 0;       // idle beyond the busiest device's work, in units of one stage's F+B+W
  };
  /// Schedule, depth, chunks, profiled microbatches, F and B in tenths, transfer in quarters.
  using ProfileKey = std::tuple<std::string, int, int, int, int, int, int>;
  ProfileKey profileKey(const ScheduleGenerator& g, const Candidate& cand, const CostSummary& s) const;
  const Profile& uniformProfile(const ProfileKey& key);
  void note(int p, int d, const std::string& schedule, const std::string& reason);
  /// As note, building the reason only when it is the family's first: the bound prunes millions
  /// of candidates of a few families, and formatting every reason took a tenth of a large search.
  /// "First" is in the order of a search that bounds every candidate as it is enumerated and
  /// then screens: enumeration-phase reasons by their place in the enumeration (a candidate's
  /// memory bound made later, when it is profiled, keeps its candidate's place), then the
  /// screenings' and simulations' reasons in time.
  template <typename MakeReason>
  void noteLazily(int p, int d, const std::string& schedule, MakeReason&& makeReason) {
    noteRanked(p, d, schedule, {m_enumerating ? 0 : 1, ++m_sequence}, std::forward<MakeReason>(makeReason));
  }
  template <typename MakeReason>
  void noteRanked(int p, int d, const std::string& schedule, std::pair<int, std::size_t> rank,
                  MakeReason&& makeReason) {
    Family& f = family(p, d, schedule);
    if (f.reason.empty() || rank < f.reasonRank) {
      f.reason = makeReason();
      f.reasonRank = rank;
    }
  }
  Family& family(int p, int d, const std::string& schedule);
  std::vector<std::string> scheduleNames() const;
  struct Screened {
    PlanConfig config;
    double throughput = 0;  // samples/s, extrapolated to the candidate's microbatches
  };
  Expected<Screened> screen(const Candidate& cand);
  Expected<Plan> simulate(const PlanConfig& config, std::optional<int> microbatches = std::nullopt, bool refine = true);
  bool allFlash() const;
  /// The work of planning `config` at `microbatches` (kConfigureWorkBudget's units): the pairs its
  /// partitions split and the ops of its plan.
  std::int64_t planWork(const PlanConfig& config, int microbatches) const;
  /// Whether `work` more fits the budget; spends it when it does.
  bool spend(std::int64_t work, Configuration& out);

  // What the enumeration needs of the model.
  struct ModelShape {
    int trainableLayers = 0;
    std::int64_t largestComponentLayers = 0;  // the largest partition problem's layers
    int blocks = 0;                           // transformer blocks (what Megatron's virtual pipeline stages divide)
    std::int64_t minHeads = 0, minKvHeads = 0, minSeq = 0;
    std::int64_t seqDivisor = 0;  // divides every sequence length
    bool anyTransformer = false;
    bool hasFrozen = false;
    bool flashOnly = false;  // every attention is flash attention
  };
  // One point of the enumeration, filled loop by loop.
  struct Point {
    int tensor = 1, context = 1, devices = 1, data = 1;
    const searchspace::Layout* layout = nullptr;
    int microBatchSize = 1;
    int microbatches = 1;
    Recompute recompute = Recompute::None;
    int zero = 0;
  };
  ModelShape modelShape() const;
  // Where the enumeration puts what it finds: each candidate is bounded as it is made and only
  // the viable ones are kept (a large search enumerates millions of which few fit).
  struct Sink {
    std::int64_t globalBatch = 0;
    Configuration& out;
    std::vector<Candidate> viable;
    std::size_t enumerated = 0;
    bool cancelled = false;
  };
  void enumerate(Sink& sink, const ModelShape& shape);
  void enumerateLayout(Sink& sink, Point pt, const ModelShape& shape, const std::vector<std::string>& schedules);
  void enumerateSchedule(Sink& sink, const Point& pt, const std::string& schedule, const ModelShape& shape);
  Candidate candidate(const Point& pt, const std::string& schedule, int chunks, const std::string& partition,
                      std::int64_t globalBatch, const ModelShape& shape) const;
  int zeroStage(const Parallelism& par) const;
  double staticLowerBound(const Candidate& cand, const CostSummary& s, const ScheduleGenerator* g) const;
  double usableBytes() const;
  bool bound(Candidate& cand, std::int64_t globalBatch, Configuration& out);
  bool profileAndBound(Candidate& cand, Configuration& out);
  bool activationBound(Candidate& cand, const CostSummary& s, double staticLb, const Profile& profile,
                       std::int64_t globalBatch, Configuration& out);
  Status settleUnprofiled(std::vector<Candidate>& viable, Configuration& out);
  double throughputEstimate(const Candidate& cand, const CostSummary& s, const Profile& profile,
                            std::int64_t globalBatch) const;
  std::size_t keepCount() const { return static_cast<std::size_t>(std::clamp(m_options.keep, 1, kMaxConfigureKeep)); }
  Expected<std::vector<Screened>> screenAll(std::vector<Candidate>& viable, Configuration& out);
  Status simulateInFull(const std::vector<Screened>& screened, Configuration& out);

  const ModelSpec& m_model;
  const ClusterSpec& m_cluster;
  const ConfigureOptions& m_options;
  const SolveControl& m_control;
  std::map<std::tuple<int, int, int, int, int, int, bool, std::int64_t, int, int, double>, CostSummary> m_summaries;
  std::map<ProfileKey, Profile> m_profiles;
  std::map<std::tuple<int, int, std::string>, Family> m_families;
  bool m_enumerating = true;
  std::size_t m_sequence = 0;             // enumeration places and note order
  std::vector<std::size_t> m_unprofiled;  // bounded out before they were profiled (screenAll)
};

std::int64_t Search::planWork(const PlanConfig& config, int microbatches) const {
  const std::int64_t stages = static_cast<std::int64_t>(config.devices) * std::max(1, config.chunksPerDevice);
  std::int64_t layers = 0;
  for (int c : m_model.trainableComponents()) layers += static_cast<std::int64_t>(m_model.component(c).layers.size());
  const std::int64_t cells = config.partition == "uniform" ? 0 : stages * layers;
  return cells + 3 * stages * std::max(1, microbatches);
}

bool Search::spend(std::int64_t work, Configuration& out) {
  if (out.work + work > m_options.workBudget) {
    out.workBudgetSpent = true;
    return false;
  }
  out.work += work;
  return true;
}

bool Search::allFlash() const {
  for (const Component& c : m_model.components) {
    for (const Layer& l : c.layers) {
      if (l.transformer && l.transformer->attention == AttentionKind::Standard) return false;
    }
  }
  return true;
}

std::vector<std::string> Search::scheduleNames() const {
  std::vector<std::string> out = m_options.schedules;
  if (out.empty()) {
    for (const ScheduleGenerator* g : scheduleGenerators()) {
      const std::string n(g->name());
      // custom and zb-auto need a CSV / a memory limit to mean anything; seq1f1b without
      // --seq-splits (which the search does not vary) is 1f1b.
      if (n == "custom" || n == "zb-auto" || n == "seq1f1b") continue;
      out.push_back(n);
    }
  }
  return out;
}

const CostSummary& Search::summary(const Parallelism& par, std::int64_t mbs) {
  const auto key = std::make_tuple(par.tensor, par.context, par.expert, par.data, static_cast<int>(par.recompute),
                                   par.zeroStage, par.sequenceParallel, mbs, par.expertTensor,
                                   static_cast<int>(par.cpCommType), par.moeCapacityFactor.value_or(-1.0));
  auto it = m_summaries.find(key);
  if (it != m_summaries.end()) return it->second;
  PlanConfig config = m_options.recipe;
  config.parallel = par;
  const CostedModel costs(m_model, m_cluster, config, mbs);
  // Full recomputation of only some layers: which ones depends on the partition, so the bound
  // takes the time of no recomputation and the activations of recomputing every layer (both
  // optimistic).
  std::optional<CostedModel> unrecomputed;
  if (par.recompute == Recompute::Full && par.recomputeNumLayers > 0) {
    PlanConfig none = config;
    none.parallel.recompute = Recompute::None;
    unrecomputed.emplace(m_model, m_cluster, none, mbs);
  }
  CostSummary s;
  for (int ci = 0; ci < static_cast<int>(m_model.components.size()); ++ci) {
    const bool trainable = m_model.component(ci).trainable;
    const std::vector<LayerCosts>& layers = costs.component(ci);
    for (std::size_t li = 0; li < layers.size(); ++li) {
      LayerCosts c = unrecomputed ? unrecomputed->component(ci)[li] : layers[li];
      c.activationBytes = std::min(c.activationBytes, layers[li].activationBytes);
      if (trainable) {
        s.trainableWorkMs += c.forwardMs + c.backwardInputMs + c.backwardWeightMs;
        s.trainableCommMs += c.forwardCommMs + c.backwardInputCommMs + c.backwardWeightCommMs;
        s.forwardMs += c.forwardMs;
        s.backwardInputMs += c.backwardInputMs;
        s.backwardWeightMs += c.backwardWeightMs;
        s.denseParams += c.parameterCount() - static_cast<double>(c.expertParameterBytes) / 2.0;
        s.expertParams += static_cast<double>(c.expertParameterBytes) / 2.0;
        s.quantizedDense += c.quantizedParameters - c.quantizedExpertParameters;
        s.quantizedExpert += c.quantizedExpertParameters;
        s.activationBytes += static_cast<double>(c.activationBytes);
        s.lowPrecisionBytes += static_cast<double>(c.lowPrecisionWeightBytes);
        s.outputBytes = std::max(s.outputBytes, static_cast<double>(c.outputBytes));
      } else {
        s.frozenWorkMs += c.forwardMs;
        s.frozenParams += c.parameterCount();
      }
    }
  }
  return m_summaries.emplace(key, s).first->second;
}

// The schedule on identical stages (its own placement, order and simulator timing, free
// transfers): how many microbatches its fullest device keeps in flight, and how long devices
// idle beyond the busiest one's work. Fill and drain do not grow with the microbatch count past
// the pipeline depth, so m is capped at p (or the next count the schedule accepts).
Search::ProfileKey Search::profileKey(const ScheduleGenerator& g, const Candidate& cand, const CostSummary& s) const {
  const PlanConfig& cfg = cand.config;
  const int p = cfg.devices;
  const int chunks = cfg.chunksPerDevice;
  const int m = cfg.microbatches;
  const double stageMs = s.trainableWorkMs * g.pipelines() / (static_cast<double>(p) * chunks);
  const double transferMs = p > 1 ? stageSendMs(m_cluster, cfg, 0, 1, s.outputBytes) : 0.0;
  const double transferPasses = stageMs > 0 ? transferMs / stageMs : 0.0;
  // F:B:W proportions in tenths and the transfer in quarters of a stage's F+B+W (capped):
  // a handful of profiles per schedule and depth.
  const double sum = std::max(1e-12, s.forwardMs + s.backwardInputMs + s.backwardWeightMs);
  const int fk = static_cast<int>(std::lround(10.0 * s.forwardMs / sum));
  const int bk = static_cast<int>(std::lround(10.0 * s.backwardInputMs / sum));
  // Rounded down so the estimate stays optimistic (screening ranks the candidates exactly).
  const int tk = static_cast<int>(std::floor(4.0 * std::min(transferPasses, 5.0)));
  int mp = std::min(m, 2 * p);
  while (mp < m && !g.validate({p, mp, chunks})) ++mp;
  return {std::string(g.name()), p, chunks, mp, fk, bk, tk};
}

const Search::Profile& Search::uniformProfile(const ProfileKey& key) {
  if (auto it = m_profiles.find(key); it != m_profiles.end()) return it->second;
  const auto& [name, p, chunks, mp, fk, bk, tk] = key;
  const ScheduleGenerator& g = *findScheduleGenerator(name);
  Profile profile;
  profile.inflightMicrobatches = std::min(mp, p);  // 1F1B's count if the schedule cannot be built
  const int pipelines = g.pipelines();
  const int layers = std::max(1, p * chunks / pipelines);
  constexpr std::int64_t kActivation = 1000;
  PlanRequest r;
  r.model.name = "uniform";
  Component c;
  c.name = "uniform";
  const double fu = std::max(1, fk) / 10.0;
  const double bu = std::max(1, bk) / 10.0;
  const double wu = std::max(0.05, 1.0 - fu - bu);
  for (int l = 0; l < layers; ++l) {
    Layer layer;
    layer.name = "l" + std::to_string(l);
    layer.forwardMs = fu;
    layer.backwardInputMs = bu;
    layer.backwardWeightMs = wu;
    layer.activationBytes = kActivation;
    layer.weightGradBytes = kActivation / 2;
    layer.outputBytes = 1;  // its transfer is the link's latency below
    c.layers.push_back(std::move(layer));
  }
  r.model.components.push_back(std::move(c));
  r.cluster.name = "uniform";
  r.cluster.gpu.peakTflops = 1;
  r.cluster.gpu.memoryGib = 1e6;
  r.cluster.nodes.push_back(NodeSpec{"n", p, std::nullopt, std::nullopt});
  r.cluster.intraNode = LinkSpec{1e9, 1000.0 * (fu + bu + wu) * tk / 4.0};
  r.cluster.interNode = r.cluster.intraNode;
  r.config.schedule = name;
  r.config.devices = p;
  r.config.microbatches = mp;
  r.config.chunksPerDevice = chunks;
  r.config.partition = "uniform";
  SolveControl quick;  // the profile is an estimate: the schedule as first built
  quick.refine = false;
  if (auto plan = makePlan(r, quick)) {
    double busiest = 0;
    std::int64_t peak = 0;
    for (const auto& d : plan->metrics.devices) {
      busiest = std::max(busiest, d.busyMs);
      peak = std::max(peak, d.peakActivationBytes);
    }
    const double perMicrobatch = static_cast<double>(kActivation) * chunks / pipelines;
    profile.inflightMicrobatches = static_cast<double>(peak) / perMicrobatch;
    profile.idleStagePasses = std::max(0.0, plan->metrics.makespanMs - busiest) / (fu + bu + wu);
  }
  return m_profiles.emplace(key, profile).first->second;
}

Expected<Plan> Search::simulate(const PlanConfig& config, std::optional<int> microbatches, bool refine) {
  PlanRequest r;
  r.model = m_model;
  r.cluster = m_cluster;
  r.config = config;
  if (microbatches) {
    // resolveRequest derives the microbatches from the global batch: shorten both.
    r.config.microbatches = *microbatches;
    r.config.globalBatch =
        static_cast<std::int64_t>(*microbatches) * config.microBatchSize.value_or(1) * config.parallel.data;
  }
  SolveControl inner;
  inner.cancel = m_control.cancel;
  inner.refine = refine;
  inner.repairMemory = refine;  // screening takes a candidate's first split as it is
  return makePlan(r, inner);
}

Expected<Search::Screened> Search::screen(const Candidate& cand) {
  const PlanConfig& cfg = cand.config;
  const ScheduleGenerator* g = findScheduleGenerator(cfg.schedule);
  const int m = cfg.microbatches;
  const int p = cfg.devices;
  auto validCount = [&](int want) {
    int k = std::min(m, want);
    while (k < m && g && !g->validate({p, k, cfg.chunksPerDevice})) ++k;
    return k;
  };
  const int m1 = validCount(2 * p);
  const int m2 = validCount(std::max(4 * p, m1 + 1));
  Screened out;
  out.config = cfg;
  if (!g || m2 >= m || m1 >= m2) {
    PS_ASSIGN_OR_RETURN(auto plan, simulate(cfg, std::nullopt, false));
    out.throughput = plan.metrics.throughputSamplesPerS;
    return out;
  }
  PS_ASSIGN_OR_RETURN(auto a, simulate(cfg, m1, false));
  PS_ASSIGN_OR_RETURN(auto b, simulate(cfg, m2, false));
  const auto span = static_cast<double>(m2 - m1);
  const auto more = static_cast<double>(m - m2);
  const double iterationMs =
      b.metrics.iterationMs + more * std::max(0.0, b.metrics.iterationMs - a.metrics.iterationMs) / span;
  // Each device's peak along its own line; over the GPU (less the margin) is out.
  for (std::size_t d = 0; d < b.metrics.devices.size() && d < a.metrics.devices.size(); ++d) {
    const DeviceMetrics& da = a.metrics.devices[d];
    const DeviceMetrics& db = b.metrics.devices[d];
    const double growth = std::max(0.0, static_cast<double>(db.peakMemoryBytes - da.peakMemoryBytes)) / span;
    const double peak = static_cast<double>(db.peakMemoryBytes) + more * growth;
    const GpuSpec gpu = deviceGpu(m_cluster, cfg, static_cast<int>(d));
    const auto capacity = static_cast<double>(gpu.memoryBytes() - db.memory.marginBytes());
    if (growth > 0 && peak > capacity) {
      return Error{cfg.schedule + " does not fit in memory at " + std::to_string(m) + " microbatches: device " +
                   std::to_string(d) + " peaks near " + formatBytes(peak) + " of " + formatBytes(capacity) +
                   " usable (its in-flight activations grow with the microbatch count)"};
    }
  }
  out.throughput = iterationMs > 0 ? static_cast<double>(cfg.globalBatch.value_or(0)) / (iterationMs / 1000.0) : 0.0;
  return out;
}

Family& Search::family(int p, int d, const std::string& schedule) {
  Family& f = m_families[{p, d, schedule}];
  f.p = p;
  f.d = d;
  f.schedule = schedule;
  return f;
}

void Search::note(int p, int d, const std::string& schedule, const std::string& reason) {
  noteLazily(p, d, schedule, [&reason] { return reason; });
}

Search::ModelShape Search::modelShape() const {
  ModelShape shape;
  for (int c : m_model.trainableComponents()) {
    shape.largestComponentLayers = std::max<std::int64_t>(
        shape.largestComponentLayers, static_cast<std::int64_t>(m_model.component(c).layers.size()));
    for (const Layer& l : m_model.component(c).layers) {
      ++shape.trainableLayers;
      if (!l.transformer || l.kind == "embedding" || l.kind == "lm_head") continue;
      shape.anyTransformer = true;
      ++shape.blocks;
      shape.minHeads = std::gcd(shape.minHeads, l.transformer->heads);
      shape.minKvHeads = std::gcd(shape.minKvHeads, l.transformer->kvHeadsOrHeads());
      shape.minSeq = shape.minSeq == 0 ? l.transformer->seq : std::min(shape.minSeq, l.transformer->seq);
      shape.seqDivisor = std::gcd(shape.seqDivisor, l.transformer->seq);
    }
  }
  shape.hasFrozen = !m_model.frozenComponents().empty();
  shape.flashOnly = allFlash();
  return shape;
}

// --- enumerate ---
void Search::enumerate(Sink& sink, const ModelShape& shape) {
  const int gpus = m_cluster.totalGpus();
  const searchspace::LayoutLimits layout = searchspace::layoutLimits(m_model);
  const int perNode = m_cluster.gpusPerNode();
  const std::vector<std::string> schedules = scheduleNames();
  const std::vector<int> tensorDegrees =
      shape.anyTransformer ? divisorsOf(std::gcd(shape.minHeads, shape.minKvHeads), perNode) : std::vector<int>{1};
  for (std::size_t t = 0; t < tensorDegrees.size() && !sink.cancelled; ++t) {
    const int T = tensorDegrees[t];
    if (m_control.progress) {
      m_control.progress(0.3 * static_cast<double>(t) / static_cast<double>(tensorDegrees.size()));
    }
    if (gpus % T != 0) continue;
    std::vector<int> contextDegrees{1};
    if (shape.anyTransformer) {
      contextDegrees.clear();
      for (int C = 1; C <= m_options.maxContextParallel; C *= 2) {
        if (C == 1 || (shape.minSeq % (2 * static_cast<std::int64_t>(C)) == 0 && gpus % (T * C) == 0))
          contextDegrees.push_back(C);
      }
    }
    for (int C : contextDegrees) {
      if (gpus % (T * C) != 0) continue;
      for (int P : divisorsOf(gpus / (T * C), shape.trainableLayers)) {
        const int D = gpus / (T * C * P);
        // MoE parallel folding: ETP × EP over the T·C·D GPUs (LayoutChoices.hpp), with token
        // dropping and context parallelism's communication type where they apply.
        for (const searchspace::Layout& lay :
             searchspace::layouts(layout, T, C, D, m_options.recipe.parallel, m_options.cpCommType)) {
          Point pt;
          pt.tensor = T;
          pt.context = C;
          pt.devices = P;
          pt.data = D;
          pt.layout = &lay;
          enumerateLayout(sink, pt, shape, schedules);
          if (sink.cancelled) return;
        }
      }
    }
  }
}

// The candidates of one layout: micro-batch sizes, recomputation, ZeRO stages, schedules.
void Search::enumerateLayout(Sink& sink, Point pt, const ModelShape& shape, const std::vector<std::string>& schedules) {
  const std::int64_t globalBatch = sink.globalBatch;
  for (int mbs : m_options.microBatchSizes) {
    if (mbs < 1 || globalBatch % (static_cast<std::int64_t>(mbs) * pt.data) != 0) continue;
    const std::int64_t m64 = globalBatch / (static_cast<std::int64_t>(mbs) * pt.data);
    if (m64 < 1 || m64 > kMaxConfigureMicrobatches) continue;
    pt.microBatchSize = mbs;
    pt.microbatches = static_cast<int>(m64);
    for (Recompute rc : m_options.recomputes) {
      if (rc == Recompute::Selective && shape.flashOnly) continue;  // the same plan as none
      if (rc != Recompute::None && !shape.anyTransformer) continue;
      pt.recompute = rc;
      for (int zero : m_options.zeroStages) {
        if (pt.data == 1 && zero != 0) continue;  // nothing to shard
        pt.zero = zero;
        for (const std::string& schedule : schedules) {
          // At P = 1 every schedule is gradient accumulation: one plan, named 1f1b.
          if (pt.devices == 1 && schedule != "1f1b") continue;
          enumerateSchedule(sink, pt, schedule, shape);
        }
      }
    }
  }
}

// The candidates of one schedule: its chunk counts the model allows, each partition; each
// bounded as it is made.
void Search::enumerateSchedule(Sink& sink, const Point& pt, const std::string& schedule, const ModelShape& shape) {
  const int P = pt.devices;
  const int D = pt.data;
  const ScheduleGenerator* g = findScheduleGenerator(schedule);
  if (!g) {
    note(P, D, schedule, "unknown schedule");
    return;
  }
  std::vector<int> chunkChoices = {g->defaultChunksPerDevice()};
  if (schedule == "interleaved-1f1b") chunkChoices = interleavingChoices(shape.blocks, P);
  for (int chunks : chunkChoices) {
    if (P * chunks > shape.trainableLayers) {
      note(P, D, schedule,
           std::to_string(P * chunks) + " virtual stages but only " + std::to_string(shape.trainableLayers) +
               " trainable layers");
      continue;
    }
    if (auto st = g->validate({P, pt.microbatches, chunks}); !st) {
      note(P, D, schedule, st.message());
      continue;
    }
    // The partitioners' tables: what `plan` refuses, never enumerated (Partition.hpp).
    const Status partitionable =
        checkPartitionSize(static_cast<std::int64_t>(P) * chunks / g->pipelines(), shape.largestComponentLayers);
    const bool tabled = std::any_of(m_options.partitions.begin(), m_options.partitions.end(),
                                    [](const std::string& name) { return name != "uniform"; });
    for (const std::string& partition : m_options.partitions) {
      if (tabled && !partitionable && partition != "uniform") {
        noteLazily(P, D, schedule, [&] { return "partition " + partition + ": " + partitionable.message(); });
        continue;
      }
      if ((sink.enumerated & 255) == 0 && m_control.cancelled()) {
        sink.cancelled = true;
        return;
      }
      ++sink.enumerated;
      Candidate cand = candidate(pt, schedule, chunks, partition, sink.globalBatch, shape);
      cand.index = ++m_sequence;
      if (bound(cand, sink.globalBatch, sink.out)) sink.viable.push_back(std::move(cand));
    }
  }
}

Candidate Search::candidate(const Point& pt, const std::string& schedule, int chunks, const std::string& partition,
                            std::int64_t globalBatch, const ModelShape& shape) const {
  const int T = pt.tensor;
  const int C = pt.context;
  Candidate cand;
  PlanConfig& cfg = cand.config;
  applyRecipe(m_options.recipe, pt.recompute, cfg);
  cfg.schedule = schedule;
  cfg.devices = pt.devices;
  cfg.microbatches = pt.microbatches;
  cfg.chunksPerDevice = chunks;
  cfg.partition = partition;
  cfg.fill = shape.hasFrozen ? "greedy" : "none";
  cfg.parallel.tensor = T;
  cfg.parallel.context = C;
  cfg.parallel.data = pt.data;
  cfg.parallel.expert = pt.layout->expert;
  cfg.parallel.expertTensor = pt.layout->expertTensor;
  cfg.parallel.moeCapacityFactor = pt.layout->capacityFactor;
  cfg.parallel.cpCommType = pt.layout->cpCommType;
  // Sequence parallelism splits each sequence over T (resolveRequest).
  cfg.parallel.sequenceParallel = T > 1 && shape.seqDivisor % (static_cast<std::int64_t>(T) * C) == 0;
  cfg.parallel.recompute = pt.recompute;
  cfg.parallel.zeroStage = pt.zero;
  cfg.globalBatch = globalBatch;
  cfg.microBatchSize = pt.microBatchSize;
  cand.samplesPerMicrobatch = pt.microBatchSize;
  return cand;
}

int Search::zeroStage(const Parallelism& par) const {
  return std::max(par.zeroStage, m_model.optimizer.distributed ? 1 : 0);
}

// --- bound --- A candidate whose memory lower bounds fit gets its throughput estimate (true);
// one that cannot fit is counted and its family noted (false).

// Parameters, gradients, optimizer state and low-precision weight copies per GPU, on average:
// the fullest GPU holds at least that.
double Search::staticLowerBound(const Candidate& cand, const CostSummary& s, const ScheduleGenerator* g) const {
  const Parallelism& par = cand.config.parallel;
  const int zero = zeroStage(par);
  const StaticBytesPerParameter dense =
      staticBytesPerParameter(zero, static_cast<int>(par.denseData()), par.gradReduceInFp32);
  const StaticBytesPerParameter expert =
      staticBytesPerParameter(zero, static_cast<int>(par.expertData()), par.gradReduceInFp32);
  // Bidirectional schedules hold the model twice.
  const double copies = g ? g->pipelines() : 1;
  const double lowPrecision = zero >= 3 ? 0.0 : s.lowPrecisionBytes;  // ZeRO-3 holds them only while gathered
  const double noBf16Copy = s.quantizedDense * dense.parameter + s.quantizedExpert * expert.parameter;
  return copies *
         (s.denseParams * dense.total() + s.expertParams * expert.total() + 2.0 * s.frozenParams + lowPrecision -
          noBf16Copy) /
         cand.config.devices;
}

double Search::usableBytes() const {
  return static_cast<double>(m_cluster.gpu.memoryBytes() - memoryMarginBytes(m_cluster.gpu));
}

// The static-memory bound, and the candidate's estimate: with its schedule's profile when that
// is cached (or the candidate has no generator), else without the idle time until it is
// profiled (profileAndBound, when it reaches the top of the screening queue). False: pruned.
bool Search::bound(Candidate& cand, std::int64_t globalBatch, Configuration& out) {
  const PlanConfig& cfg = cand.config;
  const CostSummary& s = summary(cfg.parallel, cand.samplesPerMicrobatch);
  const ScheduleGenerator* g = findScheduleGenerator(cfg.schedule);
  const double staticLb = staticLowerBound(cand, s, g);
  const double capacity = usableBytes();
  if (staticLb > capacity) {
    ++out.prunedByMemory;
    noteRanked(cfg.devices, cfg.parallel.data, cfg.schedule, {0, cand.index}, [&] {
      return "does not fit in memory: parameters, gradients and optimizer state alone need at least " +
             formatBytes(staticLb) + " per GPU of " + formatBytes(capacity) + " usable";
    });
    return false;
  }
  if (!g) return activationBound(cand, s, staticLb, Profile{static_cast<double>(cfg.devices), 0}, globalBatch, out);
  const ProfileKey key = profileKey(*g, cand, s);
  if (m_options.lazyProfiles && m_profiles.count(key) == 0) {
    cand.profiled = false;
    cand.throughputEstimate = throughputEstimate(cand, s, Profile{}, globalBatch);
    return true;
  }
  return activationBound(cand, s, staticLb, uniformProfile(key), globalBatch, out);
}

// A candidate ranked before its profile was made, profiled now (bound's deferred half).
bool Search::profileAndBound(Candidate& cand, Configuration& out) {
  const CostSummary& s = summary(cand.config.parallel, cand.samplesPerMicrobatch);
  const ScheduleGenerator& g = *findScheduleGenerator(cand.config.schedule);  // unprofiled: it has one
  return activationBound(cand, s, staticLowerBound(cand, s, &g), uniformProfile(profileKey(g, cand, s)),
                         out.globalBatch, out);
}

// The profile's activation estimate (pruned past 1.25× the GPU) and the candidate's estimate.
bool Search::activationBound(Candidate& cand, const CostSummary& s, double staticLb, const Profile& profile,
                             std::int64_t globalBatch, Configuration& out) {
  const PlanConfig& cfg = cand.config;
  const int P = cfg.devices;
  cand.profiled = true;
  const double capacity = usableBytes();
  const double inflight = profile.inflightMicrobatches;
  const double activationEstimate = inflight * s.activationBytes / P;
  if (staticLb + activationEstimate > 1.25 * capacity) {
    ++out.prunedByMemory;
    noteRanked(P, cfg.parallel.data, cfg.schedule, {0, cand.index}, [&] {
      return "does not fit in memory: about " + formatBytes(staticLb + activationEstimate) + " per GPU (" +
             formatBytes(activationEstimate) + " of activations for " +
             std::to_string(static_cast<int>(std::lround(inflight))) + " in-flight microbatches) of " +
             formatBytes(capacity) + " usable";
    });
    return false;
  }
  cand.throughputEstimate = throughputEstimate(cand, s, profile, globalBatch);
  return true;
}

// The throughput bound of a candidate: its work spread over the pipeline, the schedule's idle
// stage passes, a gradient sync that is not overlapped, and the optimizer step.
double Search::throughputEstimate(const Candidate& cand, const CostSummary& s, const Profile& profile,
                                  std::int64_t globalBatch) const {
  const PlanConfig& cfg = cand.config;
  const Parallelism& par = cfg.parallel;
  const int P = cfg.devices;
  const int D = par.data;
  const int expertDp = static_cast<int>(par.expertData());
  const int zero = zeroStage(par);
  const ScheduleGenerator* g = findScheduleGenerator(cfg.schedule);
  const double copies = g ? g->pipelines() : 1;
  const CollectiveLinks links = collectiveLinks(m_cluster, par);
  double syncLb = 0;
  if (!par.overlapGradReduce && zero <= 2) {
    const double gradBytes = (par.gradReduceInFp32 ? 4.0 : 2.0) * s.denseParams / P;
    syncLb = zero == 0 ? allReduceMs(links.data, D, gradBytes) : allGatherMs(links.data, D, gradBytes);
  }
  const double shard = (zero >= 1 ? s.denseParams / D + s.expertParams / expertDp : s.denseParams + s.expertParams) / P;
  // One virtual stage's F+B+W for one microbatch (a pipeline's stages share the model).
  // Schedules that overlap a forward with another microbatch's backward (DualPipe) hide one
  // pass's collectives under the other's compute: their bound counts compute only.
  PlanConfig scheduled = cfg;
  if (g) g->configure(scheduled);
  const double workMs = scheduled.overlapForwardBackward ? s.trainableWorkMs - s.trainableCommMs : s.trainableWorkMs;
  const double stagePassMs = workMs * copies / (static_cast<double>(P) * cfg.chunksPerDevice);
  const double iterationEstimate = (workMs + s.frozenWorkMs) * cfg.microbatches / P +
                                   profile.idleStagePasses * stagePassMs + syncLb +
                                   optimizerStepMs(m_cluster.gpu, shard);
  return iterationEstimate > 0 ? static_cast<double>(globalBatch) / (iterationEstimate / 1000.0) : 1e300;
}

// --- screen, best estimate first ---
// A screening simulates the candidate's plan (partition, order, transfers, memory; the
// schedule as first built, without refinement searches) on two short runs, m1 ≈ 2p and
// m2 ≈ 4p microbatches, and extends both lines to m: past the warm-up a schedule repeats
// itself, so the iteration time and each device's peak grow by the same amount per
// microbatch (gpipe's peak keeps growing; 1F1B's stays). The ranked list is then simulated in
// full, screened-best first; only plans simulated in full are returned.
Expected<std::vector<Search::Screened>> Search::screenAll(std::vector<Candidate>& viable, Configuration& out) {
  const std::size_t keep = keepCount();
  // The budget counts screenings that fit: a run of candidates the memory bound let through
  // but the screening refuses must not end the search before a fitting one is seen. A hard cap
  // of ten times that many screenings keeps the time bounded by work.
  const int budget = std::max(static_cast<int>(keep), m_options.maxSimulations);
  // Best estimate on top, ties in the configurations' order. An unprofiled candidate's estimate
  // is at least its profiled one, so when a profiled candidate is on top no other can overtake
  // it: the order is that of ranking every candidate profiled.
  auto below = [&viable](std::size_t a, std::size_t b) {
    const Candidate& x = viable[a];
    const Candidate& y = viable[b];
    if (x.throughputEstimate != y.throughputEstimate) return x.throughputEstimate < y.throughputEstimate;
    if (x.key() != y.key()) return y.key() < x.key();
    return y.index < x.index;  // settings key() leaves out (CP's exchange, ETP, partition): enumeration order
  };
  // A heap of indices, built in one pass; what is left when the screening stops is read as it
  // lies (its order does not matter there).
  std::vector<std::size_t> queue(viable.size());
  std::iota(queue.begin(), queue.end(), std::size_t{0});
  std::make_heap(queue.begin(), queue.end(), below);
  std::vector<Screened> screened;
  std::size_t taken = 0;
  while (!queue.empty()) {
    if (m_control.cancelled()) return Error::cancelled();
    if (m_control.progress)
      m_control.progress(0.3 + 0.5 * static_cast<double>(taken) / static_cast<double>(viable.size()));
    const std::size_t i = queue.front();
    Candidate& cand = viable[i];
    const bool settled =
        screened.size() >= keep && cand.throughputEstimate < (1.0 - kEstimateMargin) * screened[keep - 1].throughput;
    if (settled || static_cast<int>(screened.size()) >= budget || out.evaluated >= 10 * budget) break;
    std::pop_heap(queue.begin(), queue.end(), below);
    queue.pop_back();
    if (!cand.profiled) {
      if (profileAndBound(cand, out)) {
        queue.push_back(i);
        std::push_heap(queue.begin(), queue.end(), below);
      }
      continue;
    }
    // Two short runs (or the full one when the schedule is that short).
    const int p = cand.config.devices;
    const std::int64_t work = planWork(cand.config, std::min(cand.config.microbatches, 2 * p)) +
                              planWork(cand.config, std::min(cand.config.microbatches, 4 * p));
    if (!spend(work, out)) {
      queue.push_back(i);  // not screened: bounded out below, with the rest
      std::push_heap(queue.begin(), queue.end(), below);
      break;
    }
    ++taken;
    ++out.evaluated;
    auto sc = screen(cand);
    if (!sc) {
      if (sc.isCancelled()) return sc.error();
      note(cand.config.devices, cand.config.parallel.data, cand.config.schedule, sc.message());
      continue;
    }
    auto at = std::upper_bound(screened.begin(), screened.end(), sc->throughput,
                               [](double t, const Screened& x) { return t > x.throughput; });
    screened.insert(at, std::move(*sc));
  }
  // Bounded out: never screened, so not known to fail. One not profiled yet may still be one
  // the memory bound rejects; settleUnprofiled decides that where its family's fate hangs on it.
  for (const std::size_t i : queue) {
    const Candidate& cand = viable[i];
    if (!cand.profiled) {
      m_unprofiled.push_back(i);
      continue;
    }
    ++out.boundedOut;
    const PlanConfig& cfg = cand.config;
    m_families[{cfg.devices, cfg.parallel.data, cfg.schedule}].anyUndecided = true;
  }
  return screened;
}

// The bounded-out candidates never profiled: where their family has no plan and nothing else
// undecided, profile them (in enumeration order) until one passes the memory bound, which
// leaves the family undecided; if none does, the family is rejected for memory as when every
// candidate was profiled. Elsewhere they count as bounded out without a profile.
Status Search::settleUnprofiled(std::vector<Candidate>& viable, Configuration& out) {
  std::sort(m_unprofiled.begin(), m_unprofiled.end());  // viable is in enumeration order
  for (std::size_t i : m_unprofiled) {
    if (m_control.cancelled()) return Error::cancelled();
    Candidate& cand = viable[i];
    const PlanConfig& cfg = cand.config;
    Family& f = m_families[{cfg.devices, cfg.parallel.data, cfg.schedule}];
    if (f.anyFeasible || f.anyUndecided || profileAndBound(cand, out)) {
      ++out.boundedOut;
      f.anyUndecided = true;
    }
  }
  m_unprofiled.clear();
  return {};
}

// The recipe's fixed settings against the model and the cluster, before any search: a precision
// the GPUs have no peak for, recomputed modules the model lacks, expert settings on a dense model,
// or an ETP that no expert MLP or pipeline rank can take would fail every configuration alike
// (and be reported as a family's layer counts or an unsplittable batch): said once, here. The
// same check plan makes (checkPlanSettings), on a configuration of one GPU.
Status Search::checkRecipe() const {
  PlanConfig probe = m_options.recipe;
  Parallelism& par = probe.parallel;
  const int etp = par.expertTensor;
  par.tensor = par.context = par.expert = par.data = 1;
  par.expertTensor = 0;  // checked against the splits below
  par.sequenceParallel = false;
  par.recomputeNumLayers = 0;  // layers per stage depend on the split: each candidate's check
  if (par.recomputeModules != 0) par.recompute = Recompute::Selective;
  probe.devices = 1;
  probe.chunksPerDevice = 1;
  probe.microbatches = 1;
  probe.globalBatch.reset();
  probe.microBatchSize.reset();
  probe.seqSplits = 1;
  ModelSpec model = m_model;
  model.samplesPerMicrobatch = std::max<std::int64_t>(1, model.samplesPerMicrobatch);
  PS_RETURN_IF_ERROR(checkPlanSettings(model, m_cluster, probe));
  if (etp <= 0) return {};
  const searchspace::LayoutLimits limits = searchspace::layoutLimits(m_model);
  if (limits.experts <= 0) {
    return Error{"--etp " + std::to_string(etp) +
                 " needs a mixture-of-experts model (experts in a transformer "
                 "shape); '" +
                 excerpt(m_model.name) + "' has none"};
  }
  if (limits.expertFfn % etp != 0) {
    return Error{"--etp " + std::to_string(etp) + " does not divide the expert MLP size " +
                 std::to_string(limits.expertFfn) +
                 " of the model's MoE layers (expert tensor parallelism splits "
                 "each expert's MLP; expected a divisor of it)"};
  }
  if (m_cluster.totalGpus() % etp != 0) {
    return Error{"--etp " + std::to_string(etp) +
                 " divides no pipeline rank's GPUs: a rank's tensor × context × "
                 "data GPUs divide the cluster's " +
                 std::to_string(m_cluster.totalGpus()) + ", and ETP × EP must divide them (expected a divisor of " +
                 std::to_string(m_cluster.totalGpus()) + ")"};
  }
  return {};
}

ConfigCandidate rankedCandidate(const Plan& plan) {
  ConfigCandidate c;
  c.config = plan.config;
  c.samplesPerMicrobatch = plan.model.samplesPerMicrobatch;
  c.metrics = plan.metrics;
  c.makespanMs = plan.metrics.makespanMs;
  c.allReduceMs = plan.metrics.gradientSyncMs;
  c.iterationMs = plan.metrics.iterationMs;
  c.throughputSamplesPerS = plan.metrics.throughputSamplesPerS;
  c.bubbleRatio = plan.metrics.bubbleRatio;
  for (const auto& dm : plan.metrics.devices) c.peakMemoryBytes = std::max(c.peakMemoryBytes, dm.peakMemoryBytes);
  c.blockHalves = std::any_of(plan.model.components.begin(), plan.model.components.end(), [](const Component& comp) {
    return std::any_of(comp.layers.begin(), comp.layers.end(),
                       [](const Layer& l) { return blockHalfOf(l).has_value(); });
  });
  return c;
}

// --- simulate the screened list in full ---
Status Search::simulateInFull(const std::vector<Screened>& screened, Configuration& out) {
  const std::size_t keep = keepCount();
  std::size_t next = 0;
  for (; next < screened.size() && out.feasible.size() < keep; ++next) {
    if (m_control.cancelled()) return Error::cancelled();
    if (m_control.progress)
      m_control.progress(0.8 + 0.2 * static_cast<double>(out.feasible.size()) / static_cast<double>(keep));
    const Screened& sc = screened[next];
    // The budget stops the full simulations too, once one has run.
    if (!spend(planWork(sc.config, sc.config.microbatches), out) && out.simulatedInFull > 0) break;
    Expected<Plan> plan = simulate(sc.config);
    ++out.simulatedInFull;
    const int P = sc.config.devices;
    const int D = sc.config.parallel.data;
    if (!plan) {
      if (plan.isCancelled()) return plan.error();
      note(P, D, sc.config.schedule, plan.message());
      continue;
    }
    m_families[{P, D, sc.config.schedule}].anyFeasible = true;
    ConfigCandidate c = rankedCandidate(*plan);
    // Insert in rank order (stable: equal throughputs keep screening order).
    auto at = std::upper_bound(out.feasible.begin(), out.feasible.end(), c.throughputSamplesPerS,
                               [](double t, const ConfigCandidate& x) { return t > x.throughputSamplesPerS; });
    out.feasible.insert(at, std::move(c));
  }
  // Screened but never simulated in full: not known to fail, so their family is not rejected.
  for (; next < screened.size(); ++next) {
    const PlanConfig& cfg = screened[next].config;
    m_families[{cfg.devices, cfg.parallel.data, cfg.schedule}].anyUndecided = true;
  }
  return {};
}

Expected<Configuration> Search::run() {
  Configuration out;
  const int gpus = m_cluster.totalGpus();
  if (gpus < 1) return Error{"configure: cluster '" + excerpt(m_cluster.name) + "' has no GPUs"};
  if (m_model.trainableComponents().empty())
    return Error{"configure: model '" + excerpt(m_model.name) + "' has no trainable component"};
  PS_RETURN_IF_ERROR(checkRecipe());
  std::int64_t globalBatch = m_options.globalBatch;
  if (globalBatch <= 0) globalBatch = m_model.globalBatch.value_or(4LL * gpus * m_model.samplesPerMicrobatch);
  out.globalBatch = globalBatch;

  Sink sink{globalBatch, out, {}, 0, false};
  enumerate(sink, modelShape());
  m_enumerating = false;
  if (sink.cancelled) return Error::cancelled();
  out.enumerated = static_cast<int>(sink.enumerated);
  std::vector<Candidate>& viable = sink.viable;

  PS_ASSIGN_OR_RETURN(auto screened, screenAll(viable, out));
  PS_RETURN_IF_ERROR(simulateInFull(screened, out));
  PS_RETURN_IF_ERROR(settleUnprofiled(viable, out));
  for (auto& [key, f] : m_families) {
    if (!f.anyFeasible && !f.anyUndecided && !f.reason.empty())
      out.rejected.push_back({f.p, f.d, f.schedule, f.reason});
  }
  if (m_control.progress) m_control.progress(1.0);
  return out;
}

}  // namespace

Expected<Configuration> configure(const ModelSpec& model, const ClusterSpec& cluster, const ConfigureOptions& options,
                                  const SolveControl& control) {
  Search search(model, cluster, options, control);
  return search.run();
}

}  // namespace pipestudio
