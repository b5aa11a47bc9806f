#include "pipestudio/viz/TimelineData.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "pipestudio/common/Units.hpp"

namespace pipestudio::viz {

namespace {

ColourSlot slotOfOp(OpKind kind) { return static_cast<ColourSlot>(static_cast<int>(kind)); }

std::uint8_t shadeOf(ColourSlot slot, int microbatch) {
  return static_cast<std::uint8_t>(static_cast<int>(slot) * 2 + (microbatch & 1));
}

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

}  // namespace

std::size_t Lane::firstVisible(double fromMs) const {
  const auto it = std::lower_bound(startMs.begin(), startMs.end(), fromMs - maxDurationMs);
  return static_cast<std::size_t>(it - startMs.begin());
}

TimelineData::TimelineData(std::shared_ptr<const Plan> plan) : m_plan(std::move(plan)) {
  if (!m_plan) return;
  const Plan& p = *m_plan;
  int devices = std::max(0, p.config.devices);
  for (const Op& op : p.ops) devices = std::max(devices, op.device + 1);
  for (const Comm& c : p.comms) devices = std::max({devices, c.fromDevice + 1, c.toDevice + 1});
  m_devices = devices;

  bool bidirectional = false;
  for (const VirtualStage& vs : p.virtualStages) bidirectional = bidirectional || vs.pipeline != 0;
  const bool hasComms = !p.comms.empty();

  // Vertical layout inside [d, d + 1): compute lane(s) on top, the transfer strip under them.
  const double computeLo = 0.06;
  const double computeHi = hasComms ? 0.74 : 0.94;
  const int computeLanes = bidirectional ? 2 : 1;
  m_laneOfDevice.assign(static_cast<std::size_t>(devices), 0);
  for (int d = 0; d < devices; ++d) {
    m_laneOfDevice[static_cast<std::size_t>(d)] = static_cast<int>(m_lanes.size());
    const double h = (computeHi - computeLo) / computeLanes;
    for (int k = 0; k < computeLanes; ++k) {
      Lane lane;
      lane.device = d;
      lane.pipeline = k;
      lane.valueLo = d + computeLo + k * h + (k > 0 ? 0.02 : 0.0);
      lane.valueHi = d + computeLo + (k + 1) * h;
      m_lanes.push_back(std::move(lane));
    }
    if (hasComms) {
      Lane lane;
      lane.device = d;
      lane.comm = true;
      lane.valueLo = d + 0.78;
      lane.valueHi = d + 0.94;
      m_lanes.push_back(std::move(lane));
    }
  }
  const int lanesPerDevice = computeLanes + (hasComms ? 1 : 0);

  const auto stageCount = static_cast<int>(p.virtualStages.size());
  m_opLane.assign(p.ops.size(), -1);
  m_opSlot.assign(p.ops.size(), -1);
  m_prevOnDevice.assign(p.ops.size(), -1);
  std::vector<int> lastOnDevice(static_cast<std::size_t>(devices), -1);
  m_beginMs = std::numeric_limits<double>::infinity();
  m_endMs = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    if (op.device < 0) continue;
    int pipeline = 0;
    if (op.virtualStage >= 0 && op.virtualStage < stageCount)
      pipeline = p.virtualStages[static_cast<std::size_t>(op.virtualStage)].pipeline;
    pipeline = std::clamp(pipeline, 0, computeLanes - 1);
    const int laneIndex = op.device * lanesPerDevice + pipeline;
    Lane& lane = m_lanes[static_cast<std::size_t>(laneIndex)];
    lane.startMs.push_back(op.startMs);
    lane.endMs.push_back(op.endMs);
    lane.shade.push_back(shadeOf(slotOfOp(op.kind), op.microbatch));
    lane.microbatch.push_back(op.microbatch);
    lane.items.push_back({ItemRef::Kind::Op, static_cast<std::int32_t>(i)});
    m_opLane[i] = laneIndex;
    m_prevOnDevice[i] = lastOnDevice[static_cast<std::size_t>(op.device)];
    lastOnDevice[static_cast<std::size_t>(op.device)] = static_cast<int>(i);
    m_beginMs = std::min(m_beginMs, op.startMs);
    m_endMs = std::max(m_endMs, op.endMs);
    m_maxMicrobatch = std::max(m_maxMicrobatch, op.microbatch);
  }
  m_commLane.assign(p.comms.size(), -1);
  m_commSlot.assign(p.comms.size(), -1);
  if (hasComms) {
    for (std::size_t i = 0; i < p.comms.size(); ++i) {
      const Comm& c = p.comms[i];
      if (c.fromDevice < 0) continue;
      const int laneIndex = c.fromDevice * lanesPerDevice + computeLanes;
      Lane& lane = m_lanes[static_cast<std::size_t>(laneIndex)];
      const ColourSlot slot = c.kind == OpKind::F ? ColourSlot::CommForward : ColourSlot::CommBackward;
      lane.startMs.push_back(c.startMs);
      lane.endMs.push_back(c.endMs);
      lane.shade.push_back(shadeOf(slot, c.microbatch));
      lane.microbatch.push_back(c.microbatch);
      lane.items.push_back({ItemRef::Kind::Comm, static_cast<std::int32_t>(i)});
      m_commLane[i] = laneIndex;
      m_beginMs = std::min(m_beginMs, c.startMs);
      m_endMs = std::max(m_endMs, c.endMs);
      m_maxMicrobatch = std::max(m_maxMicrobatch, c.microbatch);
    }
  }
  if (!std::isfinite(m_beginMs)) m_beginMs = m_endMs = 0;

