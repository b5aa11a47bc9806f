#include "pipestudio/viz/TimelineData.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string_view>
#include <tuple>

#include "TimelineTracks.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/plan/Memory.hpp"

namespace pipestudio::viz {

namespace {

void finishLane(Lane& lane) {
  // Sort by start (ops are in execution order per device already; comms need it). A stable
  // permutation keeps equal starts in plan order.
  std::vector<std::size_t> order(lane.startMs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  const bool sorted = std::is_sorted(lane.startMs.begin(), lane.startMs.end());
  if (!sorted) {
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return lane.startMs[a] < lane.startMs[b]; });
    auto permute = [&](auto& v) {
      auto copy = v;
      for (std::size_t i = 0; i < order.size(); ++i) v[i] = copy[order[i]];
    };
    permute(lane.startMs);
    permute(lane.endMs);
    permute(lane.shade);
    permute(lane.microbatch);
    permute(lane.items);
  }
  lane.maxDurationMs = 0;
  lane.blocks.clear();
  lane.firstStartMs = lane.startMs.empty() ? 0 : lane.startMs.front();
  lane.lastEndMs = lane.firstStartMs;
  for (std::size_t i = 0; i < lane.size(); ++i) {
    lane.maxDurationMs = std::max(lane.maxDurationMs, lane.endMs[i] - lane.startMs[i]);
    lane.lastEndMs = std::max(lane.lastEndMs, lane.endMs[i]);
    if (i % TimelineData::kBlockSize == 0) lane.blocks.push_back({lane.startMs[i], lane.endMs[i]});
    lane.blocks.back().maxEndMs = std::max(lane.blocks.back().maxEndMs, lane.endMs[i]);
  }
}

// Row of TimelineData::m_opIndex: one per (virtual stage, op kind).
int opIndexRow(int virtualStage, OpKind kind) { return virtualStage * kOpKindCount + static_cast<int>(kind); }

/// Sorted intervals merged where they touch or overlap.
std::vector<std::pair<double, double>> merged(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<double, double>> out;
  for (const auto& i : v) {
    if (!out.empty() && i.first <= out.back().second) {
      out.back().second = std::max(out.back().second, i.second);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

}  // namespace

std::string_view activityKindName(ActivityKind kind) {
  switch (kind) {
    case ActivityKind::Kernel:
      return "kernel";
    case ActivityKind::Memcpy:
      return "memcpy";
    case ActivityKind::Memset:
      return "memset";
    case ActivityKind::Nccl:
      return "NCCL";
  }
  return "activity";
}

ActivityTrace ActivityTrace::scaled(double factor) const {
  ActivityTrace out = *this;
  for (ActivityStream& s : out.streams) scaleSpans(s.events, factor);
  scaleSpans(out.iterations, factor);
  return out;
}

double ActivityTrace::busyMs(int device, double fromMs, double toMs) const {
  std::vector<std::pair<double, double>> v;
  for (const ActivityStream& s : streams) {
    if (s.device != device) continue;
    for (const ActivityEvent& e : s.events) {
      const double a = std::max(fromMs, e.startMs), b = std::min(toMs, e.endMs);
      if (b > a) v.emplace_back(a, b);
    }
  }
  double total = 0;
  for (const auto& [a, b] : merged(std::move(v))) total += b - a;
  return total;
}

std::size_t Lane::firstVisible(double fromMs) const {
  const auto it = std::lower_bound(startMs.begin(), startMs.end(), fromMs - maxDurationMs);
  return static_cast<std::size_t>(it - startMs.begin());
}

namespace {

/// Devices the timeline shows: the plan's, and any an op, transfer or activity stream names.
int devicesShown(const Plan& p, const ActivityTrace* activity) {
  int devices = std::max(0, p.config.devices);
  for (const Op& op : p.ops) devices = std::max(devices, op.device + 1);
  for (const Comm& c : p.comms) devices = std::max({devices, c.fromDevice + 1, c.toDevice + 1});
  if (activity) {
    for (const ActivityStream& s : activity->streams) devices = std::max(devices, s.device + 1);
  }
  return devices;
}

}  // namespace

TimelineData::TimelineData(std::shared_ptr<const Plan> plan, std::shared_ptr<const ActivityTrace> activity,
                           bool collapsed)
    : m_plan(std::move(plan)), m_activity(std::move(activity)), m_collapsed(collapsed) {
  if (!m_plan) return;
  const Plan& p = *m_plan;
  m_devices = devicesShown(p, m_activity.get());
  bool bidirectional = false;
  for (const VirtualStage& vs : p.virtualStages) bidirectional = bidirectional || vs.pipeline != 0;
  m_chunks = std::max(1, p.config.chunksPerDevice);
  for (const VirtualStage& vs : p.virtualStages) m_chunks = std::max(m_chunks, vs.chunk + 1);
  m_shadesChunks = m_chunks > 1 && !bidirectional;

  // The tracks: compute ops (none when a measured run without op ranges shows its activity
  // only), the transfer strip (transfers and host copies; not when collapsed), GPU activity.
  const bool hasCopies = std::any_of(p.ops.begin(), p.ops.end(), [](const Op& op) { return isHostCopy(op.kind); });
  const bool hasCompute = !m_activity || !p.ops.empty();
  std::optional<tracks::OpTrack> ops;
  std::optional<tracks::TransferTrack> transfers;
  std::optional<tracks::KernelTrack> kernels;
  if (hasCompute) ops.emplace(p, bidirectional && !collapsed ? 2 : 1, m_shadesChunks);
  if ((!p.comms.empty() || hasCopies) && !collapsed) transfers.emplace(p);
  if (m_activity) kernels.emplace(*m_activity, m_devices, collapsed);

  tracks::LaneBuild build(p.ops.size(), p.comms.size());
  m_laneOfDevice.assign(m_devices, 0);
  for (int d = 0; d < m_devices; ++d) {
    m_laneOfDevice[d] = build.lanes.size();
    const bool streams = kernels && kernels->hasStreams(d);
    const tracks::RowBands bands = tracks::rowBands(ops.has_value(), transfers.has_value(), streams);
    if (ops) ops->layOut(d, bands.compute, build);
    if (transfers) transfers->layOut(d, bands.transfers, build);
    if (streams) kernels->layOut(d, bands.kernels, build);
  }
  if (ops) ops->fill(build);
  if (transfers) transfers->fill(build);
  if (kernels) kernels->fill(build);
  takeLanes(std::move(build));
  if (ops && bidirectional && !collapsed) computeIdleGaps();

  // Data flow between virtual stages: the one definition the simulator and executor use.
  StageNeighbours neighbours = stageNeighbours(p);
  m_prevStage = IdVector<int>(std::move(neighbours.previous));
  m_nextStage = IdVector<int>(std::move(neighbours.next));
  m_nextOnDevice.assign(m_prevOnDevice.size(), -1);
  for (int i = 0; i < m_prevOnDevice.size(); ++i) {
    if (m_prevOnDevice[i] >= 0) m_nextOnDevice[m_prevOnDevice[i]] = i;
  }
}

void TimelineData::takeLanes(tracks::LaneBuild build) {
  m_lanes = std::move(build.lanes);
  m_opLane = std::move(build.opLane);
  m_prevOnDevice = std::move(build.prevOnDevice);
  m_commLane = std::move(build.commLane);
  m_activityRefs = std::move(build.activityRefs);
  m_maxMicrobatch = build.maxMicrobatch;
  m_beginMs = std::isfinite(build.beginMs) ? build.beginMs : 0;
  m_endMs = std::isfinite(build.beginMs) ? build.endMs : 0;
  // Sorted lanes, and each item's position in its lane.
  m_opSlot.assign(m_opLane.size(), -1);
  m_commSlot.assign(m_commLane.size(), -1);
  m_activityLane.assign(static_cast<int>(m_activityRefs.size()), -1);
  m_activitySlot.assign(static_cast<int>(m_activityRefs.size()), -1);
  for (int l = 0; l < m_lanes.size(); ++l) {
    Lane& lane = m_lanes[l];
    finishLane(lane);
    for (std::size_t k = 0; k < lane.size(); ++k) {
      const ItemRef ref = lane.items[k];
      if (ref.kind == ItemRef::Kind::Activity) {
        m_activityLane[ref.index] = l;
        m_activitySlot[ref.index] = static_cast<std::int32_t>(k);
        continue;
      }
      auto& slots = ref.kind == ItemRef::Kind::Op ? m_opSlot : m_commSlot;
      slots[ref.index] = static_cast<std::int32_t>(k);
    }
  }
}

void TimelineData::computeIdleGaps() {
  // A device of a two-pipe schedule is idle only where neither pipe computes: its gaps are the
  // span less the union of both lanes' ops, shared by both lanes.
  for (int d = 0; d < m_devices; ++d) {
    std::vector<std::pair<double, double>> busy;
    double first = std::numeric_limits<double>::infinity();
    double last = -std::numeric_limits<double>::infinity();
    std::vector<Lane*> compute;
    for (int l = m_laneOfDevice[d]; l < m_lanes.size() && m_lanes[l].device == d; ++l) {
      Lane& lane = m_lanes[l];
      if (lane.comm || lane.activity) continue;
      compute.push_back(&lane);
      for (std::size_t k = 0; k < lane.size(); ++k) busy.emplace_back(lane.startMs[k], lane.endMs[k]);
      if (lane.size() > 0) {
        first = std::min(first, lane.firstStartMs);
        last = std::max(last, lane.lastEndMs);
      }
    }
    std::vector<std::pair<double, double>> gaps;
    double cursor = first;
    for (const auto& [a, b] : merged(std::move(busy))) {
      if (a > cursor) gaps.emplace_back(cursor, a);
      cursor = std::max(cursor, b);
    }
    for (Lane* lane : compute) {
      lane->idleGaps = gaps;
      // Every lane of the device shows the device's span (an empty pipe too).
      if (std::isfinite(first)) {
        lane->firstStartMs = first;
        lane->lastEndMs = last;
      }
    }
  }
}

int TimelineData::laneAt(double value) const {
  if (m_lanes.empty()) return -1;
  const int d = static_cast<int>(std::floor(value));
  if (d < 0 || d >= m_devices) return -1;
  for (int l = m_laneOfDevice[d]; l < m_lanes.size() && m_lanes[l].device == d; ++l) {
    if (value >= m_lanes[l].valueLo && value < m_lanes[l].valueHi) return l;
  }
  return -1;
}

ItemRef TimelineData::hitTest(double timeMs, double value, double slackMs) const {
  const int l = laneAt(value);
  if (l < 0) return {};
  const Lane& lane = m_lanes[l];
  // Binary search for the last interval starting at or before timeMs + slack, then walk back
  // while an interval could still reach timeMs (bounded by maxDurationMs).
  auto it = std::upper_bound(lane.startMs.begin(), lane.startMs.end(), timeMs + slackMs);
  ItemRef best;
  double bestDistance = std::numeric_limits<double>::infinity();
  const double stopMs = timeMs - slackMs - lane.maxDurationMs;
  while (it != lane.startMs.begin()) {
    --it;
    const auto k = static_cast<std::size_t>(it - lane.startMs.begin());
    if (lane.startMs[k] < stopMs) break;
    const double s = lane.startMs[k];
    const double e = lane.endMs[k];
    if (timeMs >= s - slackMs && timeMs <= e + slackMs) {
      const double distance = timeMs < s ? s - timeMs : (timeMs > e ? timeMs - e : 0.0);
      if (distance < bestDistance) {
        bestDistance = distance;
        best = lane.items[k];
        if (distance == 0) break;
      }
    }
  }
  return best;
}

std::pair<double, double> TimelineData::itemSpanMs(ItemRef ref) const {
  if (!ref.valid()) return {0.0, 0.0};
  switch (ref.kind) {
    case ItemRef::Kind::Op: {
      const Op& op = m_plan->op(ref.index);
      return {op.startMs, op.endMs};
    }
    case ItemRef::Kind::Comm: {
      const Comm& comm = m_plan->comms[static_cast<std::size_t>(ref.index)];
      return {comm.startMs, comm.endMs};
    }
    default: {
      const ActivityEvent& event = activityEvent(ref.index);
      return {event.startMs, event.endMs};
    }
  }
}

int TimelineData::laneOf(ItemRef ref) const {
  if (!ref.valid()) return -1;
  switch (ref.kind) {
    case ItemRef::Kind::Op:
      return m_opLane[ref.index];
    case ItemRef::Kind::Comm:
      return m_commLane[ref.index];
    default:
      return m_activityLane.contains(ref.index) ? m_activityLane[ref.index] : -1;
  }
}

const ActivityEvent& TimelineData::activityEvent(int index) const {
  const auto [stream, event] = m_activityRefs[static_cast<std::size_t>(index)];
  return m_activity->streams[static_cast<std::size_t>(stream)].events[static_cast<std::size_t>(event)];
}

void TimelineData::buildIndex() const {
  if (m_indexBuilt) return;
  m_indexBuilt = true;
  const Plan& p = *m_plan;
  const auto stages = static_cast<int>(p.virtualStages.size());
  m_opIndex.assign(stages * kOpKindCount, m_maxMicrobatch + 1, -1);
  for (int i = 0; i < m_opLane.size(); ++i) {
    const Op& op = p.op(i);
    if (!inRange(p.virtualStages, op.virtualStage) || op.microbatch < 0) continue;
    std::int32_t& first = m_opIndex(opIndexRow(op.virtualStage, op.kind), op.microbatch);
    if (first < 0) first = i;
  }
  // Dependencies beyond the stage data flow (frozen outputs consumed this iteration, the
  // vocabulary passes), exactly as the simulator derives them.
  std::vector<std::vector<std::int32_t>> laneIndex;
  const auto lanes = planLanes(p, &laneIndex);
  const auto extra = derivedDependencies(p, lanes);
  IdVector<std::int32_t> count(p.ops.size() + 1, 0);
  auto opOf = [&](const OpRef& r) -> std::int32_t {
    if (!inRange(laneIndex, r.device)) return -1;
    const auto& lane = laneIndex[static_cast<std::size_t>(r.device)];
    return inRange(lane, r.index) ? lane[static_cast<std::size_t>(r.index)] : -1;
  };
  for (const OpDependency& dep : extra) {
    const std::int32_t to = opOf(dep.to);
    if (to >= 0 && opOf(dep.from) >= 0) ++count[to + 1];
  }
  for (int i = 1; i < count.size(); ++i) count[i] += count[i - 1];
  m_extraPredBegin = count;
  m_extraPred.assign(count.back(), -1);
  for (const OpDependency& dep : extra) {
    const std::int32_t to = opOf(dep.to);
    const std::int32_t from = opOf(dep.from);
    if (to >= 0 && from >= 0) m_extraPred[count[to]++] = from;
  }
}

int TimelineData::findOp(int virtualStage, OpKind kind, int microbatch) const {
  buildIndex();
  if (!inRange(m_plan->virtualStages, virtualStage)) return -1;
  if (microbatch < 0 || microbatch > m_maxMicrobatch) return -1;
  return m_opIndex(opIndexRow(virtualStage, kind), microbatch);
}

std::vector<int> TimelineData::dataPredecessors(int opIndex) const {
  std::vector<int> out;
  if (!m_plan || !inRange(m_plan->ops, opIndex)) return out;
  const Op& op = m_plan->op(opIndex);
  if (!m_prevStage.contains(op.virtualStage)) return out;
  const int vs = op.virtualStage;
  auto add = [&](int stage, OpKind kind) {
    const int found = findOp(stage, kind, op.microbatch);
    if (found >= 0 && found != opIndex) out.push_back(found);
  };
  switch (op.kind) {
    case OpKind::F:
      if (m_prevStage[vs] >= 0) add(m_prevStage[vs], OpKind::F);
      break;
    case OpKind::N:
      if (m_prevStage[vs] >= 0) add(m_prevStage[vs], OpKind::N);
      break;
    case OpKind::B:
    case OpKind::BW:
      if (m_nextStage[vs] >= 0) {
        add(m_nextStage[vs], OpKind::B);
        add(m_nextStage[vs], OpKind::BW);
      } else {
        add(op.virtualStage, OpKind::F);
      }
      break;
    case OpKind::W:
      add(op.virtualStage, OpKind::B);
      break;
    default:
      break;
  }
  if (opIndex + 1 < m_extraPredBegin.size()) {
    for (std::int32_t k = m_extraPredBegin[opIndex]; k < m_extraPredBegin[opIndex + 1]; ++k) {
      const int from = m_extraPred[k];
      if (from != opIndex && std::find(out.begin(), out.end(), from) == out.end()) out.push_back(from);
    }
  }
  return out;
}

int TimelineData::devicePredecessor(int op) const { return m_prevOnDevice.contains(op) ? m_prevOnDevice[op] : -1; }

int TimelineData::deviceSuccessor(int op) const { return m_nextOnDevice.contains(op) ? m_nextOnDevice[op] : -1; }

void TimelineData::buildSuccessors() const {
  if (m_successorsBuilt || !m_plan) return;
  m_successorsBuilt = true;
  const int n = m_opLane.size();
  IdVector<std::vector<int>> preds(n);
  IdVector<std::int32_t> count(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    preds[i] = dataPredecessors(i);
    for (int p : preds[i]) ++count[p + 1];
  }
  for (int i = 1; i < count.size(); ++i) count[i] += count[i - 1];
  m_succBegin = count;
  m_succ.assign(count.back(), -1);
  for (int i = 0; i < n; ++i) {
    for (int p : preds[i]) m_succ[count[p]++] = i;
  }
}

std::vector<int> TimelineData::dataSuccessors(int op) const {
  std::vector<int> out;
  if (!m_plan || !inRange(m_plan->ops, op)) return out;
  buildSuccessors();
  for (std::int32_t k = m_succBegin[op]; k < m_succBegin[op + 1]; ++k) out.push_back(m_succ[k]);
  return out;
}

void TimelineData::buildSlack() const {
  if (!m_slackMs.empty() || !m_plan || m_plan->ops.empty()) return;
  buildSuccessors();
  const Plan& p = *m_plan;
  // Latest finish without delaying the last op's end (a transfer after it that feeds no op of
  // this iteration, as a frozen hand-off to the next one, gives nothing slack): a backward pass
  // over the ops in decreasing start order (every dependency ends before its consumer starts).
  double endMs = -std::numeric_limits<double>::infinity();
  for (const Op& op : p.ops) endMs = std::max(endMs, op.endMs);
  std::vector<int> order(p.ops.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return p.op(a).startMs > p.op(b).startMs; });
  IdVector<double> latestFinish(p.ops.size(), endMs);
  auto latestStart = [&](int op) { return latestFinish[op] - p.op(op).durationMs(); };
  for (int i : order) {
    double lf = endMs;
    const int next = m_nextOnDevice[i];
    if (next >= 0) lf = std::min(lf, latestStart(next));
    for (std::int32_t k = m_succBegin[i]; k < m_succBegin[i + 1]; ++k) {
      const int s = m_succ[k];
      lf = std::min(lf, latestStart(s) - transferMs(i, s));
    }
    latestFinish[i] = lf;
  }
  m_slackMs.resize(p.ops.size());
  for (int i = 0; i < m_slackMs.size(); ++i) m_slackMs[i] = std::max(0.0, latestFinish[i] - p.op(i).endMs);
}

double TimelineData::transferMs(int from, int to) const {
  const Plan& p = *m_plan;
  const Op& a = p.op(from);
  const Op& b = p.op(to);
  if (a.device == b.device) return 0;
  if (!m_transfersBuilt) {
    // Transfer time of each data hand-off, by (producing stage, kind, microbatch, receiver).
    m_transfersBuilt = true;
    for (const Comm& c : p.comms) {
      auto& t = m_transferMs[{c.virtualStage, static_cast<int>(c.kind), c.microbatch, c.toDevice}];
      t = std::max(t, c.endMs - c.startMs);
    }
  }
  const auto it = m_transferMs.find({a.virtualStage, static_cast<int>(a.kind), a.microbatch, b.device});
  return it == m_transferMs.end() ? 0.0 : it->second;
}

double TimelineData::slackMs(int op) const {
  if (!m_plan || !inRange(m_plan->ops, op)) return 0;
  buildSlack();
  return m_slackMs[op];
}

CollectiveShare TimelineData::collectiveShare(int opIndex) const {
  CollectiveShare share;
  if (!m_plan || !inRange(m_plan->ops, opIndex)) return share;
  const Plan& p = *m_plan;
  if (!m_stageCostsBuilt) {
    m_stageCostsBuilt = true;
    bool costed = !p.virtualStages.empty() && !p.model.components.empty();
    for (std::size_t s = 0; costed && s < p.virtualStages.size(); ++s) {
      const VirtualStage& vs = p.virtualStages[s];
      costed = validStage(p, static_cast<int>(s)) && vs.device >= 0 && vs.device < std::max(1, p.config.devices) &&
               vs.firstLayer >= 0 && vs.lastLayer >= vs.firstLayer &&
               inRange(p.model.component(vs.component).layers, vs.lastLayer);
    }
    if (costed) {
      for (const StageCosts& c : stageCosts(p)) {
        StageCostsLite lite;
        lite.passMs[0] = c.forwardMs;
        lite.passMs[1] = c.backwardInputMs;
        lite.passMs[2] = c.backwardWeightMs;
        lite.collectiveMs[0] = c.forwardCommMs;
        lite.collectiveMs[1] = c.backwardInputCommMs;
        lite.collectiveMs[2] = c.backwardWeightCommMs;
        lite.hiddenMs = {c.forwardHiddenCommMs, c.backwardInputHiddenCommMs, c.backwardWeightHiddenCommMs};
        m_stageCosts.push_back(lite);
      }
    }
  }
  const Op& op = p.op(opIndex);
  if (!m_stageCosts.contains(op.virtualStage)) return share;
  const StageCostsLite& c = m_stageCosts[op.virtualStage];
  auto add = [&](std::size_t pass) {
    share.passMs += c.passMs[pass];
    share.collectiveMs += c.collectiveMs[pass];
    share.hiddenMs += c.hiddenMs[pass];
  };
  switch (op.kind) {
    case OpKind::F:
    case OpKind::N:
      add(0);
      break;
    case OpKind::B:
      add(1);
      break;
    case OpKind::W:
      add(2);
      break;
    case OpKind::BW:
      add(1);
      add(2);
      break;
    default:
      break;
  }
  return share;
}

bool TimelineData::frozenWorkIsNextIteration() const {
  if (!m_plan || m_plan->config.fill == "none") return false;
  for (const Op& op : m_plan->ops) {
    if (op.kind == OpKind::N) return true;
  }
  return false;
}

std::vector<int> TimelineData::findOps(const OpQuery& query) const {
  std::vector<int> out;
  if (!m_plan) return out;
  for (std::size_t i = 0; i < m_plan->ops.size(); ++i) {
    if (query.matches(*m_plan, m_plan->ops[i])) out.push_back(static_cast<int>(i));
  }
  return out;
}

RangeMeasurement TimelineData::measure(double fromMs, double toMs) const {
  RangeMeasurement m;
  if (toMs < fromMs) std::swap(fromMs, toMs);
  m.fromMs = fromMs;
  m.toMs = toMs;
  m.devices.assign(m_devices, {});
  for (const Lane& lane : m_lanes) {
    if (lane.comm || lane.activity) continue;
    DeviceRangeUse& use = m.devices[lane.device];
    for (std::size_t k = lane.firstVisible(fromMs); k < lane.size() && lane.startMs[k] < toMs; ++k) {
      const double a = std::max(fromMs, lane.startMs[k]);
      const double b = std::min(toMs, lane.endMs[k]);
      if (b > a) use.busyMs += b - a;
    }
  }
  // A run without op ranges: the GPU is busy while any of its streams is.
  if (m_activity && (!m_plan || m_plan->ops.empty())) {
    for (int d = 0; d < m.devices.size(); ++d) m.devices[d].busyMs = m_activity->busyMs(d, fromMs, toMs);
  }
  for (DeviceRangeUse& use : m.devices) {
    use.busyMs = std::min(use.busyMs, toMs - fromMs);  // two pipelines of one device never overlap
    use.idleMs = std::max(0.0, (toMs - fromMs) - use.busyMs);
  }
  return m;
}

std::string TimelineData::laneName(int lane) const {
  if (!m_lanes.contains(lane)) return {};
  const Lane& l = m_lanes[lane];
  std::string name = "GPU " + std::to_string(l.device);
  if (l.comm) return name + " transfers";
  if (l.activity) return m_collapsed ? name + " · all streams" : name + " · stream " + std::to_string(l.stream);
  const int first = m_laneOfDevice[l.device];
  const bool twoPipelines = first + 1 < m_lanes.size() && m_lanes[first + 1].device == l.device &&
                            !m_lanes[first + 1].comm && !m_lanes[first + 1].activity;
  if (twoPipelines) name += " · pipeline " + std::to_string(l.pipeline);
  return name;
}

double RangeMeasurement::idleMs() const {
  double total = 0;
  for (const DeviceRangeUse& d : devices) total += d.idleMs;
  return total;
}

// --- queries ------------------------------------------------------------------------------

bool OpQuery::matches(const Plan& plan, const Op& op) const {
  auto inAny = [](const std::vector<Range>& ranges, int v) {
    if (ranges.empty()) return true;
    for (const Range& r : ranges) {
      if (r.contains(v)) return true;
    }
    return false;
  };
  if (!kinds.empty() && std::find(kinds.begin(), kinds.end(), op.kind) == kinds.end()) return false;
  if (!inAny(microbatches, op.microbatch) || !inAny(virtualStages, op.virtualStage) || !inAny(devices, op.device))
    return false;
  if (!chunks.empty()) {
    if (!inRange(plan.virtualStages, op.virtualStage)) return false;
    if (!inAny(chunks, plan.stage(op.virtualStage).chunk)) return false;
  }
  return true;
}

Expected<OpQuery> parseOpQuery(std::string_view text) {
  OpQuery q;
  std::vector<std::string> tokens;
  std::string cur;
  for (char c : text) {
    if (c == ' ' || c == ',' || c == '\t' || c == '=' || c == ':') {
      if (!cur.empty()) tokens.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (!cur.empty()) tokens.push_back(std::move(cur));
  auto parseRange = [](const std::string& t) -> std::optional<OpQuery::Range> {
    const auto dash = t.find('-');
    auto number = [](const std::string& s) -> std::optional<int> {
      if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
      return std::stoi(s);
    };
    if (dash == std::string::npos) {
      const auto v = number(t);
      if (!v) return std::nullopt;
      return OpQuery::Range{*v, *v};
    }
    const auto lo = number(t.substr(0, dash));
    const auto hi = number(t.substr(dash + 1));
    if (!lo || !hi || *hi < *lo) return std::nullopt;
    return OpQuery::Range{*lo, *hi};
  };
  using Key = std::pair<const char*, std::vector<OpQuery::Range> OpQuery::*>;
  const std::array<Key, 8> keys{{{"mb", &OpQuery::microbatches},
                                 {"microbatch", &OpQuery::microbatches},
                                 {"vs", &OpQuery::virtualStages},
                                 {"stage", &OpQuery::virtualStages},
                                 {"gpu", &OpQuery::devices},
                                 {"device", &OpQuery::devices},
                                 {"dev", &OpQuery::devices},
                                 {"chunk", &OpQuery::chunks}}};
  auto refuse = [](std::initializer_list<std::string_view> parts) {
    std::string message;
    for (std::string_view part : parts) message += part;
    message += " (expected op kinds F, B, W, BW, N, S, T, OPT, or mb N, vs N, gpu N, chunk N; N may be a range 4-7)";
    return Error{std::move(message)};
  };
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    std::string upper = t;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (auto kind = opKindFromName(upper)) {
      q.kinds.push_back(*kind);
      continue;
    }
    bool matched = false;
    for (const auto& [key, member] : keys) {
      const std::string k = key;
      if (t.rfind(k, 0) != 0) continue;
      std::string value = t.substr(k.size());
      if (value.empty()) {
        if (i + 1 >= tokens.size()) return refuse({"'", t, "' needs a number"});
        value = tokens[++i];
      }
      const auto range = parseRange(value);
      if (!range) {
        if (t.size() > k.size()) continue;  // e.g. "device" read as "dev" + "ice": try the next key
        return refuse({"'", value, "' after '", k, "' is not a number or range"});
      }
      (q.*member).push_back(*range);
      matched = true;
      break;
    }
    if (!matched) return refuse({"unknown search term '", t, "'"});
  }
  return q;
}

WaitReason TimelineData::waitReason(int opIndex) const {
  WaitReason why;
  if (!m_plan || !inRange(m_plan->ops, opIndex)) return why;
  const Op& op = m_plan->op(opIndex);
  double latest = -std::numeric_limits<double>::infinity();
  const int prev = devicePredecessor(opIndex);
  if (prev >= 0) {
    latest = m_plan->op(prev).endMs;
    why.waitedFor = {ItemRef::Kind::Op, prev};
    why.sameDevice = true;
  }
  for (int dep : dataPredecessors(opIndex)) {
    const Op& d = m_plan->op(dep);
    // Between a dependency on another device and this op lies its transfer: the data is ready
    // when the transfer ends (the same lag the slack computation uses).
    const double ready = d.endMs + transferMs(dep, opIndex);
    const bool later = ready > latest + 1e-9 || (d.device != op.device && ready >= latest - 1e-9);
    if (later) {
      latest = ready;
      why.waitedFor = {ItemRef::Kind::Op, dep};
      why.sameDevice = d.device == op.device;
      why.transferMs = d.device != op.device ? std::max(0.0, op.startMs - d.endMs) : 0.0;
    }
  }
  return why;
}

std::vector<int> TimelineData::dependencyChain(int opIndex) const {
  std::vector<int> out;
  if (!m_plan || !inRange(m_plan->ops, opIndex)) return out;
  // Upstream: every data predecessor, transitively.
  std::vector<int> stack{opIndex};
  IdVector<char> seen(m_plan->ops.size(), 0);
  seen[opIndex] = 1;
  while (!stack.empty()) {
    const int cur = stack.back();
    stack.pop_back();
    out.push_back(cur);
    for (int dep : dataPredecessors(cur)) {
      if (!seen[dep]) {
        seen[dep] = 1;
        stack.push_back(dep);
      }
    }
  }
  // Downstream: the ops of the same microbatch that list something in the chain as a
  // predecessor (one pass per stage depth is enough: the relation is acyclic and follows time).
  const Op& self = m_plan->op(opIndex);
  std::vector<int> sameMicrobatch;
  for (std::size_t i = 0; i < m_plan->ops.size(); ++i) {
    if (m_plan->ops[i].microbatch == self.microbatch && m_plan->ops[i].startMs >= self.startMs)
      sameMicrobatch.push_back(static_cast<int>(i));
  }
  std::sort(sameMicrobatch.begin(), sameMicrobatch.end(),
            [&](int a, int b) { return m_plan->op(a).startMs < m_plan->op(b).startMs; });
  IdVector<char> downstream(m_plan->ops.size(), 0);
  downstream[opIndex] = 1;
  for (int cand : sameMicrobatch) {
    if (downstream[cand]) continue;
    for (int dep : dataPredecessors(cand)) {
      if (downstream[dep]) {
        downstream[cand] = 1;
        if (!seen[cand]) out.push_back(cand);
        break;
      }
    }
  }
  return out;
}

std::vector<int> TimelineData::criticalPath() const {
  std::vector<int> path;
  if (!m_plan || m_plan->ops.empty()) return path;
  int cur = 0;
  for (std::size_t i = 1; i < m_plan->ops.size(); ++i) {
    if (m_plan->ops[i].endMs > m_plan->op(cur).endMs) cur = static_cast<int>(i);
  }
  IdVector<char> seen(m_plan->ops.size(), 0);
  while (cur >= 0 && !seen[cur]) {
    seen[cur] = 1;
    path.push_back(cur);
    cur = waitReason(cur).waitedFor.index;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

std::string TimelineData::describe(ItemRef ref) const {
  if (!m_plan || !ref.valid()) return {};
  const Plan& p = *m_plan;
  std::array<char, 256> buf{};
  std::string out;
  if (ref.kind == ItemRef::Kind::Activity) {
    const ActivityEvent& e = activityEvent(ref.index);
    const ActivityStream& stream =
        m_activity->streams[static_cast<std::size_t>(m_activityRefs[static_cast<std::size_t>(ref.index)].first)];
    out += std::string(activityKindName(e.kind)) + " · ";
    out += inRange(m_activity->names, e.name) ? m_activity->names[static_cast<std::size_t>(e.name)] : "(unnamed)";
    out += "\nGPU " + std::to_string(stream.device) + " · stream " + std::to_string(stream.stream) + "\n";
    out +=
        "start " + formatMs(e.startMs) + " · end " + formatMs(e.endMs) + " · duration " + formatMs(e.endMs - e.startMs);
    return out;
  }
  if (ref.kind == ItemRef::Kind::Comm) {
    const Comm& c = p.comms[static_cast<std::size_t>(ref.index)];
    std::snprintf(buf.data(), buf.size(), "%s transfer · microbatch %d\ndevice %d → device %d · virtual stage %d\n",
                  std::string(commPayloadName(c.kind)).c_str(), c.microbatch, c.fromDevice, c.toDevice, c.virtualStage);
    out += buf.data();
    out += "start " + formatMs(c.startMs) + " · end " + formatMs(c.endMs) + " · duration " +
           formatMs(c.endMs - c.startMs) + "\n" + formatBytes(static_cast<double>(c.bytes));
    return out;
  }
  const Op& op = p.op(ref.index);
  std::snprintf(buf.data(), buf.size(), "%s · microbatch %d", std::string(opKindName(op.kind)).c_str(), op.microbatch);
  out += buf.data();
  if (op.samples > 0) out += " (" + std::to_string(op.samples) + " samples)";
  out += "\n";
  if (inRange(p.virtualStages, op.virtualStage)) {
    const VirtualStage& vs = p.stage(op.virtualStage);
    std::snprintf(buf.data(), buf.size(), "virtual stage %d (device %d, chunk %d", vs.id, vs.device, vs.chunk);
    out += buf.data();
    if (vs.pipeline != 0) out += ", pipeline " + std::to_string(vs.pipeline);
    out += ")\n";
    std::string component = "component " + std::to_string(vs.component);
    if (inRange(p.model.components, vs.component)) component = p.model.component(vs.component).name;
    std::snprintf(buf.data(), buf.size(), "layers %s[%d..%d]\n", component.c_str(), vs.firstLayer, vs.lastLayer);
    out += buf.data();
  } else {
    out += "device " + std::to_string(op.device) + "\n";
  }
  out += "start " + formatMs(op.startMs) + " · end " + formatMs(op.endMs) + " · duration " + formatMs(op.durationMs());
  const CollectiveShare share = collectiveShare(ref.index);
  if (share.collectiveMs > 0 || share.hiddenMs > 0) {
    std::snprintf(buf.data(), buf.size(),
                  "\ncollectives (TP/CP/EP/ZeRO): %s exposed, %.0f %% of the op (%s); %s hidden",
                  formatMs(share.collectiveMs).c_str(), 100.0 * share.fraction(), formatMs(share.passMs).c_str(),
                  formatMs(share.hiddenMs).c_str());
    out += buf.data();
  }
  const WaitReason why = waitReason(ref.index);
  if (why.waitedFor.valid()) {
    const Op& dep = p.op(why.waitedFor.index);
    const double gap = op.startMs - dep.endMs;
    std::snprintf(buf.data(), buf.size(), "\nwaiting for: %s mb %d on device %d%s",
                  std::string(opKindName(dep.kind)).c_str(), dep.microbatch, dep.device,
                  why.sameDevice ? " (device busy)" : "");
    out += buf.data();
    if (gap > 1e-9) out += why.sameDevice ? ", then idle " + formatMs(gap) : ", + " + formatMs(gap) + " transfer/wait";
  } else {
    out += "\nwaiting for: nothing (first op)";
  }
  return out;
}

std::size_t TimelineData::memoryBytes() const {
  std::size_t bytes = sizeof(*this);
  for (const Lane& lane : m_lanes) {
    bytes += sizeof(Lane) + lane.startMs.capacity() * sizeof(double) * 2 + lane.shade.capacity() +
             lane.microbatch.capacity() * sizeof(std::int32_t) + lane.items.capacity() * sizeof(ItemRef) +
             lane.blocks.capacity() * sizeof(LaneBlock);
  }
  bytes += (m_opLane.values().capacity() + m_opSlot.values().capacity() + m_commLane.values().capacity() +
            m_commSlot.values().capacity() + m_prevOnDevice.values().capacity() + m_opIndex.values().capacity()) *
           sizeof(std::int32_t);
  return bytes;
}

}  // namespace pipestudio::viz
