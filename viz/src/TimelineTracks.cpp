#include "TimelineTracks.hpp"

#include <algorithm>
#include <limits>

namespace pipestudio::viz::tracks {

namespace {

// Host copies (D2H/H2D, activation offloading) are activation transfers to and from host memory.
ColourSlot slotOfOp(OpKind kind) {
  return isHostCopy(kind) ? ColourSlot::CommForward : static_cast<ColourSlot>(static_cast<int>(kind));
}

ColourSlot slotOfActivity(ActivityKind kind) {
  return static_cast<ColourSlot>(static_cast<int>(ColourSlot::Kernel) + static_cast<int>(kind));
}

/// Shade of an interval: its slot's variant `variant` (microbatch parity, or the chunk).
std::uint8_t shadeOf(ColourSlot slot, int variant) {
  return static_cast<std::uint8_t>(static_cast<int>(slot) * kShadesPerSlot + (variant & (kShadesPerSlot - 1)));
}

}  // namespace

LaneBuild::LaneBuild(std::size_t ops, std::size_t comms)
    : beginMs(std::numeric_limits<double>::infinity()), endMs(-std::numeric_limits<double>::infinity()) {
  opLane.assign(ops, -1);
  prevOnDevice.assign(ops, -1);
  commLane.assign(comms, -1);
}

void LaneBuild::add(int lane, double startMs, double endMsOf, std::uint8_t shade, std::int32_t microbatch,
                    ItemRef item) {
  Lane& l = lanes[lane];
  l.startMs.push_back(startMs);
  l.endMs.push_back(endMsOf);
  l.shade.push_back(shade);
  l.microbatch.push_back(microbatch);
  l.items.push_back(item);
  beginMs = std::min(beginMs, startMs);
  endMs = std::max(endMs, endMsOf);
}

RowBands rowBands(bool compute, bool transfers, bool kernels) {
  RowBands bands;
  const double computeLo = 0.06;
  bands.compute = {computeLo, kernels ? (compute ? 0.44 : computeLo) : (transfers ? 0.74 : 0.94)};
  bands.transfers = {0.78, 0.94};
  bands.kernels = {compute ? 0.48 : 0.06, 0.94};
  return bands;
}

// --- OpTrack -------------------------------------------------------------------------------

OpTrack::OpTrack(const Plan& plan, int lanesPerDevice, bool shadesChunks)
    : m_plan(plan), m_lanesPerDevice(lanesPerDevice), m_shadesChunks(shadesChunks) {}

void OpTrack::layOut(int device, Band band, LaneBuild& build) {
  if (m_firstLane.size() <= device) m_firstLane.resize(device + 1, -1);
  m_firstLane[device] = build.lanes.size();
  const double h = (band.hi - band.lo) / m_lanesPerDevice;
  for (int k = 0; k < m_lanesPerDevice; ++k) {
    Lane lane;
    lane.device = device;
    lane.pipeline = k;
    lane.hatchGapsOnly = m_lanesPerDevice > 1;
    lane.valueLo = device + band.lo + k * h + (k > 0 ? 0.02 : 0.0);
    lane.valueHi = device + band.lo + (k + 1) * h;
    build.lanes.push_back(std::move(lane));
  }
}

void OpTrack::fill(LaneBuild& build) const {
  const Plan& p = m_plan;
  const auto stageCount = static_cast<int>(p.virtualStages.size());
  IdVector<int> lastOnDevice(m_firstLane.size(), -1);
  for (int i = 0; i < build.opLane.size(); ++i) {
    const Op& op = p.op(i);
    // Host copies are not in the device's compute order (prevOnDevice): TransferTrack shows them.
    if (op.device < 0 || isHostCopy(op.kind)) continue;
    int pipeline = 0;
    int chunk = 0;
    if (op.virtualStage >= 0 && op.virtualStage < stageCount) {
      pipeline = p.stage(op.virtualStage).pipeline;
      chunk = p.stage(op.virtualStage).chunk;
    }
    pipeline = std::clamp(pipeline, 0, m_lanesPerDevice - 1);
    const int laneIndex = m_firstLane[op.device] + pipeline;
    // Only the passes the legend lists per chunk (F, B, W, BW) take a chunk's shade; frozen work,
    // vocabulary passes and the optimizer alternate by microbatch as their legend entries show.
    const bool chunkShade = m_shadesChunks && (op.kind == OpKind::F || op.kind == OpKind::B || op.kind == OpKind::W ||
                                               op.kind == OpKind::BW);
    build.add(laneIndex, op.startMs, op.endMs, shadeOf(slotOfOp(op.kind), chunkShade ? chunk : op.microbatch & 1),
              op.microbatch, {ItemRef::Kind::Op, i});
    build.opLane[i] = laneIndex;
    build.prevOnDevice[i] = lastOnDevice[op.device];
    lastOnDevice[op.device] = i;
    build.maxMicrobatch = std::max(build.maxMicrobatch, op.microbatch);
  }
}

// --- TransferTrack -------------------------------------------------------------------------

TransferTrack::TransferTrack(const Plan& plan) : m_plan(plan) {}

void TransferTrack::layOut(int device, Band band, LaneBuild& build) {
  if (m_lane.size() <= device) m_lane.resize(device + 1, -1);
  Lane lane;
  lane.device = device;
  lane.comm = true;
  lane.valueLo = device + band.lo;
  lane.valueHi = device + band.hi;
  m_lane[device] = build.lanes.size();
  build.lanes.push_back(std::move(lane));
}

void TransferTrack::fill(LaneBuild& build) const {
  // Host copies run on the device's host link beside its compute: the third (offload) and fourth
  // (reload) shade of activations.
  for (int i = 0; i < build.opLane.size(); ++i) {
    const Op& op = m_plan.op(i);
    if (op.device < 0 || !isHostCopy(op.kind) || !m_lane.contains(op.device) || m_lane[op.device] < 0) continue;
    build.add(m_lane[op.device], op.startMs, op.endMs, shadeOf(ColourSlot::CommForward, op.kind == OpKind::D2H ? 2 : 3),
              op.microbatch, {ItemRef::Kind::Op, i});
    build.opLane[i] = m_lane[op.device];
  }
  for (int i = 0; i < build.commLane.size(); ++i) {
    const Comm& c = m_plan.comms[static_cast<std::size_t>(i)];
    if (c.fromDevice < 0) continue;
    const ColourSlot slot = c.kind == OpKind::F ? ColourSlot::CommForward : ColourSlot::CommBackward;
    build.add(m_lane[c.fromDevice], c.startMs, c.endMs, shadeOf(slot, c.microbatch & 1), c.microbatch,
              {ItemRef::Kind::Comm, i});
    build.commLane[i] = m_lane[c.fromDevice];
    build.maxMicrobatch = std::max(build.maxMicrobatch, c.microbatch);
  }
}

// --- KernelTrack ---------------------------------------------------------------------------

KernelTrack::KernelTrack(const ActivityTrace& activity, int devices, bool collapsed)
    : m_activity(activity), m_collapsed(collapsed), m_streamsOfDevice(static_cast<std::size_t>(std::max(0, devices))) {
  for (std::size_t i = 0; i < activity.streams.size(); ++i) {
    const int d = activity.streams[i].device;
    if (d >= 0) m_streamsOfDevice[static_cast<std::size_t>(d)].push_back(static_cast<int>(i));
  }
}

bool KernelTrack::hasStreams(int device) const { return !m_streamsOfDevice[static_cast<std::size_t>(device)].empty(); }

void KernelTrack::layOut(int device, Band band, LaneBuild& build) {
  const auto& streams = m_streamsOfDevice[static_cast<std::size_t>(device)];
  const double lo = device + band.lo;
  const double hi = device + band.hi;
  // Collapsed: every stream of the device on one lane.
  const std::size_t laneCount = m_collapsed ? 1 : streams.size();
  const double h = (hi - lo) / static_cast<double>(laneCount);
  for (std::size_t k = 0; k < laneCount; ++k) {
    Lane lane;
    lane.device = device;
    lane.activity = true;
    lane.stream = m_activity.streams[static_cast<std::size_t>(streams[k])].stream;
    lane.valueLo = lo + static_cast<double>(k) * h + (k > 0 ? 0.01 : 0.0);
    lane.valueHi = lo + static_cast<double>(k + 1) * h;
    StreamLane placed{build.lanes.size(), {}};
    placed.streams.assign(streams.begin() + static_cast<std::ptrdiff_t>(k),
                          m_collapsed ? streams.end() : streams.begin() + static_cast<std::ptrdiff_t>(k + 1));
    m_lanes.push_back(std::move(placed));
    build.lanes.push_back(std::move(lane));
  }
}

void KernelTrack::fill(LaneBuild& build) const {
  for (const StreamLane& placed : m_lanes) {
    for (const int stream : placed.streams) {
      const ActivityStream& s = m_activity.streams[static_cast<std::size_t>(stream)];
      for (std::size_t e = 0; e < s.events.size(); ++e) {
        const ActivityEvent& ev = s.events[e];
        build.add(placed.lane, ev.startMs, ev.endMs, shadeOf(slotOfActivity(ev.kind), static_cast<int>(e & 1)), -1,
                  {ItemRef::Kind::Activity, static_cast<std::int32_t>(build.activityRefs.size())});
        build.activityRefs.emplace_back(stream, static_cast<std::int32_t>(e));
      }
    }
  }
  // The whole trace sets the time axis, streams of no device included.
  for (const ActivityStream& s : m_activity.streams) {
    for (const ActivityEvent& e : s.events) {
      build.beginMs = std::min(build.beginMs, e.startMs);
      build.endMs = std::max(build.endMs, e.endMs);
    }
  }
}

}  // namespace pipestudio::viz::tracks