  for (std::size_t l = 0; l < m_lanes.size(); ++l) {
    Lane& lane = m_lanes[l];
    finishLane(lane);
    for (std::size_t k = 0; k < lane.size(); ++k) {
      const ItemRef ref = lane.items[k];
      if (ref.kind == ItemRef::Kind::Op) m_opSlot[static_cast<std::size_t>(ref.index)] = static_cast<std::int32_t>(k);
      else m_commSlot[static_cast<std::size_t>(ref.index)] = static_cast<std::int32_t>(k);
    }
  }

  // Data flow between virtual stages: the previous/next stage of the same component and pipeline
  // in id order (DESIGN.md §2: within a pipeline data flows through its stages in id order).
  m_prevStage.assign(static_cast<std::size_t>(stageCount), -1);
  m_nextStage.assign(static_cast<std::size_t>(stageCount), -1);
  std::vector<int> byId(static_cast<std::size_t>(stageCount));
  std::iota(byId.begin(), byId.end(), 0);
  std::stable_sort(byId.begin(), byId.end(), [&](int a, int b) {
    return p.virtualStages[static_cast<std::size_t>(a)].id < p.virtualStages[static_cast<std::size_t>(b)].id;
  });
  for (std::size_t i = 0; i < byId.size(); ++i) {
    const VirtualStage& a = p.virtualStages[static_cast<std::size_t>(byId[i])];
    for (std::size_t j = i + 1; j < byId.size(); ++j) {
      const VirtualStage& b = p.virtualStages[static_cast<std::size_t>(byId[j])];
      if (b.pipeline == a.pipeline && b.component == a.component) {
        m_nextStage[static_cast<std::size_t>(byId[i])] = byId[j];
        m_prevStage[static_cast<std::size_t>(byId[j])] = byId[i];
        break;
      }
    }
  }
}

int TimelineData::laneAt(double value) const {
  if (m_lanes.empty()) return -1;
  const int d = static_cast<int>(std::floor(value));
  if (d < 0 || d >= m_devices) return -1;
  const auto begin = static_cast<std::size_t>(m_laneOfDevice[static_cast<std::size_t>(d)]);
  for (std::size_t l = begin; l < m_lanes.size() && m_lanes[l].device == d; ++l) {
    if (value >= m_lanes[l].valueLo && value < m_lanes[l].valueHi) return static_cast<int>(l);
  }
  return -1;
}

ItemRef TimelineData::hitTest(double timeMs, double value, double slackMs) const {
  const int l = laneAt(value);
  if (l < 0) return {};
  const Lane& lane = m_lanes[static_cast<std::size_t>(l)];
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

double TimelineData::itemStartMs(ItemRef ref) const {
  if (!ref.valid()) return 0;
  return ref.kind == ItemRef::Kind::Op ? m_plan->ops[static_cast<std::size_t>(ref.index)].startMs
                                       : m_plan->comms[static_cast<std::size_t>(ref.index)].startMs;
}

double TimelineData::itemEndMs(ItemRef ref) const {
  if (!ref.valid()) return 0;
  return ref.kind == ItemRef::Kind::Op ? m_plan->ops[static_cast<std::size_t>(ref.index)].endMs
                                       : m_plan->comms[static_cast<std::size_t>(ref.index)].endMs;
}

int TimelineData::laneOf(ItemRef ref) const {
  if (!ref.valid()) return -1;
  return ref.kind == ItemRef::Kind::Op ? m_opLane[static_cast<std::size_t>(ref.index)]
                                       : m_commLane[static_cast<std::size_t>(ref.index)];
}

void TimelineData::buildIndex() const {
  if (m_indexBuilt) return;
  m_indexBuilt = true;
  const Plan& p = *m_plan;
  const std::size_t stages = p.virtualStages.size();
  const auto mbs = static_cast<std::size_t>(m_maxMicrobatch + 1);
  m_opIndex.assign(stages * kOpKindCount * mbs, -1);
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    if (op.virtualStage < 0 || static_cast<std::size_t>(op.virtualStage) >= stages || op.microbatch < 0) continue;
    const std::size_t key =
        (static_cast<std::size_t>(op.virtualStage) * kOpKindCount + static_cast<std::size_t>(op.kind)) * mbs +
        static_cast<std::size_t>(op.microbatch);
    if (m_opIndex[key] < 0) m_opIndex[key] = static_cast<std::int32_t>(i);
  }
}

int TimelineData::findOp(int virtualStage, OpKind kind, int microbatch) const {
  buildIndex();
  const std::size_t stages = m_plan->virtualStages.size();
  if (virtualStage < 0 || static_cast<std::size_t>(virtualStage) >= stages) return -1;
  if (microbatch < 0 || microbatch > m_maxMicrobatch) return -1;
  const auto mbs = static_cast<std::size_t>(m_maxMicrobatch + 1);
  return m_opIndex[(static_cast<std::size_t>(virtualStage) * kOpKindCount + static_cast<std::size_t>(kind)) * mbs +
                   static_cast<std::size_t>(microbatch)];
}

std::vector<int> TimelineData::dataPredecessors(int opIndex) const {
  std::vector<int> out;
  if (!m_plan || opIndex < 0 || static_cast<std::size_t>(opIndex) >= m_plan->ops.size()) return out;
  const Op& op = m_plan->ops[static_cast<std::size_t>(opIndex)];
  if (op.virtualStage < 0 || static_cast<std::size_t>(op.virtualStage) >= m_prevStage.size()) return out;
  const auto vs = static_cast<std::size_t>(op.virtualStage);
  auto add = [&](int stage, OpKind kind) {
    const int found = findOp(stage, kind, op.microbatch);
    if (found >= 0 && found != opIndex) out.push_back(found);
  };
  switch (op.kind) {
    case OpKind::F:
      if (m_prevStage[vs] >= 0) add(m_prevStage[vs], OpKind::F);
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
  return out;
}

int TimelineData::devicePredecessor(int op) const {
  if (op < 0 || static_cast<std::size_t>(op) >= m_prevOnDevice.size()) return -1;
  return m_prevOnDevice[static_cast<std::size_t>(op)];
}

WaitReason TimelineData::waitReason(int opIndex) const {
  WaitReason why;
  if (!m_plan || opIndex < 0 || static_cast<std::size_t>(opIndex) >= m_plan->ops.size()) return why;
  const Op& op = m_plan->ops[static_cast<std::size_t>(opIndex)];
  double latest = -std::numeric_limits<double>::infinity();
  const int prev = devicePredecessor(opIndex);
  if (prev >= 0) {
    latest = m_plan->ops[static_cast<std::size_t>(prev)].endMs;
    why.waitedFor = {ItemRef::Kind::Op, prev};
    why.sameDevice = true;
  }
  for (int dep : dataPredecessors(opIndex)) {
    const Op& d = m_plan->ops[static_cast<std::size_t>(dep)];
    // Between a dependency on another device and this op lies its transfer: the ready time is
    // the dependency's end plus the gap up to this op's start when nothing else explains it.
    const double ready = d.endMs;
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
  if (!m_plan || opIndex < 0 || static_cast<std::size_t>(opIndex) >= m_plan->ops.size()) return out;
  // Upstream: every data predecessor, transitively.
  std::vector<int> stack{opIndex};
  std::vector<char> seen(m_plan->ops.size(), 0);
  seen[static_cast<std::size_t>(opIndex)] = 1;
  while (!stack.empty()) {
    const int cur = stack.back();
    stack.pop_back();
    out.push_back(cur);
    for (int dep : dataPredecessors(cur)) {
      if (!seen[static_cast<std::size_t>(dep)]) {
        seen[static_cast<std::size_t>(dep)] = 1;
        stack.push_back(dep);
      }
    }
  }
  // Downstream: the ops of the same microbatch that list something in the chain as a
  // predecessor (one pass per stage depth is enough: the relation is acyclic and follows time).
  const Op& self = m_plan->ops[static_cast<std::size_t>(opIndex)];
  std::vector<int> sameMicrobatch;
  for (std::size_t i = 0; i < m_plan->ops.size(); ++i) {
    if (m_plan->ops[i].microbatch == self.microbatch && m_plan->ops[i].startMs >= self.startMs)
      sameMicrobatch.push_back(static_cast<int>(i));
  }
  std::sort(sameMicrobatch.begin(), sameMicrobatch.end(), [&](int a, int b) {
    return m_plan->ops[static_cast<std::size_t>(a)].startMs < m_plan->ops[static_cast<std::size_t>(b)].startMs;
  });
  std::vector<char> downstream(m_plan->ops.size(), 0);
  downstream[static_cast<std::size_t>(opIndex)] = 1;
  for (int cand : sameMicrobatch) {
    if (downstream[static_cast<std::size_t>(cand)]) continue;
    for (int dep : dataPredecessors(cand)) {
      if (downstream[static_cast<std::size_t>(dep)]) {
        downstream[static_cast<std::size_t>(cand)] = 1;
        if (!seen[static_cast<std::size_t>(cand)]) out.push_back(cand);
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
    if (m_plan->ops[i].endMs > m_plan->ops[static_cast<std::size_t>(cur)].endMs) cur = static_cast<int>(i);
  }
  std::vector<char> seen(m_plan->ops.size(), 0);
  while (cur >= 0 && !seen[static_cast<std::size_t>(cur)]) {
    seen[static_cast<std::size_t>(cur)] = 1;
    path.push_back(cur);
    cur = waitReason(cur).waitedFor.index;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

std::string TimelineData::describe(ItemRef ref) const {
  if (!m_plan || !ref.valid()) return {};
  const Plan& p = *m_plan;
  char buf[256];
  std::string out;
  if (ref.kind == ItemRef::Kind::Comm) {
    const Comm& c = p.comms[static_cast<std::size_t>(ref.index)];
    std::snprintf(buf, sizeof buf, "%s transfer · microbatch %d\ndevice %d → device %d · virtual stage %d\n",
                  std::string(commPayloadName(c.kind)).c_str(), c.microbatch, c.fromDevice, c.toDevice,
                  c.virtualStage);
    out += buf;
    out += "start " + formatMs(c.startMs) + " · end " + formatMs(c.endMs) + " · duration " +
           formatMs(c.endMs - c.startMs) + "\n" + formatBytes(static_cast<double>(c.bytes));
    return out;
  }
  const Op& op = p.ops[static_cast<std::size_t>(ref.index)];
  std::snprintf(buf, sizeof buf, "%s · microbatch %d", std::string(opKindName(op.kind)).c_str(), op.microbatch);
  out += buf;
  if (op.samples > 0) out += " (" + std::to_string(op.samples) + " samples)";
  out += "\n";
  if (op.virtualStage >= 0 && static_cast<std::size_t>(op.virtualStage) < p.virtualStages.size()) {
    const VirtualStage& vs = p.virtualStages[static_cast<std::size_t>(op.virtualStage)];
    std::snprintf(buf, sizeof buf, "virtual stage %d (device %d, chunk %d", vs.id, vs.device, vs.chunk);
    out += buf;
    if (vs.pipeline != 0) out += ", pipeline " + std::to_string(vs.pipeline);
    out += ")\n";
    std::string component = "component " + std::to_string(vs.component);
    if (vs.component >= 0 && static_cast<std::size_t>(vs.component) < p.model.components.size())
      component = p.model.components[static_cast<std::size_t>(vs.component)].name;
    std::snprintf(buf, sizeof buf, "layers %s[%d..%d]\n", component.c_str(), vs.firstLayer, vs.lastLayer);
    out += buf;
  } else {
    out += "device " + std::to_string(op.device) + "\n";
  }
  out += "start " + formatMs(op.startMs) + " · end " + formatMs(op.endMs) + " · duration " +
         formatMs(op.durationMs());
  const WaitReason why = waitReason(ref.index);
  if (why.waitedFor.valid()) {
    const Op& dep = p.ops[static_cast<std::size_t>(why.waitedFor.index)];
    const double gap = op.startMs - dep.endMs;
    std::snprintf(buf, sizeof buf, "\nwaiting for: %s mb %d on device %d%s", std::string(opKindName(dep.kind)).c_str(),
                  dep.microbatch, dep.device, why.sameDevice ? " (device busy)" : "");
    out += buf;
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
  bytes += (m_opLane.capacity() + m_opSlot.capacity() + m_commLane.capacity() + m_commSlot.capacity() +
            m_prevOnDevice.capacity() + m_opIndex.capacity()) *
           sizeof(std::int32_t);
  return bytes;
}

}  // namespace pipestudio::viz
